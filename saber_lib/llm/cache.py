"""Persistent response cache: one SQLite file, one row per answered request.

Key: ``sha256(canonical JSON of {model id, messages, sampling params, guided-decoding spec,
seed, attempt, ...})`` (see :func:`request_key`). The model id is the profile's ``llm.model``,
not the backend, so a vLLM run and a run against a ``vllm serve`` endpoint of the same model
share answers.

Each row stores the raw answer and its usage as JSON plus ``checksum = sha256(key + payload)``.
A row whose checksum or JSON does not verify (a corrupt or partial entry) is deleted and counted
in ``corrupt``; the request is then made again. Failed calls are never stored, and the answers of a
request that never parsed are dropped again (:meth:`ResponseCache.discard`, from ``run_with_parser``).

Writes are grouped: ``put`` keeps the answer in memory (served by :meth:`ResponseCache.get`) and
writes every kept answer in one committed transaction (WAL mode) once ``flush_every`` answers are
waiting or ``flush_s`` seconds have passed since the last write; ``Backend.chat_batch`` flushes
at the end of every batch, so a batch that returned has every answer on disk, and a stage marks
nothing done that is not stored. A run killed mid-batch keeps every answer written before the kill;
the answers of the last, unwritten group (at most ``flush_every`` and ``flush_s`` seconds' worth)
are asked again when it restarts. ``flush_every=1`` writes each answer as it comes.

Errors name the file and what to do: a file that is not a readable SQLite database (damaged,
truncated, not a cache) raises :class:`LLMError` saying to move it aside. A cache that another
process holds locked does not lose answers: an answer that cannot be written is kept in memory
(and served by :meth:`ResponseCache.get`), and written with the next answer or at
:meth:`ResponseCache.flush`, which ``Backend.chat_batch`` calls at the end of every batch and which
waits up to ``lock_wait_s`` for the lock to clear before raising an :class:`LLMError` that names
the file and the number of answers not yet written.

A model named by its weights file (``llm.model_path`` of the ``llamacpp`` backend) is also tied to
that file: the cache records the file's sha256 per model id (:meth:`ResponseCache.bind_model_file`),
and a later run whose same-named model is another file stops with an error instead of serving the
first file's answers as the second's.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .types import ChatResult, LLMError

CACHE_FORMAT = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key      TEXT PRIMARY KEY,
    model    TEXT NOT NULL,
    payload  TEXT NOT NULL,
    checksum TEXT NOT NULL,
    created  REAL NOT NULL
)
"""
_MODEL_FILES = "CREATE TABLE IF NOT EXISTS model_files (model TEXT PRIMARY KEY, sha256 TEXT NOT NULL)"


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_key(fields: dict[str, Any]) -> str:
    """sha256 hex digest of the canonical JSON of the key fields (plus the cache format)."""
    return hashlib.sha256(canonical_json({"format": CACHE_FORMAT, **fields}).encode()).hexdigest()


def _checksum(key: str, payload: str) -> str:
    return hashlib.sha256((key + "\n" + payload).encode()).hexdigest()


def _is_lock_error(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


class ResponseCache:
    """SQLite-backed map ``key -> ChatResult`` (see module docstring).

    ``lock_wait_s``: how long opening the file, a read and :meth:`flush` wait for another
    process's lock before raising; a write during a batch never waits: its answer stays in memory.
    ``flush_every`` / ``flush_s``: the group size and age at which kept answers are written.
    """

    def __init__(self, path: str | Path, lock_wait_s: float = 60.0, flush_every: int = 64,
                 flush_s: float = 1.0):
        if flush_every < 1 or flush_s < 0:
            raise ValueError(f"cache flush_every must be >= 1 and flush_s >= 0, got {flush_every}, {flush_s}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.corrupt = 0
        self.lock_wait_s = float(lock_wait_s)
        self.flush_every, self.flush_s = int(flush_every), float(flush_s)
        self._last_write = time.monotonic()
        self._pending: dict[str, tuple[str, str, str, str, float]] = {}  # key -> row not yet written
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=self.lock_wait_s, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            self._db.execute(_MODEL_FILES)
        except sqlite3.Error as e:
            raise self._error(e, "opening it") from None

    def bind_model_file(self, model: str, sha256: str, source: str) -> None:
        """Tie the answers of ``model`` to the weights file with this ``sha256`` (``source``: how the
        profile names it): recorded on first use; another file under the same model id is an
        :class:`LLMError` naming both files' hashes, ``llm.model`` and ``llm.model_path``."""
        try:
            row = self._db.execute("SELECT sha256 FROM model_files WHERE model = ?", (model,)).fetchone()
            if row is None:
                self._db.execute("INSERT INTO model_files (model, sha256) VALUES (?, ?)", (model, sha256))
                return
        except sqlite3.Error as e:
            raise self._error(e, "reading its model files") from None
        if row[0] != sha256:
            raise LLMError(
                f"{self.path}: its answers of llm.model {model!r} came from a model file with sha256 "
                f"{row[0][:16]}..., but llm.model_path {source} has sha256 {sha256[:16]}...: they would be "
                f"served as this file's. Give this file its own llm.model name, or move {self.path.name} aside")

    # ------------------------------------------------------------------ errors
    def _error(self, e: sqlite3.Error, doing: str) -> LLMError:
        """One clear error for an SQLite failure: which file, what happened, what to do."""
        if _is_lock_error(e):
            return LLMError(
                f"{self.path}: LLM cache is locked by another process (waited {self.lock_wait_s:g} s "
                f"while {doing}; {len(self._pending)} answer(s) not yet written). Close the other "
                f"program holding it (another run or an sqlite3 shell on this file) and rerun; answers "
                f"written before are reused")
        return LLMError(
            f"{self.path}: LLM cache is damaged or not an LLM cache ({type(e).__name__}: {e}, while "
            f"{doing}). Move the file aside (e.g. rename it to {self.path.name}.damaged) and rerun: "
            f"a fresh cache is made and the missing answers are asked again")

    def _busy_timeout(self, seconds: float) -> None:
        self._db.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> ChatResult | None:
        with self._lock:
            if key in self._pending:
                return self._decode(key, self._pending[key][2], self._pending[key][3])
            try:
                self._busy_timeout(self.lock_wait_s)
                row = self._db.execute("SELECT payload, checksum FROM responses WHERE key = ?",
                                       (key,)).fetchone()
            except sqlite3.Error as e:
                raise self._error(e, "reading an answer") from None
            if row is None:
                return None
            payload, checksum = row
            try:
                res = self._decode(key, payload, checksum)
            except (ValueError, KeyError, TypeError):
                self.corrupt += 1
                try:
                    self._busy_timeout(0)
                    self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
                except sqlite3.Error as e:
                    if not _is_lock_error(e):
                        raise self._error(e, "deleting a corrupt entry") from None
                    # locked: the bad row stays until a later run; it is asked again either way
                return None
            return res

    @staticmethod
    def _decode(key: str, payload: str, checksum: str) -> ChatResult:
        if _checksum(key, payload) != checksum:
            raise ValueError("checksum mismatch")
        d = json.loads(payload)
        return ChatResult(text=d["text"], prompt_tokens=int(d["prompt_tokens"]),
                          completion_tokens=int(d["completion_tokens"]), latency_s=float(d["latency_s"]),
                          finish_reason=d["finish_reason"], logprobs=d.get("logprobs"), cached=True)

    # ------------------------------------------------------------------ writes
    def put(self, key: str, model: str, res: ChatResult) -> None:
        """Store one answer: kept in memory, written with its group (see the module docstring).
        Never blocks on another process's lock: the group then waits for a later ``put`` or
        :meth:`flush`."""
        if res.error is not None:
            raise ValueError("failed calls are not cached")
        payload = canonical_json({
            "text": res.text, "prompt_tokens": res.prompt_tokens,
            "completion_tokens": res.completion_tokens, "latency_s": res.latency_s,
            "finish_reason": res.finish_reason, "logprobs": res.logprobs,
        })
        with self._lock:
            self._pending[key] = (key, model, payload, _checksum(key, payload), time.time())
            if len(self._pending) >= self.flush_every or time.monotonic() - self._last_write >= self.flush_s:
                self._write_pending(wait_s=0.0)

    def discard(self, key: str) -> None:
        """Drop one stored answer (one that did not parse: it must not be served to the rerun that
        the failure message asks for). Waits ``lock_wait_s`` for another process's lock."""
        with self._lock:
            self._pending.pop(key, None)
            try:
                self._busy_timeout(self.lock_wait_s)
                self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
            except sqlite3.Error as e:
                raise self._error(e, "dropping an answer that did not parse") from None

    @property
    def pending(self) -> int:
        """Answers received but not yet written (their group is not full, or the file was locked)."""
        return len(self._pending)

    def _write_pending(self, wait_s: float) -> bool:
        """Write every pending answer in one transaction; False when the file stayed locked."""
        if not self._pending:
            return True
        try:
            self._busy_timeout(wait_s)
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            if _is_lock_error(e):
                return False
            raise self._error(e, "writing an answer") from None
        try:
            self._db.executemany(
                "INSERT OR REPLACE INTO responses (key, model, payload, checksum, created) "
                "VALUES (?, ?, ?, ?, ?)", list(self._pending.values()))
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if _is_lock_error(e):
                return False
            raise self._error(e, "writing an answer") from None
        self._pending.clear()
        self._last_write = time.monotonic()
        return True

    def flush(self, wait_s: float | None = None) -> None:
        """Write the answers kept in memory, waiting up to ``wait_s`` (default ``lock_wait_s``) for
        another process's lock to clear; raises :class:`LLMError` naming the file if it does not."""
        with self._lock:
            if not self._write_pending(self.lock_wait_s if wait_s is None else wait_s):
                raise self._error(sqlite3.OperationalError("database is locked"), "writing answers")

    def __len__(self) -> int:
        with self._lock:
            try:
                self._busy_timeout(self.lock_wait_s)
                return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            except sqlite3.Error as e:
                raise self._error(e, "counting answers") from None

    def close(self) -> None:
        """Write what is pending (waiting ``lock_wait_s`` at most) and close the file."""
        try:
            if self._pending:
                self.flush()
        finally:
            with self._lock:
                self._db.close()
