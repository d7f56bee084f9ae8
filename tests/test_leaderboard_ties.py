"""Expected / min / max nDCG@k over tie orders, against brute force over all permutations."""
import itertools
import math

import numpy as np
import pytest

from conftest import project_module
from saber_lib.metrics.ndcg import expected_ndcg_at_k, ndcg_tie_range, tie_sensitivity


def brute(ratings, scores, k):
    """nDCG@k of every order that sorts the scores descending, written out from the definition."""
    n = len(ratings)
    gains = [2.0 ** r - 1.0 for r in ratings]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains, reverse=True)[:k]))
    vals = []
    for perm in itertools.permutations(range(n)):
        if all(scores[perm[i]] >= scores[perm[i + 1]] for i in range(n - 1)):
            dcg = sum(gains[c] / math.log2(i + 2) for i, c in enumerate(perm[:k]))
            vals.append(0.0 if ideal == 0 else dcg / ideal)
    return vals


CASES = [
    # (ratings, scores, k)
    ([3, 0, 1, 2], [0.5, 0.5, 0.5, 0.5], 2),            # one block, all tied, straddles k
    ([5, 0, 2.5, 1, 4], [0.9, 0.4, 0.4, 0.4, 0.1], 2),   # block at ranks 2-4 straddles k = 2
    ([1, 2, 3, 4, 0, 0], [1, 1, 2, 2, 3, 3], 3),         # three blocks of two, cut inside the second
    ([0, 0, 0], [1, 1, 2], 2),                           # ideal DCG 0
    ([4.2, 1.7, 0.3, 3.3, 2.0, 0.0, 5.0], [2, 1, 1, 1, 0, 0, 3], 4),
    ([2, 3, 1], [0.1, 0.2, 0.3], 10),                    # no ties, k beyond the list
]


@pytest.mark.parametrize("ratings,scores,k", CASES)
def test_against_all_permutations(ratings, scores, k):
    vals = brute(ratings, scores, k)
    assert expected_ndcg_at_k(ratings, scores, k) == pytest.approx(np.mean(vals), abs=1e-12)
    lo, hi = ndcg_tie_range(ratings, scores, k)
    assert lo == pytest.approx(min(vals), abs=1e-12)
    assert hi == pytest.approx(max(vals), abs=1e-12)


def test_random_small_cases():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(2, 8))
        ratings = rng.choice([0, 1, 2.5, 4, 5], size=n).tolist()
        scores = rng.integers(0, 3, size=n).astype(float).tolist()
        k = int(rng.integers(1, n + 1))
        vals = brute(ratings, scores, k)
        s = tie_sensitivity(ratings, scores, k)
        assert s["expected"] == pytest.approx(np.mean(vals), abs=1e-12)
        assert s["min"] == pytest.approx(min(vals), abs=1e-12)
        assert s["max"] == pytest.approx(max(vals), abs=1e-12)
        assert s["spread"] == pytest.approx(max(vals) - min(vals), abs=1e-12)


def test_no_ties_equals_workbench_ndcg():
    # the workbench kernel (tie-free case must agree); a failure under CI if the module has moved
    ndcg_at_k = project_module("saber_lib.evaluate.tables").ndcg_at_k

    rng = np.random.default_rng(0)
    rel = rng.uniform(0, 5, 150)
    sc = rng.normal(size=150)
    assert expected_ndcg_at_k(rel, sc, 10) == pytest.approx(ndcg_at_k(rel, sc, 10), abs=1e-15)
    assert ndcg_tie_range(rel, sc, 10) == pytest.approx((ndcg_at_k(rel, sc, 10),) * 2, abs=1e-15)


def test_hand_case():
    # ratings 2 and 0 tie at rank 1, k = 1: orders give gain 3 or 0; ideal 3 -> mean 0.5
    assert expected_ndcg_at_k([2, 0], [1, 1], 1) == pytest.approx(0.5)
    assert ndcg_tie_range([2, 0], [1, 1], 1) == (0.0, 1.0)


def test_bad_input():
    with pytest.raises(ValueError):
        expected_ndcg_at_k([1, 2], [1], 1)
    with pytest.raises(ValueError):
        ndcg_tie_range([1, 2], [1, 1], 0)
