"""Approach Zero (``pya0``): formula structure search.

``approach0`` puts a query's candidates into a temporary index; the query's ``$...$`` segments
become "tex" keywords and its other words "term" keywords; a candidate that the engine does not
return scores below every returned one. Over the whole corpus it is served by
``indexes.Approach0Index``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..core.text import stop_words
from .base import Retriever, version
from .registry import register_retriever


class quiet_stdout:
    """Silence C-level writes to stdout and stderr (pya0 reports every index it creates and every
    formula its parser rejects; a rejected formula is simply not indexed as math)."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.fds = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        for i, fd in enumerate(self.fds, 1):
            os.dup2(fd, i)
            os.close(fd)
        return False


def _fast_tmp() -> str | None:
    """A memory-backed temp folder when there is one (an index is thousands of small files)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9]+")


def split_query_math(text: str) -> tuple[list[str], list[str]]:
    """(math segments, words) of a query: ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]`` are math;
    the words are the alphabetic tokens (2+ characters, lower case, English and math stop words
    removed) of the rest. Both lists keep first occurrences only, in order."""
    maths, rest, last = [], [], 0
    for m in _MATH_RE.finditer(text):
        rest.append(text[last:m.start()])
        seg = next(g for g in m.groups() if g is not None).strip()
        if seg:
            maths.append(seg)
        last = m.end()
    rest.append(text[last:])
    words = [w.lower() for w in _WORD_RE.findall(" ".join(rest))]
    stop = stop_words()
    words = [w for w in words if w not in stop]
    return list(dict.fromkeys(maths)), list(dict.fromkeys(words))


def to_imath(text: str) -> str:
    """Approach Zero's document markup: every math segment wrapped in ``[imath]..[/imath]``."""
    def rep(m):
        seg = next(g for g in m.groups() if g is not None)
        return f" [imath]{seg.strip()}[/imath] "
    return _MATH_RE.sub(rep, text)


class ApproachZeroRetriever(Retriever):
    """Approach Zero structure search (``pya0``) over a temporary index of the query's candidates."""

    name = "approach0"

    def __init__(self, max_math: int = 16, max_terms: int = 32, workdir: str | None = None):
        try:
            import pya0  # noqa: F401
        except ImportError:
            raise RuntimeError("retriever 'approach0' needs pya0: pip install pya0==0.3.7") from None
        self.max_math, self.max_terms, self.workdir = max_math, max_terms, workdir
        self.backend = f"pya0=={version('pya0')} (Approach Zero)"

    def keywords(self, query: str) -> list[dict]:
        maths, words = split_query_math(query)
        return ([{"str": m, "type": "tex"} for m in maths[: self.max_math]]
                + [{"str": w, "type": "term"} for w in words[: self.max_terms]])

    def score(self, query, candidates):
        import pya0  # optional, heavy: Approach Zero (native library)

        candidates = list(candidates)
        n = len(candidates)
        if n == 0:
            return np.zeros(0)
        kws = self.keywords(query)
        hits: dict[int, float] = {}
        tmp = Path(tempfile.mkdtemp(prefix="az-", dir=self.workdir or _fast_tmp()))
        try:
            with quiet_stdout():
                ix = pya0.index_open(str(tmp / "ix"), option="w")
                w = pya0.index_writer(ix)
                for i, c in enumerate(candidates):
                    pya0.writer_add_doc(w, content=to_imath(c), url=str(i))
                pya0.writer_maintain(w, force=True)
                pya0.writer_flush(w)
                pya0.writer_close(w)
                pya0.index_close(ix)
                ix = pya0.index_open(str(tmp / "ix"), option="r")
            for attempt in (kws, [k for k in kws if k["type"] == "term"]):
                if not attempt:
                    continue
                with quiet_stdout():
                    raw = pya0.search(ix, attempt, topk=n)
                res = json.loads(raw)
                if res.get("ret_code") == 0:
                    for h in res.get("hits", []):
                        hits[int(h["field_url"])] = float(h["score"])
                    break
            pya0.index_close(ix)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        out = np.zeros(n)
        floor = min([0.0] + list(hits.values())) - 1.0
        out[:] = floor
        for i, s in hits.items():
            out[i] = s
        return out


@register_retriever("approach0", corpus_index="approach0", retriever_class="lexical",
                    summary="Approach Zero structure search (`pya0`) over the query's candidates")
def _approach0() -> Retriever:
    """Approach Zero structure search (``pya0``) over a temporary index of the query's candidates."""
    return ApproachZeroRetriever()
