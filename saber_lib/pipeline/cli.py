"""Command line: ``saber run STAGE|all --params params/X.yaml``, ``saber status``, ``saber validate``,
``saber export``, ``saber judge-check`` (:mod:`.judge_check`), ``saber plan`` (:mod:`.plan`),
``saber leaderboard`` (delegated to :mod:`saber_lib.leaderboard.cli`)."""
from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
from pathlib import Path

import yaml

from ..core import config, outputs, stops
from ..core.config_types import ProfileError
from ..core.config_yaml import yaml_error_line
from ..core.data import PROJECT_ROOT, ArtifactModified, DiskFull, StageUnfinished, load_manifest, require_verified
from ..embed import EncoderUnavailable
from ..llm.redact import redact_text
from ..llm.types import LLMError
from . import integrity, plan, runner
from .integrity import FiguresFolderTaken, RunLock, RunLocked
from .schedule import StagesFailed, available_cores
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
    ap = command_parser()
    args = ap.parse_args(argv)
    return _dispatch(args)


def command_parser() -> argparse.ArgumentParser:
    """The ``saber`` parser (``saber leaderboard`` has its own: :func:`saber_lib.leaderboard.cli.build_parser`)."""
    ap = argparse.ArgumentParser(prog="saber", description="SABER-Math workbench", epilog=_example(
        "saber run all --params params/demo.yaml", "saber status --run-dir runs/demo"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=version_line(),
                    help="print the package version (and the commit of a checkout) and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    r = _command(sub, "run", "execute stage notebooks (and what they need) with papermill",
                 "saber run all --params params/demo.yaml --jobs 2",
                 "saber run tournament --params params/tiny.yaml --run-dir runs/t --force")
    r.add_argument("stages", nargs="+", help=f"stage names or 'all': {', '.join(s.name for s in STAGES)}")
    r.add_argument("--params", required=True, help="parameter profile, e.g. params/demo.yaml")
    r.add_argument("--run-dir", default=None, help="run directory (default runs/<profile name>)")
    r.add_argument("--force", action="store_true", help="rerun the named stages even if up to date")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter")
    r.add_argument("--verify", action="store_true", help="hash every recorded file before anything is read")
    r.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                   help="stages run at the same time, each once the stages it reads from are done "
                        f"(default: the cores available, {available_cores()} here; 1 = one after another); "
                        "the outputs are the same for any N")
    a = _command(sub, "accept", "keep edited artifacts of a stage as its outputs (what reads them reruns)",
                 "saber accept thresholds --run-dir runs/demo")
    a.add_argument("stage", help="the stage whose edited files become its outputs")
    a.add_argument("--run-dir", required=True, help="run directory holding the stage")
    s = _command(sub, "status", "list stages as done / modified / stale / missing",
                 "saber status --run-dir runs/demo --verify", "saber status --run-dir runs/demo --check")
    s.add_argument("--run-dir", required=True, help="run directory to inspect")
    s.add_argument("--params", default=None, help="profile (default: the one the run used)")
    s.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter (as the run did)")
    s.add_argument("--verify", action="store_true",
                   help="hash every recorded file (not only size and mtime): finds any edit")
    s.add_argument("--check", action="store_true",
                   help="exit with status 1 when any stage is not done (modified, stale or missing), for scripts")
    v = _command(sub, "validate", "validate a parameter profile and exit", "saber validate params/demo.yaml")
    v.add_argument("params", help="the profile to check (keys, types, ranges, registry names)")
    e = _command(sub, "export", "export a built benchmark in the MTEB/BEIR layout",
                 "saber export --run-dir runs/demo --out exports/demo-beir")
    e.add_argument("--run-dir", required=True, help="run directory whose tournament has finished")
    e.add_argument("--out", required=True, help="output folder (new, empty, or written by an earlier export)")
    e.add_argument("--setting", default="statement-full",
                   help="which texts stand for queries and documents (default statement-full)")
    _judge_check_parser(sub)
    plan.add_parser(sub)
    _command(sub, "leaderboard", "published systems (and runs on the released benchmark) ranked with intervals "
             "and paired tests; saber leaderboard --help", "saber leaderboard --published DIR --out OUT",
             add_help=False)
    return ap


DISTRIBUTION = "saber-math-workbench"   # the package name in pyproject.toml


def _command(sub, name: str, help: str, *examples: str, **kw) -> argparse.ArgumentParser:
    """A subcommand with its help line and its examples (shown under ``saber NAME --help``)."""
    return sub.add_parser(name, help=help, description=help, epilog=_example(*examples),
                          formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def _example(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {ln}" for ln in lines)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def version_line() -> str:
    """``saber X.Y.Z`` (the installed package's version), with the commit when run from a checkout."""
    try:
        ver = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        ver = "unknown (not installed)"
    commit = git_commit(PROJECT_ROOT)
    return f"saber {ver}" + (f" (commit {commit})" if commit else "")


def git_commit(root: Path) -> str | None:
    """The checked-out commit of ``root`` read from its ``.git`` (no git process; None outside a checkout)."""
    try:
        git = root / ".git"
        if git.is_file():   # a worktree: "gitdir: PATH"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:12]
        ref = head.split(":", 1)[1].strip()
        for base in (git, _common_dir(git)):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()[:12]
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0][:12]
    except (OSError, IndexError):
        pass
    return None


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    return (git / common.read_text().strip()).resolve() if common.is_file() else git


def _dispatch(args) -> int:
    try:
        if args.cmd == "run":
            runner.run(args.params, args.stages, run_dir=args.run_dir, force=args.force,
                       overrides=_overrides(args.set), verify=args.verify,
                       jobs=args.jobs if args.jobs is not None else available_cores())
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
    except (runner.StageFailed, StagesFailed) as e:
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
    j = _command(sub, "judge-check", "score pairwise judges against reference labels (triples and/or grades)",
                 "saber judge-check --params params/demo.yaml --run-dir runs/demo --judge proxy:use-m "
                 "--reference reference/triples.jsonl --out judge-check")
    j.add_argument("--params", required=True, help="parameter profile, e.g. params/demo.yaml")
    j.add_argument("--run-dir", required=True, help="run directory whose corpus holds the texts")
    j.add_argument("--reference", help="labelled triples (JSON Lines or CSV; relative = in the data dir)")
    j.add_argument("--grades", help="candidates graded 0-100 (JSON Lines or CSV; relative = in the data dir)")
    j.add_argument("--pairs-per-query", type=int, default=None, metavar="N",
                   help="graded pairs per query, drawn seeded (default judge_validation.jv_grade_pairs; 0 = all)")
    j.add_argument("--min-gap", type=float, default=None,
                   help="graded pairs: grades at least this many points apart; equal grades never form a pair "
                        "(default judge_validation.jv_grade_min_gap)")
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
    from ..judging.judge_base import JudgeFault
    from ..judging.registry import JudgeSpecError
    from ..validation.reference import ReferenceFileError
    from .run_access import RunAccess
    # Ctrl-C and SIGTERM end the command through its cleanup (the working folders removed), in one line
    try:
        with stops.stop_on_signals():
            table = _judge_check_tables(args, judge_check, RunAccess, ReferenceFileError)
    except (JudgeSpecError, JudgeFault, ReferenceFileError) as e:   # JudgeFault: a plugin's judge, named
        print(f"saber judge-check: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"{stops.stopped_line('saber judge-check', e)}: nothing written to {args.out}, the run left as it is",
              file=sys.stderr)
        return stops.exit_status(e)
    if args.reference is not None:
        print(f"{table.height} judge(s) scored on {table['n_pairs'].max()} triples: {args.out}/judge_check.md")
    if args.grades is not None:
        print(f"judge(s) scored on the graded pairs: {args.out}/grade_check.md")
    if args.fidelity:
        print(f"system order under each judge's ratings against the grades: {args.out}/fidelity_check.md")
    return 0


def _judge_check_tables(args, judge_check, run_access, reference_error):
    if args.pairs_per_query is not None and args.pairs_per_query < 0:
        raise reference_error(f"--pairs-per-query must be >= 0, got {args.pairs_per_query}")
    if args.min_gap is not None and not 0 <= args.min_gap <= 100:
        raise reference_error(f"--min-gap must be in [0, 100], got {args.min_gap}")
    overrides = _overrides(args.set)
    return judge_check.judge_check(lambda run_dir: run_access(args.params, run_dir, overrides),
                                   args.run_dir, args.reference, args.judge, args.out, grades=args.grades,
                                   pairs_per_query=args.pairs_per_query, min_gap=args.min_gap, fidelity=args.fidelity)


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
        prof = load_manifest(p).get("profile")
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
