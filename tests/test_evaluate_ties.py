"""``evaluate.tie_policy`` and the tie-sensitivity report: ``position`` is today's nDCG exactly,
``expected`` the mean over all orders of tied candidates (checked by brute force)."""
import itertools

import numpy as np
import polars as pl
import pytest

from saber_lib.evaluate import tables as ev
from saber_lib.metrics import ndcg as lb_ties


def _frames(cases):
    s_rows, r_rows = [], []
    for retr, q, rel, sc in cases:
        for pos, (g, v) in enumerate(zip(rel, sc)):
            s_rows.append((retr, "statement-full", q, f"c{pos}", float(v)))
            if retr == cases[0][0]:
                r_rows.append((q, f"c{pos}", pos, float(g)))
    scores = pl.DataFrame(s_rows, schema=["retriever", "setting", "query_id", "cand_id", "score"], orient="row")
    ratings = pl.DataFrame(r_rows, schema=["query_id", "cand_id", "position", "rating"], orient="row")
    return scores, ratings


def _brute(rel, sc, k):
    """Mean, min, max of nDCG@k over every order of the candidates that keeps scores non-increasing."""
    rel, sc = np.asarray(rel, float), np.asarray(sc, float)
    vals = []
    for perm in itertools.permutations(range(len(rel))):
        if all(sc[perm[i]] >= sc[perm[i + 1]] for i in range(len(perm) - 1)):
            # scores in this order are already sorted, so ndcg_at_k keeps it (distinct fake scores)
            fake = np.empty(len(rel))
            fake[list(perm)] = -np.arange(len(rel), dtype=float)
            vals.append(ev.ndcg_at_k(rel, fake, k))
    return np.mean(vals), min(vals), max(vals)


RNG = np.random.default_rng(3)
CASES = [("bm25", f"q{i}", RNG.integers(0, 6, size=6).astype(float), RNG.integers(0, 3, size=6).astype(float))
         for i in range(6)]


@pytest.mark.parametrize("k", [1, 3, 10])
def test_expected_policy_is_the_mean_over_tie_orders(k):
    for _, _, rel, sc in CASES:
        mean, lo, hi = _brute(rel, sc, k)
        assert ev.expected_ndcg_at_k(rel, sc, k) == pytest.approx(mean, abs=1e-12)
        assert ev.ndcg_tie_range(rel, sc, k) == pytest.approx((lo, hi), abs=1e-12)
    assert lb_ties.expected_ndcg_at_k is ev.expected_ndcg_at_k   # re-exported for the leaderboard


def test_ndcg_table_policies_and_tie_report():
    cases = list(CASES)
    cases += [("dense", q, rel, np.arange(len(rel), dtype=float)) for _, q, rel, _ in CASES]  # no ties
    scores, ratings = _frames(cases)
    pos = ev.ndcg_table(scores, ratings, k=3)
    assert pos.equals(ev.ndcg_table(scores, ratings, k=3, tie_policy="position"))
    for retr, q, rel, sc in cases:
        got = pos.filter((pl.col("retriever") == retr) & (pl.col("query_id") == q))["ndcg"][0]
        assert got == ev.ndcg_at_k(rel, sc, 3)           # today's value, bit for bit
    exp = ev.ndcg_table(scores, ratings, k=3, tie_policy="expected")
    for retr, q, rel, sc in cases:
        got = exp.filter((pl.col("retriever") == retr) & (pl.col("query_id") == q))["ndcg"][0]
        assert got == pytest.approx(_brute(rel, sc, 3)[0], abs=1e-12)
    ties = ev.tie_table(scores, ratings, k=3)
    rep = ev.tie_report(ties, pos)
    assert rep["model"].to_list() == ["bm25"]              # the dense retriever never ties
    spread = [(_brute(rel, sc, 3)[2] - _brute(rel, sc, 3)[1]) for _, _, rel, sc in cases[:6]]
    assert rep["sensitivity"][0] == pytest.approx(np.mean(spread), abs=1e-12)
    with pytest.raises(ValueError, match="tie_policy"):
        ev.ndcg_table(scores, ratings, tie_policy="random")
