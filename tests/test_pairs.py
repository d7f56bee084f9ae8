"""Tiled all-pairs signals against a brute-force double loop; histograms and stored pairs."""
import numpy as np
import pytest

from saber_lib.signals import pairs
from saber_lib.signals import SignalStore, bin_edges, jaccard, summary_tokens
from saber_lib.core.parallel import LocalProcessExecutor, SerialExecutor
from saber_lib.signals.reference import brute_force_pairs
from saber_lib.signals.store import store_from_dense


def random_corpus(n, seed=0, n_topics=40, n_words=50):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n_words)]
    toks = [frozenset(rng.choice(words, rng.integers(0, 7), replace=False).tolist()) for _ in range(n)]
    tops = [rng.choice(n_topics, rng.integers(0, 5), replace=False).tolist() for _ in range(n)]
    lin = rng.random((n_topics, n_topics)).astype(np.float32)   # float32 like lin_matrix()
    lin = (lin + lin.T) / 2
    np.fill_diagonal(lin, 1.0)
    return toks, tops, lin


@pytest.fixture(scope="module")
def corpus():
    return random_corpus(240, seed=3)


@pytest.fixture(scope="module")
def reference(corpus):
    toks, tops, lin = corpus
    return brute_force_pairs(toks, tops, lin)


def full_matrices(inp, rows, c0, c1):
    topic, summ = pairs.tile_signals(inp, rows, c0, c1)
    return topic.T, summ.T, inp.col_order[c0:c1]


def test_tile_equals_brute_force_exactly(corpus, reference):
    toks, tops, lin = corpus
    rt, rs = reference
    inp = pairs.build_inputs(toks, tops, lin, hist_bins=20, floor_topic=0.5, floor_summ=0.1)
    n = len(toks)
    for rows, (c0, c1) in [(np.arange(n), (0, n)), (np.arange(17, 90), (31, 200)), (np.array([5]), (0, 7))]:
        t, s, cols = full_matrices(inp, rows, c0, c1)
        assert np.array_equal(s, rs[np.ix_(rows, cols)])           # Jaccard: exact rationals
        assert np.array_equal(t, rt[np.ix_(rows, cols)])           # BMA: same sums, same order


def test_brute_force_reference_itself():
    # two problems by hand: X = {0, 1}, Y = {1}; Lin(0,1) = 0.2, Lin(1,1) = 1
    lin = np.array([[1.0, 0.2], [0.2, 1.0]])
    t, s = brute_force_pairs([{"a", "b"}, {"b"}], [[0, 1], [1]], lin)
    assert t[0, 1] == pytest.approx((0.2 + 1.0 + 1.0) / 3)
    assert s[0, 1] == pytest.approx(0.5)
    assert t[0, 0] == pytest.approx(1.0)


def test_agrees_with_topics_bma_block(corpus):
    from saber_lib.signals.topic import bma_block

    toks, tops, lin = corpus
    inp = pairs.build_inputs(toks, tops, lin, hist_bins=20, floor_topic=0.5, floor_summ=0.1)
    t, _, cols = full_matrices(inp, np.arange(60), 0, len(toks))
    ref = bma_block(lin, [tops[i] for i in range(60)], [tops[i] for i in cols])
    np.testing.assert_allclose(t, ref, atol=2e-6)


def test_empty_sets():
    lin = np.eye(3)
    inp = pairs.build_inputs([set(), set(), {"x"}], [[], [0], [0, 2]], lin, hist_bins=4,
                             floor_topic=0.0, floor_summ=0.0, jaccard_empty=0.7)
    t, s, cols = full_matrices(inp, np.arange(3), 0, 3)
    T = np.empty((3, 3)); S = np.empty((3, 3))
    T[:, cols] = t; S[:, cols] = s
    assert T[0].tolist() == [0.0, 0.0, 0.0]                     # empty topic set -> 0
    assert T[1, 2] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert S[0, 1] == 0.7 and S[0, 2] == 0.0                     # both empty -> jaccard_empty


def run_store(tmp_path, toks, tops, lin, executor=None, **kw):
    inp = pairs.build_inputs(toks, tops, lin, hist_bins=kw.pop("hist_bins", 20),
                             floor_topic=kw.pop("floor_topic", 0.5), floor_summ=kw.pop("floor_summ", 0.1),
                             exclude_pairs=kw.pop("exclude_pairs", None))
    st = pairs.compute_all_pairs(inp, tmp_path, [f"d{i}" for i in range(len(toks))],
                                 executor=executor or SerialExecutor(), **kw)
    return st, SignalStore.open(tmp_path)


def test_histograms_and_stored_pairs_match_raw_pairs(tmp_path, corpus, reference):
    toks, tops, lin = corpus
    rt, rs = reference
    n, B = len(toks), 20
    st, store = run_store(tmp_path, toks, tops, lin, block=23, col_tile=57, exclude_pairs=[(3, 4)])
    assert st.n_pairs == n * (n - 1) - 2
    t16 = rt.astype(np.float16).astype(np.float64)
    s16 = rs.astype(np.float16).astype(np.float64)
    edges = bin_edges(B)
    for q in (0, 3, 4, 100, n - 1):
        keep = np.ones(n, bool)
        keep[q] = False
        if q in (3, 4):
            keep[7 - q] = False
        h = store.histogram(q)
        assert h.sum() == keep.sum()
        for i in (0, 5, 10, 15):
            for j in (0, 2, 4, 8):
                ti, sj = t16[q] > edges[i], s16[q] > edges[j]
                r = h[i + 1:, j + 1:].sum()
                assert r == np.sum(keep & ti & sj)
                assert h[i + 1:, :j + 1].sum() == np.sum(keep & ti & ~sj)
        ids, pt, ps = store.pairs(q)
        want = np.flatnonzero(keep & ((t16[q] > 0.5) | (s16[q] > 0.1)))
        assert np.array_equal(ids, want)                            # sorted, floor rule
        assert np.array_equal(pt.astype(np.float64), t16[q, want])
        assert np.array_equal(ps.astype(np.float64), s16[q, want])


def test_same_inputs_byte_identical_and_pool_equals_serial(tmp_path, corpus):
    toks, tops, lin = corpus
    _, a = run_store(tmp_path / "a", toks, tops, lin, block=40, col_tile=100)
    _, b = run_store(tmp_path / "b", toks, tops, lin, block=40, col_tile=100,
                     executor=LocalProcessExecutor(2))
    _, c = run_store(tmp_path / "c", toks, tops, lin, block=64, col_tile=240)   # other tiling
    for name in ("hist_offsets", "hist_cells", "hist_counts", "pair_offsets", "pair_ids", "pair_topic",
                 "pair_summ"):
        fa = (tmp_path / "a" / f"{name}.npy").read_bytes()
        assert fa == (tmp_path / "b" / f"{name}.npy").read_bytes(), name
        assert fa == (tmp_path / "c" / f"{name}.npy").read_bytes(), name


def test_tile_plan_respects_the_budget():
    for n in (1000, 18000, 283000):
        a, b = pairs.plan_tiles(n, 3000, 6, memory_budget_mb=512, workers=4)
        per_worker = 512 * 2 ** 20 / 4
        assert pairs.BYTES_PER_PAIR * a * b + 8 * b * min(3001, a * 6) <= per_worker or b == 256
        assert 1 <= a <= 256 and b <= n


def test_real_summary_tokens_flow():
    toks = [summary_tokens("Apply the pigeonhole principle to residues"),
            summary_tokens("Use residues modulo a prime"), summary_tokens("")]
    inp = pairs.build_inputs(toks, [[0], [0], []], np.eye(1), hist_bins=10, floor_topic=0.5, floor_summ=0.1)
    _, s, cols = full_matrices(inp, np.arange(3), 0, 3)
    S = np.empty((3, 3)); S[:, cols] = s
    # {apply, pigeonhole, principle, residues} vs {use, residues, modulo, prime}: 1 / 7
    assert S[0, 1] == jaccard(toks[0], toks[1]) == pytest.approx(1 / 7)


def test_long_topic_sets_store_equals_the_reference_store(tmp_path):
    """Set sizes 0-14 with a long tail (the kernel orders queries and candidates by set size): the
    tiled store is byte-identical to the one written from the brute-force double loop."""
    rng = np.random.default_rng(11)
    n, u = 150, 60
    toks = [frozenset(rng.choice([f"w{i}" for i in range(40)], rng.integers(0, 6), replace=False).tolist())
            for _ in range(n)]
    sizes = np.minimum(14, rng.geometric(0.3, n) - 1)
    tops = [rng.choice(u, int(k), replace=False).tolist() for k in sizes]
    lin = rng.random((u, u)).astype(np.float32)
    lin = (lin + lin.T) / 2
    np.fill_diagonal(lin, 1.0)
    rt, rs = brute_force_pairs(toks, tops, lin)
    store_from_dense(rt, rs, tmp_path / "ref", [f"d{i}" for i in range(n)], hist_bins=20,
                           floor_topic=0.5, floor_summ=0.1)
    run_store(tmp_path / "tiled", toks, tops, lin, block=16, col_tile=50)
    for name in ("hist_offsets", "hist_cells", "hist_counts", "pair_offsets", "pair_ids", "pair_topic", "pair_summ"):
        assert (tmp_path / "ref" / f"{name}.npy").read_bytes() == (tmp_path / "tiled" / f"{name}.npy").read_bytes(), name


def test_topic_pair_evaluations_by_brute_force():
    tops = [[0, 1, 2], [], [3], [1, 4]]
    inp = pairs.build_inputs([set()] * 4, tops, np.eye(5), hist_bins=4, floor_topic=0.5, floor_summ=0.1,
                             exclude_pairs=[(0, 3)])
    want = sum(len(tops[q]) * len(tops[c]) for q in range(4) for c in range(4) if q != c and {q, c} != {0, 3})
    assert inp.topic_pair_evaluations() == want == 2 * (3 * 1 + 1 * 2)


def test_block_work_by_brute_force_and_sums_to_the_whole():
    tops = [[0, 1, 2], [], [3], [1, 4], [2]]
    inp = pairs.build_inputs([set()] * 5, tops, np.eye(5), hist_bins=4, floor_topic=0.5, floor_summ=0.1,
                             exclude_pairs=[(0, 3)])
    for r0, r1 in ((0, 2), (2, 5), (3, 4)):
        keep = [(q, c) for q in range(r0, r1) for c in range(5) if q != c and {q, c} != {0, 3}]
        assert inp.block_work(r0, r1) == (len(keep), sum(len(tops[q]) * len(tops[c]) for q, c in keep))
    # rows 0-1: 2 x 4 pairs less (0, 3); evaluations 3 x (0 + 1 + 2 + 1) + 0 = 12, less 3 x 2 of (0, 3)
    assert inp.block_work(0, 2) == (7, 6)
    parts = [inp.block_work(0, 2), inp.block_work(2, 5)]
    assert tuple(map(sum, zip(*parts))) == inp.block_work(0, 5) == (5 * 4 - 2, inp.topic_pair_evaluations())


def test_every_block_reports_its_own_cpu(tmp_path, corpus):
    toks, tops, lin = corpus
    st, _ = run_store(tmp_path, toks, tops, lin, block=50, col_tile=60)
    assert len(st.block_cpu_s) == 5 and all(c > 0 for c in st.block_cpu_s)
    assert st.task_cpu_s == pytest.approx(sum(st.block_cpu_s))
