"""The MathWorld ontology (paper 3.2.1): a DAG of topics expanded into a tree.

The data file is nested ``{url, title, links: [...]}`` from the root "Mathematics". A topic's
identity is its ``url``; a ``links`` entry is either a nested node or, for a compact file, the url
string of a node defined elsewhere in the file. The DAG has one vertex per url and one edge per
(parent url, child url). It must be acyclic and every referenced url must be defined.

Tree expansion duplicates every topic once per root-to-topic path::

    nodes(T) = { (t_0 = root, t_1, ..., t_d) : (t_{i-1}, t_i) is a DAG edge }

so a topic with k distinct root paths becomes k tree nodes. Links are followed as listed: a parent
that lists the same child twice (the real file has one: Surfaces -> AlgebraicSurfaces) gets two
copies of its subtree, as in the authors' tree (17,113 nodes; 17,022 distinct root paths). Tree nodes are numbered in depth-first
preorder (children in file order), which makes every subtree a contiguous id range
``[v, v + size(v))``: ``u`` is a descendant of ``v`` iff ``v <= u < v + size(v)``. A node's path is
the tuple of node ids from the root; the lowest common ancestor of two nodes is the last entry of
the longest common prefix of their paths.

Domains: the node's top-level area (depth 1 ancestor) mapped by :data:`DOMAIN_OF_AREA`
(``data/README.md``); the root and the areas outside the five domains have none.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import polars as pl

# Top-level MathWorld area (compact title) -> benchmark domain, as in data/README.md.
DOMAIN_OF_AREA: dict[str, str] = {
    "Algebra": "Algebra",
    "Geometry": "Geometry",
    "NumberTheory": "Number Theory",
    "DiscreteMathematics": "Combinatorics",
    "ProbabilityandStatistics": "Combinatorics",
    "RecreationalMathematics": "Combinatorics",
    "CalculusandAnalysis": "Calculus and Analysis",
}


class OntologyError(ValueError):
    """The ontology file cannot be used (cycle, dangling reference, malformed node)."""


@dataclass
class Ontology:
    """DAG of topics plus its tree expansion.

    Topic arrays (index = topic id, ``0 .. n_topics-1``): ``topic_urls``, ``topic_titles``.
    Tree arrays (index = node id, preorder): ``parent`` (-1 for the root), ``depth``, ``topic``
    (topic id), ``size`` (nodes in the subtree incl. itself), ``anc`` (``(n_nodes, max_depth+1)``
    ancestor at each depth, -1 below the node's depth), ``domain`` (str or None).
    """

    topic_urls: list[str]
    topic_titles: list[str]
    dag_edges: int
    parent: np.ndarray
    depth: np.ndarray
    topic: np.ndarray
    domain_map: dict[str, str] = field(default_factory=lambda: dict(DOMAIN_OF_AREA))

    def __post_init__(self):
        n = len(self.parent)
        self.parent = np.asarray(self.parent, dtype=np.int64)
        self.depth = np.asarray(self.depth, dtype=np.int64)
        self.topic = np.asarray(self.topic, dtype=np.int64)
        if n == 0 or self.parent[0] != -1:
            raise OntologyError("node 0 must be the root (parent -1)")
        if np.any(self.parent[1:] >= np.arange(1, n)) or np.any(self.parent[1:] < 0):
            raise OntologyError("tree nodes must be in preorder (every parent id below its child's)")
        # children lists (CSR, in id order = file order)
        order = np.argsort(self.parent[1:], kind="stable") + 1
        counts = np.bincount(self.parent[1:], minlength=n)
        self.child_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.child_idx = order.astype(np.int64)
        # subtree sizes (children have larger ids than parents in preorder)
        size = np.ones(n, dtype=np.int64)
        for v in range(n - 1, 0, -1):
            size[self.parent[v]] += size[v]
        self.size = size
        if np.any(np.arange(n) + size > n):
            raise OntologyError("tree nodes are not in preorder")
        self.max_depth = int(self.depth.max())
        anc = np.full((n, self.max_depth + 1), -1, dtype=np.int64)
        anc[0, 0] = 0
        for v in range(1, n):
            d = self.depth[v]
            anc[v, :d] = anc[self.parent[v], :d]
            anc[v, d] = v
        self.anc = anc
        area = np.where(self.depth >= 1, anc[:, min(1, self.max_depth)], -1)
        titles = self.topic_titles
        self.area = [titles[self.topic[a]] if a >= 0 else None for a in area]
        self.domain = [self.domain_map.get(a) if a is not None else None for a in self.area]
        self._nodes_of_topic: dict[int, list[int]] | None = None
        self._readable: dict[int, str] = {}   # topic id -> readable title (the walk asks it per candidate per visit)
        self._url_index = {u: i for i, u in enumerate(self.topic_urls)}

    # ------------------------------------------------------------------ sizes (docs/public_api.md)
    @property
    def n_topics(self) -> int:
        return len(self.topic_urls)

    @property
    def n_nodes(self) -> int:
        return len(self.parent)

    @property
    def n_edges(self) -> int:
        return self.dag_edges

    # ------------------------------------------------------------------ per node
    def children(self, v: int) -> np.ndarray:
        return self.child_idx[self.child_ptr[v]:self.child_ptr[v + 1]]

    def n_children(self) -> np.ndarray:
        return np.diff(self.child_ptr)

    def url(self, v: int) -> str:
        return self.topic_urls[self.topic[v]]

    def title(self, v: int) -> str:
        return self.topic_titles[self.topic[v]]

    def node_path(self, v: int) -> tuple[int, ...]:
        """Node ids from the root to ``v`` (inclusive)."""
        return tuple(int(x) for x in self.anc[v, : self.depth[v] + 1])

    def title_path(self, v: int) -> list[str]:
        """Titles from the root to ``v`` (inclusive)."""
        return [self.title(int(x)) for x in self.node_path(v)]

    def nodes_of_url(self, url: str) -> list[int]:
        """The tree nodes (one per root path) of a topic url."""
        if self._nodes_of_topic is None:
            d: dict[int, list[int]] = {}
            for v, t in enumerate(self.topic.tolist()):
                d.setdefault(t, []).append(v)
            self._nodes_of_topic = d
        return self._nodes_of_topic.get(self._url_index[url], [])

    # ------------------------------------------------------------------ ancestry
    def is_ancestor(self, a, b) -> np.ndarray:
        """True where node ``a`` is a proper ancestor of node ``b`` (numpy-broadcasting)."""
        a, b = np.asarray(a), np.asarray(b)
        return (a < b) & (b < a + self.size[a])

    def lca(self, a, b) -> np.ndarray:
        """Lowest common ancestor (longest common prefix of the node paths); numpy-broadcasting."""
        a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
        pa, pb = self.anc[a], self.anc[b]
        same = (pa == pb) & (pa >= 0)
        # prefix property: equal ancestors at depth d imply equal ancestors above d
        d = same.sum(axis=-1) - 1
        return np.take_along_axis(pa, d[..., None], axis=-1)[..., 0]

    def remove_ancestors(self, nodes: Iterable[int]) -> list[int]:
        """Keep only the most specific nodes: drop every node that is an ancestor of another."""
        v = np.unique(np.asarray(list(nodes), dtype=np.int64))
        if v.size <= 1:
            return v.tolist()
        # in sorted preorder, v[i] is an ancestor of some other node iff it is one of v[i+1]
        keep = ~self.is_ancestor(v[:-1], v[1:])
        return np.concatenate([v[:-1][keep], v[-1:]]).tolist()

    # ------------------------------------------------------------------ tables and labels
    def nodes_table(self):
        """``ontology/nodes.parquet`` (CONTRIBUTING): node_id, parent_id, url, title, depth, path, domain."""
        return pl.DataFrame({
            "node_id": np.arange(self.n_nodes, dtype=np.int64),
            "parent_id": self.parent,
            "url": [self.topic_urls[t] for t in self.topic.tolist()],
            "title": [self.topic_titles[t] for t in self.topic.tolist()],
            "depth": self.depth,
            "path": [self.title_path(v) for v in range(self.n_nodes)],
            "domain": self.domain,
        }, schema={"node_id": pl.Int64, "parent_id": pl.Int64, "url": pl.Utf8, "title": pl.Utf8,
                   "depth": pl.Int64, "path": pl.List(pl.Utf8), "domain": pl.Utf8})

    def readable_title(self, v: int) -> str:
        t = int(self.topic[v])
        if t not in self._readable:
            self._readable[t] = humanize_title(self.topic_titles[t], self._vocab())
        return self._readable[t]

    def label_path(self, v: int, sep: str = " > ", include_root: bool = False) -> str:
        """Readable path text, e.g. ``"Algebra > Polynomials > Quadratic Equation"``."""
        ids = self.node_path(v)[(0 if include_root else 1):] or (0,)
        return sep.join(self.readable_title(int(x)) for x in ids)

    def _vocab(self) -> frozenset:
        if not hasattr(self, "_vocab_cache"):
            self._vocab_cache = title_vocabulary(self.topic_titles)
        return self._vocab_cache


# ---------------------------------------------------------------------------- loading
def _parse_nested(data, path: Path):
    """Walk the nested JSON; return (root url, titles {url: title}, children {url: [urls]})."""
    titles: dict[str, str] = {}
    children: dict[str, list[str]] = {}
    refs: list[tuple[str, str]] = []  # (parent url, referenced url) for string links

    def fail(msg, where):
        raise OntologyError(f"{path}: {msg} (at {' / '.join(where) or 'the top level'})")

    stack = [(data, ())]
    root_url = None
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            fail(f"a node must be an object, got {type(node).__name__}", where)
        url, title = node.get("url"), node.get("title")
        if not isinstance(url, str) or not url:
            fail("node without a 'url'", where)
        if not isinstance(title, str) or not title:
            fail(f"node {url} without a 'title'", where)
        here = where + (title,)
        if root_url is None:
            root_url = url
        if url in titles and titles[url] != title:
            fail(f"url {url} has two titles: {titles[url]!r} and {title!r}", here)
        titles[url] = title
        links = node.get("links", [])
        if not isinstance(links, list):
            fail(f"'links' of {url} must be a list", here)
        kids = []
        for c in links:
            if isinstance(c, str):
                refs.append((url, c))
                kids.append(c)
            else:
                if isinstance(c, dict) and isinstance(c.get("url"), str):
                    kids.append(c["url"])
                stack.append((c, here))
        prev = children.get(url)
        if prev is None or (not prev and kids):
            children[url] = kids
        elif kids and set(kids) != set(prev):
            # the same topic listed with different children: the DAG takes the union
            children[url] = prev + [k for k in kids if k not in set(prev)]
    for parent, ref in refs:
        if ref not in titles:
            raise OntologyError(f"{path}: dangling reference: {parent} links to {ref}, which is not defined")
    return root_url, titles, children


def _check_acyclic(root: str, children: dict[str, list[str]], path) -> None:
    """Iterative DFS with colours; raises naming one cycle."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {u: WHITE for u in children}
    for start in [root] + list(children):
        if colour.get(start, WHITE) != WHITE:
            continue
        stack = [(start, iter(children.get(start, ())))]
        colour[start] = GREY
        trail = [start]
        while stack:
            u, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[u] = BLACK
                stack.pop()
                trail.pop()
                continue
            c = colour.get(nxt, WHITE)
            if c == GREY:
                cyc = trail[trail.index(nxt):] + [nxt]
                raise OntologyError(f"{path}: the ontology has a cycle: {' -> '.join(cyc)}")
            if c == WHITE:
                colour[nxt] = GREY
                trail.append(nxt)
                stack.append((nxt, iter(children.get(nxt, ()))))


def build_ontology(root: str, titles: dict[str, str], children: dict[str, Sequence[str]],
                   domain_map: dict[str, str] | None = None, source="<dag>") -> Ontology:
    """Tree-expand a DAG given as ``children[url] -> [child urls]`` (file order kept)."""
    for u, kids in children.items():
        for k in kids:
            if k not in titles:
                raise OntologyError(f"{source}: dangling reference: {u} links to {k}, which is not defined")
    if root not in titles:
        raise OntologyError(f"{source}: root {root} is not defined")
    _check_acyclic(root, {u: list(k) for u, k in children.items()}, source)
    reachable = []
    seen = set()
    todo = [root]
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        reachable.append(u)
        todo.extend(children.get(u, ()))
    urls = sorted(seen, key=lambda u: (u != root, u))
    tid = {u: i for i, u in enumerate(urls)}
    n_edges = sum(len(set(children.get(u, ()))) for u in urls)
    parent, depth, topic = [], [], []
    stack = [(root, -1, 0)]
    while stack:  # preorder, children in file order
        u, p, d = stack.pop()
        v = len(parent)
        parent.append(p)
        depth.append(d)
        topic.append(tid[u])
        for k in reversed(list(children.get(u, ()))):
            stack.append((k, v, d + 1))
    return Ontology(topic_urls=urls, topic_titles=[titles[u] for u in urls], dag_edges=n_edges,
                    parent=np.array(parent), depth=np.array(depth), topic=np.array(topic),
                    domain_map=dict(DOMAIN_OF_AREA if domain_map is None else domain_map))


def load_ontology(path, domain_map: dict[str, str] | None = None) -> Ontology:
    """Load ``mathworld_tree.json`` (paper 3.2.1): DAG by url, checked acyclic, expanded into a tree.

    Returns an :class:`Ontology` with ``n_topics`` (unique urls), ``n_nodes`` (tree nodes, one per
    root-to-topic path) and ``max_depth`` (root = 0). Raises :class:`OntologyError` naming the
    file for a cycle, a dangling reference or a malformed node.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise OntologyError(f"{path}: ontology file not found") from None
    except json.JSONDecodeError as e:
        raise OntologyError(f"{path} line {e.lineno}: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise OntologyError(f"{path}: the top level must be the root node object")
    root, titles, children = _parse_nested(data, path)
    return build_ontology(root, titles, children, domain_map, source=path)


def ontology_from_nodes(df, domain_map: dict[str, str] | None = None) -> Ontology:
    """Rebuild the :class:`Ontology` from ``ontology/nodes.parquet`` (a polars DataFrame or path)."""
    if not isinstance(df, pl.DataFrame):
        df = pl.read_parquet(df)
    df = df.sort("node_id")
    if df["node_id"].to_list() != list(range(df.height)):
        raise OntologyError("nodes table: node_id must be 0 .. n-1")
    urls = df["url"].to_list()
    titles = df["title"].to_list()
    uniq = sorted(set(urls), key=lambda u: (u != urls[0], u))
    tid = {u: i for i, u in enumerate(uniq)}
    ttl = {}
    for u, t in zip(urls, titles):
        ttl[u] = t
    parent = df["parent_id"].to_numpy()
    edges = {(urls[p], urls[c]) for c, p in enumerate(parent.tolist()) if p >= 0}
    return Ontology(topic_urls=uniq, topic_titles=[ttl[u] for u in uniq], dag_edges=len(edges),
                    parent=parent, depth=df["depth"].to_numpy(),
                    topic=np.array([tid[u] for u in urls]),
                    domain_map=dict(DOMAIN_OF_AREA if domain_map is None else domain_map))


# ---------------------------------------------------------------------------- readable titles
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z']+|[A-Z]+|[0-9]+|[^A-Za-z0-9\s]")
# MathWorld's compact titles glue lower-case function words to the previous word
# ("CalculusandAnalysis", "NumberoftheBeast"); a split starts with one of these ...
_LEAD = ("of", "and", "the", "by", "from", "with", "to", "vs", "at")
# ... and may continue with any of these.
_GLUE = _LEAD + ("a", "an", "in", "on")
_GLUE_RE = re.compile("(?:" + "|".join(sorted(_GLUE, key=len, reverse=True)) + ")+")


def _camel_words(title: str) -> list[str]:
    return _CAMEL.findall(title)


def title_vocabulary(titles: Iterable[str]) -> frozenset:
    """Lower-case words that occur in the titles (camel-case split) — the known base words."""
    return frozenset(w.lower() for t in titles for w in _camel_words(t) if w.isalpha())


def _split_glue(word: str) -> list[str]:
    """All ways ``s`` splits into function words, fewest pieces first (e.g. 'ofthe' -> of the)."""
    out: list[str] = []

    def rec(s, acc):
        if not s:
            out.append(" ".join(acc))
            return
        for g in sorted(_GLUE, key=len, reverse=True):
            if s.startswith(g):
                rec(s[len(g):], acc + [g])
    rec(word, [])
    return out


def humanize_title(title: str, vocab: frozenset = frozenset()) -> str:
    """Readable words from a compact MathWorld title.

    ``"CalculusandAnalysis"`` -> ``"Calculus and Analysis"``; a capitalized word ending in function
    words (of, and, the, ...) is split when the remaining base is a known word (``vocab``) or the
    suffix starts with "of"; "Island" stays whole.
    """
    words = []
    for w in _camel_words(title):
        if w[:1].isupper() and len(w) > 3:
            done = False
            for i in range(3, len(w) - 1):
                base, suf = w[:i], w[i:]
                if not suf.startswith(_LEAD) or not _GLUE_RE.fullmatch(suf):
                    continue
                if base.lower() in vocab or (suf.startswith("of") and len(base) >= 4):
                    words.append(base)
                    words.extend(_split_glue(suf)[0].split())
                    done = True
                    break
            if done:
                continue
        words.append(w)
    text = " ".join(words)
    return re.sub(r"\s*-\s*", "-", text).replace(" '", "'")
