"""Which backends produced the data a study reads, for captions and ``ctx.record``."""
from __future__ import annotations

BACKEND_KEYS = ("judge", "backend", "topic_scorer", "scorer", "summarizer", "model", "encoder")


def _flatten(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_flatten(x)}" for k, x in sorted(v.items()) if not isinstance(x, (dict, list)))
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def upstream_backends(ctx, stages) -> dict[str, str]:
    """stage -> the backend facts its notebook recorded (``judge``, ``backend``, ``scorer``, ...), or
    ``"not recorded"`` when the stage left no such key (or has no manifest yet)."""
    out = {}
    for st in stages:
        try:
            info = ctx.upstream_info(st)
        except FileNotFoundError:
            out[st] = "not recorded"
            continue
        parts = [f"{k}={_flatten(info[k])}" for k in BACKEND_KEYS if k in info and info[k] not in (None, "", {})]
        out[st] = "; ".join(parts) if parts else "not recorded"
    return out


def backends_line(backends: dict[str, str], extra: str = "") -> str:
    """One caption line: ``tournament: judge=...; this stage: ...``."""
    parts = [f"{k}: {v}" for k, v in backends.items()]
    if extra:
        parts.append(extra)
    return " | ".join(parts)
