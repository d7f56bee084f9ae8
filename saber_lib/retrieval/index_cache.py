"""The on-disk cache of whole-corpus indexes: one folder per (index kind, model, representation,
parameters, corpus hash) under ``<cache_dir>/open_corpus/``, written under a temporary name and
renamed when complete (a crashed build is never reused). :data:`BUILD_COUNTS` counts real builds per
kind in this process (tests use it to see that a cached index is loaded, not rebuilt).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from .indexes import INDEX_CLASSES

BUILD_COUNTS: Counter = Counter()
CACHE_SUBDIR = "open_corpus"


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s)[:60] or "x"


def cache_key(kind: str, model: str, representation: str, corpus_hash: str, params: dict | None = None) -> str:
    blob = json.dumps({"kind": kind, "model": model, "representation": representation,
                       "corpus": corpus_hash, "params": params or {}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def index_dir(cache_dir, kind: str, model: str, representation: str, corpus_hash: str,
              params: dict | None = None) -> Path:
    """The cache folder of one index (it may not exist yet)."""
    key = cache_key(kind, model, representation, corpus_hash, params)
    return Path(cache_dir) / CACHE_SUBDIR / kind / f"{_slug(model)}-{_slug(representation)}-{key}"


def cached_index(cache_dir, kind: str, model: str, representation: str, corpus_hash: str,
                 build: Callable[[], object], params: dict | None = None, load_kwargs: dict | None = None):
    """The index of ``kind`` for (model, representation, parameters, corpus hash): loaded from the
    cache when a complete copy is there, else built with ``build()``, saved and counted in
    :data:`BUILD_COUNTS`. ``cache_dir=None`` builds without caching. Returns (index, info) with
    ``info = {"path", "built", "build_s"}``."""
    cls = INDEX_CLASSES[kind]
    if cache_dir is None:
        t0 = time.perf_counter()
        ix = build()
        BUILD_COUNTS[kind] += 1
        return ix, {"path": None, "built": True, "build_s": time.perf_counter() - t0}
    path = index_dir(cache_dir, kind, model, representation, corpus_hash, params)
    if (path / "meta.json").exists():
        return cls.load(path, **(load_kwargs or {})), {"path": str(path), "built": False, "build_s": 0.0}
    t0 = time.perf_counter()
    ix = build()
    build_s = time.perf_counter() - t0
    BUILD_COUNTS[kind] += 1
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ix.save(tmp)
    (tmp / "meta.json").write_text(json.dumps({"kind": kind, "model": model, "representation": representation,
                                               "corpus_hash": corpus_hash, "params": params or {},
                                               "n_docs": len(ix.doc_ids), "build_s": build_s},
                                              indent=1, default=str))
    try:
        os.replace(tmp, path)
    except OSError:  # another process finished the same index first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    if getattr(cls, "reload_after_save", False):   # the built object's files moved into the cache
        ix = cls.load(path, **(load_kwargs or {}))
    return ix, {"path": str(path), "built": True, "build_s": build_s}
