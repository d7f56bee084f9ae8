"""The retriever registry: one name map read by the profile checks, the factory, the open-corpus
track and the docs; registration rules (clashes name both modules); any object with ``score`` is
wrapped; the ``run:`` prefix parsed in one place."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from saber_lib.retrieval import registry
from saber_lib.retrieval.base import Retriever

ROOT = Path(__file__).resolve().parent.parent


def test_the_listing_command_prints_every_registered_name(tmp_path):
    (tmp_path / "listed_plugin.py").write_text(
        "from saber_lib.retrieval import register_retriever\n\n"
        "@register_retriever('listed-one', summary='a plugin retriever')\ndef make():\n    return None\n")
    r = subprocess.run([sys.executable, "-m", "saber_lib.retrieval", "--plugins", "listed_plugin"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| `")]
    listed = [line.split("`")[1] for line in rows]
    builtin = [e.name if not e.prefix else f"{e.name}<path>" for e in registry.entries() if e.builtin]
    assert listed == builtin + ["listed-one"]            # this process may hold other tests' plugins: not listed there
    assert rows[-1] == "| `listed-one` | a plugin retriever | `listed_plugin` | - |"
    assert "python -m saber_lib.retrieval" in (ROOT / "docs" / "retrievers.md").read_text()


def test_every_encoder_is_a_dense_first_stage_and_the_lexical_ones_are_not_all():
    from saber_lib import embed

    first = set(registry.first_stage_names())
    assert set(embed.REGISTRY) <= first
    assert {"bm25", "tfidf", "approach0"} <= first
    assert not {"jaccard", "bm25-a0", "tfidf-ws"} & first      # fitted per candidate list only
    assert registry.open_corpus_system_error("jaccard") is not None
    assert registry.open_corpus_system_error("bm25>jaccard") is None
    assert registry.open_corpus_system_error("minilm@hnsw") is None
    assert "approximate index" in registry.open_corpus_system_error("bm25@hnsw")
    assert "fixed scores" in registry.open_corpus_system_error("bm25>run:x.trec")


def test_the_run_prefix_is_parsed_in_one_place():
    assert registry.file_argument("run:a/b.trec") == "a/b.trec"
    assert registry.file_argument("bm25") is None and registry.file_argument("nope") is None
    assert registry.with_file_argument("run:a/b.trec", "/abs/b.trec") == "run:/abs/b.trec"
    assert registry.fixed_scores("run:x") and not registry.fixed_scores("bm25")
    assert "give the file's path" in registry.retriever_name_error("run:")
    assert "fixed scores" in registry.retriever_name_error("run:x", rescoring=True)


class Overlap:
    """Share of the query's words found in the document (a hand-checkable scorer)."""

    def score(self, query, documents):
        q = set(query.split())
        return [len(q & set(d.split())) / len(q) for d in documents]


def _module(name):
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    return mod


def test_a_registered_object_with_score_is_wrapped_and_scores_by_hand():
    mod = _module("retrieval_test_plugin_a")
    exec("from saber_lib.retrieval import register_retriever\n"
         "@register_retriever('test-overlap')\ndef make():\n    return Overlap()\n", {**mod.__dict__, "Overlap": Overlap})
    try:
        r = registry.get_retriever("test-overlap", k1=9.0)      # options it does not take are not passed
        assert isinstance(r, Retriever) and r.name == "test-overlap"
        np.testing.assert_allclose(r.score("a b", ["a c", "a b", "c"]), [0.5, 1.0, 0.0])
        out = r.score_many(["a b", "c"], [["b"], ["c c", "d"]])
        assert [list(x) for x in out] == [[0.5], [1.0, 0.0]]
        assert "test-overlap" in registry.retriever_names()
        assert registry.retriever_name_error("test-overlap") is None
        assert registry.open_corpus_system_error("bm25>test-overlap") is None
        assert registry.open_corpus_system_error("test-overlap") is not None    # no whole-corpus index
    finally:
        registry._ENTRIES.pop("test-overlap", None)


def test_a_name_clash_names_both_modules_and_an_object_without_score_is_refused():
    with pytest.raises(KeyError, match=r"module some_plugin: retriever name 'bm25' is already registered by "
                                       r"saber_lib\.retrieval\.lexical \(a built-in\)"):
        registry.register_retriever("bm25", module="some_plugin")(lambda: Overlap())
    registry.register_retriever("test-broken", module="some_plugin")(lambda: object())
    try:
        with pytest.raises(TypeError, match="some_plugin: retriever 'test-broken': object has no score"):
            registry.get_retriever("test-broken")
    finally:
        registry._ENTRIES.pop("test-broken", None)


def test_the_factory_receives_the_options_it_names():
    seen = {}

    def make(name, k1, cache_dir=None):
        seen.update(name=name, k1=k1, cache_dir=cache_dir)
        return Overlap()

    registry.register_retriever("test-options", module="some_plugin")(make)
    try:
        registry.get_retriever("test-options", k1=2.5, b=0.1, cache_dir="/c")
        assert seen == {"name": "test-options", "k1": 2.5, "cache_dir": "/c"}
        assert registry.accepts("test-options", "k1") and not registry.accepts("test-options", "b")
        assert registry.accepts("bm25", "tokenizer") and not registry.accepts("minilm", "tokenizer")
    finally:
        registry._ENTRIES.pop("test-options", None)


def test_the_circularity_guard_reads_the_models_of_the_registry():
    assert registry.circular_judge("minilm-int8", ["bm25", "minilm"]) == "minilm"
    assert registry.circular_judge("e5-small", ["bm25", "minilm", "run:x.trec"]) is None


def test_the_retriever_classes_are_read_from_the_registrations():
    from saber_lib import embed
    from saber_lib.retrieval import authors

    # the built-ins' classes come first, in registration order (a plugin another test of this process
    # registered may add its own after them)
    assert registry.retriever_classes()[:3] == ["lexical", "dense encoder", "run file"]
    lexical = {"bm25", "tfidf", "jaccard", "approach0", *authors.PUBLISHED_COUNTERPART}
    assert {n for n in registry.retriever_names() if registry.is_lexical(n)} == lexical
    assert {n for n in registry.retriever_names() if registry.retriever_class(n) == "dense encoder"} == set(embed.REGISTRY)
    assert registry.retriever_class("run:/any/where.trec") == "run file"
    with pytest.raises(ValueError, match="unknown retriever 'nope'"):
        registry.retriever_class("nope")
    mod = _module("retrieval_test_plugin_classes")
    exec("from saber_lib.retrieval import register_retriever\n"
         "@register_retriever('test-unclassed')\ndef a():\n    return None\n"
         "@register_retriever('test-sparse', retriever_class='lexical')\ndef b():\n    return None\n"
         "@register_retriever('test-graph', retriever_class='graph walk')\ndef c():\n    return None\n", mod.__dict__)
    try:
        assert registry.retriever_class("test-unclassed") == "other" and registry.is_lexical("test-sparse")
        # a plugin's classes come after the built-ins', in registration order
        assert registry.retriever_classes() == ["lexical", "dense encoder", "run file", "other", "graph walk"]
        with pytest.raises(registry.RetrieverNameError, match="its class must be a non-empty string"):
            registry.register_retriever("test-blank", retriever_class=" ")
    finally:
        for name in ("test-unclassed", "test-sparse", "test-graph"):
            registry._ENTRIES.pop(name, None)
