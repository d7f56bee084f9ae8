"""The persistent embedding store and the one entry point that embeds texts through it."""
from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from .base import KINDS, Encoder, text_hash


# ----------------------------------------------------------------------------- the store
class EmbeddingStore:
    """Persistent embeddings in ``<cache_dir>/embeddings.sqlite`` keyed by (model_id, kind, sha256).

    WAL mode: many readers and one writer at a time across processes; writes are short
    transactions and a busy timeout waits for the lock. A vector is stored as float32 bytes.
    """

    def __init__(self, cache_dir, filename: str = "embeddings.sqlite"):
        self.path = Path(cache_dir) / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        con = self._con()
        con.execute("CREATE TABLE IF NOT EXISTS emb (model_id TEXT NOT NULL, kind TEXT NOT NULL, "
                    "sha TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, "
                    "PRIMARY KEY (model_id, kind, sha)) WITHOUT ROWID")
        con.commit()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None or getattr(self._local, "pid", None) != os.getpid():
            con = sqlite3.connect(str(self.path), timeout=120)
            con.execute("PRAGMA busy_timeout = 120000")
            try:
                con.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                pass
            con.execute("PRAGMA synchronous = NORMAL")
            self._local.con, self._local.pid = con, os.getpid()
        return con

    def get_many(self, model_id: str, kind: str, shas: Sequence[str]) -> dict[str, np.ndarray]:
        """sha -> vector for the keys present."""
        out: dict[str, np.ndarray] = {}
        con = self._con()
        shas = list(dict.fromkeys(shas))
        for s in range(0, len(shas), 500):
            part = shas[s: s + 500]
            q = ",".join("?" * len(part))
            for sha, dim, blob in con.execute(
                    f"SELECT sha, dim, vec FROM emb WHERE model_id = ? AND kind = ? AND sha IN ({q})",
                    [model_id, kind, *part]):
                out[sha] = np.frombuffer(blob, dtype=np.float32, count=dim).copy()
        return out

    def put_many(self, model_id: str, kind: str, items: dict[str, np.ndarray]) -> None:
        rows = [(model_id, kind, sha, int(v.shape[-1]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for sha, v in items.items()]
        con = self._con()
        with con:
            con.executemany("INSERT OR IGNORE INTO emb VALUES (?, ?, ?, ?, ?)", rows)

    def count(self, model_id: str | None = None) -> int:
        con = self._con()
        if model_id is None:
            return con.execute("SELECT COUNT(*) FROM emb").fetchone()[0]
        return con.execute("SELECT COUNT(*) FROM emb WHERE model_id = ?", [model_id]).fetchone()[0]

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


def store_kind(encoder: Encoder, kind: str) -> str:
    """Cache key kind: symmetric models share one entry for queries and documents."""
    return "text" if encoder.symmetric else kind


def embed(encoder: Encoder, texts: Sequence[str], store: EmbeddingStore | None = None,
          kind: str = "document", show_progress: bool = False, batch_size: int = 32) -> np.ndarray:
    """float32 (n, dim) vectors of ``texts``; computes only texts missing from ``store``.

    Identical texts in one call are embedded once. Without a store, everything is computed.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    texts = list(texts)
    shas = [text_hash(t) for t in texts]
    uniq: dict[str, str] = {}
    for sha, t in zip(shas, texts):
        uniq.setdefault(sha, t)
    skind = store_kind(encoder, kind)
    have = store.get_many(encoder.model_id, skind, list(uniq)) if store is not None else {}
    missing = [sha for sha in uniq if sha not in have]
    if missing:
        step = max(batch_size * 8, 256)
        it = range(0, len(missing), step)
        if show_progress:
            try:
                from tqdm.auto import tqdm  # optional progress bar

                it = tqdm(it, desc=f"embed {encoder.name}", unit_scale=step)
            except ImportError:
                pass
        for s in it:
            part = missing[s: s + step]
            vecs = encoder.encode([uniq[h] for h in part], kind=kind, batch_size=batch_size)
            new = dict(zip(part, vecs))
            have.update(new)
            if store is not None:
                store.put_many(encoder.model_id, skind, new)
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    return np.stack([have[s] for s in shas]).astype(np.float32)
