"""Fault cases of ``saber judge-check`` on copies of the tiny run: a reference CSV that names a column
twice, ``--set`` values that make a stage the run already has stale, every LLM request failing, a
``--run-dir`` that is a file, a FIFO or folder given as the reference, and an ``--out`` that cannot
be written.

Old behaviour is given per test. The command runs as a real process (as a user runs it); the
reference files are built here from the run's own benchmark.
"""
import json
import os
import socket
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import copy_run, needs_data, one_line_error as _one_line, saber_cli as saber, status_states
from saber_lib.core import config as cfg
from saber_lib.ontology.tree import ontology_from_nodes
from saber_lib.signals.pair_values import PairSignals

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"
pytestmark = [needs_data("sources"), pytest.mark.pipeline]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tournament_run):
    tmp = tmp_path_factory.mktemp("judge_check_faults")
    run = copy_run(tiny_tournament_run[0], tmp / "run")
    bench = pl.read_parquet(run / "select" / "benchmark.parquet").sort("query_id", "position")
    triples = []
    for (q,), g in bench.group_by("query_id", maintain_order=True):
        cands = g["cand_id"].to_list()
        triples += [(q, cands[i], cands[i + 1]) for i in range(0, min(len(cands) - 1, 8), 2)]
    return tmp, run, triples


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.write_text("".join(",".join(r) + "\n" for r in [header, *rows]))
    return path


def _check(run, ref, out, *judges, sets=()):
    # figures beside the run, not in the repository's figures/ (another test run's copy named 'run' owns that)
    return saber("judge-check", "--params", TINY, "--run-dir", run, "--reference", ref, "--out", out,
                 *[x for j in judges for x in ("--judge", j)], *[x for s in sets for x in ("--set", s)],
                 "--set", f"run.figures_dir={Path(run).parent / 'figures'}")


# --------------------------------------------------------------------------- a column named twice
def test_reference_csv_naming_a_column_twice_is_one_line(tiny):
    # old: the last 'label' column was read: agreement 0.0 with exit 0, where the file without the
    # extra column gives 100.0 for the judge that always answers the first candidate
    tmp, run, triples = tiny
    header = ["query_id", "a", "b", "label", "annotator", "reason"]
    good = _csv(tmp / "ref_good.csv", header, [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    r = _check(run, good, tmp / "out_good", "first")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(tmp / "out_good" / "judge_check.parquet")["agreement"].to_list() == [100.0]
    twice = _csv(tmp / "ref_twice.csv", header + ["label"],
                 [[q, a, b, "a", "ann1", "planted", "b"] for q, a, b in triples])
    msg = _one_line(_check(run, twice, tmp / "out_twice", "first"), twice, "'label'", code=2)
    assert "twice" in msg and "columns 4 and 7" in msg
    assert not (tmp / "out_twice").exists()


def test_every_csv_reader_refuses_a_column_named_twice(tmp_path):
    # old: both readers built each row as a dict of the header: the last of the two cells won
    from saber_lib.corpus.readers import SourceFileError, csv_records
    from saber_lib.validation.reference import ReferenceFileError, read_reference

    text = "problem,solution,problem\np1,s1,p2\n"
    with pytest.raises(SourceFileError, match=r"proofbench\.csv, line 1: the header names column 'problem' twice"):
        list(csv_records(text, "proofbench.csv", tmp_path / "proofbench.csv"))
    # a name repeated with blanks around it is the same column once the names are stripped
    ref = tmp_path / "ref.csv"
    ref.write_text("query_id,a,b,label,annotator,reason, a \nq,x,y,a,ann,r,z\n")
    with pytest.raises(ReferenceFileError, match=rf"{ref}, line 1: the header names column 'a' twice"):
        read_reference(ref)
    ref.write_text("query_id,a,b,label,annotator,reason,extra\nq,x,y,a,ann,r,z\n")
    assert read_reference(ref)["label"].to_list() == ["a"]       # an extra column named once is fine
    from saber_lib.leaderboard import mteb                          # the MTEB leaderboard snapshot
    board = tmp_path / "leaderboard.csv"
    board.write_text(",Model,Retrieval,Retrieval,Mean (Task)\n0,[a](u),1,2,3\n")
    with pytest.raises(mteb.LayoutError, match=rf"{board}: line 1: the header names column 'Retrieval' twice"):
        mteb.read_csv_rows(board)


# --------------------------------------------------------------------------- --set makes a stage stale
def test_judge_check_judges_with_what_its_settings_produce(tiny, tmp_path):
    # old: the stored topics (the run's tau, 0.85) were judged, and `saber status` with the same --set
    # still called topics stale afterwards
    _, src, triples = tiny
    run = copy_run(src, tmp_path / "run")
    ref = _csv(tmp_path / "ref.csv", ["query_id", "a", "b", "label", "annotator", "reason"],
               [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    before = pl.read_parquet(run / "topics" / "topics.parquet")
    r = _check(run, ref, tmp_path / "out", "signal:topic", sets=["topics.tau=0.9"])
    assert r.returncode == 0, r.stderr
    assert "topics (stale)" in r.stdout
    man = json.loads((run / "topics" / "manifest.json").read_text())
    assert man["parameters"]["tau"] == 0.9
    st = saber("status", "--run-dir", run, "--params", TINY, "--set", "topics.tau=0.9")
    assert status_states(st.stdout)["topics"][0] == "done", st.stdout
    # the verdicts are those of the topics the settings produced (computed here from the stage's file)
    after = pl.read_parquet(run / "topics" / "topics.parquet")
    assert not after.equals(before)
    corpus = pl.read_parquet(run / "corpus" / "corpus.parquet")
    sig = PairSignals(corpus["doc_id"].to_list(), after, pl.read_parquet(run / "summaries" / "summaries.parquet"),
                      ontology_from_nodes(run / "ontology" / "nodes.parquet"),
                      cfg.load_profile(TINY).values["signals"]["jaccard_empty"])
    m = sig.topic([(q, a) for q, a, _ in triples]) - sig.topic([(q, b) for q, _, b in triples])
    expected = ["a" if x > 0 else "b" if x < 0 else "tie" for x in m]
    got = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")["verdict"].to_list()
    assert got == expected


# --------------------------------------------------------------------------- every request failed
def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_judge_check_with_every_llm_request_failed_exits_non_zero(tiny, tmp_path):
    # old: exit 0 and "1 judge(s) scored on 0 triples" after every request failed
    _, run, triples = tiny
    ref = _csv(tmp_path / "ref.csv", ["query_id", "a", "b", "label", "annotator", "reason"],
               [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    dead = [f"llm.base_urls=[\"http://127.0.0.1:{_closed_port()}/v1\"]", "llm.backend=openai", "llm.model=m",
            "llm.api_key_env=SABER_FAULT_KEY", "llm.max_retries=0", "llm.timeout_s=2", "tournament.judge_retries=0",
            f"run.cache_dir={tmp_path / 'cache'}"]
    r = saber("judge-check", "--params", TINY, "--run-dir", run, "--reference", ref, "--out", tmp_path / "out",
              "--judge", "llm", *[x for s in dead for x in ("--set", s)], env={"SABER_FAULT_KEY": "x", "TQDM_DISABLE": "1"})
    msg = _one_line(r, "judge llm", f"{len(triples)} of {len(triples)} LLM requests failed", code=1)
    assert "every call failed" in msg
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- paths that are not what they say
def test_judge_check_run_dir_that_is_a_file_is_one_line(tiny, tmp_path):
    # old: FileExistsError traceback from the runner's mkdir (the corpus stage run into a file)
    _, _, triples = tiny
    ref = _csv(tmp_path / "ref.csv", ["query_id", "a", "b", "label", "annotator", "reason"],
               [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    afile = tmp_path / "run.txt"
    afile.write_text("not a run\n")
    _one_line(_check(afile, ref, tmp_path / "out", "first"), afile, "not a folder", code=1)
    assert afile.read_text() == "not a run\n" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_reference_that_is_a_fifo_or_a_folder_is_named_as_what_it_is(tiny, tmp_path, kind):
    # old: "reference file not found" (the path is there, it is not a file); a FIFO is never opened
    _, run, _ = tiny
    ref = tmp_path / "ref.jsonl"
    os.mkfifo(ref) if kind == "fifo" else ref.mkdir()
    msg = _one_line(_check(run, ref, tmp_path / "out", "first"), ref, code=2)
    assert ("FIFO" if kind == "fifo" else "a folder") in msg and "not found" not in msg


def test_unwritable_out_is_found_before_any_judge_runs(tiny):
    # old: every judge ran (logged "[judge] ...") before the output folder was found impossible to make
    tmp, run, triples = tiny
    ref = _csv(tmp / "ref_out.csv", ["query_id", "a", "b", "label", "annotator", "reason"],
               [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    out = "/proc/saber-judge-check-out"
    r = _check(run, ref, out, "first", "simulated")
    _one_line(r, out, "cannot make the output folder", code=1)
    assert "[judge]" not in r.stdout
