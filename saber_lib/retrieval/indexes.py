"""Whole-corpus indexes and their on-disk cache.

Every index answers ``search(queries, k) -> (rows, scores)``: ``rows`` int64 (n_queries, k) row
numbers into ``doc_ids`` (``-1`` pads a query with fewer than ``k`` hits), ``scores`` float64 of
the same shape, best first; equal scores are ordered by row number (lower first), so results do
not depend on thread scheduling.

* :class:`BM25Index`: ``bm25s`` (Lucene BM25, the score of ``retrievers.BM25Retriever`` when that
  retriever is fitted on the whole corpus). ``bm25s`` keeps a term -> postings sparse matrix of
  precomputed term weights, so a query only touches the postings of its own terms. Documents that
  share no term with the query are not returned.
* :class:`TfidfIndex`: scikit-learn ``TfidfVectorizer`` (smooth idf, L2 rows), stored as a
  term-major CSR matrix (row t = postings of term t with their weights); score = cosine. Documents
  with score 0 are not returned.
* :class:`Approach0Index`: Approach Zero (``pya0``), formula structure plus keywords; its own
  on-disk inverted index.
* :class:`ExactDenseIndex`: unit vectors (float32); score = inner product = cosine, computed as
  chunked ``Q @ D_chunk.T`` with a running top-k (memory O(n_queries x chunk)).
* :class:`HnswIndex`: ``hnswlib`` HNSW graph, inner-product space, over the same vectors
  (approximate; ``M``, ``ef_construction`` at build time, ``ef`` at query time, ``ef >= k``).
  Why hnswlib: measured here against ``usearch`` 2.26.6 (f32 and f16) and ``faiss-cpu`` 1.15.1
  (IndexHNSWFlat) with the same M = 16, ef_construction = 100 on 20K vectors (dim 384, 2 cores),
  the three reached the same recall@10 at the same ef (within 0.05 on the hardest, uniform data)
  and queries/s within the noise of a shared machine; hnswlib built faster than usearch f32, is one
  small wheel without a BLAS or OpenMP runtime of its own (faiss ships both, next to torch's),
  and saves and loads one file. Exact search stays the default at corpus size (17.6K documents):
  it is as fast as HNSW there and has no recall loss; HNSW pays off from ~10^5 documents
  (``benchmarks/bench_open_corpus.py``).

The on-disk cache of these indexes is in ``index_cache.py``.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Sequence

import numpy as np

from .approach0 import ApproachZeroRetriever, quiet_stdout


# ----------------------------------------------------------------------------- top-k helpers
def _top_k_rows(scores: np.ndarray, k: int, keep_positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of a dense (n_queries, n_docs) score matrix, ties by column index."""
    nq, n = scores.shape
    kk = min(k, n)
    rows = np.full((nq, k), -1, dtype=np.int64)
    vals = np.full((nq, k), -np.inf, dtype=np.float64)
    if kk == 0:
        return rows, vals
    for i in range(nq):
        s = scores[i]
        if kk < n:
            # the k-th largest value; everything strictly above it is in, ties at it fill up
            part = np.argpartition(-s, kk - 1)[:kk]
            cut = s[part].min()
            cand = np.flatnonzero(s >= cut)
        else:
            cand = np.arange(n)
        order = np.lexsort((cand, -s[cand]))[:kk]
        top = cand[order]
        if keep_positive:
            top = top[s[top] > 0]
        rows[i, : top.size] = top
        vals[i, : top.size] = s[top]
    return rows, vals


def merge_top_k(rows_a, vals_a, rows_b, vals_b, k: int):
    """Merge two (rows, scores) top lists per query into one top-k (ties by row number)."""
    rows = np.concatenate([rows_a, rows_b], axis=1)
    vals = np.concatenate([vals_a, vals_b], axis=1)
    out_r = np.full((rows.shape[0], k), -1, dtype=np.int64)
    out_v = np.full((rows.shape[0], k), -np.inf, dtype=np.float64)
    for i in range(rows.shape[0]):
        ok = rows[i] >= 0
        r, v = rows[i][ok], vals[i][ok]
        order = np.lexsort((r, -v))[:k]
        out_r[i, : order.size] = r[order]
        out_v[i, : order.size] = v[order]
    return out_r, out_v


# ----------------------------------------------------------------------------- lexical
def default_tokenize(texts: Sequence[str]) -> list[list[str]]:
    """The tokenization of ``retrievers.BM25Retriever``: ``bm25s.tokenize`` with English stop words."""
    import bm25s  # loaded only when a BM25 index is built or searched

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class BM25Index:
    kind = "bm25"

    def __init__(self, model, doc_ids: list[str], tokenizer=None):
        self.model, self.doc_ids, self.tokenizer = model, list(doc_ids), tokenizer

    @classmethod
    def build(cls, doc_ids, texts, k1: float = 1.5, b: float = 0.75, tokenizer=None):
        import bm25s  # heavy or optional: loaded only on this path

        toks = [list(tokenizer(t)) for t in texts] if tokenizer else default_tokenize(texts)
        model = bm25s.BM25(k1=float(k1), b=float(b))
        model.index(toks, show_progress=False)
        return cls(model, doc_ids, tokenizer)

    def save(self, path: Path) -> None:
        self.model.save(str(path / "bm25s"))
        (path / "doc_ids.json").write_text(json.dumps(self.doc_ids))

    @classmethod
    def load(cls, path: Path, tokenizer=None):
        import bm25s  # heavy or optional: loaded only on this path

        model = bm25s.BM25.load(str(path / "bm25s"))
        return cls(model, json.loads((path / "doc_ids.json").read_text()), tokenizer)

    def _tokens(self, texts):
        return [list(self.tokenizer(t)) for t in texts] if self.tokenizer else default_tokenize(texts)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for one query (0 for documents without a query term)."""
        q = [t for t in self._tokens([query])[0] if t in self.model.vocab_dict and t != ""]
        if not q:
            return np.zeros(len(self.doc_ids))
        return np.asarray(self.model.get_scores(q), dtype=np.float64)

    def search(self, queries: Sequence[str], k: int):
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        vals = np.full((len(queries), k), -np.inf)
        for i, q in enumerate(queries):
            r, v = _top_k_rows(self.scores(q)[None, :], k, keep_positive=True)
            rows[i], vals[i] = r[0], v[0]
        return rows, vals


class TfidfIndex:
    kind = "tfidf"

    def __init__(self, vectorizer, postings, doc_ids: list[str]):
        self.vectorizer, self.postings, self.doc_ids = vectorizer, postings, list(doc_ids)

    @classmethod
    def build(cls, doc_ids, texts, tokenizer=None):
        from sklearn.feature_extraction.text import TfidfVectorizer  # heavy or optional: loaded only on this path

        kw = {"tokenizer": tokenizer, "lowercase": False, "token_pattern": None} if tokenizer else {}
        vec = TfidfVectorizer(dtype=np.float32, **kw)
        D = vec.fit_transform(list(texts))            # docs x terms, L2 rows
        return cls(vec, D.T.tocsr(), doc_ids)         # terms x docs: the inverted index

    def save(self, path: Path) -> None:
        import scipy.sparse as sp  # heavy or optional: loaded only on this path

        sp.save_npz(path / "postings.npz", self.postings)
        with open(path / "vectorizer.pkl", "wb") as f:
            pickle.dump(self.vectorizer, f)
        (path / "doc_ids.json").write_text(json.dumps(self.doc_ids))

    @classmethod
    def load(cls, path: Path):
        import scipy.sparse as sp  # heavy or optional: loaded only on this path

        with open(path / "vectorizer.pkl", "rb") as f:
            vec = pickle.load(f)
        return cls(vec, sp.load_npz(path / "postings.npz").tocsr(), json.loads((path / "doc_ids.json").read_text()))

    def search(self, queries: Sequence[str], k: int, query_chunk: int = 16):
        Q = self.vectorizer.transform(list(queries)).astype(np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        vals = np.full((len(queries), k), -np.inf)
        for s in range(0, Q.shape[0], query_chunk):
            S = (Q[s: s + query_chunk] @ self.postings).toarray().astype(np.float64)
            rows[s: s + query_chunk], vals[s: s + query_chunk] = _top_k_rows(S, k, keep_positive=True)
        return rows, vals


_MATH_SEGMENT = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def _az_markup(text: str) -> str:
    """Approach Zero's document format: each TeX segment wrapped as ``[imath]...[/imath]``."""
    def wrap(m):
        return " [imath]" + next(g for g in m.groups() if g is not None).strip() + "[/imath] "
    return _MATH_SEGMENT.sub(wrap, text)


def _short_alias(path: Path) -> Path:
    """A short symlink to ``path``: pya0 aborts the process on long index paths (about 100
    characters, e.g. under pytest's or a run's cache folder)."""

    path = Path(path).resolve()
    if len(str(path)) <= 40:
        return path
    link = Path(tempfile.gettempdir()) / f"saber-az-{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
    try:
        if link.is_symlink() and Path(os.readlink(link)) == path:
            return link
        if link.is_symlink() or link.exists():
            link.unlink()   # a stale link of ours (a folder, or another user's file, raises)
        link.symlink_to(path, target_is_directory=True)
    except FileExistsError:  # made by a parallel process in between
        if not (link.is_symlink() and Path(os.readlink(link)) == path):
            return _private_alias(path)
    except OSError:   # a folder, or a file we may not remove, sits at the name: it stays as it is
        return _private_alias(path)
    return link


def _private_alias(path: Path) -> Path:
    """A short link to ``path`` inside a new folder of this process's own (removed at exit), for when
    the shared name of :func:`_short_alias` is taken by something that is not our link."""
    d = Path(tempfile.mkdtemp(prefix="saber-az-"))
    atexit.register(shutil.rmtree, str(d), True)
    (d / "i").symlink_to(path, target_is_directory=True)
    return d / "i"


class Approach0Index:
    """Approach Zero (``pya0``) structure + keyword search over the whole corpus.

    A query becomes the keywords of ``retrievers.get_retriever("approach0")`` (its TeX segments as
    formulae, its other words as terms); when the engine rejects a query (a formula it cannot
    parse), the terms alone are searched. The engine lists at most ``k`` hits; the rest of the
    corpus is not returned. The on-disk index is a folder, so it is built in a temporary folder,
    moved into the cache, and reopened from there.
    """

    kind = "approach0"
    reload_after_save = True

    def __init__(self, path, doc_ids: list[str], owned_tmp: bool = False):
        self.path, self.doc_ids = Path(path), list(doc_ids)
        self._handle = None
        self._retriever = None
        if owned_tmp:

            weakref.finalize(self, shutil.rmtree, str(self.path), True)

    @classmethod
    def build(cls, doc_ids, texts):
        import pya0  # heavy or optional: loaded only on this path

        tmp = Path(tempfile.mkdtemp(prefix="az-open-"))
        with quiet_stdout():
            h = pya0.index_open(str(tmp / "ix"), option="w")
            w = pya0.index_writer(h)
            for i, t in enumerate(texts):
                pya0.writer_add_doc(w, content=_az_markup(t or ""), url=str(i))
            pya0.writer_maintain(w, force=True)
            pya0.writer_flush(w)
            pya0.writer_close(w)
            pya0.index_close(h)
        return cls(tmp, doc_ids, owned_tmp=True)

    def save(self, path: Path) -> None:
        self.close()
        # a rename when the temporary folder is on the cache's file system (the index is thousands
        # of files); the built object is reloaded from the cache afterwards
        shutil.move(str(self.path / "ix"), str(path / "ix"))
        (path / "doc_ids.json").write_text(json.dumps(self.doc_ids))

    @classmethod
    def load(cls, path: Path):
        return cls(path, json.loads((path / "doc_ids.json").read_text()))

    def close(self) -> None:
        if self._handle is not None:
            import pya0  # heavy or optional: loaded only on this path

            pya0.index_close(self._handle)
            self._handle = None

    def search(self, queries: Sequence[str], k: int):
        import pya0  # heavy or optional: loaded only on this path


        if self._retriever is None:
            self._retriever = ApproachZeroRetriever()
        if self._handle is None:
            with quiet_stdout():
                self._handle = pya0.index_open(str(_short_alias(self.path) / "ix"), option="r")
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        vals = np.full((len(queries), k), -np.inf)
        for qi, q in enumerate(queries):
            kws = self._retriever.keywords(q)
            hits: dict[int, float] = {}
            for attempt in (kws, [x for x in kws if x["type"] == "term"]):
                if not attempt:
                    continue
                with quiet_stdout():
                    res = json.loads(pya0.search(self._handle, attempt, topk=k))
                if res.get("ret_code") == 0:
                    hits = {int(h["field_url"]): float(h["score"]) for h in res.get("hits", [])}
                    break
            if hits:
                r = np.fromiter(hits.keys(), dtype=np.int64)
                v = np.fromiter(hits.values(), dtype=np.float64)
                order = np.lexsort((r, -v))[:k]
                rows[qi, : order.size], vals[qi, : order.size] = r[order], v[order]
        return rows, vals


# ----------------------------------------------------------------------------- dense
class ExactDenseIndex:
    kind = "dense-exact"

    def __init__(self, vectors: np.ndarray, doc_ids: list[str], chunk: int = 65536):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.doc_ids, self.chunk = list(doc_ids), int(chunk)
        if self.vectors.shape[0] != len(self.doc_ids):
            raise ValueError("one vector per document id is needed")

    @classmethod
    def build(cls, doc_ids, vectors):
        return cls(vectors, doc_ids)

    def save(self, path: Path) -> None:
        np.save(path / "vectors.npy", self.vectors)
        (path / "doc_ids.json").write_text(json.dumps(self.doc_ids))

    @classmethod
    def load(cls, path: Path, mmap: bool = False):
        v = np.load(path / "vectors.npy", mmap_mode="r" if mmap else None)
        return cls(v, json.loads((path / "doc_ids.json").read_text()))

    def search(self, queries: np.ndarray, k: int):
        Q = np.ascontiguousarray(queries, dtype=np.float32)
        nq = Q.shape[0]
        rows = np.full((nq, k), -1, dtype=np.int64)
        vals = np.full((nq, k), -np.inf)
        for s in range(0, self.vectors.shape[0], self.chunk):
            S = Q @ self.vectors[s: s + self.chunk].T          # (nq, chunk) float32
            r, v = _top_k_rows(S, k)
            r = np.where(r >= 0, r + s, -1)
            rows, vals = merge_top_k(rows, vals, r, v, k)
        return rows, vals


class HnswIndex:
    """Approximate inner-product search (``hnswlib``); see the module docstring."""

    kind = "dense-hnsw"

    def __init__(self, index, doc_ids: list[str], ef: int = 128):
        self.index, self.doc_ids, self.ef = index, list(doc_ids), int(ef)

    @classmethod
    def build(cls, doc_ids, vectors, M: int = 16, ef_construction: int = 100, ef: int = 128,
              threads: int = -1, seed: int = 100):
        import hnswlib  # heavy or optional: loaded only on this path

        X = np.ascontiguousarray(vectors, dtype=np.float32)
        ix = hnswlib.Index(space="ip", dim=int(X.shape[1]))
        ix.init_index(max_elements=max(1, X.shape[0]), M=int(M), ef_construction=int(ef_construction),
                      random_seed=int(seed))
        ix.set_num_threads(threads if threads > 0 else (os.cpu_count() or 1))
        if X.shape[0]:
            ix.add_items(X, np.arange(X.shape[0]))
        return cls(ix, doc_ids, ef)

    def save(self, path: Path) -> None:
        self.index.save_index(str(path / "hnsw.bin"))
        (path / "doc_ids.json").write_text(json.dumps(self.doc_ids))
        (path / "hnsw.json").write_text(json.dumps({"dim": self.index.dim, "ef": self.ef}))

    @classmethod
    def load(cls, path: Path, ef: int | None = None):
        import hnswlib  # heavy or optional: loaded only on this path

        meta = json.loads((path / "hnsw.json").read_text())
        doc_ids = json.loads((path / "doc_ids.json").read_text())
        ix = hnswlib.Index(space="ip", dim=int(meta["dim"]))
        ix.load_index(str(path / "hnsw.bin"), max_elements=max(1, len(doc_ids)))
        return cls(ix, doc_ids, ef or meta["ef"])

    def search(self, queries: np.ndarray, k: int, ef: int | None = None):
        Q = np.ascontiguousarray(queries, dtype=np.float32)
        n = len(self.doc_ids)
        kk = min(k, n)
        rows = np.full((Q.shape[0], k), -1, dtype=np.int64)
        vals = np.full((Q.shape[0], k), -np.inf)
        if kk == 0 or Q.shape[0] == 0:
            return rows, vals
        self.index.set_ef(max(int(ef or self.ef), kk))
        labels, dist = self.index.knn_query(Q, k=kk)
        sims = 1.0 - dist.astype(np.float64)      # hnswlib "ip" distance is 1 - <q, d>
        for i in range(Q.shape[0]):
            order = np.lexsort((labels[i], -sims[i]))
            rows[i, :kk], vals[i, :kk] = labels[i][order], sims[i][order]
        return rows, vals


INDEX_CLASSES = {c.kind: c for c in (BM25Index, TfidfIndex, Approach0Index, ExactDenseIndex, HnswIndex)}
