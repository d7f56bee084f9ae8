"""Which backends produced the data a study reads, for captions and ``ctx.record``."""
from __future__ import annotations

import json
from pathlib import Path

BACKEND_KEYS = ("judge", "backend", "topic_scorer", "scorer", "summarizer", "model", "encoder")


def _flatten(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_flatten(x)}" for k, x in sorted(v.items()) if not isinstance(x, (dict, list)))
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


# keys whose value names the model-backed step; the paper's backend is an LLM ("llm", "llm:<model>", ...)
STAND_IN_KEYS = ("judge", "topic_scorer", "summarizer")
STAND_IN_NOTE = "CPU stand-in, NOT the paper's LLM"


def is_stand_in(info: dict) -> bool:
    """True when the stage recorded a judge / topic scorer / summarizer that is not an LLM."""
    return any(isinstance(info.get(k), str) and info[k] and not info[k].startswith("llm") for k in STAND_IN_KEYS)


def upstream_backends(ctx, stages) -> dict[str, str]:
    """stage -> the backend facts its notebook recorded (``judge``, ``backend``, ``scorer``, ...), or
    ``"not recorded"`` when the stage left no such key (or has no manifest yet). A non-LLM judge,
    topic scorer or summarizer is flagged with ``STAND_IN_NOTE``."""
    out = {}
    for st in stages:
        try:
            info = ctx.upstream_info(st)
        except FileNotFoundError:
            out[st] = "not recorded"
            continue
        parts = [f"{k}={_flatten(info[k])}" for k in BACKEND_KEYS if k in info and info[k] not in (None, "", {})]
        if parts and is_stand_in(info):
            parts.append(STAND_IN_NOTE)
        out[st] = "; ".join(parts) if parts else "not recorded"
    return out


def backends_line(backends: dict[str, str], extra: str = "") -> str:
    """One caption line: ``tournament: judge=...; this stage: ...``."""
    parts = [f"{k}: {v}" for k, v in backends.items()]
    if extra:
        parts.append(extra)
    return " | ".join(parts)


def run_profile(run_dir) -> str | None:
    """The profile file the run's stages were executed with (from their manifests), or None."""
    for p in sorted(Path(run_dir).glob("*/manifest.json")):
        prof = json.loads(p.read_text()).get("profile")
        if prof and Path(prof).exists():
            return prof
    return None
