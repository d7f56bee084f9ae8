"""Ontology: DAG checks, tree expansion (one node per root path), ancestry, tables."""
import json

import numpy as np
import pytest

from conftest import DATA_DIR, needs_data
from saber_lib.ontology.tree import (OntologyError, humanize_title, load_ontology, ontology_from_nodes,
                                     title_vocabulary)

U = "u:"


def node(name, *kids):
    return {"url": U + name, "title": name, "links": list(kids)}


def write(tmp_path, obj, name="tree.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


@pytest.fixture
def shared_child(tmp_path):
    # DAG: R -> A, B; A -> C; B -> C; C -> D. C (and below it D) is reachable by two paths.
    c = node("C", node("D"))
    tree = node("R", node("A", c), node("B", json.loads(json.dumps(c))))
    return load_ontology(write(tmp_path, tree), domain_map={"A": "Algebra", "B": "Geometry"})


def test_tree_expansion_of_a_shared_child(shared_child):
    o = shared_child
    # distinct DAG edges: R-A, R-B, A-C, B-C, C-D = 5
    assert o.n_edges == 5
    # tree: R, A, A/C, A/C/D, B, B/C, B/C/D = 7 nodes, depth of D = 3
    assert o.n_nodes == 7
    assert o.max_depth == 3
    paths = sorted(tuple(o.title_path(v)) for v in range(o.n_nodes))
    assert paths == sorted([("R",), ("R", "A"), ("R", "A", "C"), ("R", "A", "C", "D"), ("R", "B"),
                            ("R", "B", "C"), ("R", "B", "C", "D")])
    # C is duplicated once per path, each copy knows its own parent and domain
    cs = o.nodes_of_url(U + "C")
    assert len(cs) == 2
    assert sorted(o.title(int(o.parent[v])) for v in cs) == ["A", "B"]
    assert sorted(o.domain[v] for v in cs) == ["Algebra", "Geometry"]
    assert o.domain[0] is None


def test_preorder_ancestry_and_lca(shared_child):
    o = shared_child
    ac, acd = [v for v in range(o.n_nodes) if o.title_path(v) in (["R", "A", "C"], ["R", "A", "C", "D"])]
    bcd = [v for v in range(o.n_nodes) if o.title_path(v) == ["R", "B", "C", "D"]][0]
    a = o.nodes_of_url(U + "A")[0]
    assert o.node_path(acd) == (0, a, ac, acd)
    assert o.is_ancestor(a, acd) and o.is_ancestor(0, bcd)
    assert not o.is_ancestor(acd, acd) and not o.is_ancestor(a, bcd)
    assert int(o.lca(acd, bcd)) == 0              # the two copies of D meet only at the root
    assert int(o.lca(acd, ac)) == ac
    assert int(o.lca(acd, acd)) == acd
    # broadcasting
    L = o.lca(np.arange(o.n_nodes)[:, None], np.arange(o.n_nodes)[None, :])
    assert L.shape == (o.n_nodes, o.n_nodes) and (L == L.T).all() and (np.diag(L) == np.arange(o.n_nodes)).all()
    # most specific: a node with a descendant in the set is dropped
    assert o.remove_ancestors([a, acd, 0, bcd]) == sorted([acd, bcd])


def test_nodes_table_contract_and_round_trip(shared_child):
    o = shared_child
    df = o.nodes_table()
    assert df.columns == ["node_id", "parent_id", "url", "title", "depth", "path", "domain"]
    assert df["parent_id"][0] == -1 and df["depth"][0] == 0
    assert df["path"][3].to_list() == o.title_path(3)
    o2 = ontology_from_nodes(df, domain_map=o.domain_map)
    assert (o2.n_topics, o2.n_nodes, o2.max_depth, o2.n_edges) == (o.n_topics, o.n_nodes, o.max_depth, o.n_edges)
    assert o2.domain == o.domain and (o2.parent == o.parent).all()


def test_string_references_and_errors(tmp_path):
    # compact form: a link may be the url of a node defined elsewhere
    tree = node("R", node("A", node("C")), {"url": U + "B", "title": "B", "links": [U + "C"]})
    o = load_ontology(write(tmp_path, tree))
    assert o.n_nodes == 5 and o.n_topics == 4
    dangling = node("R", {"url": U + "A", "title": "A", "links": [U + "nowhere"]})
    with pytest.raises(OntologyError, match="dangling reference.*nowhere"):
        load_ontology(write(tmp_path, dangling, "d.json"))
    cyc = node("R", {"url": U + "A", "title": "A", "links": [node("B", U + "A")]})
    with pytest.raises(OntologyError, match="cycle"):
        load_ontology(write(tmp_path, cyc, "c.json"))
    bad = node("R", {"url": U + "A", "links": []})
    with pytest.raises(OntologyError, match="without a 'title'"):
        load_ontology(write(tmp_path, bad, "b.json"))
    p = tmp_path / "broken.json"
    p.write_text('{"url": "x",\n "title": }')
    with pytest.raises(OntologyError, match=r"broken.json line 2"):
        load_ontology(p)


def test_a_child_listed_twice_gives_two_copies(tmp_path):
    tree = node("R", node("A", node("C"), node("C")))
    o = load_ontology(write(tmp_path, tree))
    assert o.n_topics == 3 and o.n_edges == 2 and o.n_nodes == 4


def test_humanize_title():
    vocab = title_vocabulary(["Calculus", "History", "NumberTheory", "Probability", "Proof"])
    assert humanize_title("CalculusandAnalysis", vocab) == "Calculus and Analysis"
    assert humanize_title("HistoryandTerminology", vocab) == "History and Terminology"
    assert humanize_title("NumberoftheBeast", vocab) == "Number of the Beast"
    assert humanize_title("FoundationsofMathematics", vocab) == "Foundations of Mathematics"
    assert humanize_title("ProofbyContradiction", vocab) == "Proof by Contradiction"
    assert humanize_title("Island", vocab) == "Island"
    assert humanize_title("Proof", vocab) == "Proof"
    assert humanize_title("Petr-Douglas-NeumannTheorem", vocab) == "Petr-Douglas-Neumann Theorem"


REAL = DATA_DIR / "ontology" / "mathworld_tree.json"


@needs_data("ontology", "mathworld_tree.json")
def test_real_ontology_sizes():
    o = load_ontology(REAL)
    assert (o.n_topics, o.n_nodes, o.max_depth, o.n_edges) == (10586, 17113, 5, 13267)
    areas = [o.title(int(v)) for v in o.children(0)]
    assert len(areas) == 11
    assert {o.domain[int(v)] for v in o.children(0)} == {
        None, "Algebra", "Geometry", "Number Theory", "Combinatorics", "Calculus and Analysis"}
    # 2,133 topics have more than one parent (data/README.md)
    parents: dict[int, set] = {}
    for v in range(1, o.n_nodes):
        parents.setdefault(int(o.topic[v]), set()).add(int(o.topic[o.parent[v]]))
    assert sum(len(p) > 1 for p in parents.values()) == 2133
    # every subtree is a contiguous id range
    assert (o.size[0] == o.n_nodes) and all(o.is_ancestor(int(o.parent[v]), v) for v in range(1, o.n_nodes, 97))
