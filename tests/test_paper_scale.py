"""The paper-scale rehearsal (benchmarks/bench_paper_scale.py) run as a user runs it, and the time
planner (``saber plan``, saber_lib/pipeline/plan.py) on hand-computed cases and its flag errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from saber_lib.core.config import load_profile
from saber_lib import llm as L
from saber_lib.corpus import dedup
from saber_lib.llm.mock_server import MockChatServer
from saber_lib.judging.tournament import plan_queries
from saber_lib.pipeline import cli, plan
from conftest import needs_data

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "benchmarks" / "results" / "paper_scale.json"


# ------------------------------------------------------------------- what the rehearsal found, fixed
def test_plan_queries_reads_interleaved_rows_in_one_pass():
    """Queries in order of first appearance, candidates by position, whatever the rows' order (the
    table is grouped once instead of filtered once per query)."""
    b = pl.DataFrame({"query_id": ["q2", "q1", "q2", "q1", "q3", "q2", "q3"],
                      "cand_id": ["a", "x", "b", "y", "z", "c", "w"], "position": [2, 1, 0, 0, 1, 1, 0],
                      "group": ["g2", "h1", "g0", "h0", "k1", "g1", "k0"]})
    plans = plan_queries(b)
    assert [p.query_id for p in plans] == ["q2", "q1", "q3"]
    assert [p.cand_ids for p in plans] == [["b", "c", "a"], ["y", "x"], ["w", "z"]]
    assert [p.positions for p in plans] == [[0, 1, 2], [0, 1], [0, 1]]
    assert [p.groups for p in plans] == [["g0", "g1", "g2"], ["h0", "h1"], ["k0", "k1"]]
    assert [p.query_id for p in plan_queries(b, max_queries=2)] == ["q2", "q1"]
    ints = b.with_columns(pl.col("query_id").str.slice(1).cast(pl.Int64))   # non-string ids: the same plans
    assert [(p.query_id, p.cand_ids) for p in plan_queries(ints)] == [("2", ["b", "c", "a"]), ("1", ["y", "x"]),
                                                                      ("3", ["w", "z"])]
    with pytest.raises(ValueError, match="lists a candidate twice"):
        plan_queries(pl.concat([b, b.head(1)]))


def test_near_dedup_hashes_shingles_a_block_at_a_time_same_result(monkeypatch):
    """Shingle sets are built and dropped a block at a time: blocks of 2 records find the same
    duplicates (across blocks, with an empty record among them) as one block holding all."""
    base = ("Let x and y be positive reals with x + y = 10 such that both of them are at most 7 and at least 2. "
            "Find the largest value that the product x y can take over all such pairs, and say for which pairs.")
    other = ("A fair die is rolled three times in a row and the results are written down in the order in which "
             "they appear. What is the probability that the three numbers written down form a strictly "
             "increasing sequence, and what is it when the die is rolled four times instead?")
    recs = [{"doc_id": f"{s}:{i}", "source": s, "problem": p, "solution": None} for i, (s, p) in enumerate([
        ("aime", base), ("aime", other), ("aime", ""), ("math", other.replace("sequence", "list")),
        ("math", base.replace("say", "state")), ("math", "Prove that there are infinitely many primes."),
        ("math", "")])]

    def run():
        r = dedup.near_cross_source(recs, ["aime", "math"], 5, 14, 8, 1, 0.5, True)
        return r.keep, [(e["removed_id"], e["kept_id"], e["similarity"]) for e in r.log], r.candidate_pairs

    whole = run()
    monkeypatch.setattr(dedup, "SHINGLE_BLOCK", 2)
    assert run() == whole
    assert whole[0] == [True, True, True, False, False, True, True]   # both restatements removed, empties kept


def test_mock_server_answer_fn_is_what_the_backend_reads(tmp_path):
    """The mock server answers with ``answer_fn(message)`` (the rehearsal's verdicts) instead of the
    echo, and the openai backend hands that text to the caller; without it, the echo."""
    srv = MockChatServer(answer_fn=lambda user: f"verdict for {user}: \\boxed{{{len(user) % 2 + 1}}}")
    plain = MockChatServer()
    try:
        cfg = {"backend": "openai", "model": "test/mock", "base_urls": [srv.url], "api_key_env": "SABER_NO_KEY",
               "max_concurrency": 4, "timeout_s": 10.0, "max_retries": 0, "retry_backoff_s": 0.01,
               "temperature": 0.0, "max_tokens": 8, "reasoning_effort": None}
        b = L.make_backend(cfg, None, progress=False)
        out = b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": t}]) for t in ("ab", "abc")])
        assert [r.text for r in out] == ["verdict for ab: \\boxed{1}", "verdict for abc: \\boxed{2}"]
        b.close()
        b = L.make_backend({**cfg, "base_urls": [plain.url]}, None, progress=False)
        assert b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": "ab"}])])[0].text == "echo:ab"
        b.close()
    finally:
        srv.stop()
        plain.stop()


def test_mock_server_totals_only_keeps_no_prompt():
    """``count_prompts=False`` (the rehearsal's millions of distinct prompts): the totals count every
    request and answer, and no prompt is held; the default counts per prompt and the same totals."""
    for per_prompt in (False, True):
        srv = MockChatServer(answer_fn=lambda user: "ok", count_prompts=per_prompt)
        try:
            cfg = {"backend": "openai", "model": "test/mock", "base_urls": [srv.url], "api_key_env": "SABER_NO_KEY",
                   "max_concurrency": 4, "timeout_s": 10.0, "max_retries": 0, "retry_backoff_s": 0.01,
                   "temperature": 0.0, "max_tokens": 8, "reasoning_effort": None}
            b = L.make_backend(cfg, None, progress=False)
            for _ in range(3):   # 7 distinct prompts asked 3 times (no cache: every batch sent again)
                assert [r.text for r in b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": f"p{i}"}])
                                                      for i in range(7)])] == ["ok"] * 7
            b.close()
        finally:
            srv.stop()
        assert srv.n_received == srv.n_answered == 21
        if per_prompt:
            assert sum(srv.received.values()) == 21 and srv.received["p0"] == 3 and len(srv.answered) == 7
        else:
            assert not srv.received and not srv.answered


# ------------------------------------------------------------------------------------- the planner
def _figures():
    # tournament: 2 ms of workbench CPU per judgment, linear; 1.01 calls per judgment (retries)
    # evaluate: 3 s per query, slope 1; dedup: 600 s for its fixed 283,000 problems
    return {"tournament": {"unit": "judgments", "units": 1_500_000, "cpu_s_coef": 0.002, "cpu_s_slope": 1.0,
                           "llm_calls": 1_515_000},
            "evaluate": {"unit": "queries", "units": 1000, "cpu_s_coef": 3.0, "cpu_s_slope": 1.0, "llm_calls": 0},
            "dedup": {"unit": "problems", "units": 283_000, "cpu_s_coef": 600 / 283_000, "cpu_s_slope": 1.0,
                      "llm_calls": 0}}


def test_plan_hand_computed_case():
    units = {"judgments": 36_000, "queries": 24, "evaluate_share": 1.0}
    rows = {r.stage: r for r in plan.plan(_figures(), units, gpus=4, judge_rate=0.5)}
    t = rows["tournament"]
    # 36,000 judgments x 1.01 calls = 36,360 calls on 4 GPUs x 0.5/s = 18,180 s = 5.05 h
    assert t.llm_calls == pytest.approx(36_360)
    assert t.judge_h == pytest.approx(5.05)
    assert t.workbench_h == pytest.approx(72 / 3600)      # 36,000 x 2 ms
    assert t.hours == pytest.approx(5.05) and t.bound == "judge (GPUs)"
    e = rows["evaluate"]
    assert e.units == 24 and e.hours == pytest.approx(72 / 3600) and e.bound == "workbench CPU"
    assert rows["dedup"].hours == pytest.approx(600 / 3600) and rows["dedup"].units == 283_000
    text = plan.table(list(rows.values()), 4, 0.5)
    assert "bounded by tournament (judge (GPUs))" in text
    total = 5.05 + 72 / 3600 + 600 / 3600
    assert f"{total:.2f}" in text.splitlines()[-3]
    assert text.splitlines()[-1].startswith("not planned (no rehearsal figures; not in the total): ontology, topics, "
                                            "summaries, signals, thresholds, select, inversions, signal_ablation")
    assert " corpus," not in text.splitlines()[-1]          # dedup is the corpus stage's work


def test_plan_slope_above_one_and_cpu_bound():
    # a stage growing as units^2 (coef 1e-6): at 10,000 judgments 100 s of CPU, the judge 10,000 / (100 x 10) = 10 s
    f = {"tournament": {"unit": "judgments", "units": 10, "cpu_s_coef": 1e-6, "cpu_s_slope": 2.0, "llm_calls": 10}}
    (r,) = plan.plan(f, {"judgments": 10_000, "queries": 1}, gpus=100, judge_rate=10)
    assert r.workbench_h == pytest.approx(100 / 3600) and r.judge_h == pytest.approx(10 / 3600)
    assert r.bound == "workbench CPU"


def test_plan_stage_rates_and_the_both_orders_tournament():
    """``--rate summaries=R`` sets that stage's GPU time alone; a profile with position_swap plans
    the both-orders figures (per single-order judgment) and leaves the one-order set out."""
    f = _figures()
    f["summaries"] = {"unit": "problems", "units": 1000, "cpu_s_coef": 0.001, "cpu_s_slope": 1.0, "llm_calls": 1100}
    f["tournament_swap"] = {"unit": "judgments", "units": 3_000_000, "cpu_s_coef": 0.001, "cpu_s_slope": 1.0,
                            "llm_calls": 3_030_000}
    units = {"judgments": 72_000, "queries": 24, "evaluate_share": 1.0}
    rows = {r.stage: r for r in plan.plan(f, units, gpus=2, judge_rate=0.5, rates={"summaries": 4.0})}
    assert "tournament_swap" not in rows and rows["tournament"].llm_calls == pytest.approx(72_720)
    # 1,000 problems x 1.1 calls on 2 GPUs x 4 calls/s = 137.5 s
    assert rows["summaries"].judge_h == pytest.approx(1100 / 8 / 3600)
    rows = {r.stage: r for r in plan.plan(f, {**units, "position_swap": True}, gpus=2, judge_rate=0.5)}
    assert "tournament" not in rows
    t = rows["tournament_swap"]            # 72,000 single-order judgments x 1.01 calls at 0.5/s on 2 GPUs
    assert t.llm_calls == pytest.approx(72_720) and t.judge_h == pytest.approx(72_720 / 1.0 / 3600)
    assert t.workbench_h == pytest.approx(72 / 3600)
    assert rows["summaries"].judge_h == pytest.approx(1100 / 1.0 / 3600)   # no --rate: the judge's rate
    text = plan.table(list(rows.values()), 2, 0.5, {"summaries": 4.0})
    assert "2 GPUs at 0.5 judgments/s per GPU, summaries at 4 calls/s per GPU" in text


def test_plan_parallel_stage_divides_by_cores():
    """signals spreads over cores: 7,200 CPU s on 25 cores is 288 s; a serial stage stays whole."""
    f = {"signals": {"unit": "problems", "units": 283_000, "cpu_s_coef": 7200 / 283_000, "cpu_s_slope": 1.0,
                     "llm_calls": 0}, **_figures()}
    units = {"judgments": 1, "queries": 1000, "evaluate_share": 1.0}
    rows = {r.stage: r for r in plan.plan(f, units, gpus=1, judge_rate=1, cpus=25)}
    assert rows["signals"].workbench_h == pytest.approx(288 / 3600)
    assert rows["evaluate"].workbench_h == pytest.approx(3000 / 3600)     # 1,000 queries x 3 s, not divided
    assert "signals on 25 cores" in plan.table(list(rows.values()), 1, 1, cpus=25)


@pytest.mark.parametrize("value, named", [("summaries", "STAGE=R"), ("evaluate=2", "not an LLM stage"),
                                          ("tournament=0", "--rate tournament")])
def test_plan_bad_rate_one_line(value, named, capsys):
    rc = cli.main(["plan", "--params", str(ROOT / "params" / "paper.yaml"), "--gpus", "8", "--judge-rate", "1",
                   "--rate", value])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and named in err and err.startswith("saber plan:")


def test_profile_units_of_the_paper_profile():
    u = plan.profile_units(load_profile(ROOT / "params" / "paper.yaml"))
    assert u["judgments"] == 1_500_000          # the paper's 1,000 queries x 75 pairs x 20 rounds
    assert u["queries"] == 1000 and u["evaluate_share"] == 1.0 and u["position_swap"] is False


@pytest.mark.parametrize("flags, named", [
    (["--gpus", "0", "--judge-rate", "1"], "--gpus"),
    (["--gpus", "2.5", "--judge-rate", "1"], "--gpus"),
    (["--gpus", "8", "--judge-rate", "fast"], "--judge-rate"),
    (["--gpus", "8", "--judge-rate", "-1"], "--judge-rate"),
    (["--gpus", "8", "--judge-rate", "1", "--cpus", "0"], "--cpus"),
    (["--gpus", "8", "--judge-rate", "1", "--figures", "no/such.json"], "--figures"),
])
def test_plan_bad_flags_one_line_naming_the_flag(flags, named, capsys):
    rc = cli.main(["plan", "--params", str(ROOT / "params" / "paper.yaml"), *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and named in err and err.startswith("saber plan:")


def test_plan_missing_profile_names_params(capsys):
    rc = cli.main(["plan", "--params", "params/none.yaml", "--gpus", "1", "--judge-rate", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--params" in err


@pytest.mark.pipeline
def test_saber_plan_on_the_committed_figures_end_to_end():
    """The README's command in a real process: the tournament row is the figures' calls per
    judgment x 1.5M judgments on 32 GPUs at the given rate."""
    proj = json.loads(FIGURES.read_text())["projection"]
    fig = proj["tournament"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", "plan", "--params", "params/paper.yaml",
                        "--gpus", "32", "--judge-rate", "0.1", "--rate", "summaries=0.5", "--cpus", "25", "--problems", "283000"],
                       cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.split()}
    judge_h = fig["llm_calls"] / fig["units"] * 1_500_000 / (32 * 0.1) / 3600
    assert "1,500,000 judgments" in rows["tournament"] and f"{judge_h:.2f}" in rows["tournament"].split()
    summ_h = proj["summaries"]["llm_calls"] / (32 * 0.5) / 3600      # its own rate, not the judge's
    assert f"{summ_h:.2f}" in rows["summaries"].split()
    assert "tournament_swap" not in rows                  # the paper profile asks each pair once
    sig = proj["signals"]                                # spread over the 25 cores
    assert f"{sig['cpu_s_coef'] * 283_000 ** sig['cpu_s_slope'] / 25 / 3600:.3f}" in rows["signals"].split()
    assert "bounded by tournament" in p.stdout and "summaries at 0.5 calls/s per GPU" in p.stdout
    assert p.stdout.splitlines()[0].startswith("workbench figures: benchmarks/results/paper_scale.json (measured 2026")
    assert "mock server" in p.stdout.splitlines()[0]


# --------------------------------------------------------------------------------- the rehearsal
@pytest.mark.pipeline
@needs_data("sources")
def test_rehearsal_tiny_scale_every_stage_row(tmp_path):
    """As a user runs it: every stage at one tiny scale, then dedup at two more sizes merged in, so
    that its fit and projection to the paper's 283,000 problems appear."""
    out = tmp_path / "ps.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    common = [sys.executable, "benchmarks/bench_paper_scale.py", "--templates-per-source", "100", "--out", str(out)]
    for extra in (["--scale", "0.0005"], ["--merge", "--stages", "dedup", "--scale", "0.001", "0.002"]):
        p = subprocess.run(common + extra, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    stages = {"dedup", "topics", "summaries", "signals", "select", "tournament", "evaluate", "leaderboard"}
    assert {(r["stage"], r["scale"]) for r in res["runs"]} == (
        {(s, 0.0005) for s in stages} | {("dedup", 0.001), ("dedup", 0.002)})
    for r in res["runs"]:
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["rss_mb"] >= r["rss0_mb"] > 0
    (tour,) = [r for r in res["runs"] if r["stage"] == "tournament"]
    # one query: 20 rounds of at most 75 pairs; every pair answered by the mock server or the cache
    # (a few prompts repeat with 100 templates a source), and the failures within the budget
    assert tour["queries"] == 1 and 0.95 * 1500 <= tour["units"] <= 1500
    assert tour["llm_calls"] + tour["cached"] >= 0.99 * tour["units"] and tour["failures"] <= 0.02 * tour["units"]
    assert [x["round"] for x in tour["per_round"]] == list(range(1, 21))
    (summ,) = [r for r in res["runs"] if r["stage"] == "summaries"]   # 142 problems, one LLM summary each
    assert summ["units"] == 142 and summ["llm_calls"] + summ["cached"] >= summ["units"]
    assert summ["failures"] <= 0.02 * summ["units"]
    dd = sorted((r for r in res["runs"] if r["stage"] == "dedup"), key=lambda r: r["units"])
    for r in dd:     # planted copies: exact ones all removed, renumbered ones (other numbers) kept
        assert r["removed_exact"] == r["planted"]["exact"] and r["removed_renumbered"] == 0
        assert r["removed_near_planted"] <= r["planted"]["near"] and r["removed_fresh"] == 0
    assert [r["units"] for r in dd] == [142, 283, 566]
    proj = res["projection"]
    assert set(proj) == {"dedup"}   # the other stages ran at one size: no fit
    assert proj["dedup"]["units"] == 283_000 and proj["dedup"]["sizes"] == [142, 283, 566]
    table = out.with_suffix(".table.md").read_text()
    assert "| dedup | 1 (**projected**) |" in table
    assert sum(line.count("(measured)") for line in table.splitlines()) == 10
    (sel,) = [r for r in res["runs"] if r["stage"] == "select"]   # at its floor of problems: one query
    assert sel["units"] == 6000 and sel["rows"] == 150 and (sel["rows_per_group_min"], sel["rows_per_group_max"]) == (50, 50)
