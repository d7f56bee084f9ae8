"""Distributions: categories from topic paths, equal weight splits summing to the problem count."""
import polars as pl
import pytest

from saber_lib.studies.distributions import (UNASSIGNED, category_weights, flat_subdomain_weights, node_categories,
                                             pick_query, problem_categories, top_ranked)

NODES = pl.DataFrame({
    "node_id": [0, 1, 2, 3, 4, 5, 6, 7, 8],
    "parent_id": [-1, 0, 1, 2, 1, 0, 5, 0, 7],
    "url": [f"u{i}" for i in range(9)],
    "title": ["Mathematics", "NumberTheory", "Congruences", "ChineseRemainder", "PrimeNumbers",
              "DiscreteMathematics", "Combinatorics", "Topology", "Knots"],
    "depth": [0, 1, 2, 3, 2, 1, 2, 1, 2],
    "path": [["Mathematics"], ["Mathematics", "NumberTheory"], ["Mathematics", "NumberTheory", "Congruences"],
             ["Mathematics", "NumberTheory", "Congruences", "ChineseRemainder"],
             ["Mathematics", "NumberTheory", "PrimeNumbers"], ["Mathematics", "DiscreteMathematics"],
             ["Mathematics", "DiscreteMathematics", "Combinatorics"], ["Mathematics", "Topology"],
             ["Mathematics", "Topology", "Knots"]],
    "domain": [None, "Number Theory", "Number Theory", "Number Theory", "Number Theory",
               "Combinatorics", "Combinatorics", None, None],
})


def test_node_categories_second_level_under_area():
    cat = node_categories(NODES)
    assert cat[3] == ("Number Theory", "Congruences")      # depth 3 -> its depth-2 ancestor
    assert cat[4] == ("Number Theory", "PrimeNumbers")
    assert cat[1] == ("Number Theory", "NumberTheory")     # the area itself
    assert cat[6] == ("Combinatorics", "Combinatorics")
    assert 0 not in cat and 8 not in cat                   # root and non-domain areas
    # paths stored without the root's title give the same answer
    no_root = NODES.with_columns(pl.col("path").list.slice(1))
    assert node_categories(no_root) == cat


def test_weights_split_equally_and_sum_to_problem_count():
    topics = pl.DataFrame({
        "doc_id": ["d1", "d2", "d3", "d4", "d5"],
        "node_ids": [[3], [3, 4], [3, 6], [8], [4]],
        "failed": [False, False, False, False, True],
    })
    cats = problem_categories(topics, NODES, doc_ids=["d1", "d2", "d3", "d4", "d5", "d6"])
    assert cats["d2"] == {"Number Theory": {"Congruences", "PrimeNumbers"}}
    assert cats["d4"] == cats["d5"] == cats["d6"] == {UNASSIGNED: {UNASSIGNED}}
    dom, sub = category_weights(cats)
    dw = dict(dom.select("domain", "weight").iter_rows())
    # d1: NT 1; d2: NT 1; d3: NT .5, Comb .5; d4-d6 unassigned 3
    assert dw == {"Number Theory": pytest.approx(2.5), "Combinatorics": pytest.approx(0.5), UNASSIGNED: pytest.approx(3.0)}
    sw = {(d, s): w for d, s, w, _ in sub.iter_rows()}
    # d1: Cong 1; d2: Cong .5, Prime .5; d3: Cong .5 (NT half), Comb .5
    assert sw[("Number Theory", "Congruences")] == pytest.approx(2.0)
    assert sw[("Number Theory", "PrimeNumbers")] == pytest.approx(0.5)
    assert sw[("Combinatorics", "Combinatorics")] == pytest.approx(0.5)
    assert dom["weight"].sum() == pytest.approx(6) and sub["weight"].sum() == pytest.approx(6)
    # nesting: subdomain weights of a domain add up to the domain's weight
    per = dict(sub.group_by("domain").agg(pl.col("weight").sum()).iter_rows())
    assert all(per[d] == pytest.approx(w) for d, w in dw.items())
    n = dict(dom.select("domain", "n_problems").iter_rows())
    assert n == {"Number Theory": 3, "Combinatorics": 1, UNASSIGNED: 3}


def test_flat_split_alternative():
    cats = {"p": {"A": {"x", "y"}, "B": {"z"}}}
    flat = {(d, s): w for d, s, w in flat_subdomain_weights(cats).iter_rows()}
    assert flat == {("A", "x"): pytest.approx(1 / 3), ("A", "y"): pytest.approx(1 / 3), ("B", "z"): pytest.approx(1 / 3)}
    _, nested = category_weights(cats)
    assert {(d, s): w for d, s, w, _ in nested.iter_rows()} == {("A", "x"): .25, ("A", "y"): .25, ("B", "z"): .5}


def test_pick_query_and_top_ranked():
    r = pl.DataFrame({"query_id": ["q2", "q2", "q2", "q1"], "cand_id": ["a", "b", "c", "d"],
                      "rating": [1.0, 5.0, 5.0, 0.0], "position": [0, 2, 1, 0]})
    assert pick_query(r, 0) == "q1" and pick_query(r, 1) == "q2"
    with pytest.raises(ValueError, match="example_query"):
        pick_query(r, 2)
    assert top_ranked(r, "q2", 2) == ["c", "b"]


def test_candidate_distribution_marks_top_k_and_the_querys_own_subdomains():
    from saber_lib.studies.distributions import candidate_distribution

    topics = pl.DataFrame({"doc_id": ["q", "c1", "c2", "c3"], "node_ids": [[3], [3], [4, 6], [6]],
                           "failed": [False] * 4})
    bench = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["c1", "c2", "c3"], "position": [0, 1, 2]})
    ratings = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["c1", "c2", "c3"], "rating": [1.0, 5.0, 3.0],
                            "theta": [0.0, 2.0, 1.0], "position": [0, 1, 2]})
    ex = candidate_distribution(topics, NODES, bench, ratings, 0, top_k=2)
    assert ex["query_id"] == "q" and ex["cand_ids"] == ["c1", "c2", "c3"]
    assert ex["own"] == {("Number Theory", "Congruences")}
    # top-2 by rating: c2 (NT/Prime .5, Comb .5) and c3 (Comb 1)
    assert ex["top_weights"] == {("Number Theory", "PrimeNumbers"): pytest.approx(0.5),
                                 ("Combinatorics", "Combinatorics"): pytest.approx(1.5)}
    t = {(d, s): (w, top, own) for d, s, w, _, top, own in ex["table"].iter_rows()}
    assert t[("Number Theory", "Congruences")] == (pytest.approx(1.0), 0.0, True)
    assert t[("Combinatorics", "Combinatorics")] == (pytest.approx(1.5), pytest.approx(1.5), False)
    assert ex["table"]["weight"].sum() == pytest.approx(3)
