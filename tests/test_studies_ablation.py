"""Signal ablation: cumulative fraction of each group's candidates within the top r."""
import numpy as np
import polars as pl
import pytest

from saber_lib.studies.ablation import (GROUPS, final_ranks, group_rank_counts, pooled_curves,
                                        signal_ablation)


def _ratings(rows):
    return pl.DataFrame(rows, schema=["query_id", "cand_id", "group", "rating", "theta", "position"], orient="row")


HAND = _ratings([
    # query 1: ranking b1 > s1 > t1 > b2 > s2 > t2
    ("q1", "t1", "topic-only", 3.0, 3.0, 0), ("q1", "t2", "topic-only", 0.0, 0.0, 1),
    ("q1", "s1", "summary-only", 4.0, 4.0, 2), ("q1", "s2", "summary-only", 1.0, 1.0, 3),
    ("q1", "b1", "both", 5.0, 5.0, 4), ("q1", "b2", "both", 2.0, 2.0, 5),
    # query 2: one topic-only (best), one both
    ("q2", "u1", "topic-only", 5.0, 1.0, 0), ("q2", "c1", "both", 0.0, -1.0, 1),
])


def test_hand_case_curves():
    ranked = final_ranks(HAND)
    q1 = dict(ranked.filter(pl.col("query_id") == "q1").select("cand_id", "rank").iter_rows())
    assert q1 == {"b1": 1, "s1": 2, "t1": 3, "b2": 4, "s2": 5, "t2": 6}
    qids, counts, totals = group_rank_counts(ranked)
    assert qids == ["q1", "q2"] and counts.shape == (2, 3, 6)
    np.testing.assert_array_equal(totals, [[2, 2, 2], [1, 0, 1]])
    F = pooled_curves(counts, totals)
    # pooled over queries: sum of counts / sum of group sizes (not a mean of per-query fractions)
    np.testing.assert_allclose(F[GROUPS.index("topic-only")], [1/3, 1/3, 2/3, 2/3, 2/3, 1.0])
    np.testing.assert_allclose(F[GROUPS.index("summary-only")], [0, .5, .5, .5, 1, 1])
    np.testing.assert_allclose(F[GROUPS.index("both")], [1/3, 2/3, 2/3, 1, 1, 1])  # c1 is rank 2 in q2


def test_only_query_one_matches_hand_fractions_and_band_collapses():
    one = HAND.filter(pl.col("query_id") == "q1")
    res = signal_ablation(one, n_resamples=50, seed=0)
    both = res.curves.filter(pl.col("group") == "both")
    np.testing.assert_allclose(both["frac"].to_numpy(), [.5, .5, .5, 1, 1, 1])
    # a single query: every bootstrap resample is that query, the band is the curve itself
    np.testing.assert_allclose(both["low"].to_numpy(), both["frac"].to_numpy())
    np.testing.assert_allclose(both["high"].to_numpy(), both["frac"].to_numpy())
    auc = dict(res.auc.select("group", "auc").iter_rows())
    assert auc["both"] == pytest.approx(4.5 / 6) and auc["summary-only"] == pytest.approx(3.5 / 6)
    assert auc["topic-only"] == pytest.approx(2.5 / 6)
    assert res.findings["both_rises_fastest"] and res.findings["summary_ahead_of_topic"]


def test_ties_are_deterministic_and_not_by_group_order():
    rows = [("q", f"c{k}", GROUPS[k % 3], 1.0, 0.0, k) for k in range(30)]
    df = _ratings(rows)
    r1 = final_ranks(df).select("cand_id", "rank").sort("cand_id")
    r2 = final_ranks(df.reverse()).select("cand_id", "rank").sort("cand_id")
    assert r1.equals(r2)
    # with every rating tied, position order (= group order) must not decide: the first ten ranks
    # are not all one group
    top = final_ranks(df).filter(pl.col("rank") <= 10)["group"].unique().to_list()
    assert len(top) > 1
    # theta breaks rating ties before the hash
    df2 = df.with_columns(pl.when(pl.col("cand_id") == "c7").then(1.0).otherwise(0.0).alias("theta"))
    assert final_ranks(df2).filter(pl.col("rank") == 1)["cand_id"][0] == "c7"


def test_curves_monotone_end_at_one_and_bootstrap_seeded():
    rng = np.random.default_rng(3)
    rows = []
    for q in range(40):
        for k in range(30):
            g = GROUPS[k // 10]
            bonus = {"topic-only": 0.0, "summary-only": 0.3, "both": 1.2}[g]
            rows.append((f"q{q}", f"q{q}c{k}", g, float(rng.normal() + bonus), 0.0, k))
    df = _ratings(rows)
    a = signal_ablation(df, n_resamples=200, seed=7)
    b = signal_ablation(df, n_resamples=200, seed=7)
    assert a.curves.equals(b.curves)
    for g in GROUPS:
        f = a.curves.filter(pl.col("group") == g)
        assert np.all(np.diff(f["frac"].to_numpy()) >= 0)
        assert f["frac"][-1] == pytest.approx(1.0)
        assert np.all(f["low"].to_numpy() <= f["frac"].to_numpy() + 1e-12)
        assert np.all(f["high"].to_numpy() >= f["frac"].to_numpy() - 1e-12)
    # the three curves average to r / 3K at every cutoff (equal group sizes)
    F = np.stack([a.curves.filter(pl.col("group") == g)["frac"].to_numpy() for g in GROUPS])
    np.testing.assert_allclose(F.mean(axis=0), np.arange(1, 31) / 30)
    assert a.findings["both_rises_fastest"] and a.findings["both_rises_fastest_significant"]


def test_unknown_group_is_an_error():
    bad = HAND.with_columns(pl.lit("other").alias("group"))
    with pytest.raises(ValueError, match="unknown candidate group"):
        final_ranks(bad)


def test_per_domain_curves_pool_each_domains_queries():
    from saber_lib.studies.ablation import domain_curves, plot_domain_curves

    doms = pl.DataFrame({"query_id": ["q1", "q2"], "query_domains": [["Geometry", "Algebra"], ["Geometry"]]})
    curves, auc = domain_curves(HAND, doms, n_resamples=30, seed=0)
    assert auc["domain"].unique(maintain_order=True).to_list() == ["Algebra", "Geometry"]   # plots.DOMAIN_ORDER
    alg = curves.filter(pl.col("domain") == "Algebra")
    geo = curves.filter(pl.col("domain") == "Geometry")
    # Algebra holds q1 alone: t1 rank 3, t2 rank 6; its band is the curve itself
    t = alg.filter(pl.col("group") == "topic-only")
    np.testing.assert_allclose(t["frac"].to_numpy(), [0, 0, .5, .5, .5, 1])
    np.testing.assert_allclose(t["low"].to_numpy(), t["frac"].to_numpy())
    # Geometry holds both queries: the pooled curves of the hand case
    np.testing.assert_allclose(geo.filter(pl.col("group") == "topic-only")["frac"].to_numpy(),
                               [1/3, 1/3, 2/3, 2/3, 2/3, 1.0])
    np.testing.assert_allclose(geo.filter(pl.col("group") == "both")["frac"].to_numpy(), [1/3, 2/3, 2/3, 1, 1, 1])
    row = auc.filter((pl.col("domain") == "Geometry") & (pl.col("group") == "topic-only")).row(0, named=True)
    assert row["n_queries"] == 2 and row["n_candidates"] == 3 and row["auc"] == pytest.approx((1/3 * 2 + 2/3 * 3 + 1) / 6)
    assert auc.filter(pl.col("domain") == "Algebra")["n_queries"].to_list() == [1, 1, 1]
    again = domain_curves(HAND, doms, n_resamples=30, seed=0)
    assert again[0].equals(curves) and again[1].equals(auc)
    import matplotlib
    matplotlib.use("Agg")
    fig = plot_domain_curves(curves, auc)
    assert [ax.get_title() for ax in fig.axes] == ["Algebra (n=1)", "Geometry (n=2)"]
    with pytest.raises(KeyError, match="no domains in the benchmark"):
        domain_curves(HAND, doms.head(1), n_resamples=5, seed=0)
