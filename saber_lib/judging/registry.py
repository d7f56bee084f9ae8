"""The one registry of pairwise judges: a judge is named by a short spec, ``<kind>`` or
``<kind>:<argument>``, and built by the factory registered for its kind.

Every place that takes a judge reads it from here: the tournament (``tournament.judge``, through
:func:`judge_from_profile`), the judge-validation stage (``judge_validation.jv_second_judge``), the
robustness panel (``robustness.flip_judges``, ``flip_slow_judges``) and ``saber judge-check --judge``.
A spec valid in one of them is valid in all; a judge that needs something a place lacks (an LLM
backend, the run's selection signals) says so in one line when it is built.

A factory is registered on its kind::

    @register_judge("length")
    def length_judge(arg):            # arg: the text after "length:", None when the spec has none
        return MyJudge(...)           # a saber_lib.judging.Judge

``register_judge(kind, context=True)``: the factory also receives the :class:`JudgeContext` (the
profile's judge settings, the LLM backend, the embedding store, ...). ``check=`` validates the
argument when the spec is parsed (a profile fails at load time). The built-in kinds are registered
by :mod:`saber_lib.judging.spec_judges`; a kind that is already registered by another module is
refused with one error naming both modules. Plugins register theirs on import (``run.plugins`` or the
``saber.judges`` entry-point group); the registry loads the plugins handed to this process
(``core.plugins.load_from_environment``: a stage's kernel) before it looks a kind up, and notes which
module registered a kind (a stage whose parameters name it hashes the module's file).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..core import plugins
from ..core.config import paper_profile
from ..core.config_types import SPEC_CHECKS
from ..llm.types import LLMError
from ..retrieval.base import ScoreError
from .judge_base import Judge, JudgeFault


class JudgeSpecError(ValueError):
    """A judge spec that names no judge (one line, naming the spec)."""


class JudgeKindClash(ValueError):
    """A kind registered twice by different modules."""


@dataclass(frozen=True)
class JudgeSpec:
    kind: str
    arg: str | None
    text: str               # the spec as written (stripped)


@dataclass(frozen=True)
class JudgeEntry:
    factory: Callable
    module: str
    context: bool           # the factory takes (arg, ctx)
    check: Callable | None  # arg -> error message or None
    usage: str              # how the spec is written, for error messages
    profile_relative: Callable  # arg -> refers to the profile's own judge (not a value for tournament.judge)
    llm: Callable | None    # arg -> whether the judge asks the LLM backend
    rating_check: Callable | None  # (arg, profile values) -> error when it may not rate this benchmark
    parts: Callable         # arg -> the specs of the judges it combines (a majority's, a blend's sides)


_KINDS: dict[str, JudgeEntry] = {}
PACKAGE = "saber_lib."     # modules of the workbench register built-in kinds


def _load_plugins() -> None:
    """The run's plugins and the installed entry points, before a kind is looked up (a stage's kernel
    gets the run's ``run.plugins`` through the environment)."""
    plugins.load_from_environment()


def register_judge(kind: str, *, context: bool = False, check: Callable | None = None, usage: str | None = None,
                   profile_relative: bool | Callable = False, llm: bool | Callable = False,
                   rating_check: Callable | None = None, parts: Callable | None = None):
    """Decorator: ``factory`` builds the judges of ``kind`` (module docstring). ``llm``: the judge
    reads the LLM backend (a bool, or a function of the argument); ``rating_check(arg, values)``:
    an error when the judge may not rate the benchmark of a profile (its values by section);
    ``parts(arg)``: the specs of the judges a combined judge is made of (their own checks apply
    to it, :func:`rating_error`)."""
    if not kind or not kind.replace("-", "").replace("_", "").isalnum():
        raise JudgeSpecError(f"judge kind {kind!r}: letters, digits, '-' and '_' only")

    def deco(factory):
        module = factory.__module__
        old = _KINDS.get(kind)
        if old is not None and old.module != module:
            raise JudgeKindClash(f"judge kind {kind!r} registered by module {module} is already registered by "
                                 f"module {old.module}; choose another kind")
        if not module.startswith(PACKAGE):
            plugins.note_registration(module, kind)
        _KINDS[kind] = JudgeEntry(factory, module, context, check, usage or kind, _as_function(profile_relative),
                             _as_function(llm), rating_check, parts or (lambda _arg: []))
        return factory
    return deco


def _as_function(flag: bool | Callable) -> Callable:
    return flag if callable(flag) else (lambda _arg, on=bool(flag): on)


def kinds() -> list[str]:
    """The registered kinds, in registration order (built-ins first)."""
    _load_plugins()
    return list(_KINDS)


def usage() -> str:
    """How every registered spec is written, for messages and ``--help``."""
    _load_plugins()
    return " | ".join(e.usage for e in _KINDS.values())


def parse_judge_spec(text) -> JudgeSpec:
    """The :class:`JudgeSpec` of ``text``, or :class:`JudgeSpecError` naming it."""
    t = text.strip() if isinstance(text, str) else ""
    kind, sep, arg = t.partition(":")
    _load_plugins()
    entry = _KINDS.get(kind)
    if entry is None:
        raise JudgeSpecError(f"judge {text!r}: unknown kind {kind!r} (expected {usage()})")
    arg = arg if sep else None
    err = entry.check(arg) if entry.check else None
    if err:
        raise JudgeSpecError(f"judge {text!r}: {err}")
    return JudgeSpec(kind, arg, t)


def spec_error(text) -> str | None:
    """The one-line error of a spec that names no judge, else None."""
    try:
        parse_judge_spec(text)
    except JudgeSpecError as e:
        return str(e)
    return None


def uses_llm(spec: JudgeSpec | str) -> bool:
    """Whether the judge of ``spec`` asks the LLM backend."""
    s = parse_judge_spec(spec) if isinstance(spec, str) else spec
    return bool(_KINDS[s.kind].llm(s.arg))


def refers_to_profile(spec: JudgeSpec | str) -> bool:
    """Whether ``spec`` names the profile's own judge (so it cannot be ``tournament.judge``)."""
    s = parse_judge_spec(spec) if isinstance(spec, str) else spec
    return bool(_KINDS[s.kind].profile_relative(s.arg))


@dataclass(frozen=True)
class JudgeSettings:
    """The profile's judge keys (``tournament``, ``llm.logprob_judge``, ``run.seed`` and
    ``run.cache_dir``), named: built from a stage's parameters by :meth:`from_params`, written out by
    a notebook, or :meth:`paper` (``params/paper.yaml``'s values, the one place defaults live)."""

    judge: str
    judge_embed_model: str
    position_swap: bool
    swap_disagreement: str
    judge_retries: int
    judge_sim_agreement: float
    logprob_judge: bool
    seed: int
    cache_dir: str | None
    evaluated: tuple = ()       # evaluate.retrievers where the stage takes them (the circularity guard)
    majority_votes: int | None = None   # judge_validation.jv_majority_votes (None: the paper's)

    @classmethod
    def from_params(cls, params: Mapping) -> "JudgeSettings":
        """From a stage's flattened parameters (the keys above, ``llm`` as a dict)."""
        retrievers = params.get("retrievers")
        return cls(judge=params["judge"], judge_embed_model=params["judge_embed_model"],
                   position_swap=params["position_swap"], swap_disagreement=params["swap_disagreement"],
                   judge_retries=params["judge_retries"], judge_sim_agreement=params["judge_sim_agreement"],
                   logprob_judge=bool(params["llm"].get("logprob_judge", False)), seed=params["seed"],
                   cache_dir=params["cache_dir"],
                   evaluated=tuple(retrievers) if isinstance(retrievers, (list, tuple)) else (),
                   majority_votes=params.get("jv_majority_votes"))

    @classmethod
    def paper(cls, **changes) -> "JudgeSettings":
        """The paper profile's judge settings (no embedding store: ``cache_dir`` None), with ``changes``."""
        p = paper_profile()
        flat = {**p.flat(["tournament", "judge_validation"]), "seed": p.values["run"]["seed"], "cache_dir": None,
                "llm": p.section("llm")}
        return replace(cls.from_params(flat), **changes)


@dataclass(frozen=True)
class JudgeContext:
    """What a factory may use besides its argument.

    ``backend``: the LLM backend; ``make_backend``: a callable returning it (made on first use, when
    ``backend`` is None); ``store``: an
    embedding store (default: one in ``settings.cache_dir``); ``signals``: a callable returning the
    run's selection signals (``signals.pair_values.PairSignals``); ``clip_words``: > 0 when the
    texts given are whole and an LLM judge reads them clipped to that many words;
    ``rates_benchmark``: the judge rates the benchmark (its encoder must not be an evaluated
    retriever's, ``retrieval.registry.circular_judge``)."""

    settings: JudgeSettings = field(default_factory=JudgeSettings.paper)
    backend: object = None
    make_backend: Callable | None = None
    store: object = None
    signals: Callable | None = None
    clip_words: int = 0
    rates_benchmark: bool = False

    def llm(self, spec: str):
        """The LLM backend, or one error naming the judge ``spec`` that needs it."""
        b = self.backend if self.backend is not None or self.make_backend is None else self.make_backend()
        if b is None:
            raise ValueError(f"judge {spec!r} needs an LLM backend (llm.backend is none)")
        return b


def build_judge(spec: JudgeSpec | str, ctx: JudgeContext | None = None) -> Judge:
    """The judge of ``spec`` (parsed when given as text) in ``ctx``."""
    s = parse_judge_spec(spec) if isinstance(spec, str) else spec
    ctx = ctx or JudgeContext()
    entry = _KINDS[s.kind]
    judge = entry.factory(s.arg, ctx) if entry.context else entry.factory(s.arg)
    if not isinstance(judge, Judge):
        raise JudgeFault(f"judge {s.text!r}: the factory of module {entry.module} returned {type(judge).__name__}, "
                         f"not a saber_lib.judging.Judge")
    return judge


def rating_error(value: str, values: dict) -> str | None:
    """Why the judge ``value`` (a valid spec) may not rate the benchmark of a profile (its values by
    section), or None: its kind's ``rating_check``, then those of every judge it is made of (its
    ``parts``, at any depth: ``majority:3:proxy:minilm``, ``blend:first+retriever:bm25``)."""
    spec = parse_judge_spec(value)
    entry = _KINDS[spec.kind]
    own = entry.rating_check(spec.arg, values) if entry.rating_check else None
    return own or next((e for e in (rating_error(p, values) for p in entry.parts(spec.arg)) if e), None)


def plugin_modules(spec: JudgeSpec | str) -> list[str]:
    """The modules outside the workbench that registered the kinds of ``spec`` and of the judges it
    is made of (empty for a built-in judge)."""
    s = parse_judge_spec(spec) if isinstance(spec, str) else spec
    entry = _KINDS[s.kind]
    own = [] if entry.module.startswith(PACKAGE) else [entry.module]
    return sorted({*own, *(m for p in entry.parts(s.arg) for m in plugin_modules(p))})


@contextmanager
def judge_errors(spec: JudgeSpec):
    """Around the work of the judge ``spec``: a :class:`JudgeFault` or a score error becomes one
    line naming the spec (and the plugin modules in it), and so does any error a plugin's judge
    raises; an LLM error and a built-in judge's own errors pass as they are."""
    mods = plugin_modules(spec)
    where = f" (module {', '.join(mods)})" if mods else ""
    try:
        yield
    except LLMError:
        raise
    except (JudgeFault, ScoreError) as e:
        raise JudgeFault(f"judge {spec.text!r}{where}: {_first_line(e)}") from e
    except Exception as e:
        if not mods:
            raise
        raise JudgeFault(f"judge {spec.text!r}{where} failed: {type(e).__name__}: {_first_line(e)}") from e


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _profile_check(key: str, value: str, values: dict) -> str | None:
    err = spec_error(value)
    if err or key != "tournament.judge":
        return err
    spec = parse_judge_spec(value)
    entry = _KINDS[spec.kind]
    if entry.profile_relative(spec.arg):
        return f"{value!r} refers to the profile's own judge; name a judge (expected {usage()})"
    return rating_error(value, values)


SPEC_CHECKS["judge"] = _profile_check
