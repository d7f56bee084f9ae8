"""Persistent response cache: one SQLite file, one row per answered request.

Key: ``sha256(canonical JSON of {model id, messages, sampling params, guided-decoding spec,
seed, attempt, ...})`` (see :func:`request_key`). The model id is the profile's ``llm.model``,
not the backend, so a vLLM run and a run against a ``vllm serve`` endpoint of the same model
share answers.

Each row stores the raw answer and its usage as JSON plus ``checksum = sha256(key + payload)``.
A row whose checksum or JSON does not verify (a corrupt or partial entry) is deleted and counted
in ``corrupt``; the request is then made again. The file runs in WAL mode and every ``put`` is
its own committed transaction, so a run killed mid-batch keeps every answer written before the
kill and repeats none of them when restarted. Failed calls are never stored.
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


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_key(fields: dict[str, Any]) -> str:
    """sha256 hex digest of the canonical JSON of the key fields (plus the cache format)."""
    return hashlib.sha256(canonical_json({"format": CACHE_FORMAT, **fields}).encode()).hexdigest()


def _checksum(key: str, payload: str) -> str:
    return hashlib.sha256((key + "\n" + payload).encode()).hexdigest()


class ResponseCache:
    """SQLite-backed map ``key -> ChatResult`` (see module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.corrupt = 0
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise LLMError(f"{self.path}: LLM cache is not a readable SQLite file ({e}); "
                           f"move it away to start a fresh cache") from None

    def get(self, key: str) -> ChatResult | None:
        with self._lock:
            row = self._db.execute("SELECT payload, checksum FROM responses WHERE key = ?",
                                   (key,)).fetchone()
            if row is None:
                return None
            payload, checksum = row
            try:
                if _checksum(key, payload) != checksum:
                    raise ValueError("checksum mismatch")
                d = json.loads(payload)
                res = ChatResult(text=d["text"], prompt_tokens=int(d["prompt_tokens"]),
                                 completion_tokens=int(d["completion_tokens"]),
                                 latency_s=float(d["latency_s"]), finish_reason=d["finish_reason"],
                                 logprobs=d.get("logprobs"), cached=True)
            except (ValueError, KeyError, TypeError):
                self.corrupt += 1
                self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
                return None
            return res

    def put(self, key: str, model: str, res: ChatResult) -> None:
        if res.error is not None:
            raise ValueError("failed calls are not cached")
        payload = canonical_json({
            "text": res.text, "prompt_tokens": res.prompt_tokens,
            "completion_tokens": res.completion_tokens, "latency_s": res.latency_s,
            "finish_reason": res.finish_reason, "logprobs": res.logprobs,
        })
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model, payload, checksum, created) "
                "VALUES (?, ?, ?, ?, ?)", (key, model, payload, _checksum(key, payload), time.time()))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
