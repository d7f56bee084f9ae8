"""Topic scorers (paper 3.2.2): how well a problem fits each candidate topic of a visited
tree node. The simple interface is ``score(problem_text, labels) -> scores``; batched scorers
override ``score_visits``. :class:`LLMTopicScorer` asks an LLM through :mod:`saber_lib.llm` (prompt
``topic_scoring``); :class:`EmbeddingTopicScorer` is the CPU stand-in (see :mod:`.assign`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import prompts
from ..embed import EmbeddingStore, embed, get_encoder
from ..llm import make_backend
from ..llm.parsers import check_best_at_one, label_scores, parse_json_object
from ..llm.retry import ask_until_parsed
from ..llm.types import Failure
from ..core.text import document_text

Visit = tuple[int, list[int]]   # (problem index, candidate node ids; the visited node first when scored)
Item = "str | tuple[str, str | None]"  # a problem: (problem, solution), or one text


def problem_text(problem: str, solution: str | None) -> str:
    """The text a scorer sees: the evaluation's document text (paper 4.1) (:func:`saber_lib.core.text.document_text`)."""
    return document_text(problem, solution)


def item_text(item) -> str:
    """One text for an item: a string as it is, a (problem, solution) pair via :func:`problem_text`."""
    return item if isinstance(item, str) else problem_text(item[0], item[1])


# ----------------------------------------------------------------------------- scorers
class TopicScorer:
    """Interface. Subclasses implement ``score`` (one problem, label strings) or ``score_visits``.

    Items are (problem, solution) pairs or plain texts; ``score`` gets :func:`item_text` of the item.
    ``score_visits(ontology, items, visits)`` returns, per visit, a float array aligned with the
    visit's candidates, or a string (the reason the scoring failed for that problem and node).
    """

    name = "scorer"
    model = ""

    def score(self, problem_text: str, labels: list[str]) -> list[float]:  # pragma: no cover
        raise NotImplementedError

    def labels(self, ontology, nodes: Sequence[int]) -> list[str]:
        return candidate_labels(ontology, nodes)

    def score_visits(self, ontology, texts: Sequence[str], visits: Sequence[Visit]) -> list:
        out = []
        for p, cands in visits:
            s = self.score(item_text(texts[p]), self.labels(ontology, cands))
            if len(s) != len(cands):
                out.append(f"scorer returned {len(s)} scores for {len(cands)} labels")
            else:
                out.append(np.asarray(s, dtype=np.float64))
        return out

    def describe(self) -> dict:
        return {"topic_scorer": self.name, "topic_model": self.model}


class FunctionScorer(TopicScorer):
    """Wrap a plain ``score(problem_text, labels) -> list[float]`` function."""

    def __init__(self, fn: Callable[[str, list[str]], Sequence[float]], name="function", model=""):
        self.fn, self.name, self.model = fn, name, model

    def score(self, problem_text, labels):
        return list(self.fn(problem_text, labels))


def candidate_labels(ontology, nodes: Sequence[int]) -> list[str]:
    """Readable titles of the candidates, made unique: distinct topics sharing a title get their
    parent's title in brackets; copies of one topic keep one label (and get one score)."""
    titles = [ontology.readable_title(int(v)) for v in nodes]
    urls = [ontology.url(int(v)) for v in nodes]
    first_url: dict[str, str] = {}
    out = []
    for t, u, v in zip(titles, urls, nodes):
        if t in first_url and first_url[t] != u:
            par = int(ontology.parent[int(v)])
            t = f"{t} [{ontology.readable_title(par) if par >= 0 else 'root'}]"
            k = 2
            base = t
            while t in first_url and first_url[t] != u:
                t, k = f"{base} {k}", k + 1
        first_url.setdefault(t, u)
        out.append(t)
    return out


def scores_from_json(obj, labels: list[str]) -> np.ndarray:
    """A parsed topic answer as scores in the order of ``labels``
    (:func:`saber_lib.llm.parsers.label_scores`; a label the answer leaves out scores 0, a value that
    is not a number in [0, 1] raises :class:`ParseError` and the answer is asked again)."""
    scores = label_scores(obj, labels, missing_is_zero=True)
    return np.array([scores[lab] for lab in labels], dtype=float)


class LLMTopicScorer(TopicScorer):
    """The paper's scorer: an LLM rates the labels (prompt ``topic_scoring``, JSON label -> score).

    ``backend``: a :mod:`saber_lib.llm` backend. Unparseable answers, and answers that break the
    prompt's contract (no label at exactly 1.0, e.g. every label 0.0), are asked again (``retries``
    times, each a new call via the request's ``attempt``; ``llm.retry.ask_until_parsed``, the one
    way every parsed LLM read goes); then the visit is a failure with the reason. ``guided=True`` constrains the
    answer to the JSON schema (small local models; the paper asks by prompt alone).
    """

    name = "llm"

    def __init__(self, backend, retries: int = 2, guided: bool = False):
        self.backend = backend
        self.retries = retries
        self.guided = guided
        self.model = getattr(backend, "model_id", "") or ""
        self.backend_name = getattr(backend, "name", "")

    def describe(self) -> dict:
        d = {"topic_scorer": self.name, "topic_model": self.model, "llm_backend": self.backend_name}
        if hasattr(self.backend, "usage"):
            d["llm_usage"] = self.backend.usage()
            d["llm_first_errors"] = self.backend.first_errors()  # for the runner's failure budget
        return d

    def _request(self, item, labels: list[str]):
        problem, solution = (item, "") if isinstance(item, str) else (item[0], item[1] or "")
        return prompts.request("topic_scoring", guided=self.guided, problem=problem, solution=solution,
                               labels=labels)

    def score_visits(self, ontology, texts, visits):
        """Per visit the label scores, or the reason it failed (a call failed or no answer parsed
        after ``retries`` more calls; answers that never parsed are not kept in the LLM cache:
        :func:`saber_lib.llm.retry.ask_until_parsed`)."""
        labels = [self.labels(ontology, c) for _, c in visits]

        def parse(i: int, res) -> np.ndarray:
            scores = scores_from_json(parse_json_object(res[0].text), labels[i])   # ParseError: asked again
            check_best_at_one(dict(zip(labels[i], scores)))   # no label at 1.0: asked again like any unparsed answer
            return scores

        got = ask_until_parsed(lambda reqs, label: self.backend.chat_batch(reqs, desc=label), self.backend.forget,
                               [[self._request(texts[p], labels[i])] for i, (p, _) in enumerate(visits)], parse,
                               self.retries, desc="topic scoring")
        return [g.reason if isinstance(g, Failure) else g for g in got]


CALIBRATIONS = ("none", "center", "zscore")


class EmbeddingTopicScorer(TopicScorer):
    """CPU stand-in: cosine(problem text, readable label path) from a packaged sentence encoder.

    ``score = cos`` (``mode="cosine"``) or ``exp(cos / temperature)`` (``mode="exp"``); after the
    walk's max-normalization a child is kept iff ``cos > max cos - T ln(1/tau)``, so ``T`` sets the
    cosine margin. ``deep_temperature``: the ``T`` of every visit below the root (``None``: the same
    as the root's); the root's visit decides the problem's domains, deeper visits how many topics it
    gets. Each distinct label path and each problem text is embedded once (through the store when
    given); ``max_chars`` > 0 embeds only the first ``max_chars`` characters of a problem's text.

    ``subtree_weight`` w > 0: an inner node is represented by its label and its subtree,
    ``v(n) = normalize(e(label path of n) + w * mean_{children c} v(c))`` (bottom-up; leaves keep
    their label vector), which describes a one-word area such as "Algebra" by what it contains. This
    embeds every label of the tree once.

    ``calibration``: ``center`` subtracts each label's mean cosine over the corpus
    (``cos - <mu_P, l>``), ``zscore`` also divides by its standard deviation (``sqrt(l' Cov_P l)``),
    in the visits at depth >= ``calibrate_from_depth`` (the root is depth 0). Centering every visit
    lowered the domain agreement on MATH (0.64 raw cosine -> 0.34-0.42); applied from depth 2 on, it
    stops generic leaves (titles that match any problem text) from collecting thousands of problems.
    """

    name = "embedding"

    def __init__(self, encoder, store=None, mode: str = "exp", temperature: float = 0.1,
                 calibration: str = "none", *, deep_temperature: float | None = None,
                 calibrate_from_depth: int = 0, subtree_weight: float = 0.0, max_chars: int = 0):
        if mode not in ("cosine", "exp"):
            raise ValueError(f"topic_embed_score: unknown mode {mode!r} (cosine | exp)")
        if mode == "exp" and not (temperature > 0 and (deep_temperature is None or deep_temperature > 0)):
            raise ValueError("topic_embed_temperature and topic_embed_deep_temperature must be > 0")
        if calibration not in CALIBRATIONS:
            raise ValueError(f"topic_embed_calibration: unknown {calibration!r} ({' | '.join(CALIBRATIONS)})")
        if subtree_weight < 0 or max_chars < 0 or calibrate_from_depth < 0:
            raise ValueError("topic_embed_subtree_weight, topic_embed_max_chars and "
                             "topic_embed_calibrate_from_depth must be >= 0")
        self.encoder, self.store, self.mode, self.temperature = encoder, store, mode, temperature
        self.deep_temperature = temperature if deep_temperature is None else deep_temperature
        self.calibration, self.calibrate_from_depth = calibration, int(calibrate_from_depth)
        self.subtree_weight, self.max_chars = float(subtree_weight), int(max_chars)
        self.model = getattr(encoder, "model_id", getattr(encoder, "name", ""))
        self._P = None
        self._texts_key = None
        self._label_row: dict[int, int] = {}
        self._L = np.zeros((0, 0), dtype=np.float32)

    def describe(self) -> dict:
        return {"topic_scorer": self.name, "topic_model": self.model,
                "topic_embed_score": self.mode, "topic_embed_temperature": self.temperature,
                "topic_embed_deep_temperature": self.deep_temperature,
                "topic_embed_calibration": self.calibration,
                "topic_embed_calibrate_from_depth": self.calibrate_from_depth,
                "topic_embed_subtree_weight": self.subtree_weight, "topic_embed_max_chars": self.max_chars}

    def _embed(self, texts, kind):
        return embed(self.encoder, list(texts), store=self.store, kind=kind)

    def text_of(self, item) -> str:
        """What is embedded for a problem: its text, cut to ``max_chars`` characters when set."""
        t = item_text(item)
        return t[:self.max_chars] if self.max_chars else t

    def prepare(self, texts: Sequence[str]) -> None:
        """Embed the problem texts (done on first use; call it to time it separately)."""
        key = (len(texts), hash(tuple(map(item_text, texts))))
        if self._texts_key != key:
            self._P = self._embed([self.text_of(t) for t in texts], "document").astype(np.float64)
            self._texts_key = key
            self._mu = self._P.mean(axis=0)
            Pc = self._P - self._mu
            self._cov = Pc.T @ Pc / max(1, len(Pc))

    def _label_vectors(self, ontology, nodes: np.ndarray) -> np.ndarray:
        if self.subtree_weight > 0:
            if len(self._L) != ontology.n_nodes:
                self._L = subtree_vectors(ontology, self._embed(
                    [ontology.label_path(v) for v in range(ontology.n_nodes)], "query"), self.subtree_weight)
            return np.asarray(nodes, dtype=np.int64)
        new = [int(v) for v in np.unique(nodes) if int(v) not in self._label_row]
        if new:
            vecs = self._embed([ontology.label_path(v) for v in new], "query")
            base = len(self._L)
            self._L = np.vstack([self._L.reshape(base, vecs.shape[1]) if base else
                                 np.zeros((0, vecs.shape[1]), np.float32), vecs])
            self._label_row.update({v: base + i for i, v in enumerate(new)})
        return np.fromiter((self._label_row[int(v)] for v in nodes), dtype=np.int64, count=len(nodes))

    def score_visits(self, ontology, texts, visits):
        self.prepare(texts)
        if not visits:
            return []
        sizes = np.fromiter((len(c) for _, c in visits), dtype=np.int64, count=len(visits))
        cand = np.fromiter((v for _, c in visits for v in c), dtype=np.int64, count=int(sizes.sum()))
        prob = np.repeat(np.fromiter((p for p, _ in visits), dtype=np.int64, count=len(visits)), sizes)
        # depth of the visited node: its children are one deeper (the last candidate is a child)
        vdepth = np.repeat(np.fromiter((ontology.depth[c[-1]] - 1 for _, c in visits), dtype=np.int64,
                                       count=len(visits)), sizes)
        rows = self._label_vectors(ontology, cand)
        cos = np.empty(len(cand), dtype=np.float64)
        step = 65536
        for s in range(0, len(cand), step):
            cos[s:s + step] = np.einsum("ij,ij->i", self._L[rows[s:s + step]], self._P[prob[s:s + step]])
        if self.calibration != "none":
            cal = vdepth >= self.calibrate_from_depth
            urows, inv = np.unique(rows[cal], return_inverse=True)
            L = self._L[urows].astype(np.float64)
            shift = (L @ self._mu)[inv]
            if self.calibration == "zscore":
                sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", L, self._cov, L), 1e-12))[inv]
                cos[cal] = (cos[cal] - shift) / sd
            else:
                cos[cal] = cos[cal] - shift
        if self.mode == "exp":
            # exp((cos - max_visit)/T): same ratios as exp(cos/T) after max-normalization, no overflow
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            mx = np.maximum.reduceat(cos, starts)
            temp = np.where(vdepth == 0, self.temperature, self.deep_temperature)
            sc = np.exp((cos - np.repeat(mx, sizes)) / temp)
        else:
            sc = cos
        return np.split(sc, np.cumsum(sizes)[:-1])


def subtree_vectors(ontology, label_vecs: np.ndarray, weight: float) -> np.ndarray:
    """``v(n) = normalize(label_vecs[n] + weight * mean_{children c} v(c))``, leaves first (float32;
    ``label_vecs`` has one row per tree node)."""
    L = np.asarray(label_vecs, dtype=np.float64)
    V = L.copy()
    depth, parent = np.asarray(ontology.depth), np.asarray(ontology.parent)
    for d in range(int(depth.max()), 0, -1):
        kids = np.flatnonzero(depth == d)
        acc = np.zeros_like(V)
        np.add.at(acc, parent[kids], V[kids])
        cnt = np.bincount(parent[kids], minlength=len(V))
        par = np.flatnonzero(cnt)
        V[par] = L[par] + weight * acc[par] / cnt[par, None]
        V[par] /= np.maximum(np.linalg.norm(V[par], axis=1, keepdims=True), 1e-12)
    return V.astype(np.float32)


# ----------------------------------------------------------------------------- stage helper
def make_scorer(topic_scorer: str, *, llm: dict | None = None, topic_embed_model: str = "minilm",
                topic_embed_score: str = "exp", topic_embed_temperature: float = 0.1,
                topic_embed_max_chunks: int = 1, topic_embed_calibration: str = "none",
                topic_embed_deep_temperature: float | None = None, topic_embed_calibrate_from_depth: int = 0,
                topic_embed_subtree_weight: float = 0.0, topic_embed_max_chars: int = 0,
                topic_retries: int = 2, cache_dir=None,
                llm_cache_path=None) -> TopicScorer:
    """The scorer named by the profile (``topics.topic_scorer``)."""
    if topic_scorer == "embedding":
        enc = get_encoder(topic_embed_model, max_chunks=topic_embed_max_chunks or None)
        store = EmbeddingStore(cache_dir) if cache_dir else None
        return EmbeddingTopicScorer(enc, store, mode=topic_embed_score, temperature=topic_embed_temperature,
                                    calibration=topic_embed_calibration,
                                    deep_temperature=topic_embed_deep_temperature,
                                    calibrate_from_depth=topic_embed_calibrate_from_depth,
                                    subtree_weight=topic_embed_subtree_weight, max_chars=topic_embed_max_chars)
    if topic_scorer == "llm":
        if not llm or llm.get("backend") == "none":
            raise ValueError("topics.topic_scorer is 'llm' but llm.backend is 'none': "
                             "pick an LLM backend or set topic_scorer: embedding")
        return LLMTopicScorer(make_backend(llm, llm_cache_path), retries=topic_retries,
                              guided=bool(llm.get("guided_json", False)))
    raise ValueError(f"topics.topic_scorer: unknown scorer {topic_scorer!r} (llm | embedding)")
