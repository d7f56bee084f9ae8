"""The signals and select stages of the paper-scale rehearsal (benchmarks/paper_scale_select.py): its
synthetic corpus has the shapes it claims, the signals stage stores what a direct computation gives,
and the select stage returns n_queries x 3 K rows, K a group, each candidate in its group's region."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.core.config import DOMAINS
from saber_lib.core.data import data_file
from saber_lib.core.text import summary_tokens
from saber_lib.ontology.tree import load_ontology
from saber_lib.signals.store import SignalStore
from conftest import needs_data

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("paper_scale_select", ROOT / "benchmarks" / "paper_scale_select.py")
P = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = P      # its store builder runs in a spawned process, which imports it by name
_spec.loader.exec_module(P)
OPTS = {"profile": str(ROOT / "params" / "paper.yaml"), "seed": 0}
pytestmark = needs_data("ontology", "mathworld_tree.json")


@pytest.fixture(scope="module")
def onto():
    return load_ontology(data_file(None, "ontology/mathworld_tree.json"))


def test_synthetic_corpus_shapes(onto):
    n = 2000
    corpus, topics, summ, fam = P.synthetic_inputs(onto, list(DOMAINS), n, seed=3)
    clusters = P.topic_clusters(onto, list(DOMAINS), P.FAMILIES // len(DOMAINS), seed=3)
    assert corpus["doc_id"].to_list() == [f"p{i}" for i in range(n)] == topics["doc_id"].to_list()
    # ten disjoint clusters a domain, each the children (4 to 6) of one node, all of that domain
    assert len(clusters) == 50 and len({v for c in clusters for v in c}) == sum(len(c) for c in clusters)
    for k, c in enumerate(clusters):
        assert 4 <= len(c) <= 6 and len({int(onto.parent[v]) for v in c}) == 1
        assert {onto.domain[v] for v in c} == {DOMAINS[k // 10]}
    # topics: distinct nodes of the problem's topic family's cluster, 3.45 on average less the cap
    nodes = topics["node_ids"].to_list()
    assert all(len(set(ns)) == len(ns) >= 1 and set(ns) <= set(clusters[f]) for ns, f in zip(nodes, fam[:, 0]))
    assert 3.0 < np.mean([len(ns) for ns in nodes]) < 3.45
    assert topics["domains"].to_list() == [[DOMAINS[f // 10]] for f in fam[:, 0]]
    # summaries: seven tokens (five of the idea family's pool, two background ones that may coincide)
    toks = [summary_tokens(t) for t in summ["summary_text"].to_list()]
    assert all(len(t) in (6, 7) for t in toks) and np.mean([len(t) == 7 for t in toks]) > 0.95
    pools = {}
    for t, f in zip(toks, fam[:, 1]):
        pools.setdefault(int(f), set()).update(x for x in t if x.startswith("idea"))
    assert all(len(p) == P.POOL for p in pools.values()) and len(pools) == 50
    assert len(set().union(*pools.values())) == 50 * P.POOL    # pools do not share tokens
    assert abs(np.mean(fam[:, 0] == fam[:, 1]) - (P.RHO + (1 - P.RHO) / 50)) < 0.04
    # seeded: the same frames again
    again = P.synthetic_inputs(onto, list(DOMAINS), n, seed=3)
    assert again[0].equals(corpus) and again[1].equals(topics) and again[2].equals(summ)


def _lin_bma(onto, node_lists, a: int, b: int) -> float:
    """BMA of Lin similarities of problems a and b, from the definitions (IC of the annotations)."""
    count = np.zeros(onto.n_nodes)
    for ns in node_lists:
        for v in ns:
            for x in onto.node_path(v):
                count[x] += 1
    total = sum(len(ns) for ns in node_lists)
    ic = -np.log(np.maximum(count / total, 1e-12))
    ic[0] = 0.0

    def lin(x, y):
        if x == y:
            return 1.0
        common = [u for u, w in zip(onto.node_path(x), onto.node_path(y)) if u == w]
        return 2 * ic[common[-1]] / (ic[x] + ic[y] + 1e-12)
    X, Y = node_lists[a], node_lists[b]
    m = np.array([[lin(x, y) for y in Y] for x in X])
    return (m.max(axis=1).sum() + m.max(axis=0).sum()) / (len(X) + len(Y))


def test_signals_stage_stores_the_direct_values(tmp_path, onto):
    out = P.stage_signals(1e-9, tmp_path, OPTS)     # the smallest size: 100 problems
    assert out["units"] == 100 and out["unit"] == "problems" and out["llm_calls"] == 0
    assert out["pairs"] == 100 * 99 and out["cpu_s"] > 0 and out["wall_s"] > 0
    _, topics, summ, fam = P.synthetic_inputs(onto, list(DOMAINS), 100, seed=0)
    nodes = topics["node_ids"].to_list()
    toks = [summary_tokens(t) for t in summ["summary_text"].to_list()]
    store = SignalStore.open(tmp_path / "signals")
    assert store.doc_ids == [f"p{i}" for i in range(100)] and out["stored"] == len(store.pair_ids)
    for q in (0, 7, 42):
        ids, t, s = store.pairs(q)
        stored = dict(zip(ids.tolist(), zip(t.tolist(), s.tolist())))
        assert store.histogram(q).sum() == 99
        for c in range(100):
            if c == q:
                assert c not in stored
                continue
            bma = _lin_bma(onto, nodes, q, c)
            jac = len(toks[q] & toks[c]) / len(toks[q] | toks[c])
            if bma > 0.5 + 1e-3 or jac > 0.1 + 1e-3:
                assert math.isclose(stored[c][0], bma, abs_tol=1e-3) and math.isclose(stored[c][1], jac, abs_tol=1e-3)
            elif bma < 0.5 - 1e-3 and jac < 0.1 - 1e-3:
                assert c not in stored
            if fam[q, 0] == fam[c, 0]:          # the same cluster: topic-similar
                assert bma > 0.5
            if fam[q, 1] == fam[c, 1]:          # the same pool: at least 4 of at most 10 tokens shared
                assert jac >= 0.4 - 1e-9


def test_select_stage_tiny(tmp_path):
    out = P.stage_select(0.002, tmp_path, OPTS)
    # the floor of problems; 2 queries; Q_min 150 of 1,000 queries scaled and rounded up to 1
    assert out["units"] == P.SELECT_MIN_PROBLEMS and out["queries"] == 2 and out["Q_min"] == 1
    # at the pair floors about a third of the queries (their two families agree) have K in every group,
    # the paper rule's smallest feasible point is the pair floors themselves
    assert (out["tau_topic"], out["tau_summ"]) == (0.5, 0.1) and out["feasible"]
    assert all(v >= 100 for v in out["eligible_per_domain"].values())
    assert out["n_selected"] == 2 and out["rows"] == 300
    b = pl.read_parquet(tmp_path / "benchmark.parquet")
    assert b.height == 300 and b["query_id"].n_unique() == 2
    per = b.group_by("query_id", "group").len()
    assert per.height == 6 and per["len"].to_list() == [50] * 6
    t, s = b["sim_topic"].to_numpy() > 0.5, b["sim_summ"].to_numpy() > 0.1
    want = np.where(t & s, "both", np.where(t, "topic-only", "summary-only"))
    assert (t | s).all() and b["group"].to_list() == want.tolist()
    assert (b["query_id"] != b["cand_id"]).all() and b.select("query_id", "cand_id").is_unique().all()
    assert sorted(b.filter(pl.col("query_id") == b["query_id"][0])["position"].to_list()) == list(range(150))


def test_eligible_counts_by_blocks_of_queries_same_counts(tmp_path):
    """Category sizes read a block of queries at a time (any block size, queries without stored pairs
    among them, candidates masked as unusable) equal a direct count on the dense matrices."""
    from saber_lib.selection.benchmark import eligible_counts
    from saber_lib.signals.store import store_from_dense
    rng = np.random.default_rng(5)
    n = 40
    t, s = rng.random((n, n)), rng.random((n, n)) * 0.5
    t[:3], s[:3] = 0.0, 0.0                              # three queries with nothing stored
    store_from_dense(t, s, tmp_path, [f"d{i}" for i in range(n)], hist_bins=20, floor_topic=0.5, floor_summ=0.1)
    store = SignalStore.open(tmp_path)
    usable = rng.random(n) < 0.8
    t16, s16 = t.astype(np.float16).astype(float), s.astype(np.float16).astype(float)
    for tau_t, tau_s, use in ((0.5, 0.1, None), (0.7, 0.25, usable)):
        a, b = t16 > tau_t, s16 > tau_s
        keep = ~np.eye(n, dtype=bool) & (True if use is None else use[None, :])
        want = np.stack([(a & ~b & keep).sum(1), (~a & b & keep).sum(1), (a & b & keep).sum(1)], 1)
        assert want[:3].sum() == 0 and want[3:].min() > 0
        for chunk in (1, 7, 1 << 22):
            assert np.array_equal(eligible_counts(store, tau_t, tau_s, use, chunk_pairs=chunk), want)
