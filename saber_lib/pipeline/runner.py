"""Execute stage notebooks with papermill, in dependency order, skipping stages that are up to date.

A stage is *done* when its manifest exists and records the same parameter hash and the same input
hashes (output hashes of the stages it reads from, content hashes of the data files it reads) as
the current profile and run directory would give; *stale* when a manifest exists but something
changed; *missing* when it never finished. ``saber run`` executes what is not done (everything with
``force``) and writes each manifest only after the notebook finished, so a failed stage stays
missing and the artifacts of completed stages are kept.

Integrity (``integrity``): a ``saber run`` holds the run directory's lock; a manifest records every
output file (size, mtime, sha256) and a stage whose files changed since is *modified*: nothing
reads it until it is regenerated (``--force``) or the edit is accepted (``saber accept``); files
outside the run and data directories (TREC runs, published results) are hashed as inputs, and so
are the stage's notebook and the library files it runs (``sources``); files are compared by size
and mtime, and hashed in full with ``verify``, for a manifest older than ``run.verify_after_h``
and before the leaderboard reads a stage; an LLM stage past ``llm.max_failure_rate`` fails;
artifacts of another setting are moved aside before a stage reruns, and the figures a stage drew
last time are removed (in the run's own figures folder).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..core import config, plugins, progress, stops
from ..core.config_types import ProfileError
from ..corpus.loaders import LOADERS
from ..judging import registry as judge_registry  # noqa: F401  (checks the judge specs of every profile loaded)
from ..llm import BASE_URLS_ENV, ENGINE_SECRETS_ENV, FailureBudgetExceeded, redact_params, redact_url
from ..llm.redact import is_secret_key, url_secrets
from ..core.data import (PROJECT_ROOT, data_file, existing_file, hash_file, hash_stage_outputs, package_version,
                         resolve_data_dir, write_json)
from . import integrity, path_inputs, sources
from . import stages as stage_table
from ..core.data import ArtifactModified
from .integrity import RunLock
from .progress_view import ProgressView, progress_folder
from .schedule import kernel_threads, run_dag
from .kernel_env import end_all_kernels, stage_kernel_manager
from .stages import Stage
from ..retrieval.checks import check_profile
from ..retrieval.registry import file_argument, with_file_argument
from ..core.data import (changed_outputs, folder_path, half_written, load_manifest, modified_message, output_hash_of,
                         output_records, timing_files)

NOTEBOOK_DIR = PROJECT_ROOT / "notebooks"
TRACKED_PACKAGES = ("saber_lib", "numpy", "scipy", "polars", "papermill", "datasketch", "scikit-learn",
                    "torch", "sentence-transformers", "bm25s", "rank-bm25", "pya0", "vllm", "xllamacpp")


class StageFailed(RuntimeError):
    def __init__(self, stage: str, notebook: Path, error: str):
        self.stage, self.notebook, self.error = stage, notebook, error
        super().__init__(f"stage {stage!r} failed: {error}\n  executed notebook: {notebook}")


@dataclass
class RunContext:
    profile: config.Profile
    run_dir: Path

    @property
    def run_name(self) -> str:
        return self.run_dir.name

    def data_dir(self) -> Path:
        return resolve_data_dir(self.profile.values["run"]["data_dir"])

    def resolve(self, p: str) -> str:
        """Relative run paths (cache, figures) are relative to the project root."""
        path = Path(p)
        return str(path if path.is_absolute() else (PROJECT_ROOT / path))


_file_hash_cache: dict[tuple[str, int, int], str] = {}


def _data_hash(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _file_hash_cache:
        _file_hash_cache[key] = hash_file(path)
    return _file_hash_cache[key]


def load_run_profile(profile_path, overrides=None) -> config.Profile:
    """The profile a run uses: validated (``config.load_profile``, which imports its ``run.plugins``
    from the current directory with the installed entry points and checks its judge specs by the
    judge registry), its other registry names checked (corpus sources, ``retrieval.checks``), and
    every run file of ``evaluate.retrievers`` (``run:PATH``) made absolute against the current
    directory (where the user typed the path), so the notebook (run from the project root) reads the
    same file and its manifest records the absolute path."""
    profile = config.load_profile(profile_path, overrides)   # imports run.plugins, checks judge specs
    unknown = [s for s in profile.values["corpus"]["sources"] if s not in LOADERS]
    if unknown:
        raise ProfileError(f"{profile.origin.get(('corpus', 'sources'), profile.path)}: corpus.sources: unknown "
                                  f"source(s) {unknown} (known: {', '.join(LOADERS)})")
    check_profile(profile)
    ev = profile.values["evaluate"]
    ev["retrievers"] = [r if (f := file_argument(r)) is None else with_file_argument(r, str(Path(f).expanduser().resolve()))
                        for r in ev["retrievers"]]
    return profile


def stage_parameters(ctx: RunContext, stage: Stage) -> dict:
    """The parameters injected into the stage's notebook (flattened sections + run paths)."""
    run = ctx.profile.values["run"]
    params = {
        "run_dir": str(ctx.run_dir),
        "run_name": ctx.run_name,
        "seed": run["seed"],
        "data_dir": str(ctx.data_dir()),
        "cache_dir": ctx.resolve(run["cache_dir"]),
        "figures_dir": ctx.resolve(run["figures_dir"]),
        "threads": run["threads"],
    }
    if stage.parallel:
        params.update({k: run[k] for k in ("executor", "dask_scheduler", "dask_workers")})
    for sec in stage.sections:
        if sec in config.DICT_SECTIONS:
            params[sec] = dict(ctx.profile.values[sec])
        else:
            params.update(ctx.profile.values[sec])
    return params


def param_hash(ctx: RunContext, stage: Stage) -> str:
    """Hash of what the stage computes from: its sections and the run's seed (not paths)."""
    # the run's seed hashed as one more section beside the stage's own (Profile.hash_of over both)
    seeded = replace(ctx.profile, values={**ctx.profile.values, "seed": ctx.profile.values["run"]["seed"]})
    return seeded.hash_of((*stage.sections, "seed"))


def input_hashes(ctx: RunContext, stage: Stage) -> dict:
    out = {}
    for dep in stage.deps_for(ctx.profile.values):
        out[f"stage:{dep}"] = (read_manifest(ctx.run_dir, dep) or {}).get("output_hash")
    for rel in stage.run_inputs:
        out[f"run:{rel}"] = hash_stage_outputs(ctx.run_dir / rel)
    for rel in stage.data_files_for(ctx.profile.values):
        out[f"data:{rel}"] = _data_hash(data_file(ctx.data_dir(), rel))
    for f in stage.external_files_for(ctx.profile.values):
        path = existing_file(f, f"stage {stage.name}: external input")   # a FIFO there: named, never opened
        out[f"file:{path}"] = _data_hash(path)
    # files and folders its parameters name (path-valued keys of its sections)
    out.update(path_inputs.path_input_hashes(ctx.profile.values, stage.sections, _data_hash))
    out.update(path_inputs.plugin_input_hashes(ctx.profile.values, stage.sections, _data_hash))
    out.update(sources.source_hashes(NOTEBOOK_DIR / stage.notebook))  # the notebook and the code it runs
    return out


def read_manifest(run_dir: Path, name: str) -> dict | None:
    """The stage's manifest (None when it has none; a damaged one is :class:`ManifestDamaged`)."""
    return load_manifest(Path(run_dir) / name / "manifest.json")


def full_check(ctx: RunContext, man: dict, verify: bool = False) -> bool:
    """Whether a stage's recorded files are all hashed (not just compared by size and mtime): with
    ``--verify``, or when its manifest is older than ``run.verify_after_h`` hours."""
    return verify or integrity.manifest_age_h(man) >= ctx.profile.values["run"]["verify_after_h"]


def changed_files(ctx: RunContext, name: str, man: dict, verify: bool = False) -> list[str]:
    """The stage's recorded files that changed: its artifacts, then its tables and figures."""
    full = full_check(ctx, man, verify)
    return changed_outputs(ctx.run_dir / name, man, full=full) + integrity.changed_figures(man, full)


def stale_reasons(ctx: RunContext, stage: Stage, man: dict, states: dict[str, str]) -> list[str]:
    """Why a finished stage is not up to date (empty when it is): upstream stages not done, changed
    parameters, and each input (stage output, data, external, notebook or library file) that changed,
    appeared or disappeared since its manifest was written."""
    out = [f"{d} is {states.get(d, 'not checked')}" for d in stage.deps_for(ctx.profile.values)
           if states.get(d) != "done"]
    if man.get("param_hash") != param_hash(ctx, stage):
        out.append("parameters changed")
    old, new = man.get("input_hashes") or {}, input_hashes(ctx, stage)
    for key in sorted(set(old) | set(new)):
        if key not in old:
            out.append(f"{key} is new")
        elif key not in new:
            out.append(f"{key} is no longer read")
        elif old[key] != new[key]:
            out.append(path_inputs.changed_reason(key, ctx.profile.values) or f"{key} changed")
    return out


def stage_state(ctx: RunContext, stage: Stage, states: dict[str, str], verify: bool = False,
                why: dict | None = None) -> str:
    """done / modified / stale / missing; ``why`` (when given) gets the reasons under the stage's name."""
    man = read_manifest(ctx.run_dir, stage.name)
    if man is None:
        return "missing"
    changed = changed_files(ctx, stage.name, man, verify)
    reasons = [f"{f} changed since the stage wrote it" for f in changed] if changed else \
        stale_reasons(ctx, stage, man, states) + integrity.missing_figures(man)
    if why is not None:
        why[stage.name] = reasons
    return "modified" if changed else "stale" if reasons else "done"


def status(ctx: RunContext, verify: bool = False, why: dict | None = None) -> dict[str, str]:
    states: dict[str, str] = {}
    for name in stage_table.upstream_closure([s.name for s in stage_table.STAGES], ctx.profile.values):
        states[name] = stage_state(ctx, stage_table.BY_NAME[name], states, verify, why)
    return states


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for p in TRACKED_PACKAGES:
        v = package_version(p)
        if v is not None:
            out[p] = v
    return out


def _first_error(nb_path: Path) -> str:
    """The error of the failing cell in an executed notebook (ename: evalue)."""
    try:
        nb = json.loads(nb_path.read_text())
    except Exception:
        return "notebook could not be read"
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                return f"{out.get('ename')}: {out.get('evalue')}"
    return "unknown error"


def _secret_free(params: dict) -> tuple[dict, dict]:
    """The parameters as they may be shown (base URLs with their credentials masked, credentials in
    ``llm.engine_kwargs`` masked, see ``saber_lib.llm.redact``) and the environment that carries the
    real values to the kernel."""
    llm = params.get("llm") or {}
    urls = list(llm.get("base_urls") or [])
    secret_kw = {k: v for k, v in (llm.get("engine_kwargs") or {}).items() if is_secret_key(k, v)}
    masked = [redact_url(u) for u in urls]
    if masked == urls and not secret_kw:
        return params, {}
    shown = {**params, "llm": {**llm, "base_urls": masked}}
    env = {**({BASE_URLS_ENV: json.dumps(urls)} if masked != urls else {}),
           **({ENGINE_SECRETS_ENV: json.dumps(secret_kw)} if secret_kw else {})}
    secrets = [s for u in urls for s in url_secrets(u)] + [str(v) for v in secret_kw.values()]
    return redact_params(shown, secrets), env   # (redact_params masks the engine_kwargs credentials by name)


def execute_stage(ctx: RunContext, stage: Stage, log=print, progress_file: Path | None = None,
                  kernel_env: dict | None = None) -> dict:
    """Execute the stage's notebook and write its manifest. ``progress_file``: where its loops write
    their counters (:mod:`saber_lib.core.progress`); ``kernel_env``: more variables for its kernel."""
    import papermill as pm  # heavy: only executing a stage needs the notebook machinery

    src = NOTEBOOK_DIR / stage.notebook
    if not src.exists():
        raise StageFailed(stage.name, src, f"notebook {src} does not exist")
    out_dir = ctx.run_dir / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_nb = out_dir / stage.notebook
    params, env = _secret_free(stage_parameters(ctx, stage))
    env[plugins.ENV] = plugins.environment(ctx.profile.values["run"]["plugins"])   # the kernel loads them too
    inputs = input_hashes(ctx, stage)
    setting = {"param_hash": param_hash(ctx, stage), "input_hashes": inputs}
    old = read_manifest(ctx.run_dir, stage.name)
    # the figures folder is this run's (under its lock); what the stage drew last time goes first
    figures = integrity.claim_figures(Path(params["figures_dir"]) / ctx.run_name, ctx.run_dir, log)
    integrity.remove_stage_figures(figures, ctx.run_dir / stage.name, old)
    integrity.clear_other_setting(ctx.run_dir, stage.name, setting, old, stage.resumable, log)
    integrity.remove_half_written(ctx.run_dir / stage.name, log)
    (ctx.run_dir / stage.name / "manifest.json").unlink(missing_ok=True)
    integrity.record_start(ctx.run_dir, stage.name, setting)
    if progress_file is not None:   # the notebook's loops write their counters there (core.progress)
        env[progress.ENV] = str(progress_file)
    env.update(kernel_env or {})
    t0 = time.perf_counter()
    try:
        with stage_kernel_manager(env, PROJECT_ROOT) as manager:
            pm.execute_notebook(str(src), str(out_nb), parameters=params, cwd=None,
                                kernel_manager_class=manager,
                                kernel_name="python3", progress_bar=False, log_output=False,
                                # the kernel's own log (its TCP transport warning at start-up, the
                                # "KeyboardInterrupt caught" of an interrupted shutdown) is noise on the
                                # user's terminal; cell errors still come back through the notebook. The
                                # parent handle makes the kernel exit when the runner dies (even SIGKILL)
                                extra_arguments=["--IPKernelApp.log_level=CRITICAL",
                                                 f"--IPKernelApp.parent_handle={os.getpid()}"])
    except pm.PapermillExecutionError as e:
        raise StageFailed(stage.name, out_nb, f"{e.ename}: {e.evalue}") from None
    except Exception as e:  # kernel died, missing kernel, ...
        raise StageFailed(stage.name, out_nb, f"{type(e).__name__}: {e}") from None
    wall = time.perf_counter() - t0
    stage_dir = ctx.run_dir / stage.name
    info_path = stage_dir / "info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    left = half_written(stage_dir)
    if left:  # a write of this execution never finished (a worker killed mid-write): not done
        raise StageFailed(stage.name, out_nb, f"{len(left)} half-written file(s), e.g. {left[0]}; the stage "
                                              "is not recorded done: run it again")
    try:  # the partial artifacts stay for a resumed run; no manifest: the stage is not done
        integrity.check_llm_budget(info, ctx.profile.values["llm"]["max_failure_rate"], stage.name)
    except FailureBudgetExceeded as e:
        raise StageFailed(stage.name, out_nb, str(e)) from None
    outputs = output_records(stage_dir)
    manifest = {
        "stage": stage.name,
        "notebook": str(out_nb),
        "figures": str(figures),
        "profile": str(ctx.profile.path),
        "param_hash": param_hash(ctx, stage),
        "parameters": {k: v for k, v in params.items() if k not in ("run_dir",)},
        "input_hashes": inputs,
        "output_hash": output_hash_of(outputs),
        "outputs": outputs,
        "timing_files": timing_files(stage_dir),
        integrity.FIGURE_OUTPUTS: integrity.figure_records(figures, info),   # its tables and figures
        "packages": package_versions(),
        "wall_s": round(wall, 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "backend": info.get("backend") or info.get("judge") or info.get("backends"),
        "info": info,
    }
    write_json(stage_dir / "manifest.json", manifest)
    return manifest


def run(profile_path, stages: list[str], run_dir=None, force: bool = False, overrides=None,
        log=print, verify: bool = False, jobs: int = 1, live: bool | None = None) -> dict[str, str]:
    """Run the named stages (``["all"]`` for the whole pipeline) and what they need; with ``verify``
    every recorded file of every stage involved is hashed first. ``jobs``: how many stages may run at
    once (each once the stages it reads from are done; the outputs are the same for any ``jobs``).
    ``live``: progress as one line redrawn in place (default: when ``log`` is ``print`` on a terminal),
    else plain lines through ``log`` (:mod:`.progress_view`).

    Returns ``{stage: "ran" | "skipped"}``. Raises :class:`StageFailed` on a failure
    (:class:`.schedule.StagesFailed` when, with several jobs, more went wrong).
    """
    profile = load_run_profile(profile_path, overrides)
    run_dir = Path(run_dir) if run_dir else PROJECT_ROOT / "runs" / profile.name
    ctx = RunContext(profile, folder_path(run_dir, "--run-dir").resolve())
    unknown = [s for s in stages if s != "all" and s not in stage_table.BY_NAME]
    if unknown:
        raise SystemExit(f"unknown stage(s) {unknown}; stages: {', '.join(stage_table.BY_NAME)} or all")
    if live is None:
        live = log is print and sys.stdout.isatty()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    # held until the last stage ends (the OS drops it when we die); a signal ends the run as Ctrl-C does
    with RunLock(ctx.run_dir), stops.stop_on_signals():
        with progress_folder() as folder:
            view = ProgressView(log, live=live)
            with view.polling():
                try:
                    return _run_locked(ctx, stages, force, view, verify, jobs, folder)
                except BaseException:
                    end_all_kernels()   # stages in worker threads: their own clean-up never runs on a stop
                    raise


def _run_locked(ctx: RunContext, stages: list[str], force: bool, view: ProgressView, verify: bool, jobs: int,
                folder: Path) -> dict[str, str]:
    """The run under the lock: each stage checked when the stages it reads from are done, executed
    when not up to date, its kernel writing its counters to ``folder/<stage>.json``."""
    wanted = stage_table.upstream_closure([s.name for s in stage_table.STAGES] if "all" in stages else stages,
                                          ctx.profile.values)
    explicit = set(stage_table.BY_NAME) if "all" in stages else set(stages)
    states: dict[str, str] = {}
    log = view.log

    def prepare(name: str) -> bool:
        """Whether the stage must execute (its inputs are done); raises when its files were edited."""
        stage = stage_table.BY_NAME[name]
        # the leaderboard ranks what it reads: the stages it reads are hashed in full first
        deep = name == "leaderboard" and not verify  # (with verify, stage_state hashed them in full)
        for dep in stage.deps_for(ctx.profile.values) if deep else ():
            files = changed_files(ctx, dep, read_manifest(ctx.run_dir, dep) or {}, True)
            if files:
                raise ArtifactModified(modified_message(dep, files, ctx.run_dir, ctx.profile.path))
        state = stage_state(ctx, stage, states, verify)
        if state == "modified" and not (force and name in explicit):
            files = changed_files(ctx, name, read_manifest(ctx.run_dir, name), verify)
            raise ArtifactModified(modified_message(name, files, ctx.run_dir, ctx.profile.path))
        if state == "done" and not (force and name in explicit):
            log(f"[skip] {name}: up to date")
            states[name] = "done"
            return False
        log(f"[run ] {name} ({state}) -> {ctx.run_dir / 'notebooks' / stage.notebook}")
        return True

    def execute(name: str) -> None:
        path = folder / f"{name}.json"
        view.begin(name, path)
        try:
            man = execute_stage(ctx, stage_table.BY_NAME[name], log, progress_file=path,
                                kernel_env=kernel_threads(jobs))
        finally:
            view.end(name)
        log(f"[done] {name} in {man['wall_s']:.1f}s")
        states[name] = "done"

    deps = {n: stage_table.BY_NAME[n].deps_for(ctx.profile.values) for n in wanted}
    return run_dag(wanted, deps, jobs, prepare, execute, after={n: stage_table.BY_NAME[n].after for n in wanted})


def print_status(profile_path, run_dir, log=print, overrides=None, verify: bool = False) -> dict[str, str]:
    """One line per stage (name, state, wall time, backend), then, for a stage that is modified or
    stale, one indented line per reason (the file or parameter that changed)."""
    profile = load_run_profile(profile_path, overrides)
    ctx = RunContext(profile, Path(run_dir).resolve())
    why: dict[str, list[str]] = {}
    states = status(ctx, verify, why)
    for name, st in states.items():
        man = read_manifest(ctx.run_dir, name) or {}
        extra = f"  {man.get('wall_s', 0):.1f}s  backend={man.get('backend')}" if man else ""
        log(f"{name:18s} {st}{extra}")
        reasons = why.get(name, []) if st in ("modified", "stale") else []
        for r in reasons[:5]:
            log(f"    - {r}")
        if len(reasons) > 5:
            log(f"    - and {len(reasons) - 5} more")
    return states
