"""The request and result records every backend speaks, and the errors of the LLM layer."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class LLMError(RuntimeError):
    """The LLM layer cannot work as configured (missing package, bad setting, unreadable cache)."""


class ParseError(ValueError):
    """A model answer that does not match the expected format; the message says why."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat call.

    ``messages``: OpenAI-style ``[{"role": ..., "content": ...}]``. When the last message has role
    ``assistant`` it is a *prefill*: the model continues that text (used by the log-probability
    judge, whose prompt ends in ``\\boxed{``).
    ``temperature`` / ``max_tokens``: ``None`` takes the profile's ``llm.temperature`` /
    ``llm.max_tokens``.
    Guided decoding (each optional, at most one): ``json_schema`` (a JSON-schema dict),
    ``regex``, ``choices`` (the answer is one of these strings).
    ``logprobs_for``: options (e.g. ``("1", "2")``) whose log-probability as the *next* token is
    returned in ``ChatResult.logprobs`` instead of sampling an answer.
    ``seed``: ``None`` derives a seed from the cache key, so a request is reproducible.
    ``attempt``: part of the cache key; a retry of an unparseable answer raises it so that the
    retry is a new call rather than the cached bad answer.
    ``extra``: backend-specific fields sent as they are (and part of the cache key).
    ``meta``: what the request is about (``template``: the prompt's name, set by
    ``prompts.request``; a judge adds ``query``, ``first``, ``second`` ids). Never sent to a
    model and not part of the cache key; recorded in cassettes (``saber_lib.llm.cassette``).
    """

    messages: list[dict[str, str]]
    temperature: float | None = None
    max_tokens: int | None = None
    json_schema: dict | None = None
    regex: str | None = None
    choices: tuple[str, ...] | None = None
    logprobs_for: tuple[str, ...] | None = None
    seed: int | None = None
    attempt: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not isinstance(self.messages, (list, tuple)) or not self.messages:
            raise ValueError("ChatRequest.messages must be a non-empty list of {role, content}")
        for m in self.messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"ChatRequest: bad message {m!r} (needs role and content)")
        guided = [x for x in (self.json_schema, self.regex, self.choices) if x is not None]
        if len(guided) > 1:
            raise ValueError("ChatRequest: give at most one of json_schema, regex, choices")

    @property
    def prefill(self) -> str | None:
        """The assistant text the model continues, if the last message is an assistant message."""
        last = self.messages[-1]
        return last["content"] if last["role"] == "assistant" else None


@dataclass
class ChatResult:
    """One answer. ``error`` is ``None`` on success, else the reason (the call gave up)."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    error: str | None = None
    cached: bool = False
    logprobs: dict[str, float | None] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Failure:
    """A request that failed or never produced a parseable answer; ``reason`` says why."""

    reason: str
    text: str = ""        # the last raw answer, if any
    attempts: int = 0

    def __bool__(self) -> bool:  # so that `if result:` skips failures
        return False
