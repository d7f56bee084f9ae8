"""IC, Lin and BMA (paper 3.2.2) against hand-computed values; batched BMA against a brute-force loop."""
import math

import numpy as np
import pytest

from saber_lib.ontology.tree import build_ontology
from saber_lib.signals.topic import (annotation_counts, bma, bma_block, bma_many, information_content,
                                     lin_matrix, lin_similarity, pad_sets, topic_sets)


@pytest.fixture
def toy():
    # R -> A -> (A1, A2); R -> B -> B1.  Preorder ids: R0 A1 A1:2 A2:3 B4 B1:5
    titles = {u: u for u in ["R", "A", "A1", "A2", "B", "B1"]}
    o = build_ontology("R", titles, {"R": ["A", "B"], "A": ["A1", "A2"], "B": ["B1"]})
    ids = {o.title(v): v for v in range(o.n_nodes)}
    return o, ids


def test_counts_and_ic_by_hand(toy):
    o, n = toy
    ann = [[n["A1"]], [n["A1"], n["B1"]], [n["A2"]], []]
    c, N = annotation_counts(o, ann)
    assert N == 4
    assert dict(zip([o.title(v) for v in range(o.n_nodes)], c.tolist())) == {
        "R": 4, "A": 3, "A1": 2, "A2": 1, "B": 1, "B1": 1}
    ic = information_content(o, ann)
    assert ic[n["R"]] == 0.0
    assert ic[n["A1"]] == pytest.approx(math.log(2))
    assert ic[n["A"]] == pytest.approx(math.log(4 / 3))
    assert ic[n["B1"]] == pytest.approx(math.log(4))
    # a node nobody annotated: p = 0 clamped at 1e-12
    ic2 = information_content(o, [[n["A1"]]])
    assert ic2[n["B1"]] == pytest.approx(-math.log(1e-12))
    assert information_content(o, [])[0] == 0.0


def test_lin_formula():
    assert lin_similarity(1.0, 2.0, 3.0) == pytest.approx(2 / 5)
    assert lin_similarity(0.0, 0.0, 0.0) == 0.0          # epsilon keeps it finite
    out = lin_similarity(np.array([1.0, 0.5]), np.array([[1.0], [2.0]]), 1.0)
    assert out.shape == (2, 2)
    assert out[1, 0] == pytest.approx(2 * 1.0 / 3.0)


def test_lin_matrix_by_hand(toy):
    o, n = toy
    ann = [[n["A1"]], [n["A1"], n["B1"]], [n["A2"]], []]
    ic = information_content(o, ann)
    nodes = [n["A1"], n["A2"], n["B1"], n["A"]]
    L = lin_matrix(o, ic, nodes)
    l12 = 2 * math.log(4 / 3) / (math.log(2) + math.log(4))
    assert L[0, 1] == pytest.approx(l12, rel=1e-6) and L[1, 0] == pytest.approx(l12, rel=1e-6)
    assert L[0, 2] == 0.0 and L[1, 2] == 0.0            # LCA is the root (IC 0)
    # an ancestor: LCA(A1, A) = A
    assert L[0, 3] == pytest.approx(2 * math.log(4 / 3) / (math.log(2) + math.log(4 / 3)), rel=1e-6)
    assert np.all(np.diag(L) == 1.0)                     # Lin(t, t) = 1
    assert L.dtype == np.float32 and (L == L.T).all()


def test_bma_by_hand():
    assert bma(np.zeros((0, 3))) == 0.0 and bma(np.zeros((2, 0))) == 0.0
    assert bma(np.eye(3)) == 1.0                          # identical sets
    l12 = 0.3
    # X = {a1}, Y = {a1, b1}: row max 1; column maxes 1, 0 -> 2/3
    assert bma([[1.0, 0.0]]) == pytest.approx(2 / 3)
    # unequal sizes: X = {a1, b1}, Y = {a2}: rows l12, 0; column l12 -> 2*l12/3
    assert bma([[l12], [0.0]]) == pytest.approx(2 * l12 / 3)
    # asymmetric best matches
    s = np.array([[0.9, 0.1, 0.2], [0.4, 0.3, 0.8]])
    assert bma(s) == pytest.approx((0.9 + 0.8 + 0.9 + 0.3 + 0.8) / 5)
    with pytest.raises(ValueError):
        bma(np.zeros(3))


def _random_lin(rng, U):
    X = rng.random((U, U)).astype(np.float32)
    L = (X + X.T) / 2
    np.fill_diagonal(L, 1.0)
    return L


def _random_sets(rng, n, U, kmax=5):
    return [sorted(rng.choice(U, size=int(rng.integers(0, kmax + 1)), replace=False).tolist()) for _ in range(n)]


def _brute(L, A, B):
    return np.array([[bma(L[np.ix_(a, b)]) if a and b else 0.0 for b in B] for a in A])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bma_block_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    U = 40
    L = _random_lin(rng, U)
    A, B = _random_sets(rng, 37, U), _random_sets(rng, 23, U, kmax=7)
    A[0], B[3] = [], []                                  # empty sets give 0
    A[1] = B[2] = [5, 9]                                 # identical sets give 1
    got = bma_block(L, pad_sets(A), pad_sets(B))
    assert got.shape == (37, 23) and got.dtype == np.float32
    np.testing.assert_allclose(got, _brute(L, A, B), atol=2e-7)
    assert (got[0] == 0).all() and (got[:, 3] == 0).all()
    assert got[1, 2] == pytest.approx(1.0)
    # lists of lists are padded on the fly; a slice of PaddedSets works as a tile
    np.testing.assert_allclose(bma_block(L, A[5:9], B), got[5:9], atol=0)
    np.testing.assert_allclose(bma_block(L, pad_sets(A)[5:9], pad_sets(B)), got[5:9], atol=0)


def test_bma_block_all_empty_and_zero_rows():
    L = np.eye(3, dtype=np.float32)
    assert (bma_block(L, [[], []], [[0], []]) == 0).all()
    assert bma_block(L, [], [[0]]).shape == (0, 1)


def test_bma_many_equals_brute_force():
    rng = np.random.default_rng(7)
    U = 30
    L = _random_lin(rng, U)
    A, B = _random_sets(rng, 50, U), _random_sets(rng, 50, U)
    A[4] = []
    got = bma_many(L, A, B)
    want = np.array([bma(L[np.ix_(a, b)]) if a and b else 0.0 for a, b in zip(A, B)])
    np.testing.assert_allclose(got, want, atol=2e-7)
    with pytest.raises(ValueError):
        bma_many(L, A, B[:3])


def test_bma_many_in_small_blocks_gives_the_same_values_within_the_memory_bound():
    rng = np.random.default_rng(11)
    U = 40
    L = _random_lin(rng, U)
    A, B = _random_sets(rng, 37, U), _random_sets(rng, 37, U)
    A[0] = list(range(U))                      # one large set pads every row of a corpus-wide array
    whole = bma_many(L, A, B)
    want = np.array([bma(L[np.ix_(a, b)]) if a and b else 0.0 for a, b in zip(A, B)])
    np.testing.assert_allclose(whole, want, atol=2e-7)
    for budget in (1, 4 * 40 * 40, 4 * 40 * 40 * 5 + 3):   # one pair a block, and blocks of 1 and 5 pairs
        np.testing.assert_array_equal(bma_many(L, A, B, max_bytes=budget), whole)
    assert bma_many(L, [], []).shape == (0,)


def test_topic_sets_end_to_end(toy):
    o, n = toy
    ann = [[n["A1"]], [n["A1"], n["B1"]], [n["A2"]], []]
    ts = topic_sets(o, ann)
    assert ts.nodes.tolist() == sorted({n["A1"], n["B1"], n["A2"]})
    sims = bma_block(ts.lin, ts.sets, ts.sets)
    l12 = 2 * math.log(4 / 3) / (math.log(2) + math.log(4))
    assert sims[0, 1] == pytest.approx(2 / 3, rel=1e-6)
    assert sims[0, 2] == pytest.approx(l12, rel=1e-6)
    assert sims[0, 0] == pytest.approx(1.0) and sims[3].max() == 0.0
    np.testing.assert_allclose(sims, sims.T, atol=1e-7)
