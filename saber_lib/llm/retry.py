"""Asking until an answer parses, and the log-probability pairwise verdict."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from .base import Backend
from .types import ChatRequest, ChatResult, Failure, ParseError


def run_with_parser(backend: Backend, requests: Sequence[ChatRequest], parser: Callable[[str], Any],
                    retries: int = 0, desc: str | None = None) -> list[Any]:
    """Ask every request, parse every answer; return ``parsed value | Failure`` per request.

    An answer whose call failed or whose text ``parser`` rejects (ParseError) is asked again, up
    to ``retries`` more times; attempt ``k`` sets ``ChatRequest.attempt`` to the original value
    plus ``k``, so a retry is a new cache entry (and a new seed), not the cached bad answer. A
    request still unanswered after that is a :class:`Failure` carrying the last reason and text,
    and the answers of its attempts that did not parse are dropped from the cache
    (``Backend.forget``), so that a rerun asks the model again rather than failing on them (those
    of a request that a retry answered stay: a rerun then reaches the same answer without a call).
    """
    n = len(requests)
    out: list[Any] = [None] * n
    reasons: dict[int, tuple[str, str]] = {}
    rejected: dict[int, list[ChatRequest]] = {}   # the attempts whose answer did not parse
    pending = list(range(n))
    for k in range(retries + 1):
        if not pending:
            break
        batch = [dataclasses.replace(requests[i], attempt=requests[i].attempt + k) for i in pending]
        label = desc if k == 0 else f"{desc or 'llm'} (retry {k})"
        results = backend.chat_batch(batch, desc=label)
        still = []
        for i, req_k, res in zip(pending, batch, results):
            if res.error is not None:
                reasons[i] = (f"call failed: {res.error}", "")
                still.append(i)
                continue
            try:
                out[i] = parser(res.text)
            except ParseError as e:
                rejected.setdefault(i, []).append(req_k)
                why = f"unparseable: {e}"
                if res.finish_reason == "length":
                    why += " (the answer hit max_tokens)"
                reasons[i] = (why, res.text)
                still.append(i)
        pending = still
    for i in pending:
        for r in rejected.get(i, ()):   # not kept as answers: the rerun a failure asks for asks again
            backend.forget(r)
        why, text = reasons[i]
        out[i] = Failure(reason=why, text=text, attempts=retries + 1)
    return out


def logprob_margin(res_ab: ChatResult, res_ba: ChatResult, options=("1", "2")) -> float:
    """Evidence that the candidate shown first in ``res_ab`` (A) is closer, over both orders.

    ``margin = [lp_AB(o1) - lp_AB(o2)] + [lp_BA(o2) - lp_BA(o1)]`` where ``lp_XY(o)`` is the
    log-probability of option ``o`` after the prompt showing X as candidate 1 and Y as candidate 2.
    An option outside the backend's reported top-k counts as ``-inf``. Positive favours A,
    negative B; ``nan`` when the two orders disagree infinitely. Raises ParseError when an order
    failed or saw neither option.
    """
    o1, o2 = options
    parts = []
    for res, (first, second) in ((res_ab, (o1, o2)), (res_ba, (o2, o1))):
        if res.error is not None:
            raise ParseError(f"call failed: {res.error}")
        lp = res.logprobs or {}
        a, b = lp.get(first), lp.get(second)
        if a is None and b is None:
            raise ParseError(f"neither {o1!r} nor {o2!r} among the reported next tokens")
        parts.append((-math.inf if a is None else a) - (-math.inf if b is None else b))
    return parts[0] + parts[1]


def logprob_pairwise(backend: Backend, requests_ab: Sequence[ChatRequest], requests_ba: Sequence[ChatRequest],
                     options=("1", "2"), desc: str | None = None) -> list[str | Failure]:
    """Pairwise verdicts from next-token log-probabilities over both candidate orders.

    ``requests_ab[k]`` shows candidate A first, ``requests_ba[k]`` the same pair swapped; both
    should end with the ``\\boxed{`` prefill (``prompts.render("pairwise_judge_logprob", ...)``).
    Returns ``"a"`` (margin > 0, see :func:`logprob_margin`), ``"b"`` (margin < 0), ``"tie"``
    (0 or undefined) or a :class:`Failure` per pair.
    """
    if len(requests_ab) != len(requests_ba):
        raise ValueError("requests_ab and requests_ba must pair up")
    res = backend.choice_logprobs(list(requests_ab) + list(requests_ba), options=options, desc=desc)
    n = len(requests_ab)
    out: list[str | Failure] = []
    for k in range(n):
        try:
            m = logprob_margin(res[k], res[n + k], options)
        except ParseError as e:
            out.append(Failure(reason=str(e), attempts=1))
            continue
        out.append("tie" if math.isnan(m) or m == 0 else "a" if m > 0 else "b")
    return out
