"""Retrievers under evaluation (paper 4.1): each one reranks a query's candidate list.

One interface::

    r = get_retriever("bm25", k1=1.5, b=0.75)
    s = r.score(query_text, candidate_texts)              # float64 (n,), higher = more relevant
    S = r.score_many(query_texts, candidate_text_lists)   # list of arrays (dense models embed all
                                                          # texts once, through the store)

* ``bm25``: Okapi BM25 (``bm25s``, Lucene variant) fitted per query on its candidates:
  ``score(q, d) = sum_{t in q} idf(t) * tf(t,d) / (tf(t,d) + k1 (1 - b + b |d| / avgdl))``,
  ``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``; tokens: ``bm25s.tokenize`` (lower case,
  ``\\w\\w+``, English stop words) unless a ``tokenizer`` is given.
* ``tfidf``: scikit-learn ``TfidfVectorizer`` (smooth idf, sublinear off, L2 rows) fitted per query
  on its candidates; score = cosine(tfidf(q), tfidf(d)).
* ``jaccard``: ``|T(q) & T(d)| / |T(q) | T(d)|`` with ``saber_lib.signals.summary_tokens`` as T.
* ``approach0``: Approach Zero (``pya0``): the candidates go into a temporary index; the query's
  ``$...$`` segments become "tex" keywords and its other words "term" keywords; a candidate that
  the engine does not return scores below every returned one.
* every retriever name of ``saber_lib.embed`` (``minilm``, ``mpnet``, ``e5-small``, ...): cosine of
  the query vector (kind "query") and the candidate vectors (kind "document").
* ``bm25-a0``, ``tfidf-a0``, ``jaccard-a0``, ``bm25-ws``, ``tfidf-ws``, ``jaccard-ws``: the authors'
  lexical baselines, their tokenizations and ``rank_bm25``'s BM25Okapi (:mod:`saber_lib.lexical`).
* ``run:<path>``: scores read from a TREC run file (external systems); see :func:`read_trec_run`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl

from .. import embed
from ..core.data import package_version
from . import lexical
from .runs import TrecRunError, read_trec_run
from ..signals.summary import jaccard
from ..core.text import setting_texts, stop_words, summary_tokens

Tokenizer = Callable[[str], Sequence[str]]
CUSTOM_TOKENS = ("bm25", "tfidf", "jaccard")   # the lexical retrievers that take a ``tokenizer``
LEXICAL = CUSTOM_TOKENS + ("approach0",) + lexical.AUTHORS_LEXICAL


# ----------------------------------------------------------------------------- interface
class EmptyVocabulary(ValueError):
    """A TF-IDF vectorizer found no token in a query's candidate list."""


class Retriever:
    """Scores a query against its candidate list; higher is more relevant."""

    name = "retriever"
    backend = ""

    def score(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def score_many(self, queries: Sequence[str], candidate_lists: Sequence[Sequence[str]],
                   query_ids: Sequence[str] | None = None,
                   candidate_ids: Sequence[Sequence[str]] | None = None) -> list[np.ndarray]:
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        out = []
        for k, (q, c) in enumerate(zip(queries, candidate_lists)):
            try:
                out.append(np.asarray(self.score(q, list(c)), dtype=np.float64))
            except EmptyVocabulary as e:
                raise EmptyVocabulary(f"query {query_ids[k] if query_ids is not None else k}: {e}") from None
        return out

    def __call__(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        return self.score(query, candidates)

    def info(self) -> dict:
        return {"name": self.name, "backend": self.backend}


class BM25Retriever(Retriever):
    """BM25 fitted per query on its candidates (``bm25s``, method "lucene")."""

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, tokenizer: Tokenizer | None = None):
        self.k1, self.b, self.tokenizer = float(k1), float(b), tokenizer
        self.backend = f"bm25s=={_version('bm25s')} (k1={k1}, b={b})"

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is not None:
            return [list(self.tokenizer(t)) for t in texts]
        import bm25s  # optional retriever package

        return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)

    def score(self, query, candidates):
        import bm25s  # optional retriever package

        candidates = list(candidates)
        if not candidates:
            return np.zeros(0)
        docs = self.tokenize(candidates)
        q = self.tokenize([query])[0]
        vocab = {t for d in docs for t in d}
        q = [t for t in q if t in vocab]
        if not q:
            return np.zeros(len(candidates))
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(docs, show_progress=False)
        return np.asarray(model.get_scores(q), dtype=np.float64)


class TfidfRetriever(Retriever):
    """TF-IDF cosine, the vectorizer fitted per query on its candidates (scikit-learn)."""

    name = "tfidf"

    def __init__(self, tokenizer: Tokenizer | None = None):
        self.tokenizer = tokenizer
        self.backend = f"scikit-learn=={_version('scikit-learn')} TfidfVectorizer"

    def score(self, query, candidates):
        from sklearn.feature_extraction.text import TfidfVectorizer  # heavy: only the tfidf retriever needs it

        candidates = list(candidates)
        if not candidates:
            return np.zeros(0)
        kw = {"tokenizer": self.tokenizer, "lowercase": False, "token_pattern": None} if self.tokenizer else {}
        vec = TfidfVectorizer(**kw)
        try:
            D = vec.fit_transform(candidates)
        except ValueError:  # scikit-learn's empty vocabulary; all-zero scores would rank in list order
            raise EmptyVocabulary(f"tfidf: none of the {len(candidates)} candidates has a token (empty vocabulary; "
                                  f"first candidate {candidates[0][:60]!r}), so TF-IDF cannot rank them") from None
        Q = vec.transform([query])
        return np.asarray((D @ Q.T).toarray()).ravel().astype(np.float64)


def _default_set_tokens(text: str) -> frozenset:
    return summary_tokens(text)


class JaccardRetriever(Retriever):
    """Jaccard similarity of token sets (``saber_lib.signals.summary_tokens``)."""

    name = "jaccard"

    def __init__(self, tokenizer: Tokenizer | None = None, empty: float = 0.0):
        self.tokenizer = tokenizer or _default_set_tokens
        self.empty = empty
        self.backend = "token-set Jaccard (signals.summary_tokens)" if tokenizer is None else "token-set Jaccard"

    def score(self, query, candidates):
        qt = frozenset(self.tokenizer(query))
        return np.array([jaccard(qt, frozenset(self.tokenizer(c)), self.empty) for c in candidates],
                        dtype=np.float64)


class OkapiBM25Retriever(Retriever):
    """The authors' BM25: ``rank_bm25.BM25Okapi`` (defaults) fitted per query on its candidates."""

    def __init__(self, name: str, tokenizer: Tokenizer, tokens: str):
        self.name, self.tokenizer = name, tokenizer
        self.backend = f"rank-bm25=={_version('rank-bm25')} BM25Okapi (defaults) on {tokens}"

    def score(self, query, candidates):
        return lexical.okapi_scores(self.tokenizer(query), [self.tokenizer(c) for c in candidates])


def _authors_lexical(name: str) -> Retriever:
    """One of ``lexical.AUTHORS_LEXICAL``: ``<bm25|tfidf|jaccard>-<a0|ws>``."""
    kind, tok = name.split("-")
    tokens = "Approach Zero class ids + words" if tok == "a0" else "whitespace tokens"
    tokenize = lexical.a0_tokens if tok == "a0" else lexical.ws_tokens
    if kind == "bm25":
        return OkapiBM25Retriever(name, tokenize, tokens)
    if kind == "tfidf":   # -ws: scikit-learn's own analyzer, the authors' TF-IDF without math tokens
        r = TfidfRetriever(tokenize if tok == "a0" else None)
        r.backend += f" on {tokens if tok == 'a0' else 'its default tokens'}"
    else:
        r = JaccardRetriever(tokenize)
        r.backend += f" on {tokens}"
    r.name = name
    return r


# ----------------------------------------------------------------------------- Approach Zero
class quiet_stdout:
    """Silence C-level writes to stdout and stderr (pya0 reports every index it creates and every
    formula its parser rejects; a rejected formula is simply not indexed as math)."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.fds = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        for i, fd in enumerate(self.fds, 1):
            os.dup2(fd, i)
            os.close(fd)
        return False


def _fast_tmp() -> str | None:
    """A memory-backed temp folder when there is one (an index is thousands of small files)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9]+")


def split_query_math(text: str) -> tuple[list[str], list[str]]:
    """(math segments, words) of a query: ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]`` are math;
    the words are the alphabetic tokens (2+ characters, lower case, English and math stop words
    removed) of the rest. Both lists keep first occurrences only, in order."""
    maths, rest, last = [], [], 0
    for m in _MATH_RE.finditer(text):
        rest.append(text[last:m.start()])
        seg = next(g for g in m.groups() if g is not None).strip()
        if seg:
            maths.append(seg)
        last = m.end()
    rest.append(text[last:])
    words = [w.lower() for w in _WORD_RE.findall(" ".join(rest))]
    stop = stop_words()
    words = [w for w in words if w not in stop]
    return list(dict.fromkeys(maths)), list(dict.fromkeys(words))


def to_imath(text: str) -> str:
    """Approach Zero's document markup: every math segment wrapped in ``[imath]..[/imath]``."""
    def rep(m):
        seg = next(g for g in m.groups() if g is not None)
        return f" [imath]{seg.strip()}[/imath] "
    return _MATH_RE.sub(rep, text)


class ApproachZeroRetriever(Retriever):
    """Approach Zero structure search (``pya0``) over a temporary index of the query's candidates."""

    name = "approach0"

    def __init__(self, max_math: int = 16, max_terms: int = 32, workdir: str | None = None):
        try:
            import pya0  # noqa: F401
        except ImportError:
            raise RuntimeError("retriever 'approach0' needs pya0: pip install pya0==0.3.7") from None
        self.max_math, self.max_terms, self.workdir = max_math, max_terms, workdir
        self.backend = f"pya0=={_version('pya0')} (Approach Zero)"

    def keywords(self, query: str) -> list[dict]:
        maths, words = split_query_math(query)
        return ([{"str": m, "type": "tex"} for m in maths[: self.max_math]]
                + [{"str": w, "type": "term"} for w in words[: self.max_terms]])

    def score(self, query, candidates):
        import pya0  # optional, heavy: Approach Zero (native library)

        candidates = list(candidates)
        n = len(candidates)
        if n == 0:
            return np.zeros(0)
        kws = self.keywords(query)
        hits: dict[int, float] = {}
        tmp = Path(tempfile.mkdtemp(prefix="az-", dir=self.workdir or _fast_tmp()))
        try:
            with quiet_stdout():
                ix = pya0.index_open(str(tmp / "ix"), option="w")
                w = pya0.index_writer(ix)
                for i, c in enumerate(candidates):
                    pya0.writer_add_doc(w, content=to_imath(c), url=str(i))
                pya0.writer_maintain(w, force=True)
                pya0.writer_flush(w)
                pya0.writer_close(w)
                pya0.index_close(ix)
                ix = pya0.index_open(str(tmp / "ix"), option="r")
            for attempt in (kws, [k for k in kws if k["type"] == "term"]):
                if not attempt:
                    continue
                with quiet_stdout():
                    raw = pya0.search(ix, attempt, topk=n)
                res = json.loads(raw)
                if res.get("ret_code") == 0:
                    for h in res.get("hits", []):
                        hits[int(h["field_url"])] = float(h["score"])
                    break
            pya0.index_close(ix)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        out = np.zeros(n)
        floor = min([0.0] + list(hits.values())) - 1.0
        out[:] = floor
        for i, s in hits.items():
            out[i] = s
        return out


# ----------------------------------------------------------------------------- dense
class DenseRetriever(Retriever):
    """Cosine similarity of embeddings from ``saber_lib.embed`` (vectors are unit length)."""

    def __init__(self, encoder_name: str, store=None, max_chunks: int | None = None, cache_dir=None,
                 batch_size: int = 32):
        self.encoder = embed.get_encoder(encoder_name, max_chunks=max_chunks, cache_dir=cache_dir)
        self.store = store
        self.batch_size = batch_size
        self.name = encoder_name
        self.backend = self.encoder.model_id

    def score(self, query, candidates):
        return self.score_many([query], [list(candidates)])[0]

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None, show_progress=False):
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        Q = embed.embed(self.encoder, list(queries), self.store, kind="query",
                        show_progress=show_progress, batch_size=self.batch_size)
        flat = [c for cl in candidate_lists for c in cl]
        D = embed.embed(self.encoder, flat, self.store, kind="document",
                        show_progress=show_progress, batch_size=self.batch_size)
        out, s = [], 0
        for i, cl in enumerate(candidate_lists):
            out.append((D[s: s + len(cl)].astype(np.float64) @ Q[i].astype(np.float64)))
            s += len(cl)
        return out


class RunFileRetriever(Retriever):
    """Scores from a TREC run: a candidate missing from the run scores below every listed one.

    ``min_match`` (``evaluate.run_min_match``): a query whose candidates the run lists fewer than
    this share of, or none of, is an error naming the file (a run of another benchmark, or with
    other document ids, would otherwise score as a poor system)."""

    def __init__(self, path, min_match: float = 0.0):
        self.path = Path(path)
        self.min_match = float(min_match)
        self.run = read_trec_run(self.path)
        self.name = f"run:{self.path.stem}"
        tags = sorted(set(self.run["tag"].to_list()))
        self.backend = f"TREC run {self.path.name} ({', '.join(tags[:3])})"
        self._by_q: dict[str, dict[str, float]] = {}
        for q, c, s in self.run.select("query_id", "cand_id", "score").iter_rows():
            self._by_q.setdefault(q, {})[c] = s

    def score(self, query, candidates):
        raise TypeError("a run-file retriever scores by ids: use score_many(..., query_ids, candidate_ids)")

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        if query_ids is None or candidate_ids is None:
            raise TypeError("a run-file retriever needs query_ids and candidate_ids")
        out = []
        for q, cids in zip(query_ids, candidate_ids):
            got = self._by_q.get(q, {})
            n_match = sum(c in got for c in cids)
            if cids and (n_match == 0 or n_match < self.min_match * len(cids)):
                raise TrecRunError(
                    f"{self.path}: the run lists {n_match} of the {len(cids)} candidates of query {q!r} "
                    f"(evaluate.run_min_match = {self.min_match:g}); is it a run of this benchmark, "
                    "with its document ids?")
            floor = min([0.0] + list(got.values())) - 1.0
            out.append(np.array([got.get(c, floor) for c in cids], dtype=np.float64))
        return out


# ----------------------------------------------------------------------------- factory
def _version(dist: str) -> str:
    return package_version(dist) or "?"


def get_retriever(name: str, *, k1: float = 1.5, b: float = 0.75, store=None, max_chunks: int | None = None,
                  cache_dir=None, tokenizer: Tokenizer | None = None, run_min_match: float = 0.0) -> Retriever:
    """A retriever by name: ``bm25`` | ``tfidf`` | ``jaccard`` | ``approach0`` | an encoder name of
    ``saber_lib.embed`` | ``run:<path to a TREC run>``. ``tokenizer`` replaces the lexical
    retrievers' default tokenization (e.g. a math-aware one)."""
    if name == "bm25":
        return BM25Retriever(k1, b, tokenizer)
    if name == "tfidf":
        return TfidfRetriever(tokenizer)
    if name == "jaccard":
        return JaccardRetriever(tokenizer)
    if name == "approach0":
        return ApproachZeroRetriever()
    if name in lexical.AUTHORS_LEXICAL:
        return _authors_lexical(name)
    if name.startswith("run:"):
        return RunFileRetriever(name[4:], min_match=run_min_match)
    if name in embed.REGISTRY:
        return DenseRetriever(name, store=store, max_chunks=max_chunks, cache_dir=cache_dir)
    raise KeyError(f"unknown retriever {name!r}: use one of {', '.join(LEXICAL)}, "
                   f"{', '.join(embed.REGISTRY)} or run:<file>")


# ----------------------------------------------------------------------------- the benchmark
def score_benchmark(retriever: Retriever, benchmark, corpus, setting: str, progress=None, queries=None):
    """Scores of every (query, candidate) of ``benchmark`` for one setting.

    ``benchmark``: polars frame with ``query_id``, ``cand_id``, ``position``; ``corpus``: ``doc_id``,
    ``problem``, ``solution``. ``queries`` (same columns, ``query_id`` for ``doc_id``) holds the query
    texts when queries are not corpus documents (the released benchmark: its own id space).
    Returns ``retriever``, ``setting``, ``query_id``, ``cand_id``, ``score`` (candidates in
    ``position`` order).
    """
    texts = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    qtext = texts if queries is None else {
        q: (p, s) for q, p, s in queries.select("query_id", "problem", "solution").iter_rows()}
    missing = sorted((set(benchmark["query_id"]) - set(qtext)) | (set(benchmark["cand_id"]) - set(texts)))
    if missing:
        raise KeyError(f"{len(missing)} benchmark ids not in the corpus, e.g. {missing[:3]}")
    qids, qtexts, cid_lists, ctext_lists = [], [], [], []
    for (q,), g in benchmark.sort("query_id", "position").group_by(["query_id"], maintain_order=True):
        qids.append(q)
        qtexts.append(setting_texts(setting, *qtext[q])[0])
        cids = g["cand_id"].to_list()
        cid_lists.append(cids)
        ctext_lists.append([setting_texts(setting, *texts[c])[1] for c in cids])
    scores = retriever.score_many(qtexts, ctext_lists, query_ids=qids, candidate_ids=cid_lists)
    rows = []
    for q, cids, s in zip(qids, cid_lists, scores):
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (len(cids),):
            raise ValueError(f"retriever {retriever.name} returned {s.shape} scores for {len(cids)} candidates")
        rows += [(retriever.name, setting, q, c, float(v)) for c, v in zip(cids, s)]
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "cand_id": pl.Utf8, "score": pl.Float64}, orient="row")
