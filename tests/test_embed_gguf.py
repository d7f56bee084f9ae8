"""nomic-embed's window (saber_lib.embed.gguf.NomicEncoder): texts over 2,048 tokens are cut to fit.

llama.cpp refuses such an input with an error that counts its tokens; the fake server below
answers the same way (its tokens: words and punctuation marks, plus the two special tokens), so
the encoder's cutting is checked without the 270 MB model."""
import re

import numpy as np
import pytest

from saber_lib.embed import gguf


class FakeServer:
    """Embeds a text as [number of tokens, 1, 0, ...]; refuses more than ``window`` tokens."""

    def __init__(self, window=gguf.WINDOW, count=None):
        self.window, self.sent = window, []
        self.count = count or (lambda t: len(re.findall(r"\w+|[^\w\s]", t)) + 2)

    def handle_embeddings(self, body):
        text = body["input"]
        self.sent.append(text)
        n = self.count(text)
        if n > self.window:
            return {"error": {"code": 500, "type": "server_error",
                              "message": f"input ({n} tokens) is too large to process. increase the physical "
                                         f"batch size (current batch size: {self.window})"}}
        return {"data": [{"embedding": [float(n), 1.0] + [0.0] * 766}], "usage": {"prompt_tokens": n}}


def encoder(server):
    enc = object.__new__(gguf.NomicEncoder)  # no model: the runtime is the fake server
    enc.server, enc.dim, enc.truncated, enc.max_chunks = server, 768, 0, None
    return enc


def test_long_text_is_cut_to_the_window_keeping_its_start():
    server = FakeServer()
    text = "search_document: " + " ".join(f"w{k} + x{k} =" for k in range(3000))  # 4 tokens a group: 12,000+
    v = encoder(server).embed_one(text)
    kept = server.sent[-1]
    assert text.startswith(kept) and len(server.sent) >= 2
    assert server.count(kept) <= gguf.WINDOW           # it fits ...
    assert v[0] == server.count(kept) > 0.8 * gguf.WINDOW  # ... and is cut by tokens, not to a crude bound
    assert not kept.endswith(("w", " "))  # cut between words


def test_short_text_is_sent_once_unchanged():
    server = FakeServer()
    enc = encoder(server)
    X = enc._embed_pieces(["a short problem", "x^2 + 1 = 0"], "document", 8)
    assert server.sent == ["search_document: a short problem", "search_document: x^2 + 1 = 0"]
    assert enc.truncated == 0 and np.allclose(np.linalg.norm(X, axis=1), 1.0)


def test_character_bound_when_the_token_counts_do_not_shrink():
    # a runtime whose count stays high until the text is within WINDOW - 8 characters: after three cuts
    # by the reported count the encoder falls back to WINDOW - 8 characters, which always fits
    server = FakeServer(count=lambda t: 5000 if len(t) > gguf.WINDOW - 8 else 10)
    enc = encoder(server)
    enc.embed_one("y" * 50_000)
    assert len(server.sent) == 4 and server.sent[-1] == "y" * (gguf.WINDOW - 8) and enc.truncated == 1


def test_other_server_errors_are_raised():
    class Broken:
        def handle_embeddings(self, body):
            return {"error": {"code": 500, "message": "model not loaded"}}

    with pytest.raises(RuntimeError, match="nomic-embed: .*model not loaded"):
        encoder(Broken()).embed_one("anything")
