"""The ``signals/`` stage's files (paper 3.4): their format, the reader (:class:`SignalStore`), the
writers (:class:`Appender` for the streamed all-pairs computation, :func:`store_from_dense` for
small references) and the histogram binning they share.

On-disk format of ``signals/`` (all little-endian ``.npy``, readable with ``mmap_mode="r"``)
------------------------------------------------------------------------------------------------
``doc_ids.parquet``          the corpus order: row ``i`` of every array below is ``doc_ids[i]``.
``meta.json``                 ``n_docs``, ``hist_bins`` (B), floors, value dtype, counts.
Joint histograms (sparse, one row per query ``q``; ordered pairs ``(q, c)``, ``c != q``):
  ``hist_offsets.npy``  int64 [N+1]   entries of query ``q`` are ``hist_offsets[q]:hist_offsets[q+1]``
  ``hist_cells.npy``    uint32 [H]    cell ``= bin_topic * (B+1) + bin_summ``
  ``hist_counts.npy``   uint16|uint32 [H] number of candidates in that cell (uint16 when N < 65536)
  Bins: ``bin(v) = #{i in 0..B : edge_i < v}`` with ``edge_i = i / B``; so bin 0 holds ``v <= 0``
  and bin ``b >= 1`` holds ``edge_{b-1} < v <= edge_b``. Hence ``v > edge_i  <=>  bin(v) > i``:
  category counts at thresholds on the grid of edges are exact (computed on the stored values).
Pairs above the floor (CSR, both directions, neighbours sorted by id):
  ``pair_offsets.npy``  int64 [N+1]
  ``pair_ids.npy``      int32 [P]     candidate row index
  ``pair_topic.npy``    float16 [P]   sim_topic
  ``pair_summ.npy``     float16 [P]   sim_summ
  A pair ``(q, c)`` is stored when ``sim_topic > pair_floor_topic`` or ``sim_summ > pair_floor_summ``.
  Every pair counted in a category at thresholds ``tau_topic >= pair_floor_topic`` and
  ``tau_summ >= pair_floor_summ`` is therefore stored. Histograms are built from the same float16
  values that are stored, so counts from histograms and from stored pairs agree exactly.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl


# ----------------------------------------------------------------------------- histogram binning
def bin_edges(n_bins: int) -> np.ndarray:
    """Threshold grid ``edge_i = i / B`` for ``i = 0..B`` (float64)."""
    return np.arange(n_bins + 1, dtype=np.float64) / n_bins


def value_bins(values, n_bins: int) -> np.ndarray:
    """``bin(v) = #{i : edge_i < v}`` in ``0..B`` (so ``v > edge_i <=> bin(v) > i``)."""
    return np.searchsorted(bin_edges(n_bins), np.asarray(values, dtype=np.float64), side="left")


def float16_bin_lut(n_bins: int) -> np.ndarray:
    """Bin of every float16 bit pattern (uint16 view -> bin), for binning stored values fast."""
    allv = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    allv = np.nan_to_num(allv, nan=0.0, posinf=1.0, neginf=0.0)
    return value_bins(allv, n_bins).astype(np.uint16)


# ----------------------------------------------------------------------------- the stored signals
@dataclass
class SignalStore:
    """Read access to a ``signals/`` folder (format in the module docstring).

    ``store.pairs(q)`` -> (candidate rows int32, sim_topic float16, sim_summ float16) above the floor;
    ``store.histogram(q)`` -> dense (B+1, B+1) joint counts of query ``q`` (topic bin, summary bin).
    """

    path: Path
    meta: dict
    doc_ids: list
    hist_offsets: np.ndarray
    hist_cells: np.ndarray
    hist_counts: np.ndarray
    pair_offsets: np.ndarray
    pair_ids: np.ndarray
    pair_topic: np.ndarray
    pair_summ: np.ndarray

    @classmethod
    def open(cls, path, mmap: bool = True) -> "SignalStore":
        path = Path(path)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"{path}/meta.json is missing: run stage 'signals' first")
        mode = "r" if mmap else None
        ld = lambda n: np.load(path / f"{n}.npy", mmap_mode=mode)  # noqa: E731
        return cls(path=path, meta=json.loads((path / "meta.json").read_text()),
                   doc_ids=pl.read_parquet(path / "doc_ids.parquet")["doc_id"].to_list(),
                   hist_offsets=ld("hist_offsets"), hist_cells=ld("hist_cells"),
                   hist_counts=ld("hist_counts"), pair_offsets=ld("pair_offsets"),
                   pair_ids=ld("pair_ids"), pair_topic=ld("pair_topic"), pair_summ=ld("pair_summ"))

    @property
    def n_docs(self) -> int:
        return int(self.meta["n_docs"])

    @property
    def hist_bins(self) -> int:
        return int(self.meta["hist_bins"])

    def index_of(self, doc_id: str) -> int:
        if not hasattr(self, "_index"):
            self._index = {d: i for i, d in enumerate(self.doc_ids)}
        return self._index[doc_id]

    def pairs(self, q: int):
        a, b = int(self.pair_offsets[q]), int(self.pair_offsets[q + 1])
        return (np.asarray(self.pair_ids[a:b]), np.asarray(self.pair_topic[a:b]),
                np.asarray(self.pair_summ[a:b]))

    def histogram(self, q: int) -> np.ndarray:
        nb = self.hist_bins + 1
        a, b = int(self.hist_offsets[q]), int(self.hist_offsets[q + 1])
        h = np.zeros(nb * nb, dtype=np.int64)
        h[np.asarray(self.hist_cells[a:b])] = np.asarray(self.hist_counts[a:b])
        return h.reshape(nb, nb)

    def bytes_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())


# ----------------------------------------------------------------------------- writers
class Appender:
    """Append raw arrays to a file, then turn it into a .npy with the final length."""

    def __init__(self, path: Path, dtype):
        self.path, self.dtype, self.n = path, np.dtype(dtype), 0
        self.tmp = path.with_suffix(".part")
        self.f = open(self.tmp, "wb")

    def add(self, arr):
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        self.f.write(arr.tobytes())
        self.n += arr.size

    def finish(self):
        self.f.close()
        with open(self.path, "wb") as out:
            np.lib.format.write_array_header_1_0(
                out, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                      "shape": (self.n,)})
            with open(self.tmp, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 24)
        self.tmp.unlink()


def store_from_dense(topic: np.ndarray, summ: np.ndarray, out_dir, doc_ids: Sequence[str], *,
                     hist_bins: int, floor_topic: float, floor_summ: float) -> None:
    """Write the ``signals/`` format from full N x N matrices (small N; tests and references).

    Follows the same rules as :func:`compute_all_pairs` (diagonal left out, float16 values)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = topic.shape[0]
    nb1 = hist_bins + 1
    lut = float16_bin_lut(hist_bins).astype(np.int64)
    t16 = np.asarray(topic, np.float64).astype(np.float16)
    s16 = np.asarray(summ, np.float64).astype(np.float16)
    off = ~np.eye(n, dtype=bool)
    code = lut[t16.view(np.uint16)] * nb1 + lut[s16.view(np.uint16)]
    keep = off & ((t16.astype(np.float64) > floor_topic) | (s16.astype(np.float64) > floor_summ))
    hl, hc, hn, pl_, pi, pt, ps = [], [], [], [], [], [], []
    for q in range(n):
        cells, cnt = np.unique(code[q][off[q]], return_counts=True)
        hl.append(len(cells)); hc.append(cells); hn.append(cnt)
        ids = np.flatnonzero(keep[q])
        pl_.append(len(ids)); pi.append(ids); pt.append(t16[q, ids]); ps.append(s16[q, ids])
    np.save(out / "hist_offsets.npy", np.concatenate([[0], np.cumsum(hl)]).astype(np.int64))
    np.save(out / "hist_cells.npy", np.concatenate(hc).astype(np.uint32))
    np.save(out / "hist_counts.npy", np.concatenate(hn).astype(np.uint16 if n < 65536 else np.uint32))
    np.save(out / "pair_offsets.npy", np.concatenate([[0], np.cumsum(pl_)]).astype(np.int64))
    np.save(out / "pair_ids.npy", np.concatenate(pi).astype(np.int32))
    np.save(out / "pair_topic.npy", np.concatenate(pt).astype(np.float16))
    np.save(out / "pair_summ.npy", np.concatenate(ps).astype(np.float16))
    pl.DataFrame({"doc_id": list(doc_ids)}).write_parquet(out / "doc_ids.parquet")
    meta = {"n_docs": n, "hist_bins": hist_bins, "pair_floor_topic": float(floor_topic),
            "pair_floor_summ": float(floor_summ), "value_dtype": "float16",
            "n_pairs": int(off.sum()), "n_stored": int(keep.sum())}
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
