"""Fault cases of something other than a file where a data file should be: a FIFO (named pipe), a
folder, a symbolic link that leads back to itself. Each is one line naming the path, within seconds,
and the FIFO is never opened (opening it waits for a writer that never comes).

Old behaviour is given per test. Real processes through the command line, on a data folder of links
to the reference data in which one source file is replaced.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA_DIR, needs_data
from saber_lib.core import data

ROOT = Path(__file__).resolve().parents[2]
REL = "sources/aime/aime.json"          # a file the tiny profile's corpus stage reads

pytestmark = needs_data(REL)


@pytest.fixture
def data_dir(tmp_path):
    """A data folder of links to the reference files (read in place, never copied)."""
    d = tmp_path / "data"
    for src in sorted(DATA_DIR.rglob("*")):
        dst = d / src.relative_to(DATA_DIR)
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
    return d


def _run_corpus(tmp_path, data_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SABER_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", "run", "corpus", "--params",
                           str(ROOT / "params" / "tiny.yaml"), "--run-dir", str(tmp_path / "run"),
                           "--set", f"run.figures_dir={tmp_path / 'fig'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)


def _one_line(r, path) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], r.stderr
    return lines[0]


def _replace(data_dir, make) -> Path:
    target = data_dir / REL
    target.unlink()
    make(target)
    return target


def test_a_fifo_where_a_data_file_should_be_is_one_line_not_a_hang(tmp_path, data_dir):
    # old: `saber run` hung for ever in the input hashing (open() of the FIFO waits for a writer)
    fifo = _replace(data_dir, os.mkfifo)
    msg = _one_line(_run_corpus(tmp_path, data_dir), fifo)     # (a hang ends in TimeoutExpired)
    assert "FIFO" in msg and "not a file" in msg
    assert not (tmp_path / "run" / "corpus" / "manifest.json").exists()


def test_a_folder_where_a_data_file_should_be_is_one_line(tmp_path, data_dir):
    # old: IsADirectoryError traceback from the input hashing
    folder = _replace(data_dir, lambda p: p.mkdir())
    msg = _one_line(_run_corpus(tmp_path, data_dir), folder)
    assert "is a folder" in msg


def test_a_symlink_loop_where_a_data_file_should_be_is_named_as_a_loop(tmp_path, data_dir):
    # old: "data file missing ... download it from ...": the file was never missing
    loop = _replace(data_dir, lambda p: p.symlink_to(p.name))
    msg = _one_line(_run_corpus(tmp_path, data_dir), loop)
    assert "leads back to itself" in msg and "download" not in msg and "missing" not in msg


def test_the_checks_in_the_library(tmp_path):
    fifo, folder, loop, ok = tmp_path / "fifo", tmp_path / "dir", tmp_path / "loop", tmp_path / "ok.json"
    os.mkfifo(fifo)
    folder.mkdir()
    loop.symlink_to(loop.name)
    ok.write_text("[]")
    for p, kind in ((fifo, "FIFO"), (folder, "folder"), (loop, "leads back to itself")):
        with pytest.raises(data.NotAFile, match=kind):
            data.hash_file(p)
        with pytest.raises(data.NotAFile, match=kind):
            data.data_file(tmp_path, p.name)
    with pytest.raises(data.DataFileMissing, match="download it from"):   # missing stays missing
        data.data_file(tmp_path, "absent.json")
    assert data.data_file(tmp_path, "ok.json") == ok
    assert len(data.hash_file(ok)) == 64


def test_a_fifo_or_folder_where_a_named_file_should_be_is_named_not_missing(tmp_path):
    """The files that profile keys and stages name (an external input, ``llm.model_path``,
    ``llm.cassette``): nothing there is 'does not exist', a FIFO or a folder is named as what it is
    (the FIFO never opened), each one line naming the key or the stage."""
    from saber_lib import llm as L
    from saber_lib.llm.cassette import load_cassette
    from saber_lib.llm.models import resolve_model_path

    fifo, folder, missing = tmp_path / "m.gguf", tmp_path / "d.gguf", tmp_path / "absent.gguf"
    os.mkfifo(fifo)
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match="stage evaluate: external input .*absent.gguf does not exist"):
        data.existing_file(missing, "stage evaluate: external input")
    for p, kind in ((fifo, "a FIFO (named pipe)"), (folder, "a folder")):
        with pytest.raises(data.NotAFile, match=f"is {re.escape(kind)}, not a file"):
            data.existing_file(p, "stage evaluate: external input")
        for call, key in ((resolve_model_path, "llm.model_path:"), (load_cassette, "llm.cassette:")):
            with pytest.raises(L.LLMError) as e:
                call(str(p))
            assert str(e.value).startswith(f"{key} {p} is {kind}") and len(str(e.value).splitlines()) == 1
    for call, key in ((resolve_model_path, "llm.model_path:"), (load_cassette, "llm.cassette:")):
        with pytest.raises(L.LLMError, match=f"{key} .*absent.gguf does not exist"):
            call(str(missing))
