"""The log-probability pairwise judge replayed on a real model's answers to reference triples.

``tests/fixtures/judge_llm/qwen-30w.jsonl`` holds every request and raw answer of
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, ``llamacpp`` backend, CPU) judging the first reference triples of
``benchmarks/bench_judges.py``'s query-stratified sample in both orders, each problem and solution
clipped to 30 words (``llm.text_max_words`` of ``params/llm-cpu.yaml``); ``docs.jsonl`` the full
texts of their documents, ``reference.jsonl`` their reference labels (rows of the dev file).
Replaying the judge through ``llm.backend: replay`` must ask exactly the recorded requests (a
change to the prompt, the prefill, the clipping or the request settings raises, naming the template
and key) and must read the recorded log-probabilities into the verdicts the margins give.
"""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import needs_data
from saber_lib.core import config
from saber_lib import llm as L
from saber_lib.judging.judges import LLMJudge
from saber_lib.judging.tournament import corpus_docs
from saber_lib.validation import reference as ref

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "judge_llm"
CASSETTE = FIX / "qwen-30w.jsonl"
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


def replay_backend(cassette=CASSETTE):
    prof = config.load_profile(ROOT / "params" / "llm-cpu.yaml",
                               {"llm.backend": "replay", "llm.cassette": str(cassette)})
    return L.make_backend(prof.values["llm"], None, progress=False), prof.values["llm"]


def fixture_triples():
    docs = pl.read_ndjson(FIX / "docs.jsonl", schema={"doc_id": pl.String, "problem": pl.String, "solution": pl.String})
    return docs, ref.triples(ref.read_reference(FIX / "reference.jsonl"))


def recorded_margins(entries) -> dict:
    """(query, first, second) -> the summed margin straight from the recorded log-probabilities:
    log P("1") - log P("2") with ``first`` shown first, minus the same with it shown second."""
    lp = {}
    for e in entries:
        m = e["meta"]
        lp[(m["query"], m["first"], m["second"])] = e["logprobs"]["1"] - e["logprobs"]["2"]
    return {(q, f, s): d - lp[(q, s, f)] for (q, f, s), d in lp.items() if (q, s, f) in lp}


def recorded_verdicts(entries) -> dict:
    """(query, first, second) -> 'a' | 'b' | 'tie' from :func:`recorded_margins`."""
    return {k: "a" if t > 0 else "b" if t < 0 else "tie" for k, t in recorded_margins(entries).items()}


def test_cassette_is_the_pinned_model_judging_both_orders():
    entries = L.load_cassette(CASSETTE)
    assert {e["model_sha256"] for e in entries} == {QWEN_SHA256}
    assert {e["backend"] for e in entries} == {"llamacpp"} and {e["template"] for e in entries} == {"pairwise_judge_logprob"}
    pairs = {(e["meta"]["query"], frozenset((e["meta"]["first"], e["meta"]["second"]))) for e in entries}
    assert len(entries) == 2 * len(pairs) >= 16            # 8 pairs, every pair in both orders
    assert all(e["error"] is None and set(e["logprobs"]) == {"1", "2"} for e in entries)
    assert sum(p.stat().st_size for p in FIX.iterdir()) < 2 ** 20


def test_replayed_judge_gives_the_recorded_verdicts():
    docs, trip = fixture_triples()
    backend, llm = replay_backend()
    clip = llm["text_max_words"]
    assert clip == 30
    d = corpus_docs(docs, max_words=clip)
    items = [(d[q], d[a], d[b]) for q, a, b in trip.select("query_id", "a", "b").iter_rows()]
    got = LLMJudge(backend, retries=0, logprob=True).judge_pairs(items)
    verdicts = [{1: "a", 2: "b", 0: "tie"}[o] for o in got]
    want = recorded_verdicts(L.load_cassette(CASSETTE))
    assert verdicts == [want[k] for k in trip.select("query_id", "a", "b").iter_rows()]
    u = backend.usage()
    assert u["calls"] == 2 * len(items) and u["failed"] == 0
    # scored against the reference labels: the paper's scoring by hand on these triples
    labels = trip["labels"].to_list()
    by_hand = np.mean([np.mean([1.0 if v == lab else 0.5 if "tie" in (v, lab) else 0.0 for lab in labs])
                       for v, labs in zip(verdicts, labels)])
    table = ref.reference_agreement_table({"qwen": verdicts}, trip, n_resamples=200, level=0.95, seed=0)
    assert table["agreement"].item() == pytest.approx(100 * by_hand)
    assert table["n_pairs"].item() == len(items)


def test_another_text_budget_is_not_in_the_cassette():
    docs, trip = fixture_triples()
    backend, _ = replay_backend()
    d = corpus_docs(docs, max_words=31)
    q, a, b = trip.row(0)[:3]
    with pytest.raises(L.LLMError, match=r"pairwise_judge_logprob request with key [0-9a-f]{64}"):
        LLMJudge(backend, retries=0, logprob=True).judge_pairs([(d[q], d[a], d[b])])


def test_margins_are_finite_and_both_orders_are_read():
    """The model's position preference shows in the recorded answers: asked one order at a time it
    mostly names the same position (the second one here), which is why the judge sums the margins
    of both orders; the summed verdicts still go both ways."""
    entries = L.load_cassette(CASSETTE)
    assert all(math.isfinite(e["logprobs"]["1"]) and math.isfinite(e["logprobs"]["2"]) for e in entries)
    first = [e["logprobs"]["1"] > e["logprobs"]["2"] for e in entries]
    assert max(sum(first), len(first) - sum(first)) >= 0.75 * len(first)
    assert set(recorded_verdicts(entries).values()) == {"a", "b"}


@needs_data("sources")
@pytest.mark.pipeline
def test_judge_check_replays_the_recorded_model_end_to_end(tmp_path):
    """``saber judge-check --judge llm`` as a user runs it, on the real model's recorded answers: the
    corpus stage is computed in the command's working folder (the texts the answers were recorded on;
    the run folder named, which has none, is only read), the profile's
    backend is switched to the cassette, and the command's table agrees with the recorded verdicts
    scored by hand against the fixture's labels."""
    ref_file = FIX / "reference.jsonl"
    out = tmp_path / "check"
    cmd = [sys.executable, "-m", "saber_lib.pipeline.cli", "judge-check", "--params", str(ROOT / "params" / "llm-cpu.yaml"),
           "--run-dir", str(tmp_path / "run"), "--reference", str(ref_file), "--judge", "llm", "--judge", "first",
           "--set", "llm.backend=replay", "--set", f"llm.cassette={CASSETTE}", "--set", f"run.figures_dir={tmp_path / 'fig'}",
           "--set", "corpus.max_records_per_source=0",   # the whole corpus: the texts the answers were recorded on
           "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "corpus (missing)" in r.stdout and "working folder" in r.stdout
    assert not (tmp_path / "run" / "corpus").exists()
    table = pl.read_parquet(out / "judge_check.parquet")
    assert table["judge"].to_list() == ["llm", "first"]
    assert table["detail"][0] == "llm-logprob2:qwen2.5-coder-1.5b-instruct-q4_k_m"
    _, trip = fixture_triples()
    keys = list(trip.select("query_id", "a", "b").iter_rows())
    want = recorded_verdicts(L.load_cassette(CASSETTE))
    verdicts = pl.read_parquet(out / "verdicts.parquet").filter(pl.col("judge") == "llm")
    got = {(q, a, b): v for q, a, b, v in verdicts.select("query_id", "a", "b", "verdict").iter_rows()}
    assert got == {k: want[k] for k in keys}
    margins = recorded_margins(L.load_cassette(CASSETTE))   # the evidence behind each verdict, kept
    got_m = {(q, a, b): m for q, a, b, m in verdicts.select("query_id", "a", "b", "margin").iter_rows()}
    assert got_m == pytest.approx({k: margins[k] for k in keys}, abs=1e-9)
    labels = dict(zip(keys, trip["labels"].to_list()))

    def by_hand(verdict_of):
        return 100 * np.mean([np.mean([1.0 if verdict_of(k) == lab else 0.5 if "tie" in (verdict_of(k), lab) else 0.0
                                       for lab in labels[k]]) for k in keys])

    row = dict(zip(table["judge"], table.iter_rows(named=True)))
    assert row["llm"]["agreement"] == pytest.approx(by_hand(want.get))
    assert row["first"]["agreement"] == pytest.approx(by_hand(lambda k: "a"))
    assert row["llm"]["n_pairs"] == len(keys) and row["llm"]["failures"] == 0
    md = (out / "judge_check.md").read_text()
    assert "LLM backend: replay (qwen2.5-coder-1.5b-instruct-q4_k_m)" in md and "'calls': 16" in md
