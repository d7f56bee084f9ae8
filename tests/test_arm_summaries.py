"""Instruction arms summarised over models: by category and by domain, "k of n models improve",
on a hand case (two models, three queries, two domains)."""
import polars as pl
import pytest

from saber_lib import embed
from saber_lib.evaluate import arm_summaries as summ


def _nd(model, values, setting="statement-full"):
    return pl.DataFrame({"retriever": [model] * len(values), "setting": [setting] * len(values),
                         "query_id": list(values), "ndcg": list(values.values())})


DOMAINS = {"q1": ["Algebra"], "q2": ["Algebra", "Geometry"], "q3": ["Geometry"], "q4": ["Algebra"]}
# p0 of minilm also scores q4, which no arm scored: it must not count
P0 = pl.concat([_nd("minilm", {"q1": .5, "q2": .5, "q3": .5, "q4": 1.0}), _nd("e5-small", {"q1": .4, "q2": .6, "q3": .8}),
                _nd("minilm", {"q1": 0.0}, setting="full-full")])
PER_ARM = {"p1": pl.concat([_nd("minilm", {"q1": .7, "q2": .4, "q3": .5}), _nd("e5-small", {"q1": .4, "q2": .6, "q3": .5}),
                            _nd("minilm", {"q1": 1.0}, setting="full-full")]),
           "p2": _nd("minilm", {"q1": .5, "q2": .5, "q3": .6})}


def test_model_deltas_are_paired_means_per_scope():
    d = summ.model_deltas(P0, PER_ARM, DOMAINS, "statement-full")
    got = {(r, a, s): v for r, a, s, v in d.iter_rows()}
    # minilm p1: +.2, -.1, 0 over q1..q3; e5-small p1: 0, 0, -.3
    assert got[("minilm", "p1", "All")] == pytest.approx(0.1 / 3)
    assert got[("minilm", "p1", "Algebra")] == pytest.approx(0.05) and got[("minilm", "p1", "Geometry")] == pytest.approx(-0.05)
    assert got[("e5-small", "p1", "All")] == pytest.approx(-0.1) and got[("e5-small", "p1", "Geometry")] == pytest.approx(-0.15)
    assert got[("minilm", "p2", "Geometry")] == pytest.approx(0.05) and ("e5-small", "p2", "All") not in got


def test_summaries_by_category_and_domain_count_k_of_n(monkeypatch):
    # make e5-small instructable for the test: two categories
    monkeypatch.setitem(embed.ENVELOPES, "e5-small", embed.Envelope(arms="instructable"))
    s = summ.arm_summary(summ.model_deltas(P0, PER_ARM, DOMAINS, "statement-full"))
    rows = {(sc, g, a): (n, k, m) for sc, g, a, n, k, m in s.iter_rows()}
    assert rows[("category", "dense encoder, control", "p1")] == (1, 1, pytest.approx(0.1 / 3))
    assert rows[("category", "dense encoder, instructable", "p1")] == (1, 0, pytest.approx(-0.1))
    assert rows[("category", summ.ALL_MODELS, "p1")] == (2, 1, pytest.approx((0.1 / 3 - 0.1) / 2))
    assert rows[("category", summ.ALL_MODELS, "p2")] == (1, 1, pytest.approx(0.1 / 3))
    # Algebra p1: minilm +.05, e5-small 0 (not an improvement); Geometry p1: -.05, -.15
    assert rows[("domain", "Algebra", "p1")] == (2, 1, pytest.approx(0.025))
    assert rows[("domain", "Geometry", "p1")] == (2, 0, pytest.approx(-0.1))
    assert rows[("domain", "Algebra", "p2")] == (1, 0, pytest.approx(0.0))
    assert [g for sc, g in s.filter(pl.col("scope") == "domain").select("scope", "group").unique(maintain_order=True)
            .iter_rows()] == ["Algebra", "Geometry"]
    wide = summ.summary_wide(s, "domain")
    assert wide.columns == ["domain", "p1", "p2", "n"]
    assert wide.row(0) == ("Algebra", "+0.0250 (1/2)", "+0.0000 (0/1)", 2)
    cat = summ.summary_wide(s, "category")
    assert cat["category"].to_list() == ["dense encoder, control", "dense encoder, instructable", summ.ALL_MODELS]
    assert cat.filter(pl.col("category") == summ.ALL_MODELS)["p1"][0] == "-0.0333 (1/2)"
