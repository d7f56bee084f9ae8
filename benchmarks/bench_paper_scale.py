"""Paper-scale rehearsal: the workbench's stages at a fraction of the paper's sizes, measured, with
fits of cost against size and projections to the paper's size (scale 1).

    python benchmarks/bench_paper_scale.py --scale 0.001 0.003 0.01 [--stages dedup,tournament,evaluate,leaderboard]
        [--latency 0] [--fail-rate 0.003] [--concurrency 64] [--out benchmarks/results/paper_scale.json]

Paper sizes (scale 1): 283,000 problems (dedup, topics, summaries), 1,000 queries x 150 candidates,
20 Swiss rounds (1,500,000 judgments), 50 systems, 10,000 resamples, 3 settings; the counts scale, the shapes do
not (``paper_scale_stages.py`` says what each stage runs and what is synthetic).

Every (stage, scale) runs in its own child process (``--child``), so its figures are its own:
``wall_s`` and ``cpu_s`` (this process, all threads: for the tournament the client, cache, parsing,
pairing, fits and I/O, and not the mock server, which runs in a process of its own whose CPU is
reported apart as ``server_cpu_s``), ``rss_mb`` (peak resident set of the child, ``ru_maxrss``,
including the interpreter and the templates, ``rss0_mb`` before the stage ran), ``disk_mb`` (what
the stage wrote in its work folder), ``llm_calls`` and ``cpu_ms_per_call``.

With three or more scales of a stage, the fit ``cost = c * units^b`` (least squares on logs, over
the three largest sizes; the slopes over all sizes and between the last two are reported beside it) gives
the slope ``b`` (1: linear in the work; above 1: growing faster than the work) and the projection
to the paper's units, labelled ``projected``. Peak RSS is projected by a straight line through the
measured points (it holds the interpreter's constant); disk by the same power law as the CPU when
every size wrote something (the signals store grows as the pairs), else by a straight line. ``--out X.json`` writes the runs, fits and projections (what
``saber plan`` reads) and the table as ``X.table.md`` beside it.

Stopped early (Ctrl-C, SIGTERM, ``timeout``), the rehearsal leaves nothing: each child runs in a
process group of its own, which is stopped with it, and its work folder is removed.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from paper_scale_sizes import PAPER   # this file's folder is on the path when it runs

HERE = Path(__file__).resolve().parent
_JUDGMENTS = PAPER["queries"] * (PAPER["candidates"] // 2) * PAPER["rounds"]   # 1,500,000
PAPER_UNITS = {**dict.fromkeys(("dedup", "topics", "summaries", "signals", "select"), PAPER["problems"]),
               "tournament": _JUDGMENTS, "evaluate": PAPER["queries"], "leaderboard": PAPER["queries"],
               "tournament_swap": 2 * _JUDGMENTS}
ORDER = ["dedup", "topics", "summaries", "signals", "select", "tournament", "evaluate", "leaderboard"]
#: stages run only when named in --stages: the tournament with every pair asked in both orders
#: (``tournament.position_swap: true``; the paper's profile asks each pair once)
OPTIONAL = ["tournament_swap"]
ALL = ORDER + OPTIONAL
LLM_STAGES = ("topics", "summaries", "tournament", "tournament_swap")


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def child(stage: str, scale: float, work: Path, a) -> dict:
    import paper_scale_stages as S   # noqa: E402 (benchmarks/ is on the path: this file's folder)
    o = {"profile": a.params, "data_dir": a.data_dir, "seed": 0, "latency": a.latency, "fail_rate": a.fail_rate,
         "concurrency": a.concurrency, "templates": S.templates(a.params, a.data_dir, a.templates_per_source)}
    work.mkdir(parents=True, exist_ok=True)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = S.STAGES[stage](scale, work, o)
    out.update(stage=stage, scale=scale, rss0_mb=rss0,
               rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, disk_mb=_dir_bytes(work) / 2**20)
    return out


# ------------------------------------------------------------------ nothing left behind
# Every (stage, scale) child runs in a process group of its own (a new session), with its temporary
# folders inside its work folder (TMPDIR): stopping the group stops the child and whatever it started
# (the mock server, the store builder), and removing the work folder removes every file it wrote.
# The rehearsal does both when a child ends, and on SIGINT, SIGTERM or SIGHUP (turned into SystemExit,
# so the same `finally` runs) and at exit (atexit, for any other way out of the interpreter). A stop
# never cuts that short: signals after the first are ignored (`timeout` signals twice, the command
# and then its process group), and a stop that arrives while a folder or child is being registered or
# released is raised once that is done (`_uninterrupted`), so nothing is made that `_LIVE` does not hold.
_LIVE: dict[int, tuple[subprocess.Popen | None, Path]] = {}
GRACE_S = 5.0


def _stop_group(proc: subprocess.Popen | None) -> None:
    """SIGTERM to the child's process group, SIGKILL to what is left after GRACE_S seconds."""
    if proc is None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:   # the child is gone; anything it left in its group gets the kill
            time.sleep(0.2)
    if proc.poll() is None:
        proc.wait()


def _release(key: int) -> None:
    proc, work = _LIVE.get(key, (None, None))
    _stop_group(proc)
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    _LIVE.pop(key, None)   # only once released: atexit releases what an interrupted call left


def _release_all() -> None:
    for key in list(_LIVE):
        _release(key)


_STOP = {"signum": None, "deferred": 0, "raised": False}


def _exit_on_signal(signum, _frame) -> None:
    if _STOP["signum"] is not None:   # a stop is under way: its clean-up runs to its end
        return
    _STOP["signum"] = signum
    if not _STOP["deferred"]:
        _STOP["raised"] = True
        raise SystemExit(128 + signum)


@contextlib.contextmanager
def _uninterrupted():
    """A stop that arrives inside the block is raised at its end (once), not in the middle of it."""
    _STOP["deferred"] += 1
    try:
        yield
    finally:
        _STOP["deferred"] -= 1
    if not _STOP["deferred"] and _STOP["signum"] is not None and not _STOP["raised"]:
        _STOP["raised"] = True
        raise SystemExit(128 + _STOP["signum"])


def install_cleanup() -> None:
    """Signals end the rehearsal through its `finally` blocks; atexit releases what is still live."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    atexit.register(_release_all)


def run_one(stage: str, scale: float, a) -> dict:
    key = max(_LIVE, default=0) + 1
    try:
        with _uninterrupted():   # the folder and the child are in _LIVE before a stop unwinds
            work = Path(tempfile.mkdtemp(prefix=f"paper_scale_{stage}_"))
            _LIVE[key] = (None, work)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--scale", str(scale),
                   "--work", str(work), "--params", a.params, "--latency", str(a.latency),
                   "--fail-rate", str(a.fail_rate), "--concurrency", str(a.concurrency),
                   "--templates-per-source", str(a.templates_per_source)]
            if a.data_dir:
                cmd += ["--data-dir", a.data_dir]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True, env={**os.environ, "TMPDIR": str(work)})
            _LIVE[key] = (proc, work)
        out, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"stage {stage} at scale {scale} failed:\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        with _uninterrupted():
            _release(key)


def fit(runs: list[dict], stage: str) -> dict | None:
    """Slopes and projections to the paper's units from the runs of one stage (>= 3 sizes)."""
    rs = sorted((r for r in runs if r["stage"] == stage), key=lambda r: r["units"])
    if len({r["units"] for r in rs}) < 3:
        return None
    big = PAPER_UNITS[stage]
    u_all = np.array([r["units"] for r in rs], float)
    rs = rs[-3:]   # the three largest: a fixed start-up cost weighs on the smallest sizes only
    u = np.array([r["units"] for r in rs], float)
    out = {"stage": stage, "unit": rs[0]["unit"], "units": big, "sizes": [int(x) for x in u]}
    for key in ("wall_s", "cpu_s"):
        y = np.array([max(r[key], 1e-6) for r in rs])
        b, la = np.polyfit(np.log(u), np.log(y), 1)
        out[f"{key}_slope"] = float(b)
        out[f"{key}_coef"] = float(np.exp(la))
        out[key] = float(np.exp(la) * big ** b)
        y_all = np.array([max(r[key], 1e-6) for r in sorted((r for r in runs if r["stage"] == stage),
                                                             key=lambda r: r["units"])])
        out[f"{key}_slope_all"] = float(np.polyfit(np.log(u_all), np.log(y_all), 1)[0])
        out[f"{key}_slope_last"] = float(np.log(y[-1] / y[-2]) / np.log(u[-1] / u[-2]))
    y = np.array([r["rss_mb"] for r in rs])      # a constant (interpreter, libraries) plus the stage's part
    m, c = np.polyfit(u, y, 1)
    out["rss_mb"] = float(max(c + m * big, y.max()))
    y = np.array([r["disk_mb"] for r in rs])     # no constant: what the stage wrote, fitted as the CPU
    if (y > 0).all():                            # (a store of all pairs above a floor grows as units^2)
        b, la = np.polyfit(np.log(u), np.log(y), 1)
        out["disk_mb"], out["disk_mb_slope"] = float(np.exp(la) * big ** b), float(b)
    else:
        m, c = np.polyfit(u, y, 1)
        out["disk_mb"] = float(max(c + m * big, y.max()))
    if stage in LLM_STAGES:
        out["llm_calls"] = float(np.mean([r["llm_calls"] / r["units"] for r in rs]) * big)
        out["cpu_ms_per_call"] = 1000 * out["cpu_s"] / out["llm_calls"]
    else:
        out["llm_calls"] = 0.0
    return out


def markdown(res: dict) -> str:
    lines = [f"Measured {res['date']} on {res['cores']} cores, load at start `{res['load']}`; command: "
             f"`{res['command']}`", "",
             "| stage | scale | units | wall s | CPU s | peak RSS MB | disk MB | LLM calls | CPU ms/call | server CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(res["runs"], key=lambda r: (ALL.index(r["stage"]), r["scale"])):
        per = f"{r['cpu_ms_per_call']:.2f}" if r.get("cpu_ms_per_call") else ""
        srv = f"{r['server_cpu_s']:.1f}" if "server_cpu_s" in r else ""
        lines.append(f"| {r['stage']} | {r['scale']:g} (measured) | {r['units']:,} {r['unit']} | {r['wall_s']:.2f} | "
                     f"{r['cpu_s']:.2f} | {r['rss_mb']:.0f} | {r['disk_mb']:.1f} | {r['llm_calls']:,} | {per} | {srv} |")
    for f in res["projection"].values():
        per = f"{f['cpu_ms_per_call']:.2f}" if f.get("cpu_ms_per_call") else ""
        lines.append(f"| {f['stage']} | 1 (**projected**) | {f['units']:,} {f['unit']} | {f['wall_s']:.0f} | "
                     f"{f['cpu_s']:.0f} | {f['rss_mb']:.0f} | {f['disk_mb']:.0f} | {f['llm_calls']:,.0f} | {per} | |")
    lines += ["", "| stage | sizes fitted (the three largest) | slope of wall | slope of CPU | CPU slope, all sizes | "
              "CPU slope, last two |", "|---|---|---|---|---|---|"]
    for f in res["projection"].values():
        lines.append(f"| {f['stage']} | {', '.join(f'{s:,}' for s in f['sizes'])} | {f['wall_s_slope']:.2f} | "
                     f"{f['cpu_s_slope']:.2f} | {f['cpu_s_slope_all']:.2f} | {f['cpu_s_slope_last']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, nargs="+", default=[0.001, 0.003, 0.01])
    ap.add_argument("--stages", default=",".join(ORDER),
                    help=f"comma-separated, default all but {','.join(OPTIONAL)} (run only when named)")
    ap.add_argument("--params", default="params/paper.yaml")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--latency", type=float, default=0.0, help="mock judge latency, seconds")
    ap.add_argument("--fail-rate", type=float, default=0.003, help="share of prompts the mock never answers usably")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--templates-per-source", type=int, default=0,
                    help="real problems kept per source as templates (0 = all; a quick run takes fewer)")
    ap.add_argument("--out", default=None, help="JSON of the measurements (and .md beside it)")
    ap.add_argument("--merge", action="store_true", help="keep the runs already in --out of other (stage, scale)")
    ap.add_argument("--refit", action="store_true", help="run nothing: refit and rewrite the runs already in --out")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in ALL]
    if bad:
        ap.error(f"--stages: unknown stage {bad[0]!r} (expected some of {','.join(ALL)})")
    if any(not 0 < s <= 1 for s in a.scale):
        ap.error("--scale: every scale must be in (0, 1]")
    if a.child:
        # a stop of its group ends the child through its `finally` blocks (the mock server stopped)
        signal.signal(signal.SIGTERM, _exit_on_signal)
        sys.path.insert(0, str(HERE))
        print(json.dumps(child(a.child, a.scale[0], Path(a.work), a)))
        return 0
    install_cleanup()
    runs = []
    if a.merge and a.out and Path(a.out).exists():
        runs = [r for r in json.loads(Path(a.out).read_text())["runs"]
                if not (r["stage"] in stages and r["scale"] in a.scale)]
    if a.refit:
        if not (a.out and Path(a.out).exists()):
            ap.error("--refit: needs an existing --out file")
        old = json.loads(Path(a.out).read_text())
        runs, stages = old["runs"], []
    for stage in stages:
        for s in a.scale:
            r = run_one(stage, s, a)
            runs.append(r)
            print(f"{stage:>12} scale {s:<6g} {r['units']:>9,} {r['unit']:<10} wall {r['wall_s']:8.2f} s  "
                  f"CPU {r['cpu_s']:8.2f} s  RSS {r['rss_mb']:6.0f} MB  disk {r['disk_mb']:7.1f} MB  "
                  f"LLM calls {r['llm_calls']:>8,}", flush=True)
    res = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cores": os.cpu_count(),
           "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
           "command": "python benchmarks/bench_paper_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "paper_units": PAPER_UNITS, "runs": runs,
           "projection": {s: f for s in ALL if (f := fit(runs, s))}}
    if a.refit:   # the measurements' own date, load and commands
        res.update({k: old[k] for k in ("date", "load", "command")})
    print(markdown(res))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        Path(a.out).with_suffix(".table.md").write_text(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
