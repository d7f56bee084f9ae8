"""All-pairs signals over the whole corpus, in tiles, on all cores (paper 3.4, App. B.2).

For every ordered pair ``(q, c)``, ``q != c`` (the authors' code also computes full rows, N^2 - N
pairs), two signals:

* ``sim_topic(q, c) = BMA(X_q, X_c)`` with ``Lin`` between topics (rcmax-average)::

      BMA(X, Y) = ( sum_{t in X} max_{u in Y} Lin(t, u) + sum_{u in Y} max_{t in X} Lin(t, u) ) / (|X| + |Y|)

  0 when either set is empty.
* ``sim_summ(q, c) = |T_q & T_c| / |T_q | T_c|`` (Jaccard of summary token sets; ``jaccard_empty``
  when both are empty).

Nothing of size N^2 is kept: for each query a sparse joint histogram of (sim_topic, sim_summ) and
the pairs above a low floor are written (format: :mod:`saber_lib.signals.store`).

How a tile is computed (``a`` queries x ``b`` candidates; all products are scipy CSR @ dense):

* intersections ``I = T_cand @ T_query^T`` (token incidence, CSR times a dense ``V x a`` block);
  ``|A | B| = |A| + |B| - I``.
* ``M2[x, u] = max_{t in X_x} Lin(t, u)`` (``a x U``), ``S2 = Y_inc @ M2^T`` where ``Y_inc`` is the
  CSR topic incidence of the candidates: ``S2[y, x] = sum_{u in Y_y} max_{t in X_x} Lin(t, u)``.
* ``M1[y, t] = max_{u in Y_y} Lin(u, t)`` for the topics ``t`` of the query block (candidates are
  processed in order of decreasing topic count, so pass ``k`` only touches candidates with more
  than ``k`` topics), ``S1 = (X_inc @ M1^T)^T``: ``S1[y, x] = sum_{t in X_x} max_{u in Y_y} Lin(t, u)``.
* ``BMA = (S1 + S2) / (|X| + |Y|)``.

Tiles are grouped in tasks of one query block against all candidates; an :class:`Executor` runs
the tasks (a local process pool here; a Dask or Ray executor only needs ``map``).
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..core.parallel import Executor, LocalProcessExecutor
from ..core.progress import Progress
from .store import Appender, float16_bin_lut

# bytes of working memory per pair of a tile (float64 intermediates, codes, masks), measured
# loosely; the tile size is derived from memory_budget_mb with it.
BYTES_PER_PAIR = 96


# ----------------------------------------------------------------------------- inputs
@dataclass
class PairInputs:
    """Everything a tile needs, as plain arrays (picklable; shared with workers once).

    ``tokens``: CSR ``N x V`` 0/1 float32 summary-token incidence; ``n_tokens`` its row sums.
    ``topic_pad``: ``N x m`` int32 local topic indices, padded with ``U`` (a zero row/column of
    ``lin``); ``n_topics``: topics per problem. ``lin``: ``(U+1) x (U+1)`` float64 Lin matrix.
    ``col_order``: candidates sorted by decreasing topic count; ``col_pos`` its inverse.
    ``exclude``: dict query row -> int array of candidate rows to leave out (besides ``q`` itself).
    """

    tokens: sp.csr_matrix
    n_tokens: np.ndarray
    topic_pad: np.ndarray
    n_topics: np.ndarray
    lin: np.ndarray
    topic_inc: sp.csr_matrix
    col_order: np.ndarray
    col_pos: np.ndarray
    hist_bins: int
    floor_topic: float
    floor_summ: float
    jaccard_empty: float
    exclude: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    def topic_pair_evaluations(self) -> int:
        """Lin values that BMA looks at over every ordered pair counted (self and excluded pairs left
        out): ``sum |X_q| x |X_c|``, the work a pair costs, beside the number of pairs."""
        return self.block_work(0, self.n)[1]

    def block_work(self, r0: int, r1: int) -> tuple[int, int]:
        """(ordered pairs, topic-pair evaluations) of the queries ``r0..r1-1`` against all candidates,
        self and excluded pairs left out: the two quantities a block's cost grows with."""
        k = self.n_topics.astype(np.int64)
        excl = [q for q in self.exclude if r0 <= q < r1]
        n_excl = sum(len(self.exclude[q]) for q in excl)
        ev_excl = sum(int(k[q] * k[self.exclude[q]].sum()) for q in excl)
        kb = k[r0:r1]
        return ((r1 - r0) * (self.n - 1) - n_excl,
                int(kb.sum()) * int(k.sum()) - int((kb * kb).sum()) - ev_excl)

    @property
    def n_lin(self) -> int:
        return self.lin.shape[0] - 1


def build_inputs(token_sets: Sequence[Iterable[str]], topic_sets: Sequence[Sequence[int]],
                 lin: np.ndarray, *, hist_bins: int, floor_topic: float, floor_summ: float,
                 jaccard_empty: float = 0.0, exclude_pairs=None) -> PairInputs:
    """Prepare :class:`PairInputs`.

    ``token_sets[i]``: the summary tokens of problem ``i`` (see ``signals.summary_tokens``).
    ``topic_sets[i]``: indices into ``lin`` (``U x U``, ``lin[s, t] = Lin(s, t)``) of its topics.
    ``exclude_pairs``: optional iterable of ``(i, j)`` row pairs to leave out in both directions
    (e.g. near-duplicates still in the corpus); self-pairs are always left out.
    """
    n = len(token_sets)
    if len(topic_sets) != n:
        raise ValueError(f"{n} token sets but {len(topic_sets)} topic sets")
    lin = np.asarray(lin)
    lin = lin.astype(np.float32 if lin.dtype == np.float32 else np.float64, copy=False)
    if lin.ndim != 2 or lin.shape[0] != lin.shape[1]:
        raise ValueError(f"lin must be a square matrix, got shape {lin.shape}")
    u = lin.shape[0]
    # token incidence
    vocab: dict[str, int] = {}
    indptr = np.zeros(n + 1, dtype=np.int64)
    idx: list[int] = []
    for i, toks in enumerate(token_sets):
        for t in sorted(set(toks)):
            idx.append(vocab.setdefault(t, len(vocab)))
        indptr[i + 1] = len(idx)
    tokens = sp.csr_matrix((np.ones(len(idx), np.float32), np.asarray(idx, np.int32), indptr),
                           shape=(n, max(len(vocab), 1)))
    n_tokens = np.diff(indptr).astype(np.float64)
    # topics, padded
    sets = [np.unique(np.asarray(s, dtype=np.int64)) for s in topic_sets]
    for i, s in enumerate(sets):
        if len(s) and (s[0] < 0 or s[-1] >= u):
            raise ValueError(f"topic set of row {i} has an index outside the Lin matrix (size {u})")
    n_topics = np.array([len(s) for s in sets], dtype=np.int64)
    m = max(1, int(n_topics.max()) if n else 1)
    pad = np.full((n, m), u, dtype=np.int32)
    for i, s in enumerate(sets):
        pad[i, :len(s)] = s
    lin_p = np.zeros((u + 1, u + 1), dtype=lin.dtype)  # float32 stays float32 (sums are float64)
    lin_p[:u, :u] = lin
    tind = np.concatenate([np.zeros(1, np.int64), np.cumsum(n_topics)])
    tidx = np.concatenate(sets).astype(np.int32) if n and tind[-1] else np.zeros(0, np.int32)
    topic_inc = sp.csr_matrix((np.ones(len(tidx)), tidx, tind), shape=(n, u + 1))
    col_order = np.argsort(-n_topics, kind="stable").astype(np.int64)
    col_pos = np.empty(n, dtype=np.int64)
    col_pos[col_order] = np.arange(n)
    excl: dict[int, list[int]] = {}
    for i, j in (exclude_pairs or ()):
        i, j = int(i), int(j)
        if i == j:
            continue
        excl.setdefault(i, []).append(j)
        excl.setdefault(j, []).append(i)
    exclude = {k: np.unique(np.asarray(v, np.int64)) for k, v in excl.items()}
    return PairInputs(tokens=tokens, n_tokens=n_tokens, topic_pad=pad, n_topics=n_topics, lin=lin_p,
                      topic_inc=topic_inc, col_order=col_order, col_pos=col_pos, hist_bins=hist_bins,
                      floor_topic=float(floor_topic), floor_summ=float(floor_summ),
                      jaccard_empty=float(jaccard_empty), exclude=exclude)


# ----------------------------------------------------------------------------- tile kernel
def tile_signals(inp: PairInputs, rows: np.ndarray, c0: int, c1: int):
    """Both signals for queries ``rows`` against candidates ``col_order[c0:c1]``.

    Returns ``(topic, summ)``, float64 arrays of shape ``(c1 - c0, len(rows))`` (candidate-major),
    self-pairs included (the caller masks them).
    """
    cols = inp.col_order[c0:c1]
    a = len(rows)
    # --- Jaccard: I = T_c @ T_q^T
    tq = inp.tokens[rows]
    tq_dense_t = np.zeros((inp.tokens.shape[1], a), dtype=np.float32)
    rr = np.repeat(np.arange(a), np.diff(tq.indptr))
    tq_dense_t[tq.indices, rr] = 1.0
    inter = np.asarray(inp.tokens[cols] @ tq_dense_t, dtype=np.float64)
    union = inp.n_tokens[cols][:, None] + inp.n_tokens[rows][None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        summ = inter / union
    summ[union == 0] = inp.jaccard_empty
    # --- BMA
    lin = inp.lin
    qpad = inp.topic_pad[rows]
    # M2 (a x (U+1)): max_{t in X_x} Lin(t, u), built with the queries in order of decreasing topic
    # count so that pass k only touches the queries with more than k topics (the padding width is
    # the corpus maximum, often ten times the typical set)
    qn = inp.n_topics[rows]
    qord = np.argsort(-qn, kind="stable")
    qpad_o, qn_o = qpad[qord], qn[qord]
    m2t = np.empty((lin.shape[0], a), dtype=lin.dtype)  # (U+1) x a, M2 transposed for the product
    m2o = lin[qpad_o[:, 0]]
    for k in range(1, qpad.shape[1]):
        nk = int(np.count_nonzero(qn_o > k))
        if nk == 0:
            break
        np.maximum(m2o[:nk], lin[qpad_o[:nk, k]], out=m2o[:nk])
    m2t[:, qord] = m2o.T
    s2 = inp.topic_inc[cols] @ m2t                       # b x a
    ta = np.unique(qpad)
    ta = ta[ta < inp.n_lin]                             # topics of the query block
    if len(ta):
        lin_ta = np.ascontiguousarray(lin[ta].T)        # (U+1) x ua: row u holds Lin(t, u) for t in ta
        cpad = inp.topic_pad[cols]
        cnt = inp.n_topics[cols]
        m1 = lin_ta[cpad[:, 0]]                          # b x ua: max_{u in Y_y} Lin(t, u), row gathers
        for k in range(1, cpad.shape[1]):
            nk = int(np.count_nonzero(cnt > k))         # cols sorted by decreasing count
            if nk == 0:
                break
            np.maximum(m1[:nk], lin_ta[cpad[:nk, k]], out=m1[:nk])
        loc = np.searchsorted(ta, qpad)                  # local index of each query topic
        xr = np.repeat(np.arange(a), qn)
        xc = loc[np.arange(qpad.shape[1])[None, :] < qn[:, None]]
        x_inc = sp.csr_matrix((np.ones(len(xr)), (xr, xc)), shape=(a, len(ta)))
        tot = np.asarray(s2) + (x_inc @ np.ascontiguousarray(m1.T)).T   # S1[x, y] = sum_{t in X_x} M1[y, t]
    else:
        tot = np.asarray(s2)
    den = inp.n_topics[cols][:, None] + inp.n_topics[rows][None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        topic = tot / den
    topic[(inp.n_topics[cols][:, None] == 0) | (inp.n_topics[rows][None, :] == 0)] = 0.0
    return topic, summ


def _excluded_mask(inp: PairInputs, rows: np.ndarray, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
    """(candidate position in tile, query position) of self-pairs and excluded pairs in the tile."""
    ps, xs = [], []
    for x, r in enumerate(rows):
        cand = [int(r)]
        if int(r) in inp.exclude:
            cand.extend(inp.exclude[int(r)].tolist())
        p = inp.col_pos[np.asarray(cand, np.int64)]
        keep = (p >= c0) & (p < c1)
        ps.extend((p[keep] - c0).tolist())
        xs.extend([x] * int(keep.sum()))
    return np.asarray(ps, np.int64), np.asarray(xs, np.int64)


@dataclass
class BlockResult:
    """Per-query histograms and stored pairs of one block of query rows ``[r0, r1)``."""

    r0: int
    r1: int
    hist_len: np.ndarray     # entries per query
    hist_cells: np.ndarray   # uint32
    hist_counts: np.ndarray  # uint32
    pair_len: np.ndarray
    pair_ids: np.ndarray     # int32
    pair_topic: np.ndarray   # float16
    pair_summ: np.ndarray    # float16
    n_pairs: int             # ordered pairs counted (self and excluded pairs left out)
    cpu_s: float = 0.0       # CPU seconds of the thread that computed the block (its worker's other
                             # threads, e.g. a Dask worker's communication, not included)


_MALLOC_TUNED = False


def _tune_malloc():
    """Keep freed tile buffers in the heap (glibc): avoids re-faulting fresh pages every tile."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def block_task(inp: PairInputs, r0: int, r1: int, col_tile: int) -> BlockResult:
    """Queries ``r0..r1-1`` against all candidates, column tile by column tile."""
    cpu0 = time.thread_time()
    _tune_malloc()
    rows = np.arange(r0, r1, dtype=np.int64)
    a = len(rows)
    nb1 = inp.hist_bins + 1
    ncell = nb1 * nb1
    lut = float16_bin_lut(inp.hist_bins).astype(np.int64)
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    keep_t = np.nan_to_num(all16, nan=0.0) > inp.floor_topic
    keep_s = np.nan_to_num(all16, nan=0.0) > inp.floor_summ
    hist = np.zeros(a * (ncell + 1), dtype=np.int64)      # last cell of each row: excluded pairs
    offs = (np.arange(a, dtype=np.int64) * (ncell + 1))[None, :]
    px, py, pt, ps = [], [], [], []
    for c0 in range(0, inp.n, col_tile):
        c1 = min(inp.n, c0 + col_tile)
        topic, summ = tile_signals(inp, rows, c0, c1)
        t16 = topic.astype(np.float16).view(np.uint16)
        s16 = summ.astype(np.float16).view(np.uint16)
        del topic, summ
        code = lut[t16] * np.int64(nb1) + lut[s16]
        keep = keep_t[t16] | keep_s[s16]
        ep, ex = _excluded_mask(inp, rows, c0, c1)
        code[ep, ex] = ncell
        keep[ep, ex] = False
        code += offs
        hist += np.bincount(code.ravel(), minlength=hist.size)
        p, x = np.nonzero(keep)
        px.append(x)
        py.append(inp.col_order[c0 + p])
        pt.append(t16[p, x])
        ps.append(s16[p, x])
        del code, keep, t16, s16
    hist = hist.reshape(a, ncell + 1)[:, :ncell]
    hx, hc = np.nonzero(hist)
    hist_len = np.bincount(hx, minlength=a)
    px = np.concatenate(px) if px else np.zeros(0, np.int64)
    py = np.concatenate(py) if py else np.zeros(0, np.int64)
    order = np.lexsort((py, px))
    return BlockResult(
        r0=r0, r1=r1, hist_len=hist_len, hist_cells=hc.astype(np.uint32),
        hist_counts=hist[hx, hc].astype(np.uint32),
        pair_len=np.bincount(px, minlength=a), pair_ids=py[order].astype(np.int32),
        pair_topic=np.concatenate(pt)[order].view(np.float16) if pt else np.zeros(0, np.float16),
        pair_summ=np.concatenate(ps)[order].view(np.float16) if ps else np.zeros(0, np.float16),
        n_pairs=int(hist.sum()), cpu_s=time.thread_time() - cpu0)


def _run_block(inp: PairInputs, task) -> BlockResult:
    r0, r1, col_tile = task
    return block_task(inp, r0, r1, col_tile)


# ----------------------------------------------------------------------------- the driver
def plan_tiles(n: int, n_lin: int, max_topics: int, memory_budget_mb: int, workers: int):
    """(query block size ``a``, candidate tile size ``b``) so that ``workers`` tiles fit the budget.

    A tile needs about ``BYTES_PER_PAIR * a * b`` plus ``8 * b * min(U, a * m)`` (the ``M1`` block)
    plus ``8 * a * ((B+1)^2 + 1)`` for the histogram (B = 100 assumed here).
    """
    budget = memory_budget_mb * 2 ** 20 / max(1, workers)
    a = max(1, min(256, math.ceil(n / max(1, 4 * workers))))
    per_col = BYTES_PER_PAIR * a + 8 * min(n_lin + 1, a * max_topics)
    fixed = 8 * a * (101 * 101 + 1) + 8 * a * (n_lin + 1) * 2
    b = int(max(256, (budget - fixed) // per_col))
    return a, min(n, b)


@dataclass
class PairStats:
    n_docs: int
    n_pairs: int          # ordered pairs counted in the histograms
    n_stored: int         # pairs above the floor
    wall_s: float
    workers: int
    block: int
    col_tile: int
    bytes_on_disk: int
    block_cpu_s: tuple = ()   # per block, in row order: CPU seconds of the thread that computed it

    @property
    def task_cpu_s(self) -> float:
        """CPU seconds of the blocks themselves (the executor's own overhead left out)."""
        return float(sum(self.block_cpu_s))

    @property
    def pairs_per_s(self) -> float:
        return self.n_pairs / max(self.wall_s, 1e-9)

    @property
    def pairs_per_s_per_core(self) -> float:
        return self.pairs_per_s / max(1, self.workers)


def compute_all_pairs(inp: PairInputs, out_dir, doc_ids: Sequence[str], *, memory_budget_mb: int = 2048,
                      executor: Executor | None = None, block: int | None = None,
                      col_tile: int | None = None, extra_meta: dict | None = None) -> PairStats:
    """Compute both signals for all ordered pairs and write the ``signals/`` format to ``out_dir``.

    Memory is bounded by ``memory_budget_mb`` (tile sizes) independent of N; results are streamed
    to disk block by block. Same inputs -> byte-identical files.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if len(doc_ids) != inp.n:
        raise ValueError(f"{len(doc_ids)} doc ids for {inp.n} problems")
    executor = executor or LocalProcessExecutor(0)
    workers = getattr(executor, "workers", 1)
    a, b = plan_tiles(inp.n, inp.n_lin, inp.topic_pad.shape[1], memory_budget_mb, workers)
    a, b = block or a, col_tile or b
    tasks = [(r0, min(inp.n, r0 + a), b) for r0 in range(0, inp.n, a)]
    count_dtype = np.uint16 if inp.n < 65536 else np.uint32
    files = {"hist_cells": np.uint32, "hist_counts": count_dtype, "pair_ids": np.int32,
             "pair_topic": np.float16, "pair_summ": np.float16}
    app = {k: Appender(out / f"{k}.npy", dt) for k, dt in files.items()}
    hist_len = np.zeros(inp.n, np.int64)
    pair_len = np.zeros(inp.n, np.int64)
    n_pairs = 0
    block_cpu = []
    t0 = time.perf_counter()
    counter = Progress("queries", inp.n)
    for res in executor.map(_run_block, tasks, inp):
        counter.update(res.r1 - res.r0)
        hist_len[res.r0:res.r1] = res.hist_len
        pair_len[res.r0:res.r1] = res.pair_len
        app["hist_cells"].add(res.hist_cells)
        app["hist_counts"].add(res.hist_counts)
        app["pair_ids"].add(res.pair_ids)
        app["pair_topic"].add(res.pair_topic)
        app["pair_summ"].add(res.pair_summ)
        n_pairs += res.n_pairs
        block_cpu.append(res.cpu_s)
    wall = time.perf_counter() - t0
    counter.close()
    for ap in app.values():
        ap.finish()
    np.save(out / "hist_offsets.npy", np.concatenate([[0], np.cumsum(hist_len)]).astype(np.int64))
    np.save(out / "pair_offsets.npy", np.concatenate([[0], np.cumsum(pair_len)]).astype(np.int64))
    pl.DataFrame({"doc_id": list(doc_ids)}).write_parquet(out / "doc_ids.parquet")
    meta = {"n_docs": inp.n, "hist_bins": inp.hist_bins, "pair_floor_topic": inp.floor_topic,
            "pair_floor_summ": inp.floor_summ, "jaccard_empty": inp.jaccard_empty,
            "value_dtype": "float16", "hist_count_dtype": np.dtype(count_dtype).name,
            "n_pairs": n_pairs, "n_stored": int(pair_len.sum()),
            "n_excluded_pairs": int(sum(len(v) for v in inp.exclude.values())),
            "format": "see saber_lib/signals.py"}  # artifact text kept as it was (now signals/store.py)
    meta.update(extra_meta or {})
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    return PairStats(n_docs=inp.n, n_pairs=n_pairs, n_stored=int(pair_len.sum()), wall_s=wall,
                     workers=workers, block=a, col_tile=b, bytes_on_disk=size,
                     block_cpu_s=tuple(block_cpu))
