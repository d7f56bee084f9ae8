"""Command line: ``saber run STAGE|all --params params/X.yaml``, ``saber status``, ``saber validate``,
``saber export``, ``saber judge-check`` (:mod:`.judge_check`), ``saber plan`` (:mod:`.plan`),
``saber leaderboard`` (delegated to :mod:`saber_lib.leaderboard.cli`)."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

from ..core import config, outputs, stops
from ..core.config_types import ProfileError
from ..core.config_yaml import yaml_error_line
from ..core.data import ArtifactModified, DiskFull, StageUnfinished, require_verified
from ..embed import EncoderUnavailable
from ..llm.redact import redact_text
from ..llm.types import LLMError
from . import integrity, plan, runner
from .integrity import FiguresFolderTaken, RunLock, RunLocked
from .stages import STAGES


def _overrides(items) -> dict:
    """``["section.key=value", ...]`` -> ``{"section.key": value}``, each value read as YAML.

    A malformed item raises :class:`ProfileError` naming the ``--set`` item (one line)."""
    out = {}
    for it in items or []:
        key, sep, val = it.partition("=")
        sec, dot, name = key.strip().partition(".")
        shown = redact_text(it)   # the item may hold a URL password (llm.base_urls)
        if not sep or not dot or not sec or not name:
            raise ProfileError(f"--set {shown!r}: expected SECTION.KEY=VALUE")
        if f"{sec}.{name}" in out:
            raise ProfileError(f"--set {shown!r}: {sec}.{name} is set twice on the command line")
        try:
            out[f"{sec}.{name}"] = yaml.safe_load(val)
        except yaml.YAMLError as e:
            raise ProfileError(f"--set {shown!r}: the value is not valid YAML: "
                                   f"{yaml_error_line(e)}") from None
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["leaderboard"]:  # its own parser and options (saber leaderboard --help)
        # a run's evaluate outputs are hashed in full against its manifest before they are ranked
        from ..leaderboard import cli as leaderboard_cli  # heavy (plots, pandas): only this command needs it
        return leaderboard_cli.main(argv[1:])
    ap = argparse.ArgumentParser(prog="saber", description="SABER-Math workbench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute stage notebooks (and what they need) with papermill")
    r.add_argument("stages", nargs="+", help=f"stage names or 'all': {', '.join(s.name for s in STAGES)}")
    r.add_argument("--params", required=True, help="parameter profile, e.g. params/demo.yaml")
    r.add_argument("--run-dir", default=None, help="run directory (default runs/<profile name>)")
    r.add_argument("--force", action="store_true", help="rerun the named stages even if up to date")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter")
    r.add_argument("--verify", action="store_true", help="hash every recorded file before anything is read")
    a = sub.add_parser("accept", help="keep edited artifacts of a stage as its outputs (what reads them reruns)")
    a.add_argument("stage")
    a.add_argument("--run-dir", required=True)
    s = sub.add_parser("status", help="list stages as done / modified / stale / missing")
    s.add_argument("--run-dir", required=True)
    s.add_argument("--params", default=None, help="profile (default: the one the run used)")
    s.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter (as the run did)")
    s.add_argument("--verify", action="store_true",
                   help="hash every recorded file (not only size and mtime): finds any edit")
    s.add_argument("--check", action="store_true",
                   help="exit with status 1 when any stage is not done (modified, stale or missing), for scripts")
    v = sub.add_parser("validate", help="validate a parameter profile and exit")
    v.add_argument("params")
    e = sub.add_parser("export", help="export a built benchmark in the MTEB/BEIR layout")
    e.add_argument("--run-dir", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--setting", default="statement-full")
    _judge_check_parser(sub)
    plan.add_parser(sub)
    sub.add_parser("leaderboard", add_help=False,
                   help="published systems (and runs on the released benchmark) ranked with intervals and "
                        "paired tests; saber leaderboard --help")
    args = ap.parse_args(argv)

    try:
        if args.cmd == "run":
            runner.run(args.params, args.stages, run_dir=args.run_dir, force=args.force,
                       overrides=_overrides(args.set), verify=args.verify)
        elif args.cmd == "accept":
            with RunLock(Path(args.run_dir)):
                integrity.accept(Path(args.run_dir), args.stage)
        elif args.cmd == "status":
            params = args.params or _profile_of_run(Path(args.run_dir))
            states = runner.print_status(params, args.run_dir, overrides=_overrides(args.set), verify=args.verify)
            if args.check and any(st != "done" for st in states.values()):
                return 1
        elif args.cmd == "validate":
            p = runner.load_run_profile(args.params)
            print(f"{p.path}: ok ({sum(len(v) for v in p.values.values())} keys)")
        elif args.cmd == "export":
            from ..core.text import SETTINGS  # heavy (scikit-learn's stop words): only this command needs it
            if args.setting not in SETTINGS:
                print(f"saber export: unknown --setting {args.setting!r}; use one of {', '.join(SETTINGS)}",
                      file=sys.stderr)
                return 2
            info = _export(Path(args.run_dir), Path(args.out), args.setting)
            print(f"exported {info['queries']} queries, {info['corpus']} documents, {info['qrels']} qrels "
                  f"to {args.out}")
        elif args.cmd == "judge-check":
            return _judge_check(args)
        elif args.cmd == "plan":
            print(plan.run(args))
    except plan.PlanError as e:
        print(f"saber plan: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:   # Ctrl-C, or a signal during saber run (core.stops): one line
        print(f"{stops.stopped_line(f'saber {args.cmd}', e)}; a stage stopped midway is not recorded done",
              file=sys.stderr)
        return stops.exit_status(e)
    except (LLMError, EncoderUnavailable) as e:
        print(f"saber {args.cmd}: {e}", file=sys.stderr)
        return 1
    except ProfileError as e:
        print(f"invalid profile: {e}", file=sys.stderr)
        return 2
    except runner.StageFailed as e:
        print(str(e), file=sys.stderr)
        return 1
    except (RunLocked, ArtifactModified, StageUnfinished,
            FiguresFolderTaken) as e:
        print(f"saber: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, outputs.OutputFolderTaken) as e:
        print(str(e), file=sys.stderr)
        return 1
    except DiskFull as e:
        print(f"saber: {e}", file=sys.stderr)
        return 1
    return 0


def _judge_check_parser(sub) -> None:
    """The ``judge-check`` subcommand's options (:mod:`.judge_check`)."""
    j = sub.add_parser("judge-check", help="score pairwise judges against reference labels (triples and/or grades)")
    j.add_argument("--params", required=True, help="parameter profile, e.g. params/demo.yaml")
    j.add_argument("--run-dir", required=True, help="run directory whose corpus holds the texts")
    j.add_argument("--reference", help="labelled triples (JSON Lines or CSV; relative = in the data dir)")
    j.add_argument("--grades", help="candidates graded 0-100 (JSON Lines or CSV; relative = in the data dir)")
    j.add_argument("--pairs-per-query", type=int, default=None, metavar="N",
                   help="graded pairs per query, drawn seeded (default judge_validation.jv_grade_pairs; 0 = all)")
    j.add_argument("--min-gap", type=float, default=None,
                   help="graded pairs: grades at least this many points apart (default judge_validation.jv_grade_min_gap)")
    j.add_argument("--fidelity", action="store_true",
                   help="with --grades: each judge also plays the run's tournament on the graded queries, and the "
                        "run's retrievers are ordered under its ratings and under the grades (Kendall tau, bias)")
    j.add_argument("--judge", action="append", required=True, metavar="SPEC",
                   help="a judge spec of the judge registry, e.g. proxy:use-m (an unknown one's error lists "
                        "every kind); repeat for several")
    j.add_argument("--out", required=True, help="output folder (new, empty, or written by this command)")
    j.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter")


def _judge_check(args) -> int:
    # the command loads the judges, the studies and the signals: only when it runs, so that the other
    # commands (saber status in a loop) start in a second
    from ..validation import judge_check
    from ..judging.registry import JudgeSpecError
    from ..validation.reference import ReferenceFileError
    from .run_access import RunAccess
    try:
        if args.pairs_per_query is not None and args.pairs_per_query < 0:
            raise ReferenceFileError(f"--pairs-per-query must be >= 0, got {args.pairs_per_query}")
        if args.min_gap is not None and not 0 <= args.min_gap <= 100:
            raise ReferenceFileError(f"--min-gap must be in [0, 100], got {args.min_gap}")
        overrides = _overrides(args.set)
        table = judge_check.judge_check(lambda run_dir: RunAccess(args.params, run_dir, overrides),
                                        args.run_dir, args.reference, args.judge, args.out, grades=args.grades,
                                        pairs_per_query=args.pairs_per_query, min_gap=args.min_gap,
                                        fidelity=args.fidelity)
    except (JudgeSpecError, ReferenceFileError) as e:
        print(f"saber judge-check: {e}", file=sys.stderr)
        return 2
    if args.reference is not None:
        print(f"{table.height} judge(s) scored on {table['n_pairs'].max()} triples: {args.out}/judge_check.md")
    if args.grades is not None:
        print(f"judge(s) scored on the graded pairs: {args.out}/grade_check.md")
    if args.fidelity:
        print(f"system order under each judge's ratings against the grades: {args.out}/fidelity_check.md")
    return 0


EXPORT = "saber export"


def _export(run_dir: Path, out: Path, setting: str) -> dict:
    """``saber export``: the stages it reads are checked as the runner checks them (finished, every
    file hashed against the manifest); the export is written beside ``out`` and then replaces it, so
    ``out`` holds this export only (a folder holding anything but an earlier export's files is refused)."""
    out = outputs.output_target(out)   # a link: its folder; ".": the current folder by name
    outputs.check_output_dir(out, EXPORT)

    def verified(names):
        for name in names:
            require_verified(run_dir, name)

    from ..evaluate.export import export_run  # heavy (the retrievers): only this command needs it
    tmp = outputs.output_work_dir(out)
    try:
        info = export_run(run_dir, tmp, setting=setting, check=verified)
        outputs.replace_output_dir(tmp, out, EXPORT)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _profile_of_run(run_dir: Path) -> str:
    gone: dict[str, Path] = {}   # profile files named by a manifest that are no longer there
    for p in sorted(run_dir.glob("*/manifest.json")):
        prof = json.loads(p.read_text()).get("profile")
        if prof and Path(prof).exists():
            return prof
        if prof:
            gone.setdefault(prof, p)
    if gone:
        prof, man = next(iter(gone.items()))
        raise SystemExit(f"{run_dir}: the profile the run used, {prof} (named in {man}), is missing: moved or "
                         f"deleted; pass --params with its new place")
    raise SystemExit(f"{run_dir}: no manifest names a profile; pass --params")


if __name__ == "__main__":
    raise SystemExit(main())
