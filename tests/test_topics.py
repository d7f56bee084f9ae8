"""Topic traversal (paper 3.2.2) on a toy ontology with scripted scorers; LLM and embedding scorers."""
import json
import math

import numpy as np
import polars as pl
import pytest

from saber_lib.ontology.tree import build_ontology
from saber_lib.topics import (EmbeddingTopicScorer, FunctionScorer, LLMTopicScorer, assign_topics,
                              candidate_labels, domain_agreement, domain_confusion, normalize_scores,
                              problem_domains, scores_from_json, topics_table)

TITLES = ["Root", "Alpha", "AlphaOne", "AlphaTwo", "AlphaThree", "AlphaOneLeaf", "Beta", "BetaOne", "Gamma"]
CHILDREN = {"Root": ["Alpha", "Beta", "Gamma"], "Alpha": ["AlphaOne", "AlphaTwo", "AlphaThree"],
            "AlphaOne": ["AlphaOneLeaf"], "Beta": ["BetaOne"]}


@pytest.fixture
def toy():
    o = build_ontology("Root", {t: t for t in TITLES}, CHILDREN,
                       domain_map={"Alpha": "Algebra", "Beta": "Geometry"})
    ids = {o.title(v): v for v in range(o.n_nodes)}
    return o, ids


# label -> raw score for each visited node (labels are readable titles: "Alpha One", ...)
SCRIPT = {
    # root: root itself not a candidate; Alpha 1.0, Beta 0.875 (> 0.85 kept), Gamma 0.25
    ("Alpha", "Beta", "Gamma"): {"Alpha": 0.8, "Beta": 0.7, "Gamma": 0.2},
    # Alpha: max is the parent (0.5); Alpha One 0.9 kept, Alpha Two exactly 0.85 NOT kept
    ("Alpha", "Alpha One", "Alpha Two", "Alpha Three"): {"Alpha": 0.5, "Alpha One": 0.45,
                                                         "Alpha Two": 0.425, "Alpha Three": 0.05},
    # Beta: its child is far below the parent -> the walk stops here, Beta stays a topic
    ("Beta", "Beta One"): {"Beta": 0.9, "Beta One": 0.3},
    # Alpha One: the child beats the parent -> kept (then it is a leaf: never scored)
    ("Alpha One", "Alpha One Leaf"): {"Alpha One": 0.2, "Alpha One Leaf": 0.4},
}


class Recording(FunctionScorer):
    def __init__(self, fn):
        super().__init__(fn, name="scripted")
        self.batches = []

    def score_visits(self, ontology, texts, visits):
        self.batches.append([(p, tuple(c)) for p, c in visits])
        return super().score_visits(ontology, texts, visits)


def scripted(text, labels):
    return [SCRIPT[tuple(labels)][lab] for lab in labels]


def test_normalize_scores():
    assert normalize_scores(np.array([0.5, 0.25])).tolist() == [1.0, 0.5]
    assert normalize_scores(np.array([0.0, 0.0])).tolist() == [0.0, 0.0]
    assert normalize_scores(np.array([-0.2, -0.1])).tolist() == [0.0, 0.0]


def test_traversal_threshold_early_stop_and_ancestor_removal(toy):
    o, n = toy
    sc = Recording(scripted)
    res = assign_topics(o, ["problem one", "problem two"], sc, tau=0.85)
    want = sorted([n["AlphaOneLeaf"], n["Beta"]])
    assert res.node_ids == [want, want]
    # kept along the way: Alpha, Beta (depth 1), Alpha One (depth 2), Alpha One Leaf (depth 3)
    assert sorted(res.kept[0]) == sorted([n["Alpha"], n["Beta"], n["AlphaOne"], n["AlphaOneLeaf"]])
    # level-synchronous: one scorer batch per depth, both problems in each batch
    assert [len(b) for b in sc.batches] == [2, 4, 2]
    assert res.visits_per_depth == [2, 4, 2]
    visited = {c[0] for b in sc.batches[1:] for _, c in b}
    assert visited == {n["Alpha"], n["Beta"], n["AlphaOne"]}     # leaves and Beta One never scored
    assert not res.failed.any()


def test_problems_walked_in_groups_give_the_same_topics_failures_and_visit_counts(toy):
    o, n = toy

    class Failing(FunctionScorer):
        def score_visits(self, ontology, texts, visits):
            out = super().score_visits(ontology, texts, visits)
            return ["no answer" if texts[p].startswith("bad") and c[:2] == [n["Alpha"], n["AlphaOne"]] else r
                    for (p, c), r in zip(visits, out)]

    texts = ["good 1", "bad 1", "good 2", "bad 2", "good 3"]
    whole = assign_topics(o, texts, Failing(scripted), tau=0.85)
    for chunk in (1, 2, 3):
        got = assign_topics(o, texts, Failing(scripted), tau=0.85, chunk=chunk)
        assert got.node_ids == whole.node_ids and got.kept == whole.kept
        assert got.failures == whole.failures == [(1, n["Alpha"], "no answer"), (3, n["Alpha"], "no answer")]
        assert got.visits_per_depth == whole.visits_per_depth
    # one scorer batch per depth and group of two problems (2 visits at the root, 4 below, 2 deeper; 1, 2, 1 alone)
    rec = Recording(scripted)
    assign_topics(o, texts, rec, tau=0.85, chunk=2)
    assert [len(b) for b in rec.batches] == [2, 4, 2, 2, 4, 2, 1, 2, 1]


def test_a_depth_with_more_scores_than_a_batch_holds_is_scored_in_consecutive_batches(toy, monkeypatch):
    from saber_lib.topics import assign
    o, n = toy
    texts = ["a", "b", "c"]
    whole = assign_topics(o, texts, FunctionScorer(scripted), tau=0.85)
    monkeypatch.setattr(assign, "MAX_BATCH_SCORES", 4)
    rec = Recording(scripted)
    got = assign_topics(o, texts, rec, tau=0.85)
    assert got.node_ids == whole.node_ids and got.kept == whole.kept
    assert got.visits_per_depth == whole.visits_per_depth              # counted per depth, not per batch
    # every batch asks for at most 4 scores, or is one visit with more candidates than that
    assert all(sum(len(c) for _, c in b) <= 4 or len(b) == 1 for b in rec.batches)
    assert len(rec.batches) > len(whole.visits_per_depth)


def test_a_threshold_that_keeps_most_of_the_tree_for_every_problem_stops_with_one_clear_error(toy, monkeypatch):
    from saber_lib.topics import assign
    o, n = toy
    texts = ["p"] * 10                       # each keeps Alpha, Beta, Alpha One, Alpha One Leaf at tau 0.85: 4
    assert sum(len(k) for k in assign_topics(o, texts, FunctionScorer(scripted), tau=0.85).kept) == 40
    monkeypatch.setattr(assign, "MAX_KEPT", 39)
    rec = Recording(scripted)
    with pytest.raises(assign.TopicWalkTooLarge, match=r"topics.tau = 0.85 keeps 4 topics a problem on the first 3 "
                                                       r"problems .* ~40 \(problem, topic\) pairs, more than 39"):
        assign_topics(o, texts, rec, tau=0.85, chunk=3)
    assert {p for b in rec.batches for p, _ in b} == {0, 1, 2}    # stopped after the first group
    monkeypatch.setattr(assign, "MAX_KEPT", 40)
    assert assign_topics(o, texts, FunctionScorer(scripted), tau=0.85, chunk=3).visits_per_depth


def test_tau_changes_what_is_kept(toy):
    o, n = toy
    res = assign_topics(o, ["p"], FunctionScorer(scripted), tau=0.88)   # Beta (0.875) now dropped
    assert res.node_ids == [[n["AlphaOneLeaf"]]]
    res = assign_topics(o, ["p"], FunctionScorer(scripted), tau=0.84)   # Alpha Two (0.85) now kept
    assert res.node_ids == [sorted([n["AlphaOneLeaf"], n["AlphaTwo"], n["Beta"]])]
    with pytest.raises(ValueError):
        assign_topics(o, ["p"], FunctionScorer(scripted), tau=1.5)


def test_failed_visit_is_recorded_and_not_expanded(toy):
    o, n = toy

    class Failing(FunctionScorer):
        def score_visits(self, ontology, texts, visits):
            out = super().score_visits(ontology, texts, visits)
            # the visit of Alpha (candidates Alpha + its three children) fails for "bad"
            return ["no answer" if texts[p] == "bad" and c[:2] == [n["Alpha"], n["AlphaOne"]] else r
                    for (p, c), r in zip(visits, out)]

    res = assign_topics(o, ["good", "bad"], Failing(scripted), tau=0.85)
    assert res.failed.tolist() == [False, True]
    assert res.failures == [(1, n["Alpha"], "no answer")]
    assert res.node_ids[1] == sorted([n["Alpha"], n["Beta"]])   # Alpha kept but not expanded


def test_topics_table_and_domains(toy):
    o, n = toy
    res = assign_topics(o, ["a", "b"], FunctionScorer(scripted), tau=0.85)
    df = topics_table(o, ["x:1", "x:2"], res)
    assert df.columns == ["doc_id", "node_ids", "urls", "domains", "failed"]
    assert df["domains"][0].to_list() == ["Algebra", "Geometry"]
    assert df["urls"][0].to_list() == [o.url(v) for v in df["node_ids"][0].to_list()]
    assert problem_domains(o, [n["Gamma"]]) == []
    corpus = pl.DataFrame({"doc_id": ["x:1", "x:2", "x:3"], "source_domain": ["Geometry", "Number Theory", None]})
    ag = domain_agreement(df, corpus)
    assert ag == {"n_with_source_domain": 2, "n_agree": 1, "agreement": 0.5, "n_without_topic": 0}
    conf = domain_confusion(df, corpus)
    row = conf.filter(pl.col("source_domain") == "Geometry").row(0, named=True)
    assert row["n"] == 1 and row["Geometry"] == 1.0 and row["Algebra"] == 1.0 and row["Number Theory"] == 0.0


def test_candidate_labels_are_unique(toy):
    titles = {"R": "R", "u1": "Same", "u2": "Same", "P": "Parent"}
    o = build_ontology("R", titles, {"R": ["u1", "P"], "P": ["u2"]})
    v1 = o.nodes_of_url("u1")[0]
    v2 = o.nodes_of_url("u2")[0]
    labs = candidate_labels(o, [v1, v2])
    assert labs[0] == "Same" and labs[1] == "Same [Parent]"


# ----------------------------------------------------------------------------- LLM scorer
def test_scores_from_json():
    labs = ["Number Theory", "Geometry", "Algebra"]
    s = scores_from_json({"NumberTheory": 0.5, "geometry": 1, "Other": 0.3}, labs)
    assert s.tolist() == [0.5, 1.0, 0.0]            # loose key match; missing label -> 0
    with pytest.raises(ValueError):
        scores_from_json({"Geometry": 1.7}, labs)
    with pytest.raises(ValueError):
        scores_from_json({"Geometry": "high"}, labs)
    with pytest.raises(ValueError):
        scores_from_json([1, 2], labs)


def _labels_in(req):
    text = req.messages[-1]["content"]
    readable = ["Alpha", "Beta", "Gamma", "Alpha One", "Alpha Two", "Alpha Three", "Alpha One Leaf",
                "Beta One"]
    lines = set(text.splitlines())
    return tuple(l for l in readable if l in lines)


def test_llm_scorer_with_scripted_backend(toy):
    from saber_lib.llm.testing import ScriptedBackend

    o, n = toy
    state = {"bad_first": 0}

    def respond(req):
        labels = _labels_in(req)
        problem = req.messages[-1]["content"]
        if "never parses" in problem:
            return "I think the answer is Alpha."
        if "retry me" in problem and labels == ("Beta", "Beta One") and req.attempt == 0:
            state["bad_first"] += 1
            return '{"Beta": 0.9, "Beta One": '           # truncated JSON
        scores = dict(SCRIPT[tuple(sorted(labels, key=lambda l: list(SCRIPT[tuple(labels)]).index(l)))])
        top = max(scores.values())
        scores = {k: v / top for k, v in scores.items()}   # the prompt's contract: the best label at 1.0
        if "drop gamma" in problem:
            scores.pop("Gamma", None)                     # a missing label scores 0
        return "Here you go:\n```json\n" + json.dumps(scores) + "\n```"

    backend = ScriptedBackend(respond, model_id="toy-llm")
    sc = LLMTopicScorer(backend, retries=1)
    items = [("plain problem", "sol"), ("retry me", "sol"), ("never parses", "sol"), ("drop gamma", "sol")]
    res = assign_topics(o, items, sc, tau=0.85)
    want = sorted([n["AlphaOneLeaf"], n["Beta"]])
    assert res.node_ids[0] == want and res.node_ids[1] == want and res.node_ids[3] == want
    assert state["bad_first"] == 1
    assert res.failed.tolist() == [False, False, True, False]
    (p, v, reason), = res.failures
    assert (p, v) == (2, 0) and "unparseable" in reason
    assert res.node_ids[2] == []
    assert sc.describe()["topic_model"] == "toy-llm"
    # the retry was a new call: same messages, attempt 1
    attempts = [r.attempt for r in backend.seen if "retry me" in r.messages[-1]["content"]
                and _labels_in(r) == ("Beta", "Beta One")]
    assert attempts == [0, 1]


def test_llm_scorer_asks_again_when_no_label_gets_one(toy):
    """An answer that parses as JSON but breaks the prompt's contract (every label 0.0, or no label at
    1.0) assigns nothing: it is a parse failure, asked again within the retries, then a failed visit
    with the reason."""
    from saber_lib.llm.testing import ScriptedBackend

    o, n = toy
    root = ("Alpha", "Beta", "Gamma")

    def respond(req):
        problem = req.messages[-1]["content"]
        if _labels_in(req) != root:
            return json.dumps({"best_label": "x", "scores": {}})    # below the root: never reached (depth 1)
        if "always zero" in problem or ("zero first" in problem and req.attempt == 0):
            return json.dumps({"best_label": "Beta", "scores": {"Alpha": 0.0, "Beta": 0.0, "Gamma": 0.0}})
        if "no one" in problem:
            return json.dumps({"Alpha": 0.3, "Beta": 0.9, "Gamma": 0.0})
        return json.dumps({"best_label": "Beta", "scores": {"Alpha": 0.2, "Beta": 1.0, "Gamma": 0.0}})

    backend = ScriptedBackend(respond, model_id="toy-llm")
    sc = LLMTopicScorer(backend, retries=1)
    items = [("zero first", "sol"), ("always zero", "sol"), ("no one", "sol")]
    res = assign_topics(o, items, sc, tau=0.85, max_depth=1)
    assert res.node_ids[0] == [n["Beta"]]                  # the retry (attempt 1) answered with Beta at 1.0
    assert res.failed.tolist() == [False, True, True] and res.node_ids[1] == res.node_ids[2] == []
    reasons = {p: r for p, _, r in res.failures}
    assert "unparseable" in reasons[1] and "every one of the 3 labels scored 0.0" in reasons[1]
    assert "no label scored 1.0 (the highest is 'Beta' at 0.9)" in reasons[2]
    attempts = sorted((r.messages[-1]["content"].split("\n")[1], r.attempt) for r in backend.seen)
    assert attempts == [("always zero", 0), ("always zero", 1), ("no one", 0), ("no one", 1), ("zero first", 0),
                        ("zero first", 1)]


# ----------------------------------------------------------------------------- embedding scorer
class BagEncoder:
    """Deterministic fake encoder: bag of known words, L2-normalized."""

    name = "bag"
    model_id = "bag-test"
    symmetric = True
    VOCAB = ["alpha", "beta", "gamma", "one", "two", "three", "leaf", "problem"]
    dim = len(VOCAB)

    def __init__(self):
        self.seen = []

    def encode(self, texts, kind="document", batch_size=32):
        self.seen.extend(texts)
        X = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(">", " ").split():
                if w in self.VOCAB:
                    X[i, self.VOCAB.index(w)] += 1
        nrm = np.linalg.norm(X, axis=1, keepdims=True)
        return X / np.where(nrm > 0, nrm, 1)


def test_embedding_scorer_cosines_and_exp(toy):
    o, n = toy
    enc = BagEncoder()
    items = [("alpha one leaf", ""), ("beta beta", "")]
    sc = EmbeddingTopicScorer(enc, store=None, mode="cosine")
    visits = [(0, o.children(0).tolist()), (1, [n["Beta"], n["BetaOne"]])]
    out = sc.score_visits(o, items, visits)
    P = enc.encode(["Problem: alpha one leaf\n\nSolution: ", "Problem: beta beta\n\nSolution: "])
    L = {t: enc.encode([t])[0] for t in ["Alpha", "Beta", "Gamma", "Beta > Beta One"]}
    np.testing.assert_allclose(out[0], [P[0] @ L["Alpha"], P[0] @ L["Beta"], P[0] @ L["Gamma"]], atol=1e-6)
    np.testing.assert_allclose(out[1], [P[1] @ L["Beta"], P[1] @ L["Beta > Beta One"]], atol=1e-6)
    # exp mode: after max-normalization, exp((cos - max cos) / T)
    sc2 = EmbeddingTopicScorer(enc, store=None, mode="exp", temperature=0.25)
    out2 = sc2.score_visits(o, items, visits)
    for a, b in zip(out, out2):
        np.testing.assert_allclose(normalize_scores(b), np.exp((a - a.max()) / 0.25), rtol=1e-6)
    with pytest.raises(ValueError):
        EmbeddingTopicScorer(enc, mode="softmax")


def test_embedding_traversal_embeds_each_label_once(toy):
    o, n = toy
    enc = BagEncoder()
    sc = EmbeddingTopicScorer(enc, store=None, mode="cosine")
    res = assign_topics(o, [("alpha one leaf", "alpha one"), ("beta", "")], sc, tau=0.85)
    labels = [t for t in enc.seen if not t.startswith("Problem:")]
    assert len(labels) == len(set(labels))
    assert sum(t.startswith("Problem:") for t in enc.seen) == 2
    assert n["AlphaOneLeaf"] in res.node_ids[0]
    # "beta": cos(Beta) = 1, cos("Beta > Beta One") = 2/sqrt(5) = 0.894 > 0.85 -> Beta One kept
    assert res.node_ids[1] == [n["BetaOne"]]
    assert sc.describe()["topic_scorer"] == "embedding"


def test_subtree_vectors_by_hand(toy):
    from saber_lib.topics.scorers import subtree_vectors

    o, n = toy
    rng = np.random.default_rng(0)
    L = rng.normal(size=(o.n_nodes, 4))
    V = subtree_vectors(o, L, weight=2.0)

    def unit(x):
        return x / np.linalg.norm(x)

    for leaf in ("AlphaOneLeaf", "AlphaTwo", "AlphaThree", "BetaOne", "Gamma"):
        np.testing.assert_allclose(V[n[leaf]], L[n[leaf]], rtol=1e-6)          # leaves: their label
    a1 = unit(L[n["AlphaOne"]] + 2.0 * L[n["AlphaOneLeaf"]])
    np.testing.assert_allclose(V[n["AlphaOne"]], a1, rtol=1e-5)
    alpha = unit(L[n["Alpha"]] + 2.0 * (a1 + L[n["AlphaTwo"]] + L[n["AlphaThree"]]) / 3)
    np.testing.assert_allclose(V[n["Alpha"]], alpha, rtol=1e-5)
    np.testing.assert_allclose(V[n["Beta"]], unit(L[n["Beta"]] + 2.0 * L[n["BetaOne"]]), rtol=1e-5)


def test_embedding_scorer_per_depth_temperature_and_calibration(toy):
    o, n = toy
    enc = BagEncoder()
    items = [("alpha one problem", ""), ("beta gamma", ""), ("alpha three", "")]
    sc = EmbeddingTopicScorer(enc, store=None, mode="exp", temperature=0.5, deep_temperature=0.1,
                              calibration="center", calibrate_from_depth=1, max_chars=20)
    alpha_visit = [n["Alpha"], n["AlphaOne"], n["AlphaTwo"], n["AlphaThree"]]
    out = sc.score_visits(o, items, [(0, o.children(0).tolist()), (0, alpha_visit)])
    texts = ["Problem: alpha one problem", "Problem: beta gamma", "Problem: alpha three"]  # no solution
    assert [t for t in enc.seen if t.startswith("Problem")] == [t[:20] for t in texts]   # cut to 20 chars
    P = enc.encode([t[:20] for t in texts]).astype(np.float64)
    mu = P.mean(axis=0)
    lab = {t: enc.encode([t])[0].astype(np.float64) for t in
           ["Alpha", "Beta", "Gamma", "Alpha > Alpha One", "Alpha > Alpha Two", "Alpha > Alpha Three"]}
    # the root's visit (depth 0): raw cosines, temperature 0.5
    cos0 = np.array([P[0] @ lab[k] for k in ("Alpha", "Beta", "Gamma")])
    np.testing.assert_allclose(out[0], np.exp((cos0 - cos0.max()) / 0.5), rtol=1e-6)
    # Alpha's visit (depth 1): cosines minus each label's corpus mean, temperature 0.1
    keys = ("Alpha", "Alpha > Alpha One", "Alpha > Alpha Two", "Alpha > Alpha Three")
    cos1 = np.array([P[0] @ lab[k] - mu @ lab[k] for k in keys])
    np.testing.assert_allclose(out[1], np.exp((cos1 - cos1.max()) / 0.1), rtol=1e-6)
    d = sc.describe()
    assert d["topic_embed_deep_temperature"] == 0.1 and d["topic_embed_calibrate_from_depth"] == 1
    with pytest.raises(ValueError):
        EmbeddingTopicScorer(enc, subtree_weight=-1.0)
