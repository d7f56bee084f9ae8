"""Thresholds from histograms (App. B.3) and benchmark selection (paper 3.4)."""
import numpy as np
import pytest

from saber_lib.selection import benchmark
from saber_lib.signals import SignalStore, bin_edges, pairs, thresholds
from saber_lib.signals.store import store_from_dense

DOMS = ["Algebra", "Geometry"]


def make_store(tmp_path, topic, summ, B=10, ft=0.0, fs=0.0, name="s"):
    d = tmp_path / name
    store_from_dense(topic, summ, d, [f"d{i}" for i in range(topic.shape[0])], hist_bins=B,
                           floor_topic=ft, floor_summ=fs)
    return SignalStore.open(d)


def designed(rows_spec, n_cand=6):
    """Queries 0..Q-1, candidates Q..Q+n_cand-1; each query's candidate values given as 3 pairs x2."""
    Q = len(rows_spec)
    n = Q + n_cand
    t = np.zeros((n, n)); s = np.zeros((n, n))
    for q, groups in enumerate(rows_spec):
        vals = [v for v in groups for _ in range(2)]
        for k, (a, b) in enumerate(vals):
            t[q, Q + k], s[q, Q + k] = a, b
    return t, s


# query A: feasible for t in [0.1, 0.8], s in [0.1, 0.4]; query B: t in [0.3, 0.9], s in [0.3, 0.6]
QA = [(0.85, 0.05), (0.05, 0.45), (0.85, 0.45)]
QB = [(0.95, 0.25), (0.25, 0.65), (0.95, 0.65)]


def test_paper_rule_known_answer(tmp_path):
    t, s = designed([QA, QB])
    store = make_store(tmp_path, t, s)
    qd = [["Algebra"], ["Geometry"]] + [[]] * 6
    sw = thresholds.sweep(store, qd, DOMS, k_values=[2])
    res = thresholds.find_thresholds(sw, K=2, Q_min=1, rule="paper")
    assert res["per_domain"]["Algebra"]["tau_topic"] == pytest.approx(0.1)
    assert res["per_domain"]["Algebra"]["tau_summ"] == pytest.approx(0.1)
    assert res["per_domain"]["Geometry"]["tau_topic"] == pytest.approx(0.3)
    assert res["per_domain"]["Geometry"]["tau_summ"] == pytest.approx(0.3)
    assert (res["tau_topic"], res["tau_summ"]) == pytest.approx((0.1, 0.1))   # min over domains
    assert res["feasible"]
    # the eligible region of query A is exactly the rectangle
    e = sw.eligible[sw.k_index(2), 0]
    want = np.zeros((11, 11), int)
    want[1:9, 1:5] = 1
    assert np.array_equal(e, want)
    # K = 3 is impossible (two candidates per group): reported, not raised
    sw3 = thresholds.sweep(store, qd, DOMS, k_values=[3])
    r3 = thresholds.find_thresholds(sw3, K=3, Q_min=1, rule="paper")
    assert not r3["feasible"]
    assert thresholds.max_k_for(r3["frontier"], 1) == {"Algebra": 2, "Geometry": 2}


def test_strictest_rule_takes_the_largest_feasible_point(tmp_path):
    t, s = designed([QA, QB])
    store = make_store(tmp_path, t, s)
    qd = [["Algebra"], ["Geometry"]] + [[]] * 6
    sw = thresholds.sweep(store, qd, DOMS, k_values=[2])
    res = thresholds.find_thresholds(sw, K=2, Q_min=1, rule="strictest")
    assert (res["per_domain"]["Algebra"]["tau_topic"], res["per_domain"]["Algebra"]["tau_summ"]) == pytest.approx((0.8, 0.4))
    assert (res["per_domain"]["Geometry"]["tau_topic"], res["per_domain"]["Geometry"]["tau_summ"]) == pytest.approx((0.9, 0.6))
    assert (res["tau_topic"], res["tau_summ"]) == pytest.approx((0.8, 0.4))   # min over domains
    assert res["feasible"] and res["all_domains_reach_Q_min_at_final"]


def test_search_order_topic_first_vs_summ_first(tmp_path):
    r1 = [(0.85, 0.45), (0.05, 0.65), (0.85, 0.65)]     # t in [0.1, 0.8], s in [0.5, 0.6]
    r2 = [(0.85, 0.05), (0.35, 0.45), (0.85, 0.45)]     # t in [0.4, 0.8], s in [0.1, 0.4]
    t, s = designed([r1, r2])
    store = make_store(tmp_path, t, s)
    qd = [["Algebra"], ["Algebra"]] + [[]] * 6
    sw = thresholds.sweep(store, qd, ["Algebra"], k_values=[2])
    a = thresholds.find_thresholds(sw, K=2, Q_min=1, order="topic_first")
    b = thresholds.find_thresholds(sw, K=2, Q_min=1, order="summ_first")
    assert (a["tau_topic"], a["tau_summ"]) == pytest.approx((0.1, 0.5))
    assert (b["tau_topic"], b["tau_summ"]) == pytest.approx((0.4, 0.1))
    c = thresholds.find_thresholds(sw, K=2, Q_min=2)      # no point serves both queries
    assert not c["feasible"] and c["per_domain"]["Algebra"]["eligible"] == 1
    # floors restrict the search: thresholds below them cannot be selected from stored pairs
    d = thresholds.find_thresholds(sw, K=2, Q_min=1, floor_topic=0.35)
    assert (d["tau_topic"], d["tau_summ"]) == pytest.approx((0.4, 0.1))


def random_store(tmp_path, n=120, seed=0, B=20, ft=0.3, fs=0.1):
    rng = np.random.default_rng(seed)
    t = rng.beta(2, 3, (n, n)); s = rng.beta(1, 4, (n, n))
    t = (t + t.T) / 2; s = (s + s.T) / 2
    return make_store(tmp_path, t, s, B=B, ft=ft, fs=fs), t, s


def test_sweep_equals_counts_from_raw_pairs(tmp_path):
    B = 20
    store, t, s = random_store(tmp_path, B=B)
    n = t.shape[0]
    rng = np.random.default_rng(1)
    qd = [[DOMS[k] for k in range(2) if rng.random() < 0.6] for _ in range(n)]
    sw = thresholds.sweep(store, qd, DOMS, k_values=[7], chunk=17)
    t16 = t.astype(np.float16).astype(np.float64); s16 = s.astype(np.float16).astype(np.float64)
    off = ~np.eye(n, dtype=bool)
    edges = bin_edges(B)
    ex = thresholds.HistogramExplorer(store, qd, DOMS)
    for i in range(0, B + 1, 3):
        for j in range(0, B + 1, 4):
            ti = (t16 > edges[i]) & off; sj = (s16 > edges[j]) & off
            cats = np.stack([(ti & ~sj).sum(1), (~ti & sj).sum(1), (ti & sj).sum(1)], 1)
            assert np.array_equal(ex.counts(i, j), cats)
            for k, K in enumerate(sw.k_ladder[:8]):
                ok = cats.min(1) >= K
                for d, name in enumerate(DOMS):
                    m = np.array([name in x for x in qd])
                    assert sw.eligible[k, d, i, j] == np.sum(ok & m)
            if edges[i] >= 0.3 and edges[j] >= 0.1:      # above the floors: stored pairs agree
                assert np.array_equal(benchmark.eligible_counts(store, edges[i], edges[j]), cats)


def test_quantile_rule(tmp_path):
    B = 50
    store, t, s = random_store(tmp_path, B=B)
    n = t.shape[0]
    qd = [["Algebra"] if q < 60 else ["Geometry"] for q in range(n)]
    sw = thresholds.sweep(store, qd, DOMS)
    res = thresholds.find_thresholds(sw, K=1, Q_min=1, rule="quantile", quantile=0.9)
    edges = bin_edges(B)
    off = ~np.eye(n, dtype=bool)
    for d, rows in (("Algebra", slice(0, 60)), ("Geometry", slice(60, n))):
        for key, mat in (("tau_topic", t), ("tau_summ", s)):
            v = mat.astype(np.float16).astype(np.float64)[rows][off[rows]]
            want = next(e for e in edges if np.mean(v <= e) >= 0.9 - 1e-12)
            assert res["per_domain"][d][key] == pytest.approx(want)
    assert res["tau_topic"] == min(res["per_domain"][d]["tau_topic"] for d in DOMS)


def test_fixed_rule_needs_values(tmp_path):
    store, _, _ = random_store(tmp_path)
    sw = thresholds.sweep(store, [["Algebra"]] * store.n_docs, DOMS)
    r = thresholds.find_thresholds(sw, K=1, Q_min=1, rule="fixed", tau_topic=0.45, tau_summ=0.2)
    assert (r["tau_topic"], r["tau_summ"]) == (0.45, 0.2)
    with pytest.raises(ValueError, match="tau_topic"):
        thresholds.find_thresholds(sw, K=1, Q_min=1, rule="fixed")


def test_selection_invariants(tmp_path):
    store, t, s = random_store(tmp_path, n=150, seed=4)
    n = store.n_docs
    doms = ["Algebra", "Geometry", "Number Theory"]
    rng = np.random.default_rng(2)
    qd = [[doms[k] for k in range(3) if rng.random() < 0.4] for _ in range(n)]
    usable = rng.random(n) > 0.1
    K, nq, tt, ts = 4, 10, 0.45, 0.25
    df, rep = benchmark.select_benchmark(store, qd, tau_topic=tt, tau_summ=ts, K=K, n_queries=nq,
                                      domains=doms, seed=7, usable=usable)
    assert rep["n_selected"] == nq and df.height == nq * 3 * K
    assert rep["selected"] == benchmark.domain_quotas(nq, doms) == {"Algebra": 4, "Geometry": 3, "Number Theory": 3}
    idx = {f"d{i}": i for i in range(n)}
    t16 = t.astype(np.float16).astype(np.float64); s16 = s.astype(np.float16).astype(np.float64)
    for qid, g in df.group_by("query_id", maintain_order=True):
        q = idx[qid[0] if isinstance(qid, tuple) else qid]
        assert usable[q]
        assert g["position"].to_list() == list(range(3 * K))
        assert g["group"].to_list() == ["topic-only"] * K + ["summary-only"] * K + ["both"] * K
        cands = [idx[c] for c in g["cand_id"].to_list()]
        assert q not in cands and len(set(cands)) == 3 * K
        assert all(usable[c] for c in cands)
        ct, cs = t16[q, cands], s16[q, cands]
        assert np.array_equal(ct, g["sim_topic"].to_numpy()) and np.array_equal(cs, g["sim_summ"].to_numpy())
        assert np.all((ct[:K] > tt) & (cs[:K] <= ts))
        assert np.all((ct[K:2 * K] <= tt) & (cs[K:2 * K] > ts))
        assert np.all((ct[2 * K:] > tt) & (cs[2 * K:] > ts))
        slot = rep["slot_domain"][qid[0] if isinstance(qid, tuple) else qid]
        assert slot in qd[q]
    again, _ = benchmark.select_benchmark(store, qd, tau_topic=tt, tau_summ=ts, K=K, n_queries=nq,
                                       domains=doms, seed=7, usable=usable)
    assert again.equals(df)
    other, _ = benchmark.select_benchmark(store, qd, tau_topic=tt, tau_summ=ts, K=K, n_queries=nq,
                                       domains=doms, seed=8, usable=usable)
    assert not other.equals(df)


def test_selection_reports_shortfall_and_checks_floors(tmp_path):
    store, _, _ = random_store(tmp_path, n=60, seed=5)
    qd = [["Algebra"] if q < 3 else ["Geometry"] for q in range(store.n_docs)]
    df, rep = benchmark.select_benchmark(store, qd, tau_topic=0.45, tau_summ=0.25, K=3, n_queries=20,
                                      domains=DOMS, seed=0)
    assert rep["selected"]["Algebra"] <= 3 and rep["shortfall"]["Algebra"] >= 7
    assert rep["selected"]["Geometry"] == 10
    with pytest.raises(ValueError, match="pair_floor_topic"):
        benchmark.select_benchmark(store, qd, tau_topic=0.2, tau_summ=0.25, K=3, n_queries=4, domains=DOMS, seed=0)


def test_fill_shortfall_from_other_domains(tmp_path):
    store, _, _ = random_store(tmp_path, n=60, seed=5)
    qd = [["Algebra"] if q < 3 else ["Geometry"] for q in range(store.n_docs)]
    kw = dict(tau_topic=0.45, tau_summ=0.25, K=3, n_queries=20, domains=DOMS, seed=0)
    base, rep0 = benchmark.select_benchmark(store, qd, **kw)
    df, rep = benchmark.select_benchmark(store, qd, fill_shortfall=True, **kw)
    elig = sum(rep["eligible_queries"].values())
    assert rep["n_selected"] == min(20, elig) > rep0["n_selected"]
    assert rep["filled_from_other_domains"] == rep["n_selected"] - rep0["n_selected"]
    assert set(base["query_id"].unique()) <= set(df["query_id"].unique())
    assert df["query_id"].n_unique() == rep["n_selected"]
