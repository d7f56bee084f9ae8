"""Schedules (Swiss invariants, round robin, random, adaptive) and the tournament driver."""
import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.judging.schedules import Standing, adaptive_round, exhaustive_rounds, first_round, next_pairs, random_round, round_robin_round, swiss_round
from saber_lib.judging.tournament import Doc, judgment_summary, ratings_from_judgments, run_tournament
from saber_lib.judging.simulated import SimulatedJudge


# ----------------------------------------------------------------------------- Swiss
def check_swiss_round(wins, played, pairs):
    """Replay Algorithm 1's greedy steps and check every pair against the rules.

    At each step the first candidate of the pair must be a lowest-scoring unpaired candidate among
    those that still have a legal opponent (lower ones with none sit out), its opponent must be
    unpaired, not met before and at the smallest win gap among its legal opponents; at the end the
    candidates left over must have met one another already (sit-outs only when forced)."""
    wins = np.asarray(wins, dtype=float)
    n = len(wins)
    legal = lambda i, j: i != j and frozenset((i, j)) not in played  # noqa: E731
    unpaired = set(range(n))
    for i, j in pairs:
        assert i in unpaired and j in unpaired, "a candidate is paired twice in one round"
        assert legal(i, j), f"rematch {i}-{j}"
        for k in sorted(unpaired):
            if wins[k] < wins[i]:
                assert not any(legal(k, x) for x in unpaired), f"{k} (fewer wins than {i}) was skipped"
        # lower-scoring candidates without a legal opponent sit out; they stay without one
        unpaired -= {k for k in unpaired if wins[k] < wins[i]}
        best = min(abs(wins[i] - wins[x]) for x in unpaired if legal(i, x))
        assert abs(wins[i] - wins[j]) == best, f"{i}-{j} is not the smallest legal win gap"
        unpaired -= {i, j}
    for k, x in itertools.combinations(sorted(unpaired), 2):
        assert not legal(k, x), f"{k} and {x} sat out although they could have played"


def test_swiss_hand_case_all_outcomes():
    # wins [0, 0, 1, 1], 0-1 and 2-3 already met: lowest (0 or 1) meets a 1-win candidate
    wins = [0, 0, 1, 1]
    played = {frozenset((0, 1)), frozenset((2, 3))}
    seen = set()
    for s in range(200):
        pairs = swiss_round(wins, played, np.random.default_rng(s))
        seen.add(frozenset(frozenset(p) for p in pairs))
    assert seen == {frozenset({frozenset((0, 2)), frozenset((1, 3))}),
                    frozenset({frozenset((0, 3)), frozenset((1, 2))})}


def test_swiss_forced_sit_out():
    # 0 has met everyone: it sits out, 1 and 2 play
    pairs = swiss_round([0, 1, 2], {frozenset((0, 1)), frozenset((0, 2))}, np.random.default_rng(0))
    assert pairs == [(1, 2)]
    # everybody met everybody: nobody plays
    allp = {frozenset(p) for p in itertools.combinations(range(4), 2)}
    assert swiss_round([0, 1, 2, 3], allp, np.random.default_rng(0)) == []


def test_swiss_picks_closest_gap_and_breaks_ties_randomly():
    # candidate 0 (0 wins) may meet 1 (2 wins), 2 (2 wins) or 3 (5 wins): 1 or 2, about evenly
    wins = [0, 2, 2, 5]
    partner = [dict(swiss_round(wins, set(), np.random.default_rng(s)))[0] for s in range(400)]
    counts = np.bincount(partner, minlength=4)
    assert counts[3] == 0 and counts[0] == 0
    assert 150 < counts[1] < 250


@pytest.mark.parametrize("seed", range(6))
def test_swiss_invariants_over_whole_tournaments(seed):
    rng = np.random.default_rng(seed)
    n = 15 + seed  # odd and even sizes
    strength = rng.normal(size=n)
    wins = np.zeros(n)
    played = set()
    for r in range(1, 13):
        pairs = first_round(n, rng) if r == 1 else swiss_round(wins, played, rng)
        check_swiss_round(wins, played, pairs)
        for i, j in pairs:
            played.add(frozenset((i, j)))
            wins[i if rng.random() < 1 / (1 + np.exp(strength[j] - strength[i])) else j] += 1


def test_first_round_is_a_random_perfect_matching():
    pairs = first_round(9, np.random.default_rng(1))
    flat = [x for p in pairs for x in p]
    assert len(pairs) == 4 and len(set(flat)) == 8
    firsts = {tuple(sorted(map(tuple, (sorted(p) for p in first_round(4, np.random.default_rng(s))))))
              for s in range(100)}
    assert len(firsts) == 3  # all three matchings of 4 candidates occur


# ----------------------------------------------------------------------------- other schedules
@pytest.mark.parametrize("n", [2, 5, 8, 9])
def test_round_robin_covers_every_pair_once(n):
    seen = []
    for r in range(1, exhaustive_rounds(n) + 1):
        pairs = round_robin_round(n, r)
        flat = [x for p in pairs for x in p]
        assert len(flat) == len(set(flat))
        seen += [frozenset(p) for p in pairs]
    assert len(seen) == len(set(seen)) == n * (n - 1) // 2
    with pytest.raises(ValueError):
        round_robin_round(n, exhaustive_rounds(n) + 1)


def test_random_round_is_a_matching_without_rematches():
    rng = np.random.default_rng(0)
    n = 10
    met = np.zeros((n, n), dtype=bool)
    for _ in range(9):
        pairs = random_round(n, met, rng)
        flat = [x for p in pairs for x in p]
        assert len(flat) == len(set(flat))
        for i, j in pairs:
            assert not met[i, j]
            met[i, j] = met[j, i] = True
    assert met.sum() > 0.8 * n * (n - 1)


def test_adaptive_round_pairs_closest_estimates_without_rematches():
    rng = np.random.default_rng(0)
    n = 8
    theta = np.array([0.0, 0.1, 1.0, 1.05, 3.0, 3.2, -2.0, -2.1])
    var = np.array([1, 1, 1, 1, 1, 1, 1, 5.0])
    met = np.zeros((n, n), dtype=bool)
    met[7, 6] = met[6, 7] = True
    pairs = adaptive_round(n, met, theta, var, rng)
    assert pairs[0][0] == 7  # most uncertain first
    assert pairs[0][1] == 0  # 6 already met: the next closest estimate
    flat = [x for p in pairs for x in p]
    assert len(flat) == len(set(flat))
    assert {frozenset(p) for p in pairs[1:]} >= {frozenset((2, 3)), frozenset((4, 5))}


def test_next_pairs_dispatch_and_unknown_schedule():
    st = Standing(6)
    assert len(next_pairs("adaptive", st, np.random.default_rng(0))) == 3
    with pytest.raises(ValueError, match="unknown schedule"):
        next_pairs("elo", st, np.random.default_rng(0))


def test_standing_records_outcomes():
    st = Standing(3)
    st.record(0, 1, "a")
    st.record(1, 2, "tie")
    st.record(0, 2, "failure")
    assert list(st.wins) == [1.0, 0.5, 0.5]
    assert st.met[0, 2] and st.met[2, 0] and st.n_judgments == 3
    assert (st.winners, st.losers, st.weights) == ([0, 1, 2], [1, 2, 1], [1.0, 0.5, 0.5])


# ----------------------------------------------------------------------------- the driver
def _benchmark(n_queries=3, k=12):
    rows = []
    docs = {}
    for q in range(n_queries):
        qid = f"src:q{q}"
        docs[qid] = Doc(qid, f"query problem {q}", "its solution")
        for p in range(k):
            cid = f"src:c{q}_{p}"
            docs[cid] = Doc(cid, f"candidate {p} of {q}", "sol")
            rows.append({"query_id": qid, "query_domains": ["Algebra"], "cand_id": cid, "position": p,
                         "group": ("topic-only", "summary-only", "both")[p * 3 // k], "sim_topic": 0.9,
                         "sim_summ": 0.3})
    return pl.DataFrame(rows), docs


class CountingJudge(SimulatedJudge):
    """A simulated judge that counts its judgments and can 'crash' after a number of batches."""

    def __init__(self, crash_on_batch=None, **kw):
        super().__init__(**kw)
        self.calls = 0
        self.batches = 0
        self.crash_on_batch = crash_on_batch

    def judge_pairs(self, items):
        self.batches += 1
        if self.crash_on_batch is not None and self.batches == self.crash_on_batch:
            raise KeyboardInterrupt("simulated kill")
        self.calls += len(items)
        return super().judge_pairs(items)


def test_tournament_outputs_follow_the_contract(tmp_path):
    bench, docs = _benchmark()
    judge = CountingJudge(seed=1)
    res = run_tournament(bench, docs, judge, schedule="swiss", rounds=5, seed=0, store_dir=tmp_path / "rounds")
    j = res.judgments
    assert j.columns[:7] == ["query_id", "round", "a", "b", "outcome", "judge", "reason"]
    assert set(j["outcome"]) <= {"a", "b"} and set(j["judge"]) == {judge.name}
    assert j.height == judge.calls
    per_round = j.group_by("query_id", "round").len()["len"]
    assert per_round.max() == 6 and per_round.min() >= 5  # greedy pairing may force a sit-out late
    for (q,), g in j.group_by("query_id"):
        pairs = [frozenset(p) for p in g.select("a", "b").iter_rows()]
        assert len(pairs) == len(set(pairs)), "rematch"
    r = res.ratings
    assert r.columns == ["query_id", "cand_id", "position", "group", "theta", "rating", "wins", "n_judged"]
    assert r.height == 36
    for (q,), g in r.group_by("query_id"):
        n_q = j.filter(pl.col("query_id") == q).height
        assert g["rating"].min() == 0 and g["rating"].max() == pytest.approx(5.0)
        assert g["n_judged"].sum() == 2 * n_q
        assert g["wins"].sum() == n_q
    # the shown order is a coin flip, not always the lower-scoring candidate first
    assert 0.2 < (j["outcome"] == "a").mean() < 0.8


def test_ratings_refit_from_stored_judgments_without_calls(tmp_path):
    bench, docs = _benchmark()
    res = run_tournament(bench, docs, CountingJudge(seed=1), rounds=4, store_dir=tmp_path / "s")
    again = CountingJudge(seed=1)
    res2 = run_tournament(bench, docs, again, rounds=4, store_dir=tmp_path / "s")
    assert again.calls == 0 and res2.judge_calls == 0
    assert res2.ratings.equals(res.ratings)
    assert ratings_from_judgments(res.judgments, bench).equals(res.ratings)


@pytest.mark.parametrize("schedule", ["swiss", "random", "adaptive"])
def test_resume_after_a_kill_gives_the_uninterrupted_result(tmp_path, schedule):
    bench, docs = _benchmark()
    full = run_tournament(bench, docs, CountingJudge(seed=2), schedule=schedule, rounds=6, seed=3,
                            store_dir=tmp_path / "full")
    crashing = CountingJudge(seed=2, crash_on_batch=4)
    with pytest.raises(KeyboardInterrupt):
        run_tournament(bench, docs, crashing, schedule=schedule, rounds=6, seed=3, store_dir=tmp_path / "part")
    assert sorted(p.name for p in (tmp_path / "part").glob("round_*.parquet")) == \
        ["round_0001.parquet", "round_0002.parquet", "round_0003.parquet"]
    resumed = CountingJudge(seed=2)
    res = run_tournament(bench, docs, resumed, schedule=schedule, rounds=6, seed=3, store_dir=tmp_path / "part")
    assert resumed.calls == full.judgments.filter(pl.col("round") > 3).height
    assert res.judgments.equals(full.judgments)
    assert res.ratings.equals(full.ratings)


def test_a_round_file_that_fails_mid_write_leaves_no_temp_file_and_no_round(tmp_path, monkeypatch):
    bench, docs = _benchmark()
    full = run_tournament(bench, docs, CountingJudge(seed=2), rounds=4, seed=3, store_dir=tmp_path / "full")
    real = pl.DataFrame.write_parquet
    writes = []

    def dies_in_round_3(df, path, *args, **kwargs):   # half a file, then the disk is gone
        writes.append(path)
        if len(writes) == 3:
            Path(path).write_bytes(b"PAR1 half")
            raise OSError("planted: device went away")
        return real(df, path, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", dies_in_round_3)
    with pytest.raises(OSError, match="planted"):
        run_tournament(bench, docs, CountingJudge(seed=2), rounds=4, seed=3, store_dir=tmp_path / "part")
    monkeypatch.setattr(pl.DataFrame, "write_parquet", real)
    # the failed round's temporary file went; the rounds before it are whole and the round is not stored
    assert sorted(p.name for p in (tmp_path / "part").iterdir() if p.name != "fingerprint.json") == \
        ["round_0001.parquet", "round_0002.parquet"]
    assert Path(writes[2]).name.startswith("round_0003.parquet.tmp")
    resumed = CountingJudge(seed=2)
    res = run_tournament(bench, docs, resumed, rounds=4, seed=3, store_dir=tmp_path / "part")
    assert resumed.calls == full.judgments.filter(pl.col("round") > 2).height
    assert res.judgments.equals(full.judgments)


def test_more_rounds_continue_a_finished_tournament(tmp_path):
    bench, docs = _benchmark(2, 10)
    run_tournament(bench, docs, CountingJudge(), rounds=3, store_dir=tmp_path / "s")
    j = CountingJudge()
    res = run_tournament(bench, docs, j, rounds=5, store_dir=tmp_path / "s")
    ref = run_tournament(bench, docs, CountingJudge(), rounds=5, store_dir=tmp_path / "ref")
    assert j.calls == ref.judgments.filter(pl.col("round") > 3).height
    assert res.judgments.equals(ref.judgments)


def test_store_of_another_setting_is_refused(tmp_path):
    bench, docs = _benchmark(1, 6)
    run_tournament(bench, docs, CountingJudge(), rounds=2, store_dir=tmp_path / "s")
    with pytest.raises(ValueError, match="another setting"):
        run_tournament(bench, docs, CountingJudge(), schedule="random", rounds=2, store_dir=tmp_path / "s")


def test_exhaustive_schedule_judges_every_pair_once(tmp_path):
    bench, docs = _benchmark(2, 7)
    res = run_tournament(bench, docs, CountingJudge(), schedule="exhaustive", rounds=1, store_dir=tmp_path / "s")
    for (q,), g in res.judgments.group_by("query_id"):
        pairs = {frozenset(p) for p in g.select("a", "b").iter_rows()}
        assert len(pairs) == g.height == 21


def test_same_parameters_give_identical_outputs(tmp_path):
    bench, docs = _benchmark()
    a = run_tournament(bench, docs, CountingJudge(seed=4), rounds=4, seed=9, store_dir=tmp_path / "a")
    b = run_tournament(bench, docs, CountingJudge(seed=4), rounds=4, seed=9, store_dir=tmp_path / "b")
    for r in range(1, 5):
        assert (tmp_path / "a" / f"round_{r:04d}.parquet").read_bytes() == \
            (tmp_path / "b" / f"round_{r:04d}.parquet").read_bytes()
    assert a.ratings.equals(b.ratings)
    c = run_tournament(bench, docs, CountingJudge(seed=4), rounds=4, seed=10, store_dir=tmp_path / "c")
    assert not c.judgments.equals(a.judgments)


def test_missing_corpus_text_and_max_queries(tmp_path):
    bench, docs = _benchmark(3, 4)
    res = run_tournament(bench, docs, CountingJudge(), rounds=2, max_queries=2, store_dir=tmp_path / "s")
    assert res.ratings["query_id"].n_unique() == 2
    docs.pop("src:c0_1")
    with pytest.raises(ValueError, match="no corpus text"):
        run_tournament(bench, docs, CountingJudge(), rounds=2, store_dir=tmp_path / "t")


def test_judgment_summary_counts(tmp_path):
    j = pl.DataFrame({"query_id": ["q", "q", "q"], "round": [1, 1, 2], "a": ["x", "y", "x"], "b": ["y", "z", "z"],
                      "outcome": ["a", "failure", "tie"], "judge": ["j"] * 3, "reason": [None, "bad", None],
                      "position_consistent": [True, None, False]})
    s = judgment_summary(j).row(0, named=True)
    assert (s["judgments"], s["failures"], s["ties"], s["first_shown_wins"], s["position_inconsistent"]) == \
        (3, 1, 1, 1, 1)


def test_round_driver_stop_hook_and_empty_schedules():
    """play_rounds: the stop hook removes a query from later rounds, the others play on, and a
    query whose schedule runs out of pairs stops with 'no pairs left' (3 candidates: 3 pairs,
    one per round)."""
    from saber_lib.judging.rounds import NO_PAIRS, play_rounds
    from saber_lib.judging.schedules import Standing

    seen = []

    def judge_round(r, shown):
        seen.extend((r, q) for q, _, _ in shown)
        return ["a"] * len(shown)

    st = {"x": Standing(6), "y": Standing(6), "z": Standing(3)}
    out = play_rounds(["x", "y", "z"], st, judge_round, last_round=5,
                      stop=lambda r, active: {"x": "rule"} if r == 2 else {}, stop_without_pairs=True)
    assert out.stopped_by["x"] == "rule" and out.rounds["x"] == 2
    assert max(r for r, q in seen if q == "x") == 2 and max(r for r, q in seen if q == "y") == 5
    assert out.rounds["y"] == 5 and st["y"].n_judgments == 5 * 3       # 6 candidates: 3 pairs a round
    assert out.stopped_by["z"] == NO_PAIRS and st["z"].n_judgments == 3  # all 3 pairs met, then none left
