"""Fault cases of a command's output folder (``saber export --out``, ``saber leaderboard --out``): the
command replaces the folder only when it holds nothing but the files an earlier call wrote, unchanged
(its marker lists them with their sha256); a user's file added to an export, or a folder holding
``paper.tex`` beside a copied marker, is refused and kept. ``--out`` given as a symbolic link, as ``.``,
and the mode of a new folder.

The export runs through the command line (in this process) on the session's finished tiny run.
"""
import json
import os
import stat

import pytest

from saber_lib.core import data, outputs
from saber_lib.pipeline.cli import main

pytestmark = pytest.mark.pipeline        # exports a run built by the command line (conftest)


def export(run_dir, out, capsys) -> tuple[int, str]:
    code = main(["export", "--run-dir", str(run_dir), "--out", str(out)])
    return code, capsys.readouterr().err.strip()


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_file_added_to_an_export_is_never_deleted(tiny_tournament_run, tmp_path, capsys):
    # old: NOTES.md written into an export was deleted by the next export into the same folder
    run = tiny_tournament_run[0]
    out = tmp_path / "beir"
    assert export(run, out, capsys)[0] == 0
    (out / "NOTES.md").write_text("my notes on this export\n")
    code, err = export(run, out, capsys)
    assert (out / "NOTES.md").read_text() == "my notes on this export\n"
    line = one_line(err)
    assert code == 1 and str(out / "NOTES.md") in line and "nothing was changed" in line
    (out / "NOTES.md").unlink()

    marker = json.loads((out / outputs.OUTPUT_OWNER).read_text())
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
                     and p.name != outputs.OUTPUT_OWNER)
    assert sorted(marker["files"]) == written and "qrels/test.tsv" in written
    assert marker["files"]["qrels/test.tsv"] == data.hash_file(out / "qrels" / "test.tsv")
    assert export(run, out, capsys)[0] == 0            # its own files only: replaced

    # a listed file whose content changed is the user's too
    (out / "qrels" / "test.tsv").write_text("my own qrels\n")
    code, err = export(run, out, capsys)
    assert code == 1 and str(out / "qrels" / "test.tsv") in one_line(err) and "changed" in err
    assert (out / "qrels" / "test.tsv").read_text() == "my own qrels\n"


def test_a_copied_export_does_not_make_a_users_folder_deletable(tiny_tournament_run, tmp_path, capsys):
    # old: an export copied (marker included) into paper/ made `saber export --out paper` delete paper.tex
    run = tiny_tournament_run[0]
    first = tmp_path / "beir"
    assert export(run, first, capsys)[0] == 0
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "paper.tex").write_text("\\documentclass{article}\n")
    for p in first.rglob("*"):
        if p.is_file():
            (paper / p.relative_to(first)).parent.mkdir(parents=True, exist_ok=True)
            (paper / p.relative_to(first)).write_bytes(p.read_bytes())
    before = sorted(p.relative_to(paper).as_posix() for p in paper.rglob("*"))
    code, err = export(run, paper, capsys)
    assert code == 1 and str(paper / "paper.tex") in one_line(err)
    assert (paper / "paper.tex").read_text() == "\\documentclass{article}\n"
    assert sorted(p.relative_to(paper).as_posix() for p in paper.rglob("*")) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary folder left


def test_out_as_a_link_dot_and_the_mode_of_a_new_folder(tiny_tournament_run, tmp_path, capsys, monkeypatch):
    run = tiny_tournament_run[0]
    # old: the new folder had mode 0700 (mkdtemp's) whatever the user's umask
    old_mask = os.umask(0o022)
    try:
        assert export(run, tmp_path / "fresh", capsys)[0] == 0
        os.umask(0o002)
        assert export(run, tmp_path / "shared", capsys)[0] == 0
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o775

    # old: the link itself was renamed to .link.old<pid> and left behind, pointing at the old folder
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    for _ in range(2):
        assert export(run, link, capsys)[0] == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert (link / "qrels" / "test.tsv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "link", "shared", "target"]

    # old: `--out .` named the command's own temporary folder (./..xxxx) as what made "." not empty
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert export(run, ".", capsys)[0] == 0
    assert (here / "qrels" / "test.tsv").is_file()
    assert export(run, ".", capsys)[0] == 0             # again: its own files only
    assert not [p for p in here.iterdir() if p.name.startswith("..")]
    (here / "draft.tex").write_text("mine\n")
    code, err = export(run, ".", capsys)
    assert code == 1 and str(here / "draft.tex") in one_line(err) and (here / "draft.tex").is_file()
