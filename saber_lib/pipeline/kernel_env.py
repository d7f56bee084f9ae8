"""The kernel a stage's notebook runs in: the runner's environment plus the stage's own variables,
in the project root, set per kernel (never on this process, from which several stages may start
kernels at once)."""
from __future__ import annotations

import os
from pathlib import Path


def stage_kernel_manager(env: dict, cwd: Path):
    """The kernel manager class papermill starts a stage's kernel with: the kernel gets the runner's
    environment plus ``env`` and runs in ``cwd``, without changing this process's environment or
    working directory (several stages may start kernels at once, from threads)."""
    from jupyter_client.manager import AsyncKernelManager  # heavy: only executing a stage needs it

    class StageKernelManager(AsyncKernelManager):
        async def _async_pre_start_kernel(self, **kw):
            kw["env"] = {**os.environ, **kw.get("env", {}), **env}
            kw["cwd"] = str(cwd)
            return await super()._async_pre_start_kernel(**kw)

        pre_start_kernel = _async_pre_start_kernel

    return StageKernelManager
