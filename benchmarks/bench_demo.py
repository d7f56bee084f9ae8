"""Where a cold run of the pipeline spends its time: wall and CPU seconds per stage and per heavy cell,
each notebook's kernel start and import cell, and how busy the cores were.

    python benchmarks/bench_demo.py [--params params/demo.yaml] [--label before] [--out FILE]
                                    [--keep] [-- EXTRA saber run ARGUMENTS]

Runs ``saber run all`` on the profile as one child process, into a fresh run directory with an
empty embedding and model cache (``run.cache_dir`` and ``run.figures_dir`` under the run directory),
as ``make demo`` does on a fresh clone. Arguments after ``--`` go to ``saber run`` unchanged (e.g.
``--jobs 2`` where the runner has it). While it runs, a sampler reads ``/proc`` twice a second: the
CPU seconds (user + sys, reaped children included) of every process under the runner, the 1-minute
load average. Each Jupyter kernel is matched to the notebook it executed (the executed notebook's
papermill start and end times), so a cell's CPU seconds are the kernel's (and its workers') CPU
between the cell's start and end. CPU / wall is how many cores a stage kept busy (2.0 = both here).

Writes (or replaces) the section named ``--label`` in ``--out`` (default
``benchmarks/results/<profile>_profile.md``, ``demo_profile.md`` for the demo) and keeps the other
sections, so one file holds the before and after of a change, each with the load beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
HEAVY_CELL_S = 3.0       # a cell at least this long (wall) is listed
SAMPLE_S = 0.5


def _stat(pid: int):
    """(ppid, cumulative CPU seconds incl. reaped children) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / TICK


def _kernel_stage(pid: int) -> str | None:
    """The stage a kernel runs: the runner gives each kernel its progress file, named after the stage
    (SABER_PROGRESS_FILE=<folder>/<stage>.json), so kernels that run at the same time (saber run --jobs)
    are told apart."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"SABER_PROGRESS_FILE="):
            return Path(item.split(b"=", 1)[1].decode(errors="replace")).stem
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Samples the process tree under ``root``: for each Jupyter kernel, its CPU (its own, its
    reaped children's and its live descendants') over time; and the load average."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.stop = root, threading.Event()
        self.kernels: dict[int, list[tuple[float, float]]] = {}
        self.stage_of: dict[int, str] = {}     # kernel pid -> the stage it runs (its progress file's name)
        self.loads: list[float] = []
        self._is_kernel: dict[int, bool] = {}

    def sample(self):
        now = time.time()
        stats = {}
        for d in os.listdir("/proc"):
            if d.isdigit() and (s := _stat(int(d))) is not None:
                stats[int(d)] = s
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in stats.items():
            children.setdefault(ppid, []).append(pid)

        def tree_cpu(pid):
            return stats[pid][1] + sum(tree_cpu(c) for c in children.get(pid, ()))

        stack = list(children.get(self.root, ()))
        while stack:
            pid = stack.pop()
            # a kernel is remembered; any other process is asked again, since a child seen between its
            # fork and its exec still shows the runner's command line
            if not self._is_kernel.get(pid):
                self._is_kernel[pid] = "ipykernel" in _cmdline(pid)
                if self._is_kernel[pid] and (stage := _kernel_stage(pid)):
                    self.stage_of[pid] = stage
            if self._is_kernel[pid]:
                self.kernels.setdefault(pid, []).append((now, tree_cpu(pid)))
            else:
                stack.extend(children.get(pid, ()))
        self.loads.append(os.getloadavg()[0])

    def run(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_S)


def _ts(s: str | None) -> float | None:
    if not s:
        return None
    d = datetime.fromisoformat(s)
    return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()


def cpu_at(series: list[tuple[float, float]], t: float) -> float:
    """The kernel's cumulative CPU at time ``t`` (linear between samples, clamped at the ends)."""
    if t <= series[0][0]:
        return series[0][1] if t >= series[0][0] - SAMPLE_S else 0.0
    for (t0, c0), (t1, c1) in zip(series, series[1:]):
        if t <= t1:
            return c0 + (c1 - c0) * (t - t0) / max(t1 - t0, 1e-9)
    return series[-1][1]


def notebook_cells(path: Path) -> tuple[float, float, list[dict]]:
    nb = json.loads(path.read_text())
    meta = nb["metadata"].get("papermill", {})
    cells = []
    for i, c in enumerate(nb["cells"]):
        pm = c.get("metadata", {}).get("papermill", {})
        if c["cell_type"] != "code" or not pm.get("start_time"):
            continue
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        tags = c.get("metadata", {}).get("tags", [])
        cells.append({"index": i, "start": _ts(pm["start_time"]), "end": _ts(pm.get("end_time")),
                      "wall": pm.get("duration") or 0.0, "tags": tags,
                      "first": next((ln for ln in src.splitlines() if ln.strip() and not ln.startswith("#")), "")})
    return _ts(meta.get("start_time")), _ts(meta.get("end_time")), cells


def match_kernel(sampler: Sampler, start: float, end: float,
                 stage: str | None = None) -> list[tuple[float, float]] | None:
    """The kernel that ran ``stage`` (by its environment), else the one whose sampled life overlaps the
    notebook's execution most (right for a sequential run only)."""
    named = [sampler.kernels[pid] for pid, s in sampler.stage_of.items() if s == stage and pid in sampler.kernels]
    if named:
        return max(named, key=lambda series: min(end, series[-1][0]) - max(start, series[0][0]))
    # a kernel starts and ends with its notebook: the one whose first and last samples lie nearest the
    # notebook's start and end tells apart kernels that overlap (a long one covers a short one's whole life)
    near = [(abs(series[0][0] - start) + abs(series[-1][0] - end), series) for series in sampler.kernels.values()
            if abs(series[0][0] - start) <= 5.0]
    if near:
        return min(near, key=lambda x: x[0])[1]
    best, overlap = None, 0.0
    for series in sampler.kernels.values():
        o = min(end, series[-1][0]) - max(start, series[0][0])
        if o > overlap:
            best, overlap = series, o
    return best


def stage_rows(run_dir: Path, sampler: Sampler) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from saber_lib.pipeline.stages import STAGES
    rows = []
    for st in STAGES:
        man_path, nb_path = run_dir / st.name / "manifest.json", run_dir / "notebooks" / st.notebook
        if not man_path.exists() or not nb_path.exists():
            continue
        man = json.loads(man_path.read_text())
        start, end, cells = notebook_cells(nb_path)
        series = match_kernel(sampler, start, end or start, st.name)
        cpu = (lambda a, b: cpu_at(series, b) - cpu_at(series, a)) if series else (lambda a, b: float("nan"))
        body = [c for c in cells if not {"parameters", "injected-parameters"} & set(c["tags"])]
        first = body[0] if body else None
        for c in cells:
            c["cpu"] = cpu(c["start"], c["end"] or c["start"])
        rows.append({
            "stage": st.name, "notebook": st.notebook, "wall": man["wall_s"],
            "cpu": series[-1][1] if series else float("nan"),
            "kernel_start": (cells[0]["start"] - start) if cells else float("nan"),
            "kernel_start_cpu": cpu_at(series, cells[0]["start"]) if cells and series else float("nan"),
            "import_wall": first["wall"] if first else float("nan"),
            "import_cpu": first["cpu"] if first else float("nan"),
            "import_first": first["first"] if first else "",
            "heavy": [c for c in body if c["wall"] >= HEAVY_CELL_S],
            "start": start, "end": end,
        })
    return rows


def render(label: str, args, rows, total_wall, total_cpu, loads, load0, load1) -> str:
    f = lambda x: "-" if x != x else f"{x:.1f}"   # noqa: E731  (nan: not measured)
    f2 = lambda x: "-" if x != x else f"{x:.2f}"   # noqa: E731
    mean_load = sum(loads) / len(loads) if loads else float("nan")
    out = [f"## {label}", "",
           f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {args.commit}, {platform.node()}, "
           f"{os.cpu_count()} cores; `saber run all --params {args.params}{' ' + ' '.join(args.extra) if args.extra else ''}` "
           f"into a fresh run directory with an empty cache. Load average (1 min): {load0:.2f} at the start, "
           f"{mean_load:.2f} mean and {max(loads, default=float('nan')):.2f} max while it ran, {load1:.2f} at the end.",
           "",
           f"**Whole run: {f(total_wall)} s wall, {f(total_cpu)} CPU s (runner and every kernel), "
           f"CPU/wall {total_cpu / total_wall:.2f}.**", "",
           "| stage | wall s | CPU s | CPU/wall | kernel start wall s | kernel start CPU s | first cell wall s | "
           "first cell CPU s | first cell |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['stage']} | {f(r['wall'])} | {f(r['cpu'])} | {f2(r['cpu'] / r['wall'])} | "
                   f"{f(r['kernel_start'])} | {f(r['kernel_start_cpu'])} | {f(r['import_wall'])} | {f(r['import_cpu'])} | "
                   f"`{r['import_first'].strip()[:40]}` |")
    kernels = sum(r["cpu"] for r in rows if r["cpu"] == r["cpu"])
    starts = sum(r["kernel_start_cpu"] for r in rows if r["kernel_start_cpu"] == r["kernel_start_cpu"])
    firsts = sum(r["import_cpu"] for r in rows if r["import_cpu"] == r["import_cpu"])
    out += ["", f"Stages' kernels: {kernels:.1f} CPU s, of which kernel starts {starts:.1f} and first cells (the "
                f"imports, with what else the cell does) {firsts:.1f}; the runner itself (hashing, papermill, kernel "
                f"management): {total_cpu - kernels:.1f} CPU s.", "",
            f"Heavy cells (at least {HEAVY_CELL_S:.0f} s wall):", "",
            "| stage | cell | wall s | CPU s | CPU/wall | first line |", "|---|---|---|---|---|---|"]
    for r in rows:
        for c in sorted(r["heavy"], key=lambda c: -c["wall"]):
            line = c["first"].strip().replace("|", "\\|")[:90]
            out.append(f"| {r['stage']} | {c['index']} | {c['wall']:.1f} | {f(c['cpu'])} | "
                       f"{f2(c['cpu'] / max(c['wall'], 1e-9))} | `{line}` |")
    return "\n".join(out) + "\n"


def write_section(out: Path, label: str, text: str, profile: str):
    head = (f"# Where a cold `saber run all --params {profile}` spends its time\n\n"
            "Written by `benchmarks/bench_demo.py` (one section per measured tree or change; CPU s = user + "
            "sys; the load average beside each, since wall seconds on a shared machine are upper bounds).\n\n")
    old = out.read_text() if out.exists() else head
    parts = re.split(r"(?m)^(?=## )", old)
    kept = [p for p in parts if not p.startswith(f"## {label}\n")]
    if not kept or kept[0].startswith("## "):
        kept.insert(0, head)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(p if p.endswith("\n\n") or p is kept[-1] else p + "\n" for p in kept).rstrip("\n")
                   + "\n\n" + text)


HEAVY = ("torch", "sentence_transformers", "transformers", "onnxruntime", "sklearn", "scipy", "matplotlib",
         "seaborn", "pandas", "datasketch", "ipywidgets", "dask", "polars")
PROBE = """
import ast, json, sys, time
import IPython.display  # the kernel has IPython loaded before the first cell
before = set(sys.modules)
tree = ast.parse(sys.stdin.read())
code = ast.unparse(ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], []))
w, c = time.perf_counter(), time.process_time()
exec(code, {})
w, c = time.perf_counter() - w, time.process_time() - c
heavy = [m for m in HEAVY if m in sys.modules and m not in before]
print(json.dumps({"wall": w, "cpu": c, "heavy": heavy}))
"""


def import_costs(repeat: int = 1) -> list[dict]:
    """Each stage notebook's import statements (those of its first cell after the parameters) run alone in a
    fresh interpreter: wall and CPU seconds (the median of ``repeat``), and the heavy packages they load."""
    sys.path.insert(0, str(ROOT))
    from saber_lib.pipeline.stages import STAGES
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    rows = []
    for st in STAGES:
        nb = json.loads((ROOT / "notebooks" / st.notebook).read_text())
        body = [c for c in nb["cells"] if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", [])]
        src = "".join(body[0]["source"]) if body else ""
        runs = []
        for _ in range(repeat):
            r = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + PROBE], input=src, text=True,
                               capture_output=True, cwd=ROOT, env=env)
            if r.returncode != 0:
                raise SystemExit(f"{st.notebook}: its imports failed: {r.stderr.strip()[-300:]}")
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        runs.sort(key=lambda x: x["cpu"])
        rows.append({"stage": st.name, **runs[len(runs) // 2]})
    return rows


def render_imports(label: str, rows: list[dict]) -> str:
    load = os.getloadavg()[0]
    out = [f"## {label}", "", f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average (1 min) {load:.2f}: "
           "the import statements of each notebook's first cell, alone in a fresh interpreter (IPython loaded, "
           "as in a kernel).", "",
           "| stage | imports wall s | imports CPU s | heavy packages they load |", "|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['stage']} | {r['wall']:.2f} | {r['cpu']:.2f} | {', '.join(r['heavy']) or '-'} |")
    out.append(f"| total | {sum(r['wall'] for r in rows):.2f} | {sum(r['cpu'] for r in rows):.2f} | |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params/demo.yaml")
    ap.add_argument("--label", default="run", help="section heading in the output (e.g. 'before: main ed0db9e')")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--run-dir", type=Path, default=None, help="default runs/bench_<profile> (removed first)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory afterwards")
    ap.add_argument("--imports-only", action="store_true",
                    help="measure only each notebook's first-cell imports (no run); section --label in --out")
    ap.add_argument("--render", type=Path, default=None, help="render the samples of a kept run directory again")
    ap.add_argument("--repeat", type=int, default=3, help="--imports-only: runs per notebook (median)")
    args = ap.parse_args(argv)
    args.extra = extra
    profile = Path(args.params).stem
    out = args.out or ROOT / "benchmarks" / "results" / f"{profile}_profile.md"
    if args.render:   # a kept run directory's samples, rendered again
        raw_path = args.render / "_bench.json"
        if not raw_path.exists():   # a run still going (or killed): its finished stages, wall seconds only
            raw = {"kernels": {}, "loads": [os.getloadavg()[0]], "load0": float("nan"), "load1": os.getloadavg()[0],
                   "total_wall": float("nan"), "total_cpu": float("nan"), "commit": "?", "extra": []}
            return report(args.render.resolve(), raw, args, out)
        return report(args.render.resolve(), json.loads(raw_path.read_text()), args, out)
    if args.imports_only:
        text = render_imports(args.label, import_costs(args.repeat))
        write_section(out, args.label, text, args.params)
        print(text)
        return 0
    run_dir = (args.run_dir or ROOT / "runs" / f"bench_{profile}").resolve()
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip() or "?"
    cmd = [sys.executable, "-m", "saber_lib.pipeline.cli", "run", "all", "--params", args.params,
           "--run-dir", str(run_dir), "--set", f"run.cache_dir={run_dir / '_cache'}",
           "--set", f"run.figures_dir={run_dir / '_figures'}", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("SABER_CACHE_DIR", None)
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    sampler = Sampler(proc.pid)
    sampler.start()
    rc = proc.wait()
    total_wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc != 0:
        print(f"saber run failed ({rc}); run directory kept: {run_dir}", file=sys.stderr)
        return rc
    raw = {"kernels": {str(k): v for k, v in sampler.kernels.items()}, "loads": sampler.loads, "load0": load0,
           "stage_of": {str(k): v for k, v in sampler.stage_of.items()},
           "load1": os.getloadavg()[0], "total_wall": total_wall, "total_cpu": total_cpu, "commit": args.commit,
           "extra": extra}
    (run_dir / "_bench.json").write_text(json.dumps(raw))   # the samples, to render again (--render)
    return report(run_dir, raw, args, out)


def report(run_dir: Path, raw: dict, args, out: Path) -> int:
    sampler = Sampler(0)
    sampler.kernels = {int(k): [tuple(x) for x in v] for k, v in raw["kernels"].items()}
    sampler.stage_of = {int(k): v for k, v in raw.get("stage_of", {}).items()}
    sampler.loads = raw["loads"]
    args.commit, args.extra = raw["commit"], raw["extra"]
    rows = stage_rows(run_dir, sampler)
    text = render(args.label, args, rows, raw["total_wall"], raw["total_cpu"], raw["loads"], raw["load0"], raw["load1"])
    write_section(out, args.label, text, args.params)
    print(text)
    print(f"written: {out}")
    if not args.keep and not args.render:
        shutil.rmtree(run_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
