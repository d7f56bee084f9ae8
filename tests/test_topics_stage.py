"""The topics stage's recipes (saber_lib.topics.stage) on a toy tree and hand-made frames."""
import matplotlib.pyplot as plt
import polars as pl
import pytest

from saber_lib.ontology.tree import build_ontology
from saber_lib.topics import FunctionScorer
from saber_lib.topics import stage

TITLES = ["Root", "Alpha", "AlphaOne", "AlphaOneLeaf", "Beta", "Gamma"]
CHILDREN = {"Root": ["Alpha", "Beta", "Gamma"], "Alpha": ["AlphaOne"], "AlphaOne": ["AlphaOneLeaf"]}


@pytest.fixture
def toy():
    onto = build_ontology("Root", {t: t for t in TITLES}, CHILDREN, domain_map={"Alpha": "Algebra", "Beta": "Geometry"})
    return onto, {onto.title(v): v for v in range(onto.n_nodes)}


def scores(text, labels):
    """Blank problems score every candidate 0 (nothing kept); the others keep Alpha and Beta at the
    root, then walk down Alpha (its child ties with it, kept) to Alpha One Leaf (0.9 of its parent, kept)."""
    if "blank" in text:
        return [0.0] * len(labels)
    table = {"Alpha": 1.0, "Beta": 0.9, "Gamma": 0.1, "Alpha One": 1.0, "Alpha One Leaf": 0.9}
    return [table[lab] for lab in labels]


def test_assign_corpus_writes_topics_failures_and_the_record(toy):
    onto, ids = toy
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "problem": ["one", "blank", "three"],
                           "solution": ["s", "s", "s"]})
    topics, failures, record = stage.assign_corpus(onto, corpus, FunctionScorer(scores, name="toy", model="m"), 0.85)
    assert topics["doc_id"].to_list() == ["d1", "d2", "d3"]
    want = sorted([ids["AlphaOneLeaf"], ids["Beta"]])
    assert topics["node_ids"].to_list() == [want, [], want]
    assert failures.height == 0
    assert record["backend"] == "toy:m" and record["tau"] == 0.85 and record["wall_s"] >= 0
    assert (record["topic_scorer"], record["topic_model"]) == ("toy", "m")
    # three root visits; depth 1: Alpha (Beta is a leaf) and depth 2: Alpha One, for the two non-blank problems
    assert {k: record[k] for k in ("problems", "failed_problems", "failed_visits", "no_topic", "topics_per_problem_max",
                                   "topics_per_problem_median", "visits_per_depth")} == {
        "problems": 3, "failed_problems": 0, "failed_visits": 0, "no_topic": 1, "topics_per_problem_max": 2,
        "topics_per_problem_median": 2.0, "visits_per_depth": [3, 2, 2]}
    assert record["topics_per_problem_mean"] == pytest.approx(4 / 3)


def test_topics_per_problem_figure_counts_problems_per_number_of_topics():
    topics = pl.DataFrame({"node_ids": [[1, 2], [], [3], [4, 5]]})
    fig, caption = stage.topics_per_problem_figure(topics, "toy:m", 0.85)
    assert [bar.get_height() for bar in fig.axes[0].patches] == [1, 1, 2]
    assert caption == "Topics per problem over 4 problems; scorer: toy:m, tau = 0.85."
    plt.close(fig)


def test_domain_pie_rings_give_problems_without_domain_their_own_outer_wedge(toy):
    onto, ids = toy
    # problem 1: Algebra (via Alpha One) and Geometry (Beta itself), half each; problem 2: Gamma has no domain
    topics = pl.DataFrame({"node_ids": [sorted([ids["AlphaOneLeaf"], ids["Beta"]]), [ids["Gamma"]]]})
    inner, outer = stage.domain_pie_rings(onto, topics)
    assert inner.rows() == [("Algebra", 0.5), ("Geometry", 0.5), ("none", 1.0)]
    assert outer.rows() == [("Algebra", "Alpha One", 0.5), ("Geometry", "Beta", 0.5), ("none", "none", 1.0)]
    # both rings add up to the number of problems
    assert inner["weight"].sum() == outer["weight"].sum() == 2.0


def test_confusion_report_caption_names_agreement_and_scorer():
    topics = pl.DataFrame({"doc_id": ["x:1", "x:2"], "domains": [["Algebra", "Geometry"], ["Algebra"]]})
    corpus = pl.DataFrame({"doc_id": ["x:1", "x:2", "x:3"], "source_domain": ["Geometry", "Number Theory", None]})
    agreement, table, caption = stage.confusion_report(topics, corpus, "toy:m")
    assert agreement["n_agree"] == 1 and agreement["n_with_source_domain"] == 2
    assert table.filter(pl.col("source_domain") == "Geometry")["Geometry"].to_list() == [1.0]
    assert caption.endswith("agreement 0.500 over 2 problems; scorer: toy:m.")


def test_no_topic_by_source_counts_per_source():
    topics = pl.DataFrame({"doc_id": ["a", "b", "c", "d"], "node_ids": [[], [1], [], []]})
    corpus = pl.DataFrame({"doc_id": ["a", "b", "c", "d"], "source": ["math", "aime", "aime", "math"]})
    assert stage.no_topic_by_source(topics, corpus) == (3, [{"source": "aime", "len": 1}, {"source": "math", "len": 2}])
