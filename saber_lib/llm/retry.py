"""Asking until an answer parses, and the log-probability pairwise verdict."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from .base import Backend
from .types import ChatRequest, ChatResult, Failure, ParseError


def ask_until_parsed(ask: Callable[[list[ChatRequest], str | None], list[ChatResult]],
                     forget: Callable[[ChatRequest], None], groups: Sequence[Sequence[ChatRequest]],
                     parse: Callable[[int, list[ChatResult]], Any], retries: int = 0,
                     desc: str | None = None) -> list[Any]:
    """The one way an answer becomes a value: ask, parse, ask again, and forget what never parsed.

    ``groups[i]``: the requests whose answers make item ``i`` (one request, or the two orders of a
    pair); ``ask(requests, desc)`` answers them in order (``Backend.chat_batch`` or
    ``choice_logprobs``), ``parse(i, results)`` returns item ``i``'s value or raises ParseError. An item
    with a failed call, or whose answers ``parse`` rejects, is asked again, up to ``retries`` more
    times; attempt ``k`` sets ``ChatRequest.attempt`` to the original value plus ``k``, so a retry is
    a new cache entry (and a new seed), not the cached bad answer. An item still unanswered after
    that is a :class:`Failure` carrying the last reason and text, and the answers of its attempts
    that did not parse are dropped from the cache (``forget``), so that a rerun asks the model again
    rather than failing on them (those of an item that a retry answered stay: a rerun then reaches
    the same value without a call).
    """
    n = len(groups)
    out: list[Any] = [None] * n
    reasons: dict[int, tuple[str, str]] = {}
    rejected: dict[int, list[ChatRequest]] = {}   # the attempts whose answers did not parse
    pending = list(range(n))
    for k in range(retries + 1):
        if not pending:
            break
        batch = [[dataclasses.replace(r, attempt=r.attempt + k) for r in groups[i]] for i in pending]
        label = desc if k == 0 else f"{desc or 'llm'} (retry {k})"
        flat = ask([r for group in batch for r in group], label)
        still, at = [], 0
        for i, reqs_k in zip(pending, batch):
            res = list(flat[at:at + len(reqs_k)])
            at += len(reqs_k)
            errors = [r.error for r in res if r.error is not None]
            if errors:
                reasons[i] = (f"call failed: {errors[0]}", "")
                still.append(i)
                continue
            try:
                out[i] = parse(i, res)
            except ParseError as e:
                rejected.setdefault(i, []).extend(reqs_k)
                why = f"unparseable: {e}"
                if any(r.finish_reason == "length" for r in res):
                    why += " (the answer hit max_tokens)"
                reasons[i] = (why, "\n".join(r.text for r in res))
                still.append(i)
        pending = still
    for i in pending:
        for r in rejected.get(i, ()):   # not kept as answers: the rerun a failure asks for asks again
            forget(r)
        why, text = reasons[i]
        out[i] = Failure(reason=why, text=text, attempts=retries + 1)
    return out


def run_with_parser(backend: Backend, requests: Sequence[ChatRequest], parser: Callable[[str], Any],
                    retries: int = 0, desc: str | None = None) -> list[Any]:
    """Ask every request, parse every answer's text with ``parser`` (ParseError: not an answer);
    return ``parsed value | Failure`` per request, retried and forgotten as :func:`ask_until_parsed`."""
    return ask_until_parsed(lambda reqs, label: backend.chat_batch(reqs, desc=label), backend.forget,
                            [[r] for r in requests], lambda _, res: parser(res[0].text), retries, desc)


def logprob_margin(res_ab: ChatResult, res_ba: ChatResult | None = None, options=("1", "2")) -> float:
    """Evidence that the candidate shown first in ``res_ab`` (A) is closer, over both orders.

    ``margin = [lp_AB(o1) - lp_AB(o2)] + [lp_BA(o2) - lp_BA(o1)]`` where ``lp_XY(o)`` is the
    log-probability of option ``o`` after the prompt showing X as candidate 1 and Y as candidate 2
    (only the first term without ``res_ba``). An option outside the backend's reported top-k counts
    as ``-inf``. Positive favours A, negative B; ``nan`` when the two orders disagree infinitely.
    Raises ParseError when an order failed or saw neither option.
    """
    o1, o2 = options
    parts = []
    orders = ((res_ab, (o1, o2)),) if res_ba is None else ((res_ab, (o1, o2)), (res_ba, (o2, o1)))
    for res, (first, second) in orders:
        if res.error is not None:
            raise ParseError(f"call failed: {res.error}")
        lp = res.logprobs or {}
        a, b = lp.get(first), lp.get(second)
        if a is None and b is None:
            raise ParseError(f"neither {o1!r} nor {o2!r} among the reported next tokens")
        parts.append((-math.inf if a is None else a) - (-math.inf if b is None else b))
    return sum(parts)


def logprob_pairwise(backend: Backend, requests_ab: Sequence[ChatRequest],
                     requests_ba: Sequence[ChatRequest] | None = None, options=("1", "2"),
                     desc: str | None = None, retries: int = 0) -> list[str | Failure]:
    """Pairwise verdicts from next-token log-probabilities, over both candidate orders.

    ``requests_ab[k]`` shows candidate A first, ``requests_ba[k]`` the same pair swapped (``None``:
    the shown order only); both should end with the ``\\boxed{`` prefill
    (``prompts.render("pairwise_judge_logprob", ...)``). Returns ``"a"`` (margin > 0, see
    :func:`logprob_margin`), ``"b"`` (margin < 0), ``"tie"`` (0 or undefined) or a :class:`Failure`
    per pair. A pair whose answers did not both show an option is asked again and forgotten like
    any other unparsed answer (:func:`ask_until_parsed`).
    """
    return [g if isinstance(g, Failure) else margin_verdict(g)
            for g in logprob_pairwise_margins(backend, requests_ab, requests_ba, options, desc, retries)]


def margin_verdict(margin: float) -> str:
    """``"a"`` for a positive margin, ``"b"`` for a negative one, ``"tie"`` for 0 or an undefined one."""
    return "tie" if math.isnan(margin) or margin == 0 else "a" if margin > 0 else "b"


def logprob_pairwise_margins(backend: Backend, requests_ab: Sequence[ChatRequest],
                             requests_ba: Sequence[ChatRequest] | None = None, options=("1", "2"),
                             desc: str | None = None, retries: int = 0) -> list[float | Failure]:
    """The numbers behind :func:`logprob_pairwise`: the summed margin of each pair
    (:func:`logprob_margin`; NaN when undefined) or a :class:`Failure`, asked the same way."""
    if requests_ba is not None and len(requests_ab) != len(requests_ba):
        raise ValueError("requests_ab and requests_ba must pair up")
    groups = [[ab] for ab in requests_ab] if requests_ba is None else \
        [[ab, ba] for ab, ba in zip(requests_ab, requests_ba)]

    def margin(_: int, res: list[ChatResult]) -> float:
        return logprob_margin(res[0], res[1] if len(res) > 1 else None, options)

    return ask_until_parsed(lambda reqs, label: backend.choice_logprobs(reqs, options=options, desc=label),
                            lambda r: backend.forget(backend.logprob_request(r, options)), groups, margin,
                            retries, desc)
