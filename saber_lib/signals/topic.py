"""Topic similarity (paper 3.2.2): information content, Lin similarity, Best-Match Average.

Over the ontology *tree* (one node per root path, :mod:`saber_lib.ontology.tree`) and the topic
annotations of the corpus (each problem's list of most specific tree nodes)::

    c(t)   = number of annotations at t or at any descendant of t
    N      = total number of annotations (sum over problems of their number of topics)
    p(t)   = c(t) / N,  clamped below at 1e-12
    IC(t)  = -ln p(t)                                    (IC(root) = 0)
    Lin(a, b) = 2 IC(LCA(a, b)) / (IC(a) + IC(b) + 1e-12)          Lin(t, t) := 1
    BMA(X, Y) = ( sum_{t in X} max_{u in Y} Lin(t, u) + sum_{u in Y} max_{t in X} Lin(t, u) )
                / (|X| + |Y|),              0 when X or Y is empty

``lin_similarity`` and ``bma`` are the public API (docs/public_api.md; re-exported by
:mod:`saber_lib.signals`). For many pairs at once: build the dense Lin matrix over the topics in use
(:func:`lin_matrix`), turn each problem's topics into rows of a padded index array
(:func:`pad_sets`), then :func:`bma_block` (a tile: every row set against every column set) or
:func:`bma_many` (aligned pairs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

LIN_EPS = 1e-12   # the paper's epsilon in Lin's denominator
P_FLOOR = 1e-12   # the authors' clamp of p(t) before the logarithm


# ----------------------------------------------------------------------------- public API
def lin_similarity(ic_lca, ic_a, ic_b, eps: float = LIN_EPS):
    """Lin similarity ``2*ic_lca / (ic_a + ic_b + eps)`` (numpy-broadcasting)."""
    return 2.0 * np.asarray(ic_lca, dtype=np.float64) / (
        np.asarray(ic_a, dtype=np.float64) + np.asarray(ic_b, dtype=np.float64) + eps)


def bma(sim) -> float:
    """Best-Match Average (rcmax-average) of ``sim[i, j] = Lin(topic i of X, topic j of Y)``.

    ``(sum_i max_j sim[i, j] + sum_j max_i sim[i, j]) / (n_X + n_Y)``; 0.0 when either side is empty.
    """
    s = np.asarray(sim, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"bma expects a 2-D array, got shape {s.shape}")
    m, n = s.shape
    if m == 0 or n == 0:
        return 0.0
    return float((s.max(axis=1).sum() + s.max(axis=0).sum()) / (m + n))


# ----------------------------------------------------------------------------- information content
def annotation_counts(ontology, node_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, int]:
    """``(c, N)``: c[t] = annotations at tree node t or below, N = total annotations.

    Subtrees are contiguous preorder ranges, so ``c[t] = S[t + size(t)] - S[t]`` with ``S`` the
    prefix sums of the per-node annotation counts.
    """
    flat = np.fromiter((v for nodes in node_lists for v in nodes), dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= ontology.n_nodes):
        raise ValueError("an annotation names a node id outside the ontology")
    own = np.bincount(flat, minlength=ontology.n_nodes)
    S = np.concatenate([[0], np.cumsum(own)])
    ids = np.arange(ontology.n_nodes)
    return S[ids + ontology.size] - S[ids], int(flat.size)


def information_content(ontology, node_lists: Sequence[Sequence[int]],
                        p_floor: float = P_FLOOR) -> np.ndarray:
    """IC per tree node: ``-ln(max(c(t)/N, p_floor))``; the root gets 0 (also when N = 0)."""
    c, N = annotation_counts(ontology, node_lists)
    p = c / N if N > 0 else np.zeros(len(c))
    ic = -np.log(np.maximum(p, p_floor))
    ic[0] = 0.0
    return ic


def lin_matrix(ontology, ic: np.ndarray, nodes: Sequence[int], eps: float = LIN_EPS,
               block: int = 512) -> np.ndarray:
    """Dense ``(U, U)`` float32 Lin matrix over ``nodes`` (LCA in the tree), diagonal set to 1."""
    nodes = np.asarray(nodes, dtype=np.int64)
    U = len(nodes)
    out = np.empty((U, U), dtype=np.float32)
    ic = np.asarray(ic, dtype=np.float64)
    for i in range(0, U, block):
        a = nodes[i:i + block]
        l = ontology.lca(a[:, None], nodes[None, :])
        out[i:i + block] = lin_similarity(ic[l], ic[a][:, None], ic[nodes][None, :], eps)
    np.fill_diagonal(out, 1.0)
    return out


# ----------------------------------------------------------------------------- padded topic sets
@dataclass(frozen=True)
class PaddedSets:
    """Topic sets as a padded index array: ``idx[i, :size[i]]`` are row indices into a Lin matrix.

    ``idx`` int32 ``(n, m)``, ``mask`` bool ``(n, m)`` (True = a real entry), ``size`` int32 ``(n,)``;
    padding entries are 0 and masked out. ``m >= 1`` even when every set is empty.
    """

    idx: np.ndarray
    mask: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return len(self.size)

    def take(self, rows) -> "PaddedSets":
        rows = np.asarray(rows)
        return PaddedSets(self.idx[rows], self.mask[rows], self.size[rows])

    def __getitem__(self, sl) -> "PaddedSets":
        return PaddedSets(self.idx[sl], self.mask[sl], self.size[sl])


def pad_sets(sets: Sequence[Sequence[int]], index_of: dict | None = None) -> PaddedSets:
    """Pad lists of indices (or of node ids, mapped through ``index_of``) into :class:`PaddedSets`."""
    n = len(sets)
    size = np.fromiter((len(s) for s in sets), dtype=np.int32, count=n)
    m = max(1, int(size.max()) if n else 1)
    idx = np.zeros((n, m), dtype=np.int32)
    flat = np.fromiter((index_of[v] if index_of is not None else v for s in sets for v in s),
                       dtype=np.int64, count=int(size.sum()))
    mask = np.arange(m)[None, :] < size[:, None]
    idx[mask] = flat
    return PaddedSets(idx, mask, size)


def _as_padded(s) -> PaddedSets:
    return s if isinstance(s, PaddedSets) else pad_sets(s)


def _best_match(L: np.ndarray, sets: PaddedSets, pos: np.ndarray) -> np.ndarray:
    """``M[i, :] = max_{k < size[i]} L[pos[i, k], :]`` (0 for an empty set), float32."""
    M = np.zeros((len(sets), L.shape[1]), dtype=np.float32)
    for j in range(sets.idx.shape[1]):
        has = sets.mask[:, j]
        if not has.any():
            break
        if has.all():
            np.maximum(M, L[pos[:, j]], out=M)
        else:
            rows = np.flatnonzero(has)
            M[rows] = np.maximum(M[rows], L[pos[rows, j]])
    return M


def _sum_matched(M: np.ndarray, sets: PaddedSets, pos: np.ndarray) -> np.ndarray:
    """``out[r, c] = sum_{k < size[c]} M[r, pos[c, k]]`` as a sparse product ``(W @ M.T).T``."""
    from scipy import sparse  # only the sparse path needs it

    W = sparse.csr_matrix((np.ones(int(sets.size.sum()), dtype=np.float32),
                           (np.nonzero(sets.mask)[0], pos[sets.mask])),
                          shape=(len(sets), M.shape[1]))
    return np.asarray(W @ M.T).T


def _positions(sets: PaddedSets) -> tuple[np.ndarray, np.ndarray]:
    """Distinct indices of a batch of sets and each entry's position among them (padding -> 0)."""
    uniq, pos = np.unique(sets.idx[sets.mask], return_inverse=True)
    full = np.zeros(sets.idx.shape, dtype=np.int64)
    full[sets.mask] = pos
    return uniq, full


def bma_block(lin: np.ndarray, rows_sets, cols_sets) -> np.ndarray:
    """BMA of every row set against every column set: ``(len(rows), len(cols))`` float32.

    ``lin`` is the symmetric ``(U, U)`` Lin matrix (:func:`lin_matrix`); ``rows_sets`` and
    ``cols_sets`` are :class:`PaddedSets` of indices into it (lists of lists are padded on the
    fly). With ``L`` the Lin sub-matrix between the topics of the rows and those of the columns,
    ``R[r, u] = max_{t in X_r} L[t, u]`` and ``C[c, t] = max_{u in Y_c} L[t, u]``::

        BMA(X_r, Y_c) = (sum_{u in Y_c} R[r, u] + sum_{t in X_r} C[c, t]) / (|X_r| + |Y_c|)

    The sums are sparse products with the set-incidence matrices, so a tile costs
    O(R * U_c * m + C * U_r * k + (R + C) * nnz) instead of O(R * C * m * k).
    """
    rows, cols = _as_padded(rows_sets), _as_padded(cols_sets)
    out = np.zeros((len(rows), len(cols)), dtype=np.float32)
    if len(rows) == 0 or len(cols) == 0 or not rows.size.any() or not cols.size.any():
        return out
    urow, pos_r = _positions(rows)
    ucol, pos_c = _positions(cols)
    L = np.asarray(lin[np.ix_(urow, ucol)], dtype=np.float32)             # (Ur, Uc)
    A = _sum_matched(_best_match(L, rows, pos_r), cols, pos_c)               # (R, C)
    B = _sum_matched(_best_match(np.ascontiguousarray(L.T), cols, pos_c), rows, pos_r)  # (C, R)
    denom = rows.size[:, None].astype(np.float32) + cols.size[None, :].astype(np.float32)
    ok = (rows.size[:, None] > 0) & (cols.size[None, :] > 0)
    np.divide(A + B.T, denom, out=out, where=ok)
    return out


#: the most bytes one block of :func:`bma_many`'s (pairs x m x k) similarity array may take
BMA_MANY_BYTES = 64 << 20


def bma_many(lin: np.ndarray, sets_a, sets_b, max_bytes: int = BMA_MANY_BYTES) -> np.ndarray:
    """BMA of aligned pairs ``(sets_a[i], sets_b[i])``: ``(n,)`` float32. Pairs are taken in blocks
    whose ``(pairs, m, k)`` similarity array stays under ``max_bytes`` (m, k: the largest sets of
    the block, not the padding of the whole corpus), so a permissive topic threshold that gives
    problems hundreds of topics costs time, not all the memory."""
    a, b = _as_padded(sets_a), _as_padded(sets_b)
    if len(a) != len(b):
        raise ValueError(f"bma_many: {len(a)} sets against {len(b)}")
    lin = np.asarray(lin, dtype=np.float32)
    out = np.zeros(len(a), dtype=np.float32)
    if len(a) == 0:
        return out
    m, k = max(1, int(a.size.max())), max(1, int(b.size.max()))
    step = max(1, int(max_bytes) // (4 * m * k))
    for lo in range(0, len(a), step):
        out[lo:lo + step] = _bma_aligned(lin, a[lo:lo + step], b[lo:lo + step])
    return out


def _bma_aligned(lin: np.ndarray, a: PaddedSets, b: PaddedSets) -> np.ndarray:
    """:func:`bma_many` on one block, its padding cut to the block's largest sets."""
    m, k = max(1, int(a.size.max())), max(1, int(b.size.max()))
    ai, am, bi, bm = a.idx[:, :m], a.mask[:, :m], b.idx[:, :k], b.mask[:, :k]
    S = lin[ai[:, :, None], bi[:, None, :]]                  # (n, m, k)
    valid = am[:, :, None] & bm[:, None, :]
    S = np.where(valid, S, -np.inf)
    with np.errstate(invalid="ignore"):
        row = np.where(am, S.max(axis=2), 0.0).sum(axis=1)
        col = np.where(bm, S.max(axis=1), 0.0).sum(axis=1)
    denom = (a.size + b.size).astype(np.float32)
    ok = (a.size > 0) & (b.size > 0)
    out = np.zeros(len(a), dtype=np.float32)
    np.divide(row + col, denom, out=out, where=ok)
    return out


# ----------------------------------------------------------------------------- from topics to sets
@dataclass
class TopicSets:
    """What the all-pairs code needs: the Lin matrix over the used nodes and the padded sets."""

    nodes: np.ndarray        # tree node id of each Lin row
    ic: np.ndarray           # IC per tree node (all nodes)
    lin: np.ndarray          # (U, U) float32
    sets: PaddedSets         # one row per problem, indices into ``nodes``


def topic_sets(ontology, node_lists: Sequence[Sequence[int]], p_floor: float = P_FLOOR,
               eps: float = LIN_EPS) -> TopicSets:
    """IC from the annotations, dense Lin over the nodes in use, and padded per-problem sets."""
    ic = information_content(ontology, node_lists, p_floor)
    used = np.unique(np.fromiter((v for s in node_lists for v in s), dtype=np.int64))
    index_of = {int(v): i for i, v in enumerate(used)}
    return TopicSets(nodes=used, ic=ic, lin=lin_matrix(ontology, ic, used, eps),
                     sets=pad_sets([[int(v) for v in s] for s in node_lists], index_of))
