"""``saber leaderboard``: the published systems (and workbench runs) ranked with honest statistics.

    saber leaderboard --published DIR [--run-dir RUN ...] [--task statement-full]
                      [--ci-scheme correct|authors] [--n-resamples N] [--seed S]
                      [--min-coverage 0.95] [--mteb FILE] [--dedup FILE]
                      [--stability [--stability-splits N] [--stability-subsets N]
                                   [--stability-permutations N] [--stability-target T]] --out OUT

Also runnable as ``python -m saber_lib.leaderboard.cli ...`` (the same checks). Reads
``DIR/evaluation/*.json`` (and ``DIR/confidence/*.json``), the ``evaluate/ndcg.parquet`` of every
``--run-dir`` (its evaluate stage must have finished, with every recorded file as the stage wrote
it, and on the released benchmark: its query ids must be released ids), and writes
into ``OUT`` (see :func:`saber_lib.leaderboard.report.write_leaderboard`). A run's systems are named by
retriever; a retriever whose name is already taken is named ``<run dir name>/<retriever>``.
A system that scored under ``--min-coverage`` of a task's queries gets no rank and is listed apart
(``unranked_<task>.md``) with its coverage.
Domains of a run's queries are the released ones, taken from the published files.

Beside the leaderboard, the cross-system readings (:mod:`saber_lib.leaderboard.crosssystem`): MTEB
against SABER-Math over the systems the committed systems table matches to rows of ``--mteb``
(default ``DIR/mteb/leaderboard.csv``), and the rephrased-copy rank against nDCG@10 from ``--dedup``
(default ``DIR/dedup_summaries.jsonl``) and from each run's ``robustness/rephrased_rank.parquet``.
A default file that is absent is skipped (and said); a named one that is absent is an error.
With ``--stability``, also the query-set stability of the published systems' order in every setting
(split-half Kendall tau, swap rate, discriminative power, queries needed for a target tau;
:mod:`saber_lib.leaderboard.stability`).

Any error prints one line naming the file and exits with status 2; the outputs are written to a
temporary folder first and replace ``OUT`` only when everything succeeded, so ``OUT`` holds this
call's files and nothing else. A non-empty ``OUT`` that this command did not write is refused.
Stopped (Ctrl-C, SIGTERM, SIGHUP: :mod:`saber_lib.core.stops`), it removes its temporary folder, prints
one line and exits with status 130 (Ctrl-C) or 128 + the signal's number.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import matplotlib

from ..core import data, outputs, stops
from . import crosssystem as cs
from . import published as pub
from . import report as rep
from . import stability as stab
from . import stats as st


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2
        print(f"saber leaderboard: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="saber leaderboard", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="example:\n  saber leaderboard --published ../shared/data/published --run-dir runs/released "
                       "--task all --out leaderboard")
    p.add_argument("--published", required=True, type=Path, help="folder with evaluation/ (and confidence/)")
    p.add_argument("--run-dir", action="append", default=[], type=Path, help="workbench run (repeatable)")
    p.add_argument("--task", action="append", default=None,
                   help="task(s) to rank (repeatable; 'all' = the three); default statement-full")
    p.add_argument("--ci-scheme", choices=st.SCHEMES, default="correct",
                   help="interval scheme: correct (the ordinary bootstrap of each scope's scored queries) or "
                        "authors (the draws of the published confidence files); default correct")
    p.add_argument("--n-resamples", type=int, default=st.AUTHORS_RESAMPLES,
                   help="bootstrap resamples and sign-flip draws (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resamples and sign flips (default 0)")
    p.add_argument("--alpha", type=float, default=0.05, help="level of the Holm-adjusted tests (letters)")
    p.add_argument("--min-coverage", type=float, default=rep.MIN_COVERAGE,
                   help="least share of a task's queries a system must score to be ranked (default 0.95)")
    p.add_argument("--mteb", type=Path, default=None,
                   help="MTEB leaderboard CSV (default: DIR/mteb/leaderboard.csv when present)")
    p.add_argument("--dedup", type=Path, default=None,
                   help="rephrased-copy rank summaries, JSON lines (default: DIR/dedup_summaries.jsonl when present)")
    p.add_argument("--stability", action="store_true",
                   help="also write the query-set stability of the published systems' order (stability.parquet, "
                        "stability_<setting> figures): split-half Kendall tau, swap rate, discriminative power")
    p.add_argument("--stability-splits", type=int, default=stab.SPLITS,
                   help=f"seeded random splits into two disjoint query sets per query count (default {stab.SPLITS})")
    p.add_argument("--stability-subsets", type=int, default=stab.SUBSETS,
                   help=f"random query subsets per query count for the discriminative power (default {stab.SUBSETS})")
    p.add_argument("--stability-permutations", type=int, default=stab.PERMUTATIONS,
                   help="sign-flip patterns and bootstrap resamples of each paired test of the discriminative power "
                        f"(default {stab.PERMUTATIONS})")
    p.add_argument("--stability-target", type=float, default=stab.TARGET,
                   help=f"split-half tau whose query count is reported, fitted past the queries (default {stab.TARGET})")
    p.add_argument("--out", required=True, type=Path,
                   help="output folder (new, empty, or written by this command); replaced only when all succeeded")
    return p


def _input(given, default: Path, what: str):
    """The file to read: ``given`` (must exist: the reader names it when not), else ``default`` when it
    exists, else None (a line says the reading is skipped)."""
    if given is not None:
        return given
    if default.is_file():
        return default
    print(f"{what}: {default} not found, skipped (name a file to read)")
    return None


def _check_run_cutoff(run_dir: Path) -> None:
    """A run evaluated at another cut-off (``evaluate.ndcg_k`` in its evaluate manifest) is refused."""
    man = run_dir / "evaluate" / "manifest.json"
    k = json.loads(man.read_text()).get("parameters", {}).get("ndcg_k", pub.CUTOFF) if man.is_file() else pub.CUTOFF
    if k != pub.CUTOFF:
        raise pub.LayoutError(f"{man}: field 'parameters.ndcg_k': the run scored nDCG@{k}, the leaderboard "
                              f"ranks nDCG@{pub.CUTOFF}")


def collect_systems(published_dir, run_dirs=(), tasks=None):
    """Published systems plus the runs' systems, aligned on the released queries."""
    d = pub.read_published_dir(published_dir)
    ref = d.systems[0]
    systems = list(d.systems)
    taken = {s.name for s in systems}
    for rd in run_dirs:
        _check_run_cutoff(Path(rd))
        for s in pub.align(pub.read_run(rd, pub.query_domains_of(ref), tasks), ref):
            if s.name in taken:
                s.name = f"{Path(rd).name}/{s.name}"
            if s.name in taken:
                raise pub.LayoutError(f"{rd}: field 'retriever': system name {s.name!r} is used twice")
            taken.add(s.name)
            systems.append(s)
    return d, systems


COMMAND = "saber leaderboard"


def check_runs(run_dirs) -> None:
    """Every run's evaluate stage finished and its recorded outputs hash as recorded
    (:func:`saber_lib.core.data.require_verified`, the check every command runs before it reads a
    stage); otherwise its one-line error (naming the changed file, or the missing manifest)."""
    for rd in run_dirs:
        try:
            data.require_verified(Path(rd), "evaluate")
        except (data.ArtifactModified, data.StageUnfinished, OSError, ValueError) as e:
            raise pub.LayoutError(str(e)) from None


MIN_RESAMPLES = 2   # an interval needs two resample means at least (one is the whole "interval")


def check_options(args) -> None:
    """The options, before anything is read: the numbers in range, a named file a regular file (a
    FIFO is refused, never opened)."""
    for given in (args.mteb, args.dedup):
        if given is not None:
            pub.regular(given)
    if args.n_resamples < MIN_RESAMPLES:
        raise ValueError(f"--n-resamples must be at least {MIN_RESAMPLES} (an interval needs two resamples), "
                         f"got {args.n_resamples}")
    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must be in (0, 1), got {args.alpha}")
    if not 0 <= args.min_coverage <= 1:
        raise ValueError(f"--min-coverage must be in [0, 1], got {args.min_coverage}")
    for opt in ("stability_splits", "stability_subsets", "stability_permutations"):
        if getattr(args, opt) < 1:
            raise ValueError(f"--{opt.replace('_', '-')} must be >= 1, got {getattr(args, opt)}")
    if not 0 < args.stability_target < 1:
        raise ValueError(f"--stability-target must be in (0, 1), got {args.stability_target}")


def run(args) -> list[Path]:
    """The leaderboard into ``args.out``, from verified runs only (:func:`check_runs`), however the
    command was started (``saber leaderboard`` or ``python -m saber_lib.leaderboard.cli``)."""
    check_options(args)
    outputs.check_output_dir(outputs.output_target(args.out), COMMAND)  # before any work: a folder of other files is refused
    check_runs(args.run_dir)
    tasks = args.task or ["statement-full"]
    if "all" in tasks:
        tasks = list(pub.TASKS)
    d, systems = collect_systems(args.published, args.run_dir, tasks)
    for task in tasks:
        for s in systems:
            if task not in s.scores:
                where = Path(s.source) / "evaluate" / "ndcg.parquet" if s.meta.get("run_dir") else s.source
                raise pub.LayoutError(f"{where}: field 'ndcgs_by_task.{task}': system {s.name} has no task {task!r}")
    prov = rep.Provenance(published_files=[str(Path(f).resolve()) for f in d.files],
                          run_dirs=[str(Path(r).resolve()) for r in args.run_dir],
                          ci_scheme=args.ci_scheme, n_resamples=args.n_resamples, seed=args.seed,
                          alpha=args.alpha, skipped=d.skipped, min_coverage=args.min_coverage)
    progress = sys.stderr.isatty()
    lb = rep.leaderboard_frame(systems, tasks, args.ci_scheme, args.n_resamples, args.seed, progress=progress,
                               min_coverage=args.min_coverage)
    pw = rep.pairwise_frame(systems, tasks, args.n_resamples, args.seed, progress=progress)
    out = outputs.output_target(args.out)   # a link: its folder; ".": the current folder by name
    tmp = outputs.output_work_dir(out)
    try:  # OUT then holds this call's files only (an earlier call's tables on other inputs go)
        extra, facts = _cross_system(tmp, args, d, prov)
        if args.stability:
            f, facts_s = stab.write_published_stability(tmp, d.systems, n_splits=args.stability_splits,
                                              n_subsets=args.stability_subsets,
                                              n_permutations=args.stability_permutations, alpha=args.alpha,
                                              target=args.stability_target, seed=args.seed, caption=prov.caption(),
                                              progress=progress)
            extra, facts = extra + f, {**facts, **facts_s}
            for task, rows in facts_s["stability_needed"].items():
                print(f"stability {task}: " + ", ".join(
                    f"{r['statistic']} {r['target']:g} at n={r['n_needed']:.0f}" + (" (extrapolated)" if r["extrapolated"] else "")
                    if r["n_needed"] is not None else f"{r['statistic']}: no fit" for r in rows))
        files = rep.write_leaderboard(tmp, lb, pw, tasks, prov)
        man = json.loads((tmp / "manifest.json").read_text())
        man["files"] = sorted(set(man["files"]) | {f.name for f in extra})
        (tmp / "manifest.json").write_text(json.dumps({**man, **facts}, indent=2))
        files += extra
        outputs.replace_output_dir(tmp, out, COMMAND)
        final = [out / f.name for f in files]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for task in tasks:
        n_unranked = rep.unranked_table(lb, task).height
        print(f"{task}: {len(systems)} systems ({n_unranked} not ranked: coverage under {args.min_coverage}), "
              f"{rep.n_significant(pw, task, args.alpha)} of {pw.filter(pw['task'] == task).height} pairs "
              f"significantly different (Holm, {args.alpha})")
    print(f"wrote {len(final)} files to {out}")
    return final


def _cross_system(tmp: Path, args, d, prov) -> tuple[list[Path], dict]:
    """MTEB and rephrased-rank readings into ``tmp`` (each printed in one line)."""
    cap = (f"Published results in {Path(args.published).resolve()} ({len(d.confidence)} confidence files, "
           f"{len(d.systems)} systems with per-query files); workbench runs: "
           f"{', '.join(prov.run_dirs) if prov.run_dirs else 'none'}.")
    files, facts = [], {}
    mteb_file = _input(args.mteb, Path(args.published) / "mteb" / "leaderboard.csv", "MTEB correlation")
    if mteb_file is not None:
        f, facts_m = cs.write_mteb(tmp, mteb_file, d, args.run_dir, args.n_resamples, args.seed, cap)
        files, facts = files + f, {**facts, **facts_m}
        for scope, v in facts_m["mteb_statement_full_retrieval"].items():
            print(f"MTEB Retrieval vs statement-full ({scope}): {v['n']} systems, Spearman "
                  f"{_f(v['spearman'])}, Pearson {_f(v['pearson'])}")
    dedup = _input(args.dedup, Path(args.published) / "dedup_summaries.jsonl", "rephrased-rank correlation")
    f, facts_r = cs.write_rephrased(tmp, dedup, d, args.run_dir, args.n_resamples, args.seed, cap)
    files, facts = files + f, {**facts, **facts_r}
    for r in facts_r.get("rephrased_statement_full_mean_rank", []):
        print(f"rephrased-copy mean rank vs statement-full ({r['source']}, {r['pool']}): {r['n']} systems, "
              f"Spearman {_f(r['spearman'])}")
    return files, facts


def _f(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv=None) -> int:
    matplotlib.use("Agg")  # no display: files only
    args = build_parser().parse_args(argv)
    try:
        with stops.stop_on_signals():   # SIGTERM as Ctrl-C: the work folder goes in run()'s finally
            run(args)
    except KeyboardInterrupt as e:
        print(f"{stops.stopped_line(COMMAND, e)}; {args.out} was not changed", file=sys.stderr)
        return stops.exit_status(e)
    except (pub.LayoutError, KeyError, ValueError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"saber leaderboard: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
