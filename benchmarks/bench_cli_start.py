"""Start-up cost of the ``saber`` command line: what every ``saber status``, ``saber validate`` and
``saber run`` pays before it does any work (scripts and the test suite call them in loops).

    python benchmarks/bench_cli_start.py [--repeat 7] [--run-dir runs/demo] [--tree PATH ...]

Each ``--tree`` is a checkout of the project (default: this one); its ``saber_lib`` is put first on
``PYTHONPATH``, so an older checkout (a git worktree) gives the figures before a change. For each
tree: the median wall seconds (and CPU seconds: user + sys of the child) of importing the entry
point, of ``saber validate params/tiny.yaml`` and, when ``--run-dir`` exists, of ``saber status``;
and the heavy packages the import loaded. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ["sklearn", "scipy", "matplotlib", "seaborn", "datasketch", "torch", "pandas", "papermill"]


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), r.stdout


def measure(tree: Path, run_dir: Path | None, repeat: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    py = sys.executable
    probe = f"import sys, saber_lib.pipeline.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    cases = [("import the entry point", [py, "-c", probe]),
             ("saber validate params/tiny.yaml", [py, "-m", "saber_lib.pipeline.cli", "validate", "params/tiny.yaml"])]
    if run_dir is not None and run_dir.is_dir():
        cases.append((f"saber status --run-dir {run_dir}",
                      [py, "-m", "saber_lib.pipeline.cli", "status", "--run-dir", str(run_dir)]))
    rows = []
    for name, cmd in cases:
        walls, cpus, out = [], [], ""
        for _ in range(repeat):
            w, c, out = timed(cmd, env, tree)
            walls.append(w)
            cpus.append(c)
        rows.append({"case": name, "wall": statistics.median(walls), "cpu": statistics.median(cpus),
                     "heavy": out.strip() if name.startswith("import") else ""})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "demo")
    ap.add_argument("--tree", type=Path, action="append", help="project checkout to measure (repeatable)")
    args = ap.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print("| tree | case | median wall s | median CPU s | heavy packages loaded by the import |")
    print("|---|---|---|---|---|")
    for tree in trees:
        for r in measure(tree, args.run_dir.resolve() if args.run_dir else None, args.repeat):
            print(f"| {tree} | {r['case']} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['heavy'] or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
