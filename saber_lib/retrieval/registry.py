"""The one registry of retrievers: a name maps to a factory, and every list of retriever names
(profile checks, error messages, docs/retrievers.md, the open-corpus track, the rephrased-copy
rank, the proxy judge's circularity guard) is read from here.

A factory is registered with the decorator :func:`register_retriever` in the module that defines
it; the built-in modules of this package are imported the first time the registry is read (a new
module of ``saber_lib/retrieval/`` registers its retrievers without being listed anywhere), a
user's modules by :func:`saber_lib.core.plugins.load_plugins`. A factory's keyword parameters
are filled from what the caller knows, by name (``name``, ``argument``: the text after a prefix,
``k1``, ``b``, ``store``, ``max_chunks``, ``cache_dir``, ``tokenizer``, ``run_min_match``); a
factory without parameters is called with none. It returns any object with ``score(query: str,
documents: list[str]) -> sequence of floats`` (optionally ``score_many``), wrapped by
:func:`get_retriever` into a :class:`~.base.Retriever` when it is not one.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Callable, Iterable

from ..core import plugins
from .base import Retriever, wrap

PACKAGE = __name__.rsplit(".", 1)[0]
OTHER = "other"     # the class of a retriever registered without one


class RetrieverNameError(KeyError):
    """A name no registered factory answers, or a registration that clashes with another."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class RetrieverEntry:
    """One registered retriever.

    ``prefix``: the name is a prefix and the rest of the profile's entry its argument (``run:PATH``);
    ``file_argument``: that argument is a file the stage reads (hashed as an input, made absolute
    where the user typed it); ``fixed_scores``: it scores fixed queries by id, so it cannot score a
    rewritten query; ``model``: the model behind it (encoders of one model share it: the proxy
    judge's circularity guard); ``corpus_index``: the whole-corpus index that serves it as a first
    stage of the open-corpus track and in the rephrased-copy rank (``bm25``, ``tfidf``,
    ``approach0``, ``dense``; None: it reranks candidates only); ``retriever_class``: the class the
    analyses group it by (``lexical``: bag-of-tokens scorers, the controls of the instruction arms;
    ``dense encoder``; ``run file``: fixed rankings; ``other`` unless a plugin says which)."""

    name: str
    factory: Callable
    module: str
    prefix: bool = False
    file_argument: bool = False
    fixed_scores: bool = False
    model: str | None = None
    corpus_index: str | None = None
    summary: str = ""
    retriever_class: str = OTHER

    @property
    def builtin(self) -> bool:
        return self.module.startswith(PACKAGE + ".")


SPEC_SYNTAX = ">@:+,"   # what joins names in specs, never inside a name (blanks neither)


def _origin(factory) -> tuple:
    """What identifies a factory across imports of its module: its name and where it is defined."""
    code = getattr(factory, "__code__", None)
    return (getattr(factory, "__qualname__", repr(factory)), getattr(code, "co_filename", None),
            getattr(code, "co_firstlineno", None))


_ENTRIES: dict[str, RetrieverEntry] = {}
_LOADED: list[bool] = [False]


def _load_builtins() -> None:
    """Import every module of this package once (each registers its own retrievers), then the
    plugins handed to this process (``core.plugins.load_from_environment``)."""
    if _LOADED[0]:
        return
    _LOADED[0] = True
    for module in builtin_modules():
        importlib.import_module(module)
    plugins.load_from_environment()   # a stage's kernel: the run's plugins and installed entry points


def builtin_modules() -> list[str]:
    """The dotted names of this package's modules (the stages that score with a retriever hash them)."""
    package = importlib.import_module(PACKAGE)
    return [f"{PACKAGE}.{m.name}" for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name)
            if not m.name.startswith("_")]


def register_retriever(name: str, *, prefix: bool = False, file_argument: bool = False,
                       fixed_scores: bool = False, model: str | None = None, corpus_index: str | None = None,
                       summary: str = "", module: str | None = None, retriever_class: str = OTHER):
    """Decorator: register ``factory`` under ``name`` (see :class:`RetrieverEntry` for the options). A name
    another module registered already, or one module registering a name twice (another factory), is an
    error naming the module(s). A name holds none of the characters that join names in specs
    (:data:`SPEC_SYNTAX`: ``bm25>mine``, ``<encoder>@hnsw``, ``retriever:<name>``, ``blend:a+b``, blanks); a
    prefix entry ends with its one ``:`` (``run:``)."""
    bare = name[:-1] if prefix and isinstance(name, str) and name.endswith(":") else name
    if not isinstance(name, str) or not bare.strip() or name != name.strip():
        raise RetrieverNameError(f"a retriever name must be a non-empty string without surrounding blanks, got {name!r}")
    clash = sorted({c for c in bare if c in SPEC_SYNTAX or c.isspace()})
    if clash:
        raise RetrieverNameError(f"retriever name {name!r}: {' '.join(repr(c) for c in clash)} may not be in a name "
                                 f"(they join names in specs: 'bm25>mine', 'minilm@hnsw', 'retriever:<name>', "
                                 f"'blend:a+b'); choose another name")
    if not isinstance(retriever_class, str) or not retriever_class.strip():
        raise RetrieverNameError(f"retriever {name!r}: its class must be a non-empty string, got {retriever_class!r}")

    def decorate(factory: Callable) -> Callable:
        owner = module or getattr(factory, "__module__", "?")
        if not owner.startswith(PACKAGE + "."):
            _load_builtins()   # a plugin's name is checked against every built-in one
        old = _ENTRIES.get(name)
        if old is not None and old.module != owner:
            raise RetrieverNameError(f"module {owner}: retriever name {name!r} is already registered by {old.module}"
                                     + (" (a built-in)" if old.builtin else "") + "; choose another name")
        if old is not None and _origin(old.factory) != _origin(factory):   # the same one again: a module imported anew
            raise RetrieverNameError(f"module {owner} registers retriever name {name!r} twice ({_origin(old.factory)[0]} "
                                     f"and {_origin(factory)[0]}); choose another name for one of them")
        if not owner.startswith(PACKAGE + "."):
            plugins.note_registration(owner, name)
        _ENTRIES[name] = RetrieverEntry(name, factory, owner, prefix, file_argument, fixed_scores, model, corpus_index,
                               summary or (inspect.getdoc(factory) or "").split("\n\n")[0].replace("\n", " "),
                               retriever_class)
        return factory

    return decorate


def entries() -> list[RetrieverEntry]:
    """Every registered retriever, built-ins first (by module name, then registration order)."""
    _load_builtins()
    return sorted(_ENTRIES.values(), key=lambda e: (not e.builtin, e.module if e.builtin else ""))


def retriever_names(*, prefixes: bool = False) -> list[str]:
    """The registered names (prefix entries such as ``run:`` only when ``prefixes``)."""
    return [e.name for e in entries() if prefixes or not e.prefix]


def lookup(name: str) -> tuple[RetrieverEntry, str | None] | None:
    """(entry, argument after the prefix or None) for a profile's entry, or None."""
    _load_builtins()
    if not isinstance(name, str):
        return None
    if name in _ENTRIES and not _ENTRIES[name].prefix:
        return _ENTRIES[name], None
    for e in _ENTRIES.values():
        if e.prefix and name.startswith(e.name):
            return e, name[len(e.name):].strip()
    return None


def file_argument(name: str) -> str | None:
    """The file a prefixed entry names (``run:PATH`` gives ``PATH``), else None: the one parser of
    prefixed names."""
    found = lookup(name)
    return found[1] if found and found[0].file_argument else None


def with_file_argument(name: str, path: str) -> str:
    """``name`` with its file argument replaced by ``path`` (the prefix kept)."""
    entry, _ = lookup(name)
    return f"{entry.name}{path}"


def fixed_scores(name: str) -> bool:
    """Whether ``name`` is a fixed-score entry (a run file): it cannot score a rewritten query."""
    found = lookup(name)
    return found is not None and found[0].fixed_scores


def corpus_index(name: str) -> str | None:
    """The whole-corpus index kind serving ``name`` (see :class:`RetrieverEntry`), or None."""
    found = lookup(name)
    return found[0].corpus_index if found else None


def _known(*, prefixes: bool) -> str:
    listed = ", ".join(retriever_names())
    pre = [f"{e.name}<{'file' if e.file_argument else 'argument'}>" for e in entries() if e.prefix]
    return listed + (" or " + ", ".join(pre) if prefixes and pre else "")


def retriever_name_error(name, *, rescoring: bool = False) -> str | None:
    """Why ``name`` is not a retriever :func:`get_retriever` can build (None when it is);
    ``rescoring``: the stage scores rewritten queries, which a fixed-score entry cannot."""
    if not isinstance(name, str):
        return f"{name!r} is not a name"
    found = lookup(name)
    if found is None:
        return f"unknown retriever {name!r}: use one of {_known(prefixes=not rescoring)}"
    entry, arg = found
    if entry.fixed_scores and rescoring:
        return (f"{name!r}: {entry.summary or 'it'} has fixed scores for fixed queries and cannot "
                f"score the rewritten queries of this stage")
    if entry.prefix and not arg:
        what = "file's path" if entry.file_argument else "argument"
        return f"{name!r}: give the {what} after {entry.name!r}"
    return None


def first_stage_names() -> list[str]:
    """The names that retrieve from the whole corpus (open-corpus first stage, corpus pool)."""
    return [e.name for e in entries() if e.corpus_index is not None]


def open_corpus_system_error(name) -> str | None:
    """Why ``name`` is not an open-corpus system: a first stage (:func:`first_stage_names`),
    ``<dense first stage>@hnsw``, or ``<first>><reranker>`` with any rescoring retriever as the
    reranker (None when it is)."""
    if not isinstance(name, str):
        return f"{name!r} is not a name"
    first, sep, rr = name.partition(">")
    if sep and (not rr or ">" in rr):
        return f"bad two-stage system {name!r}: use '<first>><reranker>'"
    base, at, ann = first.partition("@")
    dense = [n for n in first_stage_names() if corpus_index(n) == "dense"]
    if at:
        if ann != "hnsw" or base not in dense:
            return f"{name!r}: an approximate index is '<encoder>@hnsw' (encoders: {', '.join(dense)})"
    elif corpus_index(first) is None:
        return (f"unknown open-corpus system {first!r}: use one of {', '.join(first_stage_names())}, "
                f"'<encoder>@hnsw' or '<first>><reranker>'")
    if sep:
        return retriever_name_error(rr, rescoring=True)
    return None


def retriever_classes() -> list[str]:
    """The classes of the registered retrievers (:class:`RetrieverEntry`), each once, in the order of
    :func:`entries` (built-ins: ``lexical``, ``dense encoder``, ``run file``)."""
    return list(dict.fromkeys(e.retriever_class for e in entries()))


def retriever_class(name: str) -> str:
    """The class of a profile's retriever entry (``run:<path>`` is a ``run file``); ``ValueError``
    naming the known retrievers for a name no registration answers."""
    found = lookup(name)
    if found is None:
        raise ValueError(retriever_name_error(name))
    return found[0].retriever_class


def is_lexical(name: str) -> bool:
    """Whether ``name`` is a lexical retriever (no instruction mechanism: a control of the arms)."""
    return retriever_class(name) == "lexical"


def circular_judge(encoder: str, retrievers: Iterable) -> str | None:
    """The entry of ``retrievers`` (``evaluate.retrievers``) that is ``encoder``'s model, if any: a
    proxy judge on it would rate the benchmark with the model it evaluates."""
    def model(n):
        found = lookup(n)
        return (found[0].model if found and found[0].model else n)
    target = model(encoder)
    return next((r for r in retrievers if isinstance(r, str) and model(r) == target), None)


def _call(factory: Callable, given: dict):
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return factory(**given)
    return factory(**{k: v for k, v in given.items() if k in params})


def get_retriever(name: str, *, k1: float = 1.5, b: float = 0.75, store=None, max_chunks: int | None = None,
                  cache_dir=None, tokenizer=None, run_min_match: float = 0.0) -> Retriever:
    """A retriever by registered name (``bm25``, ``tfidf``, ``jaccard``, ``approach0``, the authors'
    baselines, an encoder of ``saber_lib.embed``, ``run:<TREC run>``, or a plugin's name).
    ``tokenizer`` replaces the lexical retrievers' default tokenization (e.g. a math-aware one)."""
    err = retriever_name_error(name)
    if err:
        raise RetrieverNameError(err)
    entry, arg = lookup(name)
    given = {"name": name, "argument": arg, "k1": k1, "b": b, "store": store, "max_chunks": max_chunks,
             "cache_dir": cache_dir, "tokenizer": tokenizer, "run_min_match": run_min_match}
    made = _call(entry.factory, given)
    return wrap(made, name, where=entry.module)


def accepts(name: str, option: str) -> bool:
    """Whether the factory of ``name`` takes the keyword ``option`` (e.g. ``tokenizer``)."""
    found = lookup(name)
    if found is None:
        return False
    params = inspect.signature(found[0].factory).parameters
    return option in params


def markdown_table(builtin_only: bool = True) -> str:
    """The registered retrievers as a Markdown table (``python -m saber_lib.retrieval`` prints it;
    docs/retrievers.md points there): name, what it is, its module, the whole-corpus index serving it."""
    rows = ["| name | what | module | whole-corpus index |", "|---|---|---|---|"]
    for e in entries():
        if builtin_only and not e.builtin:
            continue
        shown = f"{e.name}<{'path' if e.file_argument else 'argument'}>" if e.prefix else e.name
        rows.append(f"| `{shown}` | {e.summary} | `{e.module.rsplit('.', 1)[-1]}` | {e.corpus_index or '-'} |")
    return "\n".join(rows) + "\n"
