"""Summary tokens, Jaccard, histogram binning and the re-exported topic API (paper 3.3; docs/public_api.md)."""
import numpy as np
import pytest
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from saber_lib import signals
from saber_lib.core import text
from saber_lib.signals import jaccard, summary_tokens


def test_math_stop_words_are_the_30_of_the_spec():
    spec = ("let assume consider given suppose find compute solve show determine value expression "
            "equation result step term method approach solution thus hence therefore so then if and "
            "or but theorem lemma").split()
    assert len(spec) == 30
    assert text.MATH_STOP_WORDS == frozenset(spec)
    assert signals.stop_words() == frozenset(ENGLISH_STOP_WORDS) | frozenset(spec)


def test_summary_tokens_lowercase_regex_and_stop_words():
    text = "Use the Pigeonhole principle; THEN apply x^2 and a_1 mod 7 -- consider parity!"
    # lower-cased, split on [a-zA-Z0-9^_]+, stop words ("the", "then", "and", "consider") removed
    assert summary_tokens(text) == frozenset({"use", "pigeonhole", "principle", "apply", "x^2", "a_1",
                                              "mod", "7", "parity"})
    assert isinstance(summary_tokens(text), frozenset)


def test_summary_tokens_empty_and_none():
    assert summary_tokens("") == frozenset()
    assert summary_tokens(None) == frozenset()
    assert summary_tokens("Let us find the value, hence solve it.") == frozenset()


def test_jaccard_hand_cases():
    assert jaccard({"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(2 / 4)
    assert jaccard({"a"}, {"a"}) == 1.0
    assert jaccard({"a"}, {"b"}) == 0.0
    assert jaccard(set(), {"a"}) == 0.0
    assert jaccard(set(), set()) == 0.0
    assert jaccard(set(), set(), empty=1.0) == 1.0        # the authors' convention
    assert jaccard(frozenset("abcde"), frozenset("ab")) == pytest.approx(2 / 5)


def test_bins_make_threshold_comparisons_exact():
    B = 10
    edges = signals.bin_edges(B)
    v = np.array([0.0, 1e-9, 0.1, 0.1000001, 0.35, 0.999, 1.0])
    b = signals.value_bins(v, B)
    for i, e in enumerate(edges):
        assert np.array_equal(v > e, b > i)
    lut = signals.float16_bin_lut(B)
    v16 = v.astype(np.float16)
    assert np.array_equal(lut[v16.view(np.uint16)], signals.value_bins(v16.astype(np.float64), B))


def test_topic_api_is_reexported():
    assert signals.lin_similarity(1.0, 1.0, 1.0) == pytest.approx(1.0)
    assert signals.lin_similarity(0.0, 2.0, 3.0) == 0.0
    np.testing.assert_allclose(signals.lin_similarity(np.array([1.0, 2.0]), 2.0, 2.0), [0.5, 1.0])
    assert signals.bma(np.zeros((0, 3))) == 0.0
    # X = {t1, t2}, Y = {u1}: rows max 0.5, 0.25; column max 0.5 -> (0.75 + 0.5) / 3
    assert signals.bma(np.array([[0.5], [0.25]])) == pytest.approx(1.25 / 3)
