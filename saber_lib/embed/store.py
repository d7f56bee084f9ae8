"""The persistent embedding store and the one entry point that embeds texts through it."""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.progress import Progress
from .base import KINDS, Encoder, text_hash


# ----------------------------------------------------------------------------- the store
def vector_checksum(model_id: str, kind: str, sha: str, dim: int, blob: bytes) -> str:
    """The checksum stored with a vector: BLAKE2b over its key, its dimension and its bytes (so a
    damaged vector, or a vector under another key, does not verify)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (model_id, kind, sha, str(int(dim))):
        h.update(part.encode() + b"\0")
    h.update(blob)
    return h.hexdigest()


class StoreDamaged(RuntimeError):
    """Stored vectors whose bytes do not match their checksum."""


class EmbeddingStore:
    """Persistent embeddings in ``<cache_dir>/embeddings.sqlite`` keyed by (model_id, kind, sha256).

    WAL mode: many readers and one writer at a time across processes; writes are short
    transactions and a busy timeout waits for the lock. A vector is stored as float32 bytes with a
    checksum (:func:`vector_checksum`) verified on every read: a vector that does not verify, or one
    of a store written before checksums (column ``chk`` null), is never returned as a hit.
    """

    def __init__(self, cache_dir, filename: str = "embeddings.sqlite"):
        self.path = Path(cache_dir) / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        con = self._con()
        con.execute("CREATE TABLE IF NOT EXISTS emb (model_id TEXT NOT NULL, kind TEXT NOT NULL, "
                    "sha TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, chk TEXT, "
                    "PRIMARY KEY (model_id, kind, sha)) WITHOUT ROWID")
        if "chk" not in [r[1] for r in con.execute("PRAGMA table_info(emb)")]:
            try:  # a store from before checksums: its rows get null, i.e. unverified (recomputed)
                con.execute("ALTER TABLE emb ADD COLUMN chk TEXT")
            except sqlite3.OperationalError as e:  # another process migrated it first
                if "duplicate column" not in str(e):
                    raise
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

    def get_many(self, model_id: str, kind: str, shas: Sequence[str],
                 damaged: list | None = None) -> dict[str, np.ndarray]:
        """sha -> vector for the keys present whose checksum verifies. A row that does not verify
        is left out and listed in ``damaged`` as ``(sha, why)``; without a ``damaged`` list it
        raises :class:`StoreDamaged` naming the store and the key."""
        out: dict[str, np.ndarray] = {}
        bad: list[tuple[str, str]] = []
        con = self._con()
        shas = list(dict.fromkeys(shas))
        for s in range(0, len(shas), 500):
            part = shas[s: s + 500]
            q = ",".join("?" * len(part))
            for sha, dim, blob, chk in con.execute(
                    f"SELECT sha, dim, vec, chk FROM emb WHERE model_id = ? AND kind = ? AND sha IN ({q})",
                    [model_id, kind, *part]):
                if chk is None:
                    bad.append((sha, "no checksum (written before stores had them)"))
                elif len(blob) != 4 * dim or vector_checksum(model_id, kind, sha, dim, blob) != chk:
                    bad.append((sha, "its bytes do not match its checksum"))
                else:
                    out[sha] = np.frombuffer(blob, dtype=np.float32, count=dim).copy()
        if bad and damaged is None:
            raise StoreDamaged(f"{self.path}: the vector of {model_id}/{kind} text sha256 {bad[0][0]}: "
                               f"{bad[0][1]} ({len(bad)} such vectors)")
        if damaged is not None:
            damaged.extend(bad)
        return out

    def put_many(self, model_id: str, kind: str, items: dict[str, np.ndarray], replace: bool = False) -> None:
        """Store vectors (with their checksums); an existing key is kept unless ``replace``."""
        rows = []
        for sha, v in items.items():
            blob = np.ascontiguousarray(v, dtype=np.float32).tobytes()
            dim = int(v.shape[-1])
            rows.append((model_id, kind, sha, dim, blob, vector_checksum(model_id, kind, sha, dim, blob)))
        con = self._con()
        with con:
            con.executemany(f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO emb "
                            "(model_id, kind, sha, dim, vec, chk) VALUES (?, ?, ?, ?, ?, ?)", rows)

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


def _warn_damaged(store, model_id: str, damaged: list[tuple[str, str]], texts: dict[str, str]) -> None:
    """One warning per damaged vector (the first few), naming the store and the text; vectors of an
    older store without checksums get one warning in all. All of them are recomputed."""
    bad = [(sha, why) for sha, why in damaged if not why.startswith("no checksum")]
    for sha, why in bad[:5]:
        warnings.warn(f"embedding store {store.path}: the {model_id} vector of text {texts[sha][:80]!r} is "
                      f"damaged ({why}); recomputing it", RuntimeWarning, stacklevel=3)
    if len(bad) > 5:
        warnings.warn(f"embedding store {store.path}: {len(bad) - 5} more damaged {model_id} vectors; "
                      "recomputing them", RuntimeWarning, stacklevel=3)
    old = len(damaged) - len(bad)
    if old:
        warnings.warn(f"embedding store {store.path}: {old} {model_id} vectors have no checksum (an older "
                      "store); recomputing them", RuntimeWarning, stacklevel=3)


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
    prepare = getattr(encoder, "prepare", None)   # an encoder without it is given the texts as they are
    texts = [prepare(t) for t in texts] if prepare else list(texts)   # keyed as the model sees it
    shas = [text_hash(t) for t in texts]
    uniq: dict[str, str] = {}
    for sha, t in zip(shas, texts):
        uniq.setdefault(sha, t)
    skind = store_kind(encoder, kind)
    damaged: list[tuple[str, str]] = []
    have = store.get_many(encoder.model_id, skind, list(uniq), damaged) if store is not None else {}
    _warn_damaged(store, encoder.model_id, damaged, uniq)
    redo = {sha for sha, _ in damaged}
    missing = [sha for sha in uniq if sha not in have]
    if missing:
        step = max(batch_size * 8, 256)
        with Progress("texts", len(missing), bar=show_progress, desc=f"embed {encoder.name}") as counter:
            _embed_missing(encoder, kind, batch_size, store, skind, uniq, missing, redo, have, step, counter)
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    return np.stack([have[s] for s in shas]).astype(np.float32)


def _embed_missing(encoder, kind, batch_size, store, skind, uniq, missing, redo, have, step, counter) -> None:
    """Embed the ``missing`` texts ``step`` at a time, storing each chunk as it is done."""
    for s in range(0, len(missing), step):
        part = missing[s: s + step]
        vecs = encoder.encode([uniq[h] for h in part], kind=kind, batch_size=batch_size)
        new = dict(zip(part, vecs))
        have.update(new)
        if store is not None:
            store.put_many(encoder.model_id, skind, {h: v for h, v in new.items() if h not in redo})
            store.put_many(encoder.model_id, skind, {h: v for h, v in new.items() if h in redo}, replace=True)
        counter.update(len(part))
