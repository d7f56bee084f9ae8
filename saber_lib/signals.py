"""Pair signals (paper 3.2.2-3.4, SPEC 4-6): topic similarity and summary Jaccard.

Public API (SPEC 10):

* ``lin_similarity(ic_lca, ic_a, ic_b)`` = ``2 IC(LCA) / (IC(a) + IC(b) + 1e-12)``  (re-exported from
  :mod:`saber_lib.signals_topic`)
* ``bma(sim)`` = ``(sum_i max_j sim[i, j] + sum_j max_i sim[i, j]) / (n_rows + n_cols)``, 0 when either
  side is empty (re-exported from :mod:`saber_lib.signals_topic`)
* ``summary_tokens(text)`` = the set ``T(s)`` of lower-cased ``[a-zA-Z0-9^_]+`` tokens minus stop words
* ``jaccard(a, b, empty=0.0)`` = ``|a & b| / |a | b|``; ``empty`` when both sets are empty

The all-pairs computation lives in :mod:`saber_lib.pairs`; this module also defines the on-disk
format of the ``signals/`` stage (:class:`SignalStore`).

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
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------- topic signal
try:  # written by the topics helper; the names are part of the public API (SPEC 10)
    from .signals_topic import bma, lin_similarity  # noqa: F401
except ImportError:  # pragma: no cover - only while signals_topic.py does not exist yet
    def lin_similarity(ic_lca, ic_a, ic_b):
        """Lin similarity ``2 IC(LCA) / (IC(a) + IC(b) + 1e-12)`` (numpy broadcasting)."""
        ic_lca, ic_a, ic_b = np.asarray(ic_lca), np.asarray(ic_a), np.asarray(ic_b)
        return 2.0 * ic_lca / (ic_a + ic_b + 1e-12)

    def bma(sim):
        """Best-match average (rcmax-average) of ``sim[i, j]``; 0.0 when either side is empty."""
        sim = np.asarray(sim, dtype=np.float64)
        if sim.ndim != 2 or sim.shape[0] == 0 or sim.shape[1] == 0:
            return 0.0
        return float((sim.max(axis=1).sum() + sim.max(axis=0).sum()) / (sim.shape[0] + sim.shape[1]))


# ----------------------------------------------------------------------------- summary signal
#: The 30 mathematics stop words of SPEC 5, added to scikit-learn's English list.
MATH_STOP_WORDS = frozenset("""
let assume consider given suppose find compute solve show determine value expression equation
result step term method approach solution thus hence therefore so then if and or but theorem lemma
""".split())

TOKEN_RE = re.compile(r"[a-zA-Z0-9^_]+")


def _stop_words() -> frozenset:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS) | MATH_STOP_WORDS


STOP_WORDS = _stop_words()


def summary_tokens(text) -> frozenset:
    """``T(s)``: lower-case ``s``, take the ``[a-zA-Z0-9^_]+`` tokens, drop stop words; a frozenset.

    ``None`` or an empty string give the empty set.
    """
    if not text:
        return frozenset()
    return frozenset(t for t in TOKEN_RE.findall(str(text).lower()) if t not in STOP_WORDS)


def jaccard(a, b, empty: float = 0.0) -> float:
    """``J(A, B) = |A & B| / |A | B|``; ``empty`` when both sets are empty (the authors' code: 1.0)."""
    a, b = set(a), set(b)
    union = len(a | b)
    if union == 0:
        return float(empty)
    return len(a & b) / union


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
        import polars as pl

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
