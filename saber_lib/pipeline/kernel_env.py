"""The kernel a stage's notebook runs in: the runner's environment plus the stage's own variables,
in the project root, set per kernel (never on this process, from which several stages may start
kernels at once), with its connection file in a folder of its own that is removed however the stage
ends."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

# the kernels of the stages running now (several with --jobs): folder -> their managers
_LIVE: dict[Path, list] = {}
_LOCK = threading.Lock()


@contextlib.contextmanager
def stage_kernel_manager(env: dict, cwd: Path):
    """The kernel manager class papermill starts a stage's kernel with: the kernel gets the runner's
    environment plus ``env`` and runs in ``cwd``, without changing this process's environment or
    working directory (several stages may start kernels at once, from threads). Its connection file
    (jupyter_client would write it as ``tmpXXXX.json`` in the temporary folder) lies in a folder of
    its own; when the stage ends however it ends (an error, Ctrl-C, or a signal that ``saber run``
    turns into an exception, :mod:`saber_lib.core.stops`), a kernel still running is killed (a kernel
    stopped while starting would write the file again) and the folder removed."""
    from jupyter_client.manager import AsyncKernelManager  # heavy: only executing a stage needs it

    folder = Path(tempfile.mkdtemp(prefix="saber-kernel-"))
    managers: list = []
    with _LOCK:
        _LIVE[folder] = managers

    class StageKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.connection_file = str(folder / "kernel.json")
            managers.append(self)

        async def _async_pre_start_kernel(self, **kw):
            kw["env"] = {**os.environ, **kw.get("env", {}), **env}
            kw["cwd"] = str(cwd)
            return await super()._async_pre_start_kernel(**kw)

        pre_start_kernel = _async_pre_start_kernel

    try:
        yield StageKernelManager
    finally:
        _end(folder)


def _end(folder: Path) -> None:
    with _LOCK:
        managers = _LIVE.pop(folder, [])
    for km in managers:
        proc = getattr(getattr(km, "provisioner", None), "process", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


def end_all_kernels() -> None:
    """Kills every stage kernel still running and removes its folder: for a run stopped (Ctrl-C, a
    signal) in the calling thread while stages run in worker threads, whose own clean-up would never
    run (they are daemon threads)."""
    with _LOCK:
        folders = list(_LIVE)
    for folder in folders:
        _end(folder)
