"""Fault cases of ``saber judge-check`` on copies of the tiny run: a reference CSV that names a column
twice, ``--set`` values that make a stage the run already has stale (with ``--fidelity`` too: the run
is read, never rewritten), SIGTERM and Ctrl-C during the fidelity tournaments, every LLM request
failing, a ``--run-dir`` that is a file, a FIFO or folder given as the reference, and an ``--out``
that cannot be written.

Old behaviour is given per test. The command runs as a real process (as a user runs it); the
reference files are built here from the run's own benchmark.
"""
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import ROOT, copy_run, needs_data, one_line_error as _one_line, saber_cli as saber, status_states
from saber_lib.core import config as cfg
from saber_lib.ontology.tree import ontology_from_nodes
from saber_lib.signals.pair_values import PairSignals

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
def _snapshot(run: Path) -> dict:
    """Every path under the run with the sha256 of its bytes (None for a folder): what 'unchanged' means."""
    return {str(p.relative_to(run)): None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*"))}


def _left(tmp: Path) -> list:
    """The command's own temporary folders (``saber-*``) in ``tmp`` (other libraries keep caches there)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("saber-")) if tmp.exists() else []


def test_judge_check_judges_with_what_its_settings_produce_and_leaves_the_run_alone(tiny, tmp_path):
    # old: topics were rerun under tau 0.9 inside the run the command reads (its topics, summaries and
    # manifest replaced, `saber status` with the run's own settings then said topics stale)
    _, src, triples = tiny
    run = copy_run(src, tmp_path / "run")
    ref = _csv(tmp_path / "ref.csv", ["query_id", "a", "b", "label", "annotator", "reason"],
               [[q, a, b, "a", "ann1", "planted"] for q, a, b in triples])
    before = _snapshot(run)
    work_tmp = tmp_path / "tmp"
    work_tmp.mkdir()
    r = saber("judge-check", "--params", TINY, "--run-dir", run, "--reference", ref, "--out", tmp_path / "out",
              "--judge", "signal:topic", "--set", "topics.tau=0.9", "--set", f"run.figures_dir={tmp_path / 'figures'}",
              env={"TMPDIR": str(work_tmp)})
    assert r.returncode == 0, r.stderr
    assert "topics (stale)" in r.stdout and "working folder" in r.stdout
    assert _snapshot(run) == before                     # byte for byte, no file added or removed
    assert _left(work_tmp) == []                        # the working folder removed
    st = saber("status", "--run-dir", run, "--params", TINY)
    assert status_states(st.stdout)["topics"][0] == "done", st.stdout
    # the verdicts are those of the topics the settings produce: computed here from a copy of the run
    # whose topics stage the user reran with the same setting
    mine = copy_run(src, tmp_path / "mine")
    assert saber("run", "topics", "--params", TINY, "--run-dir", mine, "--set", "topics.tau=0.9",
                 "--set", f"run.figures_dir={tmp_path / 'fig-mine'}").returncode == 0
    topics = pl.read_parquet(mine / "topics" / "topics.parquet")
    assert not topics.equals(pl.read_parquet(run / "topics" / "topics.parquet"))
    corpus = pl.read_parquet(run / "corpus" / "corpus.parquet")
    sig = PairSignals(corpus["doc_id"].to_list(), topics, pl.read_parquet(mine / "summaries" / "summaries.parquet"),
                      ontology_from_nodes(run / "ontology" / "nodes.parquet"),
                      cfg.load_profile(TINY).values["signals"]["jaccard_empty"])
    m = sig.topic([(q, a) for q, a, _ in triples]) - sig.topic([(q, b) for q, _, b in triples])
    expected = ["a" if x > 0 else "b" if x < 0 else "tie" for x in m]
    got = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")["verdict"].to_list()
    assert got == expected


@pytest.fixture(scope="module")
def evaluated(tiny, tiny_full_run):
    """A copy of the session's whole tiny run (its evaluate stage done by ``saber run all``, under the
    tiny profile's own settings), and grades for every candidate of three queries."""
    tmp, _, _ = tiny
    run = copy_run(tiny_full_run[0], tmp / "evaluated")
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    rng = np.random.default_rng(11)
    rows = [{"query_id": q, "doc_id": c, "score": int(rng.integers(0, 101))}
            for q in sorted(bench["query_id"].unique())[:3] for c in bench.filter(pl.col("query_id") == q)["cand_id"]]
    grades = tmp / "grades.jsonl"
    grades.write_text("".join(json.dumps(x) + "\n" for x in rows))
    return tmp, run, grades


def _fidelity(run, grades, out, *judges, sets=(), env=None, popen=False):
    args = [sys.executable, "-m", "saber_lib.pipeline.cli", "judge-check", "--params", str(TINY), "--run-dir", str(run),
            "--grades", str(grades), "--fidelity", "--out", str(out), *[x for j in judges for x in ("--judge", j)],
            *[x for s in (*sets, f"run.figures_dir={Path(run).parent / 'figures'}") for x in ("--set", s)]]
    if popen:
        return subprocess.Popen(args, cwd=Path(grades).parent, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return saber(*args[3:], env=env)


def test_fidelity_under_settings_that_make_the_tournament_stale_never_rewrites_the_run(evaluated, tmp_path):
    # old: the tournament and evaluate stages were rerun in the run under the command's settings (its
    # ratings and evaluation replaced: on an LLM-judged run the model under test re-judged the benchmark)
    tmp, src, grades = evaluated
    run = copy_run(src, tmp_path / "run")
    before = _snapshot(run)
    work_tmp = tmp_path / "tmp"
    work_tmp.mkdir()
    # the lexical retrievers only (no encoder to load): the run's evaluate stage is stale for that too, the
    # tournament for its alpha alone
    sets = ["tournament.bt_alpha=0.4", "evaluate.retrievers=[bm25, tfidf, jaccard]"]
    r = _fidelity(run, grades, tmp_path / "out", "first", sets=sets, env={"TMPDIR": str(work_tmp)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tournament (stale)" in r.stdout and "evaluate (stale)" in r.stdout
    assert _snapshot(run) == before and _left(work_tmp) == []
    # the numbers are those of a run the user brought up to date under the same settings (read in place)
    mine = copy_run(src, tmp_path / "mine")
    assert saber("run", "evaluate", "--params", TINY, "--run-dir", mine, *[x for v in sets for x in ("--set", v)],
                 "--set", f"run.figures_dir={tmp_path / 'fig-mine'}").returncode == 0
    r2 = _fidelity(mine, grades, tmp_path / "out-mine", "first", sets=sets)
    assert r2.returncode == 0, r2.stderr
    assert "working folder" not in r2.stdout
    for name, timing in (("fidelity_check", "seconds"), ("fidelity_systems", None), ("grade_check", "seconds_per_pair")):
        got, want = (pl.read_parquet(d / f"{name}.parquet") for d in (tmp_path / "out", tmp_path / "out-mine"))
        if timing:
            got, want = got.drop(timing), want.drop(timing)
        assert got.height > 0 and got.equals(want), name
    assert set(pl.read_parquet(tmp_path / "out" / "fidelity_systems.parquet")["retriever"]) == {"bm25", "tfidf", "jaccard"}


SLEEPY = """
import time
from saber_lib.judging import Judge, register_judge


class Sleepy(Judge):
    built = 0

    def __init__(self, slow):
        super().__init__()
        self.slow, self.name = slow, "sleepy"

    def judge_pairs(self, items):
        if self.slow:
            time.sleep(600)
        return self._count([1] * len(items))


@register_judge("sleepy")
def make(argument):
    Sleepy.built += 1          # the graded pairs first (answered at once), then the tournaments: slow
    return Sleepy(slow=Sleepy.built > 1)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_fidelity_tournaments_leaves_nothing_and_is_one_line(evaluated, tmp_path, sig):
    # old: SIGTERM left /tmp/saber-fidelity-* behind; Ctrl-C printed a KeyboardInterrupt traceback
    tmp, run, grades = evaluated
    (grades.parent / "sleepy_judge.py").write_text(SLEEPY)
    before = _snapshot(run)
    work_tmp = tmp_path / "tmp"
    work_tmp.mkdir()
    p = _fidelity(run, grades, tmp_path / "out", "sleepy", sets=["run.plugins=[sleepy_judge]"],
                  env={"TMPDIR": str(work_tmp), "PYTHONUNBUFFERED": "1"}, popen=True)
    try:
        deadline = time.monotonic() + 600
        while not any(n.startswith("saber-fidelity-") for n in _left(work_tmp)) and p.poll() is None:
            assert time.monotonic() < deadline, "the fidelity tournaments never started"
            time.sleep(0.2)
        time.sleep(1.0)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    _one_line(r, "stopped (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)", code=128 + sig)
    assert _left(work_tmp) == [] and not (tmp_path / "out").exists()
    assert _snapshot(run) == before


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
