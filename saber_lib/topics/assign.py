"""Topic assignment (paper 3.2.2): top-down traversal of the ontology tree with a scorer.

At a visited tree node ``v`` the scorer rates the problem against the candidates
``C(v) = [v] + children(v)`` (the root itself is left out of its own candidates, as in the authors'
code: "Mathematics" fits every problem). With raw scores ``s_c``::

    s'_c = s_c / max_{c' in C(v)} s_{c'}          (the most relevant candidate gets 1.0)
    keep child c  iff  s'_c > tau                  (tau = 0.85 in the paper)

kept children are visited next. Because ``v`` is among its own candidates, a walk ends early when
every child scores well below its parent. Leaves are never scored. At the end only the most
specific kept nodes remain: a kept node with a kept descendant is dropped.

The walk is *level-synchronous*: all (problem, node) visits of one depth are scored in one batch,
so a scorer sees thousands of requests at once (an LLM backend gets one big ``chat_batch``; the
embedding scorer does one matrix product).

Scorers (:class:`TopicScorer`): the simple interface is ``score(problem_text, labels) -> scores``;
batched scorers override ``score_visits``. :class:`LLMTopicScorer` asks an LLM through
:mod:`saber_lib.llm` (prompt ``topic_scoring``); :class:`EmbeddingTopicScorer` is the CPU stand-in:
cosine between the problem text and each candidate's readable path ("Algebra > Polynomials >
Quadratic Equation"), optionally sharpened as ``exp(cos / T)`` so that, after max-normalization,
a child is kept iff ``cos_c > max cos - T ln(1/tau)`` (a fixed cosine margin instead of one that
shrinks with the scale of the cosines).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import polars as pl

from ..core.config import DOMAINS
from ..core.progress import Progress
from .scorers import TopicScorer


# ----------------------------------------------------------------------------- traversal
@dataclass
class TopicAssignment:
    """Result of :func:`assign_topics`; lists are per problem."""

    node_ids: list[list[int]]                 # most specific kept nodes (sorted)
    kept: list[list[int]]                     # every kept node, in visiting order
    failures: list[tuple[int, int, str]]      # (problem, visited node, reason)
    visits_per_depth: list[int] = field(default_factory=list)

    @property
    def failed(self) -> np.ndarray:
        f = np.zeros(len(self.node_ids), dtype=bool)
        for p, _, _ in self.failures:
            f[p] = True
        return f


def normalize_scores(s: np.ndarray) -> np.ndarray:
    """``s / max(s)``; all zeros when the maximum is not positive (nothing is kept then)."""
    s = np.asarray(s, dtype=np.float64)
    m = s.max() if s.size else 0.0
    return s / m if m > 0 else np.zeros_like(s)


#: problems walked together: the walk's memory grows with the (problem, node) visits of one depth,
#: which a permissive ``tau`` multiplies, so problems go through the tree in groups of this many
WALK_CHUNK = 4096
#: the most (problem, label) scores one scorer batch asks for; a depth with more visits (only a
#: permissive ``tau`` gives that many: the demo's largest depth holds well under a million) is
#: scored in consecutive batches
MAX_BATCH_SCORES = 4_000_000
#: the most (problem, topic) pairs a walk may keep, projected from the groups walked so far: a
#: threshold so permissive that every problem keeps most of the tree (topics.tau = 0.3 keeps ~6,700
#: of MathWorld's nodes a problem; the paper's 0.85 a handful) would fill the memory long before the
#: topics table is written, and no selection signal could be computed on it
MAX_KEPT = 50_000_000


class TopicWalkTooLarge(ValueError):
    """The walk would keep more (problem, topic) pairs than :data:`MAX_KEPT`."""


def assign_topics(ontology, texts: Sequence[str], scorer: TopicScorer, tau: float,
                  score_root: bool = False, progress: Callable[[int, int], None] | None = None,
                  max_depth: int = 0, chunk: int = WALK_CHUNK) -> TopicAssignment:
    """Top-down traversal (paper 3.2.2) for every problem, one scorer batch per depth and group of
    ``chunk`` problems (each problem's walk is its own, so the groups change no result; they bound
    the memory a permissive ``tau`` needs).

    ``score_root``: put the root among its own candidates (SPEC wording); default off as in the
    authors' code. ``progress(depth, n_visits)`` is called before each batch. ``max_depth`` > 0
    stops the walk after that many levels (nodes deeper than ``max_depth`` are never scored).
    """
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    n = len(texts)
    kept: list[list[int]] = [[] for _ in range(n)]
    failures: list[tuple[int, int, int, str]] = []        # (depth, problem, node, reason)
    per_depth: list[int] = []
    step = max(1, int(chunk))
    for lo in range(0, n, step):
        done = min(n, lo + step)
        _walk(ontology, texts, scorer, tau, range(lo, done), kept, failures, per_depth,
              score_root=score_root, progress=progress, max_depth=max_depth)
        so_far = sum(len(k) for k in kept[:done])
        if so_far * n / done > MAX_KEPT:
            raise TopicWalkTooLarge(
                f"topics.tau = {tau:g} keeps {so_far / done:,.0f} topics a problem on the first {done:,} problems (the "
                f"ontology has {ontology.n_nodes:,} nodes): the {n:,} problems would keep ~{so_far * n / done:,.0f} "
                f"(problem, topic) pairs, more than {MAX_KEPT:,}; raise topics.tau (the paper's 0.85 keeps a handful)")
    failures.sort(key=lambda f: f[0])        # stable: by depth, then problem, as one batch per depth gives them
    final = [ontology.remove_ancestors(k) for k in kept]
    return TopicAssignment(node_ids=final, kept=kept, failures=[f[1:] for f in failures], visits_per_depth=per_depth)


def _walk(ontology, texts, scorer, tau, problems, kept, failures, per_depth, *, score_root, progress, max_depth):
    """The walk of ``problems`` (indices into ``texts``): appends to ``kept``, ``failures`` and the
    visit counts per depth."""
    nch = ontology.n_children()
    frontier = [(p, 0) for p in problems]
    depth = 0
    with Progress("depth", max_depth or ontology.max_depth) as levels:
        while frontier:
            frontier = _walk_depth(ontology, texts, scorer, tau, frontier, depth, kept, failures, per_depth, nch,
                                   score_root=score_root, progress=progress, max_depth=max_depth)
            depth += 1
            levels.update()


def _walk_depth(ontology, texts, scorer, tau, frontier, depth, kept, failures, per_depth, nch, *, score_root,
                progress, max_depth) -> list:
    """One depth of the walk: scores the visits of ``frontier`` in batches; returns the next depth's."""
    frontier = [(p, v) for p, v in frontier if nch[v] > 0]
    if not frontier or (max_depth and depth >= max_depth):
        return []
    if depth == len(per_depth):
        per_depth.append(0)
    per_depth[depth] += len(frontier)
    if progress:
        progress(depth, len(frontier))
    nxt, lo, filled = [], 0, 0
    with Progress("visits", len(frontier)) as visits:
        for i, (_, v) in enumerate(frontier):
            size = int(nch[v]) + (v != 0 or score_root)
            if filled and filled + size > MAX_BATCH_SCORES:    # full: score what came before this visit
                _score_batch(ontology, texts, scorer, tau, frontier[lo:i], depth, kept, failures, nxt, score_root)
                visits.set(i)
                lo, filled = i, 0
            filled += size
        _score_batch(ontology, texts, scorer, tau, frontier[lo:], depth, kept, failures, nxt, score_root)
    return nxt


def _score_batch(ontology, texts, scorer, tau, part, depth, kept, failures, nxt, score_root) -> None:
    """One scorer batch of visits (``part``: (problem, node) pairs): what each keeps goes to ``kept``
    and ``nxt``, what fails to ``failures``."""
    visits = [(p, ([v] if (v != 0 or score_root) else []) + ontology.children(v).tolist()) for p, v in part]
    results = scorer.score_visits(ontology, texts, visits)
    if len(results) != len(visits):
        raise RuntimeError(f"scorer {scorer.name} returned {len(results)} results for {len(visits)} visits")
    for (p, v), (_, cands), res in zip(part, visits, results):
        if isinstance(res, str):
            failures.append((depth, p, v, res))
            continue
        res = np.asarray(res, dtype=np.float64)
        if res.shape != (len(cands),):
            failures.append((depth, p, v, f"{res.shape} scores for {len(cands)} candidates"))
            continue
        norm = normalize_scores(res)
        off = 0 if cands[0] != v else 1
        for c, sn in zip(cands[off:], norm[off:]):
            if sn > tau:
                kept[p].append(c)
                nxt.append((p, c))


# ----------------------------------------------------------------------------- tables
def topics_table(ontology, doc_ids: Sequence[str], assignment: TopicAssignment):
    """``topics/topics.parquet`` (CONTRIBUTING): doc_id, node_ids, urls, domains, failed."""
    failed = assignment.failed
    return pl.DataFrame({
        "doc_id": list(doc_ids),
        "node_ids": [list(map(int, x)) for x in assignment.node_ids],
        "urls": [[ontology.url(v) for v in x] for x in assignment.node_ids],
        "domains": [problem_domains(ontology, x) for x in assignment.node_ids],
        "failed": failed.tolist(),
    }, schema={"doc_id": pl.Utf8, "node_ids": pl.List(pl.Int64), "urls": pl.List(pl.Utf8),
               "domains": pl.List(pl.Utf8), "failed": pl.Boolean})


def failures_table(doc_ids: Sequence[str], assignment: TopicAssignment, ontology=None):
    """One row per failed (problem, node) scoring: doc_id, node_id, url, reason."""
    rows = [(doc_ids[p], int(v), ontology.url(v) if ontology is not None else None, r)
            for p, v, r in assignment.failures]
    return pl.DataFrame(rows, schema={"doc_id": pl.Utf8, "node_id": pl.Int64, "url": pl.Utf8,
                                      "reason": pl.Utf8}, orient="row")


def problem_domains(ontology, nodes: Sequence[int]) -> list[str]:
    """A problem's domains: the union of its topics' domains (sorted)."""
    return sorted({ontology.domain[int(v)] for v in nodes if ontology.domain[int(v)] is not None})


def subdomain(ontology, v: int) -> str | None:
    """The node's depth-2 ancestor title (readable), e.g. "Polynomials" (None above depth 2)."""
    return ontology.readable_title(int(ontology.anc[v, 2])) if ontology.depth[v] >= 2 else None


def domain_agreement(topics, corpus) -> dict:
    """Share of problems with a source domain whose topic domains include it.

    ``topics``/``corpus``: polars frames (``topics.parquet`` / ``corpus.parquet``), joined on doc_id.
    """
    j = topics.join(corpus.select("doc_id", "source_domain"), on="doc_id", how="inner")
    j = j.filter(pl.col("source_domain").is_not_null())
    hit = j.select(pl.col("domains").list.contains(pl.col("source_domain")).alias("hit"))["hit"]
    n = j.height
    return {"n_with_source_domain": n, "n_agree": int(hit.sum()) if n else 0,
            "agreement": float(hit.mean()) if n else float("nan"),
            "n_without_topic": int((j["domains"].list.len() == 0).sum()) if n else 0}


def domain_overlap(topics_a, topics_b) -> dict:
    """How far two topic assignments of the same problems agree on domains (problems in both):
    ``same`` share with equal domain sets, ``shared`` share with at least one domain in common,
    ``jaccard`` mean |A & B| / |A | B| (1 when both are empty)."""
    a = dict(zip(topics_a["doc_id"].to_list(), topics_a["domains"].to_list()))
    b = dict(zip(topics_b["doc_id"].to_list(), topics_b["domains"].to_list()))
    common = [d for d in a if d in b]
    same = shared = jac = 0.0
    for d in common:
        x, y = set(a[d] or []), set(b[d] or [])
        same += x == y
        shared += bool(x & y)
        jac += len(x & y) / len(x | y) if x | y else 1.0
    n = len(common)
    return {"n": n, "same": same / n if n else float("nan"), "shared": shared / n if n else float("nan"),
            "jaccard": jac / n if n else float("nan")}


def domain_confusion(topics, corpus):
    """Rows: source domain; columns: topic domains (+ "none"); cells: share of the row's problems
    whose topic domains include the column (multi-label, so a row can sum above 1)."""
    j = topics.join(corpus.select("doc_id", "source_domain"), on="doc_id", how="inner")
    j = j.filter(pl.col("source_domain").is_not_null())
    out = {"source_domain": [], "n": []}
    cols = list(DOMAINS) + ["none"]
    for c in cols:
        out[c] = []
    for d in DOMAINS:
        sub = j.filter(pl.col("source_domain") == d)
        out["source_domain"].append(d)
        out["n"].append(sub.height)
        for c in DOMAINS:
            out[c].append(float(sub["domains"].list.contains(c).mean()) if sub.height else float("nan"))
        out["none"].append(float((sub["domains"].list.len() == 0).mean()) if sub.height else float("nan"))
    return pl.DataFrame(out)


def topic_frequencies(ontology, topics, top: int = 20):
    """Most frequent assigned topics: url, title, path (readable), problems."""
    ex = topics.select("node_ids").explode("node_ids").drop_nulls()
    if ex.height == 0:
        return pl.DataFrame(schema={"title": pl.Utf8, "path": pl.Utf8, "problems": pl.Int64})
    cnt = ex.group_by("node_ids").len().sort(["len", "node_ids"], descending=[True, False]).head(top)
    return pl.DataFrame({
        "title": [ontology.readable_title(v) for v in cnt["node_ids"].to_list()],
        "path": [ontology.label_path(v) for v in cnt["node_ids"].to_list()],
        "problems": cnt["len"].to_list(),
    })


def domain_shares(ontology, topics) -> "tuple":
    """Weighted domain and (domain, subdomain) shares: each problem's weight 1 split equally over
    its domains, and within the problem over its topics' (domain, subdomain) pairs. Problems with
    no domain are counted under "none"."""
    dom: dict[str, float] = {}
    sub: dict[tuple[str, str], float] = {}
    for nodes in topics["node_ids"].to_list():
        pairs = sorted({(ontology.domain[v], subdomain(ontology, v) or ontology.readable_title(v))
                        for v in nodes if ontology.domain[v] is not None})
        if not pairs:
            dom["none"] = dom.get("none", 0.0) + 1.0
            continue
        ds = sorted({d for d, _ in pairs})
        for d in ds:
            dom[d] = dom.get(d, 0.0) + 1.0 / len(ds)
            sd = [p for p in pairs if p[0] == d]
            for p in sd:
                sub[p] = sub.get(p, 0.0) + 1.0 / len(ds) / len(sd)
    d1 = pl.DataFrame({"domain": list(dom), "weight": list(dom.values())}).sort("domain")
    d2 = pl.DataFrame({"domain": [k[0] for k in sub], "subdomain": [k[1] for k in sub],
                       "weight": list(sub.values())}).sort(["domain", "weight"], descending=[False, True])
    return d1, d2
