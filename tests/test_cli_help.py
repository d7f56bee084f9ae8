"""The command line documents itself: ``saber --version``, a help line on every option of every
subcommand (``saber`` and ``saber leaderboard``), and an example in every subcommand's help."""
import argparse
import re
import subprocess
import sys
from pathlib import Path

from saber_lib.leaderboard import cli as leaderboard_cli
from saber_lib.pipeline import cli

ROOT = Path(__file__).resolve().parent.parent


def _parsers():
    """(name, parser) of ``saber``, each of its subcommands, and ``saber leaderboard``'s own parser."""
    top = cli.command_parser()
    out = [("saber", top)]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            out += [(f"saber {name}", p) for name, p in action.choices.items()]
    out.append(("saber leaderboard (its own parser)", leaderboard_cli.build_parser()))
    return out


def test_every_option_has_help_and_every_command_an_example():
    bare, no_example = [], []
    for name, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                bare += [f"{name} {c.dest}" for c in action._choices_actions if not (c.help or "").strip()]
            elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                bare.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
        if "saber" not in (parser.epilog or "") or not re.search(r"example", parser.epilog or ""):
            no_example.append(name)
    assert bare == []
    assert no_example == []


def test_the_walk_finds_a_bare_option():
    """The check above can fail: an option added without help is found."""
    p = argparse.ArgumentParser(prog="x", epilog="example:\n  saber x")
    p.add_argument("--quiet", action="store_true")
    assert [a.dest for a in p._actions if not (a.help or "").strip()] == ["quiet"]


def test_version_names_the_package_version_and_the_checkout_commit():
    r = subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", "--version"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert r.returncode == 0, r.stderr
    import importlib.metadata
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    line = r.stdout.strip()
    assert line.startswith(f"saber {importlib.metadata.version(cli.DISTRIBUTION)}")
    if head.returncode == 0:                   # a checkout: its commit, read without running git
        assert line.endswith(f"(commit {head.stdout.strip()[:12]})")


def test_outside_a_checkout_the_version_has_no_commit(tmp_path):
    assert cli.git_commit(tmp_path) is None
    (tmp_path / ".git").write_text("gitdir: nowhere\n")      # a broken worktree pointer: no error either
    assert cli.git_commit(tmp_path) is None
    git = tmp_path / "repo" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/main\n")
    assert cli.git_commit(tmp_path / "repo") == "ab" * 6
