"""The names a profile may give a retriever, an encoder or an open-corpus system, kept as plain
names so that validating a profile imports no model code, and the checks of those names (one line
naming what is wrong). ``config`` validates profiles with them. May import: nothing of ``saber_lib``.
"""
from __future__ import annotations

# Names a retriever entry may take (``retrievers.get_retriever``): the lexical retrievers, an encoder
# of ``embed.REGISTRY``, or ``run:<path of a TREC run file>``. Kept here as plain names so that
# validating a profile imports no model code; tests/faults/test_profile_faults.py checks that these
# tuples match ``retrievers.LEXICAL`` and ``embed.REGISTRY``.
# the authors' lexical baselines (saber_lib.lexical) follow the four of this workbench
LEXICAL_RETRIEVERS = ("bm25", "tfidf", "jaccard", "approach0", "bm25-a0", "tfidf-a0", "jaccard-a0", "bm25-ws",
                      "tfidf-ws", "jaccard-ws")
ENCODERS = ("minilm", "minilm-bf16", "mpnet", "mpnet-bf16", "mpnet-int8", "e5-small", "paraphrase-minilm-l3",
            "minilm-int8", "use-m")
RUN_PREFIX = "run:"
INSTRUCTION_ARMS = ("p0", "p1", "p2", "p3")   # = embed.instructions.ARMS (checked by a test)

# encoders that are one model (the same weights at another precision or in another runtime): a proxy
# judge on any of them judges with an evaluated retriever's own model
SAME_MODEL = {"minilm": "all-MiniLM-L6-v2", "minilm-bf16": "all-MiniLM-L6-v2", "minilm-int8": "all-MiniLM-L6-v2",
              "mpnet": "all-mpnet-base-v2", "mpnet-bf16": "all-mpnet-base-v2", "mpnet-int8": "all-mpnet-base-v2"}


def circular_judge(encoder: str, retrievers) -> str | None:
    """The entry of ``retrievers`` (``evaluate.retrievers``) that is ``encoder``'s model, if any: a
    proxy judge on it would rate the benchmark with the model it evaluates."""
    model = SAME_MODEL.get(encoder, encoder)
    return next((r for r in retrievers if isinstance(r, str) and SAME_MODEL.get(r, r) == model), None)


# the classes of retrievers the analyses group by (the latency-quality frontier, the controls of the
# instruction arms): bag-of-tokens scorers, neural encoders, and fixed rankings read from a run file
RETRIEVER_CLASSES = ("lexical", "dense encoder", "run file")


def retriever_class(name: str) -> str:
    """The class of a retriever name: ``lexical`` (:data:`LEXICAL_RETRIEVERS`), ``dense encoder``
    (:data:`ENCODERS`) or ``run file`` (``run:<path>``); ``ValueError`` for an unknown name."""
    if isinstance(name, str) and name.startswith(RUN_PREFIX):
        return "run file"
    if name in LEXICAL_RETRIEVERS:
        return "lexical"
    if name in ENCODERS:
        return "dense encoder"
    raise ValueError(retriever_name_error(name))


def is_lexical(name: str) -> bool:
    """Whether ``name`` is a lexical retriever (no instruction mechanism: a control of the arms)."""
    return retriever_class(name) == "lexical"


def retriever_name_error(name: str, *, run_files: bool = True) -> str | None:
    """Why ``name`` is not a retriever ``retrievers.get_retriever`` can build (None when it is)."""
    if not isinstance(name, str):
        return f"{name!r} is not a name"
    if name.startswith(RUN_PREFIX):
        if not run_files:
            return (f"{name!r}: a TREC run file has fixed scores for fixed queries and cannot "
                    f"score the rewritten queries of this stage")
        if not name[len(RUN_PREFIX):].strip():
            return f"{name!r}: give the run file's path after 'run:'"
        return None
    if name in LEXICAL_RETRIEVERS or name in ENCODERS:
        return None
    return (f"unknown retriever {name!r}: use one of {', '.join(LEXICAL_RETRIEVERS)}, "
            f"{', '.join(ENCODERS)}" + (" or run:<TREC run file>" if run_files else ""))


def open_corpus_system_error(name: str) -> str | None:
    """Why ``name`` is not an open-corpus system (``open_corpus.track``): ``bm25``, ``tfidf``,
    ``approach0``, an encoder, ``<encoder>@hnsw``, or ``<first>><reranker>`` (None when it is)."""
    if not isinstance(name, str):
        return f"{name!r} is not a name"
    first, sep, rr = name.partition(">")
    if sep and (not rr or ">" in rr):
        return f"bad two-stage system {name!r}: use '<first>><reranker>'"
    enc, at, ann = first.partition("@")
    if at:
        if ann != "hnsw" or enc not in ENCODERS:
            return f"{name!r}: an approximate index is '<encoder>@hnsw' (encoders: {', '.join(ENCODERS)})"
    elif first not in ("bm25", "tfidf", "approach0") and first not in ENCODERS:
        return (f"unknown open-corpus system {first!r}: use bm25, tfidf, approach0, an encoder "
                f"({', '.join(ENCODERS)}), '<encoder>@hnsw' or '<first>><reranker>'")
    if sep:
        return retriever_name_error(rr, run_files=False)
    return None
