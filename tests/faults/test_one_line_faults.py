"""Fault cases that were tracebacks or misleading lines: a profile that names a folder (``inherit:``,
``saber validate DIR``), an unknown export setting, an output folder asked for where none can be
made, something planted at the open-corpus index's fixed short link in /tmp, and a run whose profile
file was moved away.

Old behaviour is given per test. The command line runs as a real process (as in tests/test_cli.py).
"""
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import copy_run, one_line_error as _one_line, saber_cli as saber

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- a folder as a profile
def test_inherit_naming_a_folder_is_one_line(tmp_path):
    # old: IsADirectoryError traceback from read_text
    (tmp_path / "base").mkdir()
    child = tmp_path / "child.yaml"
    child.write_text("inherit: base\n")
    msg = _one_line(saber("validate", child), child, "folder", code=2)
    assert "inherit" in msg


def test_validate_a_folder_is_one_line(tmp_path):
    # old: IsADirectoryError traceback
    _one_line(saber("validate", tmp_path), tmp_path, "folder", code=2)
    _one_line(saber("run", "corpus", "--params", tmp_path, "--run-dir", tmp_path / "run"), tmp_path, code=2)
    assert not (tmp_path / "run").exists()


def test_a_fifo_as_a_profile_is_one_line_not_a_hang(tmp_path):
    # old: `saber validate` waited for ever on the FIFO's open
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    _one_line(saber("validate", fifo, timeout=60), fifo, "not a regular file", code=2)


# --------------------------------------------------------------------------- export
@pytest.mark.pipeline   # on a copy of the session's tiny run (built by the command line)
def test_export_with_an_unknown_setting_is_one_line(tiny_tournament_run, tmp_path):
    # old: a ValueError traceback from setting_texts, after the stages were hashed
    run = copy_run(tiny_tournament_run[0], tmp_path / "run")
    msg = _one_line(saber("export", "--run-dir", run, "--out", tmp_path / "out", "--setting", "bogus"),
                    "'bogus'", "statement-full", code=2)
    assert "--setting" in msg and not (tmp_path / "out").exists()
    r = saber("export", "--run-dir", run, "--out", tmp_path / "out", "--setting", "full-full")
    assert r.returncode == 0 and (tmp_path / "out" / "corpus.jsonl").exists(), r.stderr


@pytest.mark.parametrize("where", ["/dev/null/out", "/sys/saber-export-out", "/proc/saber-export-out"])
def test_export_out_where_no_folder_can_be_made_names_out(tmp_path, where):
    # old: FileExistsError / PermissionError tracebacks, or a line naming /proc (not OUT)
    msg = _one_line(saber("export", "--run-dir", tmp_path / "run", "--out", where), where, code=1)
    assert "cannot make the output folder" in msg and f"/.{Path(where).name}." not in msg


def test_the_work_folder_is_not_left_in_a_special_place(tmp_path):
    from saber_lib.core import outputs

    with pytest.raises(outputs.OutputFolderUnwritable, match="/dev/null is not a folder"):
        outputs.output_work_dir("/dev/null/out")
    tmp = outputs.output_work_dir(tmp_path / "a" / "b" / "out")   # missing parents are made
    assert tmp.parent == tmp_path / "a" / "b" and tmp.is_dir() and not list(tmp.iterdir())


# --------------------------------------------------------------------------- the index's short link
def _alias_name(path: Path) -> Path:
    return Path(tempfile.gettempdir()) / f"saber-az-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"


def test_a_folder_at_the_index_link_in_tmp_is_left_alone_and_the_index_still_opens(tmp_path):
    # old: IsADirectoryError traceback (it tried to unlink the folder) when the index was searched
    pytest.importorskip("pya0")
    from saber_lib.retrieval.indexes import Approach0Index, _short_alias

    docs = ["Solve $x^2 - 5x + 6 = 0$ for real $x$.", "Find the area of a circle of radius $r$.",
            "Factor $x^2 - 5x + 6$ completely."]
    deep = tmp_path / ("a-long-folder-name-" * 4) / "index"
    deep.mkdir(parents=True)
    built = Approach0Index.build([f"d{i}" for i in range(len(docs))], docs)
    built.save(deep)
    planted = _alias_name(deep)
    planted.mkdir()
    (planted / "keep.txt").write_text("someone's file")
    try:
        link = _short_alias(deep)
        assert link != planted and link.resolve() == deep.resolve() and len(str(link)) <= 60
        rows, _ = Approach0Index.load(deep).search(["Find the roots of $x^2 - 5x + 6 = 0$"], 2)
        assert int(rows[0][0]) in (0, 2)
        assert (planted / "keep.txt").read_text() == "someone's file"
    finally:
        shutil.rmtree(planted, ignore_errors=True)


# --------------------------------------------------------------------------- a moved profile
@pytest.mark.pipeline   # on a copy of the session's tiny run (built by the command line)
def test_status_of_a_run_whose_profile_was_moved_names_the_missing_file(tiny_tournament_run, tmp_path):
    # old: "RUN: no manifest names a profile; pass --params" although every manifest names one
    run = copy_run(tiny_tournament_run[0], tmp_path / "run")
    gone = tmp_path / "moved-away" / "mine.yaml"
    for man in run.glob("*/manifest.json"):
        m = json.loads(man.read_text())
        m["profile"] = str(gone)
        man.write_text(json.dumps(m))
    msg = _one_line(saber("status", "--run-dir", run), run, gone, "missing", "--params", code=1)
    assert "no manifest names a profile" not in msg
