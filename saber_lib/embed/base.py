"""Encoder base class and shared helpers (hashing, normalization, threads, package checks)."""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.data import package_version

KINDS = ("document", "query")


class EncoderUnavailable(RuntimeError):
    """An encoder whose package is missing or broken; the message names what to install."""


# ----------------------------------------------------------------------------- helpers
def text_hash(text: str) -> str:
    """sha256 of the UTF-8 text (the store's key)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (zero rows stay zero); float32."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def default_threads() -> int:
    for var in ("SABER_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return os.cpu_count() or 1


_THREADS: int | None = None


def set_threads(n: int | None = None) -> int:
    """Set the number of CPU threads for torch and for ONNX sessions created afterwards.

    ``None``: from ``SABER_THREADS`` / ``OMP_NUM_THREADS``, else all cores; ``0``: all cores.
    torch is told now when it is loaded already, else by the torch encoder that loads it
    (:func:`torch_threads`): a stage whose encoders are all ONNX never pays torch's import.
    """
    global _THREADS
    n = default_threads() if n is None else (os.cpu_count() or 1) if n == 0 else int(n)
    _THREADS = n
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    return n


def torch_threads(torch) -> int:
    """Give the just-imported ``torch`` the thread count of :func:`set_threads` (all cores by default)."""
    n = _threads()
    torch.set_num_threads(n)
    return n


def _threads() -> int:
    return _THREADS if _THREADS is not None else set_threads(None)


def one_at_a_time(texts, embed_one, workers: int = 1) -> np.ndarray:
    """``embed_one(text)`` (a float32 row) for each piece, one model call per piece, stacked in order;
    with ``workers`` > 1 the calls run on that many threads (for a model whose calls release the GIL).
    Batching makes a vector depend on its neighbours: a padded batch changes a few vectors by up to ~1e-3
    in bf16 and ~1e-7 in fp32 with the batch's longest text, and even a batch of equal lengths gives
    other last bits than a lone piece at some lengths (the matrix kernels differ with the row count). One
    piece per call makes a text's vector a function of the text alone, whatever was embedded with it and
    whatever the store held (a torch model's last bits can still change with its own thread count); on
    a CPU it costs no more than padded batches (mpnet bf16 about 30% less, MiniLM about 15% more)."""
    texts = list(texts)
    if workers > 1 and len(texts) > 1:
        with ThreadPoolExecutor(min(workers, len(texts))) as pool:
            rows = list(pool.map(embed_one, texts))
    else:
        rows = [embed_one(t) for t in texts]
    out = [np.asarray(r, dtype=np.float32).reshape(-1) for r in rows]
    return np.stack(out) if out else np.zeros((0, 0), np.float32)


def _dist_version(dist: str) -> str:
    v = package_version(dist)
    if v is None:
        raise EncoderUnavailable(f"package {dist!r} is not installed")
    return v


def _import(module: str, install: str, name: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise EncoderUnavailable(f"encoder {name!r} cannot load: {e}. Install it with: pip install {install}") from None


def _size_mb(path) -> float:
    p = Path(path)
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


# ----------------------------------------------------------------------------- encoders
class Encoder:
    """Base class: chunking, chunk averaging and batching; subclasses embed short pieces.

    Subclasses implement ``_embed_pieces(texts, kind, batch_size)`` (rows L2-normalized) and, when
    the model has a token window, ``_token_words(text)`` -> (char start of each token, word index of
    each token) for the text without special tokens, plus ``_reserved(kind)`` (tokens the model adds
    around a piece: specials and instruction prefix).
    """

    name: str = "encoder"
    model_id: str = ""
    dim: int = 0
    max_tokens: int | None = None    # the model's window including special tokens; None = no limit
    symmetric: bool = True            # query and document vectors identical
    package: str = ""
    size_mb: float | None = None      # size of the model files on disk

    def __init__(self, max_chunks: int | None = None):
        if max_chunks is not None and max_chunks < 1:
            raise ValueError(f"max_chunks must be >= 1 or None, got {max_chunks}")
        self.max_chunks = max_chunks

    def _id_suffix(self) -> str:
        return "" if self.max_chunks is None else f"|chunks<={self.max_chunks}"

    # --- to implement
    def _embed_pieces(self, texts: list[str], kind: str, batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def _token_words(self, text: str) -> tuple[list[int], list[int]] | None:
        return None

    def _reserved(self, kind: str) -> int:
        return 2

    def prepare(self, text: str) -> str:
        """The text as the model is given it (and as the embedding store keys it); subclasses whose
        tokenizer loses something (a word too long for it) rewrite it here."""
        return text

    # --- chunking
    def chunk_budget(self, kind: str = "document") -> int | None:
        """Tokens of text per chunk: the window minus the special / instruction tokens."""
        if self.max_tokens is None:
            return None
        return max(1, self.max_tokens - self._reserved(kind))

    def chunks(self, text: str, kind: str = "document") -> list[str]:
        """Non-overlapping pieces of ``text`` of at most ``chunk_budget`` tokens, cut between words.

        A cut goes before the last token that starts a new word within the budget; a single word
        longer than the budget is cut inside. Only the first ``max_chunks`` pieces are returned.
        """
        budget = self.chunk_budget(kind)
        if budget is None:
            return [text]
        tw = self._token_words(text)
        if tw is None:
            return [text]
        starts, words = tw
        n = len(starts)
        if n <= budget:
            return [text]
        bounds = [0]  # token index where each chunk starts
        s = 0
        while n - s > budget:
            cut = s + budget
            j = cut
            while j > s and words[j] == words[j - 1]:
                j -= 1
            if j == s:  # one word longer than the budget
                j = cut
            bounds.append(j)
            s = j
        pieces = []
        for i, b in enumerate(bounds):
            lo = 0 if i == 0 else starts[b]
            hi = starts[bounds[i + 1]] if i + 1 < len(bounds) else len(text)
            pieces.append(text[lo:hi])
        if self.max_chunks is not None:
            pieces = pieces[: self.max_chunks]
        return pieces

    # --- public
    def encode(self, texts: Sequence[str], kind: str = "document", batch_size: int = 32) -> np.ndarray:
        """float32 (n, dim), rows L2-normalized; long texts chunked and chunk vectors averaged."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts, not one string")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} is {type(t).__name__}, not str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [self.prepare(t) for t in texts]
        pieces: list[str] = []
        owner: list[int] = []
        for i, t in enumerate(texts):
            for c in self.chunks(t, kind):
                pieces.append(c)
                owner.append(i)
        vecs = l2_normalize(self._embed_pieces(pieces, kind, batch_size))
        if len(pieces) == len(texts):
            return vecs
        out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float64)
        np.add.at(out, np.asarray(owner), vecs.astype(np.float64))
        counts = np.bincount(owner, minlength=len(texts)).astype(np.float64)
        return l2_normalize(out / counts[:, None])

    def info(self) -> dict:
        """What to record in a manifest about this encoder."""
        return {"name": self.name, "model_id": self.model_id, "dim": self.dim,
                "max_tokens": self.max_tokens, "max_chunks": self.max_chunks, "package": self.package,
                "size_mb": self.size_mb}

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.model_id}>"
