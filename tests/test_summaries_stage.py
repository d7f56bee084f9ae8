"""The summaries stage's recipes (saber_lib.summaries.stage) on hand-made frames and a scripted LLM."""
import json

import matplotlib.pyplot as plt
import polars as pl
import pytest

from saber_lib.summaries import stage as summaries_stage
from saber_lib.llm.testing import ScriptedBackend
from saber_lib.summaries.summarize import summaries_frame


def frame(rows):
    """A summaries table from (doc_id, core_idea, summary_text, failed, reason) tuples."""
    return summaries_frame([dict(doc_id=d, no_core_idea=c is None, core_idea=c, supporting_ideas=[], keywords=[],
                                 confidence=1.0, summary_text=t, failed=f, failure_reason=r, summarizer="x")
                            for d, c, t, f, r in rows])


def test_failure_budget_counts_failures_and_keeps_the_first_three_reasons():
    df = frame([(f"d{i}", None, "", True, f"bad {i}") for i in range(4)] + [("ok", "Use parity.", "parity", False, None)])
    assert summaries_stage.failure_budget(df) == {"n_calls": 5, "n_failed": 4, "first_reasons": ["bad 0", "bad 1", "bad 2"]}


def test_overview_table_keeps_counts_integer_and_rounds_the_mean():
    report = {"n": 7, "failed": 1, "no_core_idea": 2, "empty_token_sets": 0, "mean_tokens": 3.14159}
    tab = summaries_stage.overview_table(report)
    assert tab.rows() == [("problems", "7"), ("failed", "1"), ("no core idea", "2"), ("empty token set", "0"),
                          ("mean tokens", "3.14")]


def test_summary_lengths_figure_histograms_words_and_tokens():
    df = frame([("a", "pair the terms", "pair terms", False, None), ("b", None, "", False, None),
                ("c", "use parity", "parity", False, None)])
    fig, caption = summaries_stage.summary_lengths_figure(df, 4, "extractive:tfidf")
    words, tokens = ([bar.get_height() for bar in ax.patches] for ax in fig.axes)
    assert words == [1, 0, 1, 1, 0]          # 0, 2 and 3 words; bins 0..4
    assert tokens == [1, 1, 1]               # token sets of sizes 0, 2 and 1 ("pair", "terms"; "parity")
    assert caption == "Core-idea length and summary token-set size over 3 problems; summarizer: extractive:tfidf."
    plt.close(fig)


def test_llm_summary_sample_sets_the_llm_beside_the_main_summarizer(monkeypatch):
    def respond(req):
        text = req.messages[-1]["content"]
        core = None if "P2" in text else "Count the pairs twice."
        return json.dumps({"noCoreIdea": core is None, "coreIdea": core, "supportingIdeas": [], "keywords": [],
                           "confidence": 0.8})
    backend = ScriptedBackend(respond, model_id="tiny")
    monkeypatch.setattr(summaries_stage, "make_backend", lambda llm, path: backend)
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "problem": ["P1 one two three", "P2", "P3"],
                           "solution": ["S1 a b c d", "S2", "S3"]})
    main = frame([("d1", "main one", "", False, None), ("d2", "main two", "", False, None)])
    out = summaries_stage.llm_summary_sample(corpus, main, "extractive:tfidf", {"backend": "x", "text_max_words": 2},
                                             n=2, max_words=30, retries=0, cache_path=None)
    assert out["summaries"]["doc_id"].to_list() == ["d1", "d2"]
    assert out["table"].columns == ["doc_id", "core idea (llm:tiny via scripted)", "no_core_idea", "failed",
                                    "core idea (extractive:tfidf)"]
    assert out["table"]["core idea (extractive:tfidf)"].to_list() == ["main one", "main two"]
    assert "P1 one two three" not in backend.seen[0].messages[-1]["content"]   # clipped to 2 words
    assert out["caption"] == ("Core ideas of the first 2 problems from llm:tiny via scripted beside extractive:tfidf; "
                              "2 of 2 parsed, 1 without a core idea, mean 4.0 words; texts clipped to 2 words per "
                              "problem and solution.")
    assert out["record"]["summarizer"] == "llm:tiny via scripted" and out["record"]["n"] == 2
    assert out["backend"]["llm_model"] == "tiny"
    assert out["budget"] == {"n_calls": 2, "n_failed": 0, "first_reasons": []}


def test_failure_budget_of_an_empty_table():
    assert summaries_stage.failure_budget(frame([])) == {"n_calls": 0, "n_failed": 0, "first_reasons": []}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")
