"""Instruction arms summarised over models: by category and by domain, "k of n models improve",
on a hand case (two models, three queries, two domains)."""
import polars as pl
import pytest

from saber_lib import embed
from conftest import DATA_DIR, needs_data
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


TABLES = "published/tables/RESULTS_instructions.md"


def _md_rows(lines):
    """The body rows of the first markdown table in ``lines`` (cells stripped)."""
    rows, started = [], False
    for line in lines:
        if line.startswith("|"):
            if started and not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
            started = True
        elif started:
            break
    return rows[1:] if rows and rows[0][0] == "Model" else rows


@needs_data(TABLES)
def test_the_domain_summary_is_the_authors_k_of_n_on_their_published_table():
    """The authors' per-domain instruction tables (statement-full, instructable models): their changes
    against p0 summarised here equal their own "Summary by domain" rows (means to the rounding of the
    4-decimal changes, counts exactly)."""
    import re

    text = (DATA_DIR / TABLES).read_text(encoding="utf-8").splitlines()
    detail = text.index("## Per-domain detail (statement-full)")
    rows = []
    heads = [i for i in range(detail, len(text)) if text[i].startswith("### ")]
    for h in heads:
        dom = text[h][4:].strip()
        start = text.index("**Instructable**", h)
        for cells in _md_rows(text[start + 1:]):
            if cells[1] == "-":
                continue                                    # no p0: not compared
            for arm, cell in zip(("p1", "p2", "p3"), cells[2:5]):
                m = re.search(r"\(([+-]\d\.\d{4})\)", cell)
                if m:
                    rows.append((cells[0], arm, dom, float(m.group(1))))
    deltas = pl.DataFrame(rows, schema={"retriever": pl.Utf8, "arm": pl.Utf8, "domain": pl.Utf8, "delta": pl.Float64},
                          orient="row")
    ours = summ.arm_summary(deltas).filter(pl.col("scope") == "domain")
    summary = text.index("## Summary by domain (statement-full)")
    theirs = _md_rows(text[summary + 1:])
    assert len(theirs) == 5 and ours["group"].n_unique() == 5
    for dom, *cells, n in theirs:
        for arm, cell in zip(("p1", "p2", "p3"), cells):
            mean, k, n_ = re.fullmatch(r"([+-]\d\.\d{4}) \((\d+)/(\d+)\)", cell).groups()
            row = ours.filter((pl.col("group") == dom) & (pl.col("arm") == arm)).row(0, named=True)
            assert (row["n_improved"], row["n_models"]) == (int(k), int(n_)) == (int(k), int(n)), (dom, arm)
            assert row["mean_delta"] == pytest.approx(float(mean), abs=1.01e-4), (dom, arm)
