"""The failure budget of an LLM stage (profile key ``llm.max_failure_rate``).

A stage whose model calls fail (a dead server, HTTP 500s, answers that never parse) must not end
as "done" with an artifact full of failures. After its LLM work, and before it writes anything
that a later stage would take for finished, every LLM stage calls::

    from saber_lib import llm as L

    parsed = L.run_with_parser(backend, reqs, parser, retries=summary_retries, desc="summaries")
    L.check_results_budget(parsed, llm["max_failure_rate"], stage="summaries")

or, with counts it keeps itself (e.g. judgments with outcome ``failure``)::

    L.check_failure_budget(n_calls=len(judgments), n_failed=n_failures,
                           first_reasons=reasons[:3], max_rate=llm["max_failure_rate"],
                           stage="tournament")

Count *requests that ended without a usable answer after their retries* (what the artifact marks
as failed), not raw HTTP attempts: a call retried into success is not a failure. Where a stage has
only the backend (no parser layer), :func:`backend_failure_counts` reads the backend's accounting
(``Backend.usage()``: ``calls`` answered by the model, ``cached`` answers, ``failed`` calls; and
``Backend.first_errors()``).

Past the budget :class:`FailureBudgetExceeded` is raised: the notebook fails, the runner writes no
manifest, so the stage is not done; write the partial artifacts (and the LLM cache, which keeps
every answer received) *before* the check if they help a resumed run, never a manifest.

Rule: fail when ``n_failed / n_calls > max_rate``, and always when every one of at least one call
failed (no answer at all is never a result, whatever the budget). ``n_calls == 0`` passes.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .types import Failure, LLMError

MAX_REASONS = 3


class FailureBudgetExceeded(LLMError):
    """More LLM requests of a stage failed than ``llm.max_failure_rate`` allows."""

    def __init__(self, message: str, *, stage: str, n_calls: int, n_failed: int, max_rate: float,
                 first_reasons: Sequence[str] = ()):
        super().__init__(message)
        self.stage, self.n_calls, self.n_failed = stage, n_calls, n_failed
        self.max_rate, self.first_reasons = max_rate, list(first_reasons)


def _short(reason: Any, limit: int = 200) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_failure_budget(n_calls: int, n_failed: int, first_reasons: Iterable[str], max_rate: float,
                         stage: str) -> None:
    """Raise :class:`FailureBudgetExceeded` when ``n_failed`` of ``n_calls`` is past ``max_rate``
    (a share in [0, 1]); the message gives the counts, the budget and the first failure reasons."""
    if not 0.0 <= float(max_rate) <= 1.0:
        raise ValueError(f"llm.max_failure_rate must be in [0, 1], got {max_rate!r}")
    if n_calls < 0 or not 0 <= n_failed <= max(n_calls, 0):
        raise ValueError(f"failure counts do not add up: {n_failed} failed of {n_calls}")
    if n_calls == 0 or n_failed == 0:
        return
    rate = n_failed / n_calls
    if rate <= max_rate and n_failed < n_calls:
        return
    reasons = [_short(r) for r in list(first_reasons)[:MAX_REASONS]]
    why = "every call failed" if n_failed == n_calls else f"above llm.max_failure_rate = {max_rate:g}"
    msg = (f"stage {stage}: {n_failed} of {n_calls} LLM requests failed ({rate:.1%}; {why})"
           + (f"; first reasons: " + " | ".join(reasons) if reasons else "")
           + ". Fix the cause (server, model, prompt) and rerun: answers already received are cached")
    raise FailureBudgetExceeded(msg, stage=stage, n_calls=n_calls, n_failed=n_failed, max_rate=max_rate,
                                first_reasons=reasons)


def results_failure_counts(results: Sequence[Any]) -> tuple[int, int, list[str]]:
    """``(n, n_failed, first_reasons)`` over the outputs of ``run_with_parser`` /
    ``logprob_pairwise`` (a :class:`Failure` is a failed request) or ``ChatResult`` lists."""
    reasons = []
    for r in results:
        if isinstance(r, Failure):
            reasons.append(r.reason)
        elif getattr(r, "error", None) is not None:
            reasons.append(r.error)
    return len(results), len(reasons), reasons[:MAX_REASONS]


def backend_failure_counts(backend) -> tuple[int, int, list[str]]:
    """``(n_calls, n_failed, first_reasons)`` from a backend's accounting since it was made (or
    since ``reset_usage()``): every request answered by the model, from the cache, or failed."""
    u = backend.usage()
    n_failed = int(u["failed"])
    return int(u["calls"]) + int(u["cached"]) + n_failed, n_failed, backend.first_errors()[:MAX_REASONS]


def check_results_budget(results: Sequence[Any], max_rate: float, stage: str) -> None:
    """:func:`check_failure_budget` over the outputs of ``run_with_parser`` (see the module doc)."""
    check_failure_budget(*results_failure_counts(results), max_rate=max_rate, stage=stage)


def check_backend_budget(backend, max_rate: float, stage: str) -> None:
    """:func:`check_failure_budget` over a backend's accounting (see the module doc)."""
    check_failure_budget(*backend_failure_counts(backend), max_rate=max_rate, stage=stage)
