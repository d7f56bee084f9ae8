"""Fault cases of the files ``saber leaderboard`` reads beside the per-query results: confidence files
that contradict themselves or the evaluation file, something other than a file where one is read (a
FIFO: never opened, so never a hang), MTEB scores and rephrased-rank summaries out of their range,
an empty summaries file, and a resample count that cannot give an interval. Each is one line naming
the file and line (or field, or option), exit 2, and nothing written.

Old behaviour is given per test. Readers run in-process on a copy of the authors' published files;
a reader that would block on a FIFO is released after a few seconds by a writer thread (so an old
reader fails the test instead of hanging it).
"""
import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_data
from saber_lib.core.data import resolve_data_dir
from saber_lib.leaderboard import mteb, rephrased
from saber_lib.leaderboard import published as pub
from test_leaderboard_faults import _edit, _error  # the same helpers as the older leaderboard faults

PUBLISHED = resolve_data_dir() / "published"
pytestmark = needs_data("published", "evaluation")


@pytest.fixture
def published(tmp_path) -> Path:
    """A writable copy of the published result files (evaluation, confidence, MTEB, summaries)."""
    dst = tmp_path / "published"
    for f in PUBLISHED.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl", ".csv"):
            (dst / f.relative_to(PUBLISHED)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / f.relative_to(PUBLISHED))
    return dst


def _statement_full(d: dict) -> dict:
    return next(t for t in d["tasks"] if t["task"] == "statement-full")


# ----------------------------------------------------------------------------- confidence files
@pytest.mark.parametrize("case", ["mean 42", "mean outside its interval", "interval outside [0, 1]",
                                  "task twice", "branch twice"])
def test_a_confidence_file_that_contradicts_itself_is_refused(published, tmp_path, capsys, case):
    # old: a mean of 42, a mean outside its own interval or a task listed twice changed the MTEB
    # correlation (Spearman 0.79 -> 0.67, Pearson 0.77 -> 0.28) and the command exited 0
    conf = published / "confidence" / "bge-m3.json"    # a system without an evaluation file
    want = {"mean 42": r"field 'tasks\[1\]\.mean': 42",
            "mean outside its interval": r"field 'tasks\[1\]\.mean': .*outside its confidence_interval",
            "interval outside [0, 1]": r"field 'tasks\[1\]\.confidence_interval': .*\[0, 1\]",
            "task twice": r"field 'tasks\[3\]\.task': 'statement-full' already listed as tasks\[1\]",
            "branch twice": r"field 'tasks\[1\]\.branches\[1\]\.branch': 'Algebra' already listed"}[case]

    def change(d):
        t = d["tasks"][1]
        assert t["task"] == "statement-full"
        lo, hi = t["confidence_interval"]
        if case == "mean 42":
            t["mean"] = 42
        elif case == "mean outside its interval":
            t["mean"] = hi + 0.05
        elif case == "interval outside [0, 1]":
            t["confidence_interval"] = [lo, 1.5]
        elif case == "task twice":
            d["tasks"].append({**t, "mean": lo})
        else:
            t["branches"][1]["branch"] = t["branches"][0]["branch"]
    _edit(conf, change)
    with pytest.raises(pub.LayoutError, match=rf"bge-m3.json: {want}"):
        pub.read_published_dir(published)
    line = _error(capsys, ["--published", str(published), "--n-resamples", "10", "--out", str(tmp_path / "lb")])
    assert str(conf) in line and not (tmp_path / "lb").exists()


def test_a_confidence_mean_that_the_evaluation_file_does_not_give_is_refused(published):
    # old: the MTEB correlation used the confidence file's mean while the leaderboard used the
    # evaluation file's per-query values, whatever the two said
    conf = published / "confidence" / "bm25.json"
    ev = pub.read_evaluation_file(published / "evaluation" / "bm25__p0.json")[0][0]
    plain = float(np.nanmean(ev.scores["statement-full"]))
    orig = json.loads(conf.read_text())
    assert abs(_statement_full(orig)["mean"] - plain) < 1e-3     # the authors' bootstrap mean: within 1e-3

    def shift(d):   # mean and interval moved together: consistent within the file, not with bm25__p0.json
        t = _statement_full(d)
        t["mean"] += 0.02
        t["confidence_interval"] = [x + 0.02 for x in t["confidence_interval"]]
    _edit(conf, shift)
    with pytest.raises(pub.LayoutError, match=r"bm25.json: field 'tasks\[1\]\.mean': .*bm25__p0.json"):
        pub.read_published_dir(published)
    conf.write_text(json.dumps(orig))
    assert pub.read_published_dir(published).confidence["bm25"]["statement-full"]["Overall"]["mean"] == \
        _statement_full(orig)["mean"]


# ----------------------------------------------------------------------------- not a regular file
def _fifo_released_after(path: Path, seconds: float = 8.0) -> threading.Thread:
    """A FIFO at ``path`` and a thread that, from ``seconds`` on and until the FIFO is removed, opens it
    for writing whenever a reader waits (then closes it): a reader blocked in open() is released with
    an empty read, so the test fails on its assertions and never hangs."""
    os.mkfifo(path)

    def release():
        deadline = time.monotonic() + seconds
        while path.exists():
            time.sleep(0.05)
            if time.monotonic() < deadline:
                continue
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))   # ENXIO while no reader waits
            except OSError:
                pass
    t = threading.Thread(target=release, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("where", ["--mteb", "--dedup", "evaluation", "confidence"])
def test_a_fifo_as_an_input_is_refused_at_once_not_a_hang(published, tmp_path, capsys, where):
    # old: saber leaderboard blocked for ever in open() of the FIFO (waiting for a writer)
    fifo = {"--mteb": tmp_path / "mteb.csv", "--dedup": tmp_path / "dedup.jsonl",
            "evaluation": published / "evaluation" / "zz__p0.json",
            "confidence": published / "confidence" / "zz.json"}[where]
    _fifo_released_after(fifo)
    argv = ["--published", str(published), "--n-resamples", "10", "--out", str(tmp_path / "lb")]
    if where.startswith("--"):
        argv += [where, str(fifo)]
    t0 = time.monotonic()
    line = _error(capsys, argv)
    assert time.monotonic() - t0 < 7.5, "the reader waited on the FIFO"
    assert str(fifo) in line and "FIFO" in line and not (tmp_path / "lb").exists()
    fifo.unlink()   # ends the writer thread


def test_every_reader_refuses_a_folder_or_fifo(tmp_path):
    # the readers themselves (the stage and the notebooks call them too), each naming what is there
    folder = tmp_path / "folder.json"
    folder.mkdir()
    for read in (pub.read_evaluation_file, pub.read_confidence_file, mteb.read_mteb, mteb.read_csv_rows,
                 rephrased.read_dedup_summaries):
        with pytest.raises(pub.LayoutError, match=rf"{folder} is a folder, not a file"):
            read(folder)
        fifo = tmp_path / f"{read.__name__}.fifo"
        _fifo_released_after(fifo)
        t0 = time.monotonic()
        with pytest.raises(pub.LayoutError, match=r"is a FIFO \(named pipe\), not a file"):
            read(fifo)
        assert time.monotonic() - t0 < 7.5, f"{read.__name__} waited on the FIFO"
        fifo.unlink()


# ----------------------------------------------------------------------------- values out of range
@pytest.mark.parametrize("value", ["7827", "-50"])
def test_an_mteb_score_out_of_range_is_refused_naming_file_line_and_column(published, tmp_path, value):
    # old: a Retrieval score of 7827 or -50 entered the correlation as it was
    csv = published / "mteb" / "leaderboard.csv"
    lines = csv.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    col = header.index("Retrieval")
    fields = lines[2].split(",")
    assert float(fields[col]) == 75.66
    fields[col] = value
    lines[2] = ",".join(fields)
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(pub.LayoutError, match=rf"leaderboard.csv: line 3: column 'Retrieval': {value} is outside "
                                              r"\[0, 100\]"):
        mteb.read_mteb(csv)


@pytest.mark.parametrize("field,value,why", [
    ("avg_rank", -3.0, r"a rank is at least 1"),
    ("max_rank", 0, r"a rank is at least 1"),
    ("top_1", 7.5, r"a share is in \[0, 1\]"),
    ("top_8", -0.1, r"a share is in \[0, 1\]"),
])
def test_a_rank_or_share_out_of_range_in_the_summaries_is_refused(published, field, value, why):
    # old: a negative rank or a top_1 of 7.5 entered the rephrased-rank correlation as it was
    f = published / "dedup_summaries.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    rows[4]["insert_per_query"][field] = value
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(pub.LayoutError, match=rf"dedup_summaries.jsonl: line 5: field 'insert_per_query.{field}': "
                                              rf"{value!r} .*{why}"):
        rephrased.read_dedup_summaries(f)


def test_an_empty_summaries_file_is_said_in_one_line(published, tmp_path, capsys):
    # old: an empty dedup_summaries.jsonl gave an empty correlation table, without a word, exit 0
    f = published / "dedup_summaries.jsonl"
    for text in ("", "\n  \n"):
        f.write_text(text)
        with pytest.raises(pub.LayoutError, match=r"dedup_summaries.jsonl: no summaries \(empty file\)"):
            rephrased.read_dedup_summaries(f)
    line = _error(capsys, ["--published", str(published), "--n-resamples", "10", "--out", str(tmp_path / "lb")])
    assert str(f) in line and "no summaries" in line and not (tmp_path / "lb").exists()


def test_one_resample_is_refused_before_any_work(tmp_path, capsys):
    # old: --n-resamples 1 was accepted, then the leaderboard figure failed ("'xerr' must not contain
    # negative values": one resample mean is the whole interval, and the estimate lies outside it)
    t0 = time.monotonic()
    line = _error(capsys, ["--published", str(tmp_path / "absent"), "--n-resamples", "1",
                           "--out", str(tmp_path / "lb")])
    assert "--n-resamples" in line and "at least 2" in line and time.monotonic() - t0 < 5
    assert not (tmp_path / "lb").exists()
