"""A user's own retriever, judge and corpus source as plugins (docs/extending.md), run as a user
would: the examples of ``examples/plugins/`` copied into a working folder and named in
``run.plugins`` on the command line; ``saber_lib.evaluate_retriever`` on the finished run; the
errors of a plugin that fails to import or takes a built-in's name; the plugin's file hashed as an
input of the stage that uses it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats
import pytest

from conftest import copy_run, needs_data, status_states
from saber_lib.judging.tournament import Doc
from saber_lib.core import plugins
from saber_lib.core.config_types import ProfileError
from saber_lib.corpus.loaders import load_source
from saber_lib.pipeline.runner import load_run_profile

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "params" / "tiny.yaml"
EXAMPLES = ROOT / "examples" / "plugins"
pytestmark = [needs_data("sources"), pytest.mark.pipeline]
PLUGIN = "examples.plugins.word_overlap"


def saber(*args, cwd, timeout=1200):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def overlap(query: str, doc: str) -> float:
    """The example's score, written again from its docstring: share of the query's distinct words in doc."""
    words = lambda s: set("".join(c if c.isalnum() and c.isascii() else " " for c in s.lower()).split())  # noqa: E731
    q = words(query)
    return len(q & words(doc)) / len(q) if q else 0.0


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_tournament_run):
    """A working folder holding a copy of the example plugins (importable from there only) and a copy
    of the tiny run, evaluated with ``evaluate.retrievers=[bm25, word-overlap]``."""
    src, _ = tiny_tournament_run
    tmp = tmp_path_factory.mktemp("plugins")
    shutil.copytree(EXAMPLES, tmp / "examples" / "plugins")
    run = copy_run(src, tmp / "run")
    args = ["--params", str(TINY), "--run-dir", str(run), "--set", f"run.plugins=[{PLUGIN}]",
            "--set", "evaluate.retrievers=[bm25, word-overlap]", "--set", "evaluate.n_bootstrap=20",
            "--set", f"run.figures_dir={tmp / 'fig'}"]
    r = saber("run", "evaluate", *args, cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, run, args


def test_a_plugin_retriever_gets_its_row_in_the_evaluate_tables(work):
    tmp, run, _ = work
    ndcg = pl.read_parquet(run / "evaluate" / "ndcg.parquet")
    assert set(ndcg["retriever"]) == {"bm25", "word-overlap"}
    main = (tmp / "fig" / "run" / "evaluate_main.md").read_text()
    assert "| word-overlap |" in main and "| bm25 |" in main
    # its scores are the example's formula, recomputed here from the texts
    scores = pl.read_parquet(run / "evaluate" / "scores.parquet").filter(
        (pl.col("retriever") == "word-overlap") & (pl.col("setting") == "statement-statement"))
    corpus = {d: p for d, p in pl.read_parquet(run / "corpus" / "corpus.parquet").select("doc_id", "problem").iter_rows()}
    for q, c, s in scores.head(40).select("query_id", "cand_id", "score").iter_rows():
        assert s == pytest.approx(overlap(corpus[q], corpus[c]), abs=1e-12)
    info = json.loads((run / "evaluate" / "manifest.json").read_text())["info"]["models"]["word-overlap"]
    assert info["backend"] == "word overlap (examples/plugins/word_overlap.py)"


def test_the_plugin_file_is_an_input_of_the_stage_that_uses_it(work):
    tmp, run, args = work
    plugin = tmp / "examples" / "plugins" / "word_overlap.py"
    inputs = json.loads((run / "evaluate" / "manifest.json").read_text())["input_hashes"]
    assert inputs[f"plugin:{PLUGIN}"] == hashlib.sha256(plugin.read_bytes()).hexdigest()
    assert not any(k.startswith("plugin:") for k in
                   json.loads((run / "tournament" / "manifest.json").read_text())["input_hashes"])
    before = plugin.read_text()
    try:
        plugin.write_text(before.replace("return WordOverlap()", "return WordOverlap()  # edited"))
        r = saber("status", *args, cwd=tmp)
        states = status_states(r.stdout)
        assert states["evaluate"][0] == "stale", r.stdout
        assert any(f"plugin {PLUGIN}" in reason for reason in states["evaluate"][1]), r.stdout
        assert states["tournament"][0] == "done"
    finally:
        plugin.write_text(before)


def test_evaluate_retriever_on_the_finished_run_matches_the_stage(work):
    import saber_lib
    from saber_lib.retrieval import get_retriever

    sys.path.insert(0, str(work[0]))
    try:
        from examples.plugins.word_overlap import WordOverlap
    finally:
        sys.path.remove(str(work[0]))
    _, run, _ = work
    ndcg = pl.read_parquet(run / "evaluate" / "ndcg.parquet")
    for obj, name in ((WordOverlap(), "word-overlap"), (get_retriever("bm25"), "bm25")):
        table = saber_lib.evaluate_retriever(obj, run_dir=run, name=name)
        overall = table.filter(pl.col("group") == "Overall")
        stage = ndcg.filter(pl.col("retriever") == name).group_by("setting").agg(pl.col("ndcg").mean(), pl.len())
        want = dict(stage.select("setting", "ndcg").iter_rows())
        assert dict(overall.select("setting", "mean").iter_rows()) == pytest.approx(want, abs=1e-12)
        assert set(overall["n"]) == set(stage["len"])
        assert (overall["lo"] <= overall["mean"]).all() and (overall["mean"] <= overall["hi"]).all()
    with pytest.raises(FileNotFoundError, match="stage 'select' has not finished"):
        saber_lib.evaluate_retriever(WordOverlap(), run_dir=work[0] / "fig")


def test_evaluate_retriever_refuses_an_edited_benchmark(work, tmp_path):
    import saber_lib
    from saber_lib.core.data import ArtifactModified
    from saber_lib.retrieval import get_retriever

    run = copy_run(work[1], tmp_path / "run")
    ratings = run / "tournament" / "ratings.parquet"
    pl.read_parquet(ratings).with_columns(pl.col("rating") * 0.5).write_parquet(ratings)
    with pytest.raises(ArtifactModified, match="ratings.parquet"):
        saber_lib.evaluate_retriever(get_retriever("bm25"), run_dir=run, name="bm25")


def test_a_plugin_that_fails_or_clashes_is_one_error_naming_the_module(work, tmp_path):
    (tmp_path / "broken_plugin.py").write_text("import not_a_package_anywhere\n")
    (tmp_path / "clashing_plugin.py").write_text(
        "from saber_lib.retrieval import register_retriever\n\n"
        "@register_retriever('bm25')\ndef make():\n    return None\n")
    for module, what in (("broken_plugin", "No module named 'not_a_package_anywhere'"),
                         ("clashing_plugin", "retriever name 'bm25' is already registered by saber_lib.retrieval")):
        r = saber("run", "evaluate", "--params", str(TINY), "--run-dir", str(tmp_path / "run"),
                  "--set", f"run.plugins=[{module}]", cwd=tmp_path)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "run.plugins" in lines[0] and module in lines[0] and what in lines[0], r.stderr
    assert not (tmp_path / "run" / "evaluate").exists()


def test_a_corpus_source_plugin_reads_the_users_jsonl():
    plugins.load_plugins(["examples.plugins.jsonl_source"], search_path=ROOT)
    load = load_source("my-problems", None)
    rows = [json.loads(line) for line in (EXAMPLES / "problems.jsonl").read_text().splitlines()]
    assert [r["source_id"] for r in load.records] == [r["id"] for r in rows]
    assert [r["problem"] for r in load.records] == [r["problem"] for r in rows]
    assert load.quarantine == []
    p = load_run_profile(TINY, {"corpus.sources": ["aime", "my-problems"], "run.plugins": ["examples.plugins.jsonl_source"]})
    assert p.values["corpus"]["sources"] == ["aime", "my-problems"]
    with pytest.raises(ProfileError, match="corpus.sources: unknown source.*'nope'"):
        load_run_profile(TINY, {"corpus.sources": ["aime", "nope"]})


def closer_length_verdict(q: str, a: str, b: str, tie: float) -> str:
    """The example judge's rule, written again from its docstring: the candidate whose length is closer
    to the query's wins; a tie when the two distances differ by less than ``tie`` of the query's length."""
    n = max(len(q), 1)
    da, db = abs(len(a) - n) / n, abs(len(b) - n) / n
    return "tie" if abs(da - db) < tie else "a" if da < db else "b"


def test_a_plugin_judge_in_judge_check(work):
    tmp, run, _ = work
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    rows = []
    for (q,), g in bench.sort("query_id", "position").group_by("query_id", maintain_order=True):
        c = g["cand_id"].to_list()
        for a, b in zip(c, c[1:]):
            rows.append({"query_id": q, "a": a, "b": b, "label": "a", "annotator": "ann1", "reason": "planted"})
    ref = tmp / "reference.jsonl"
    ref.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = saber("judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref),
              "--set", "run.plugins=[examples.plugins.length_judge]", "--judge", "closer-length:0.1",
              "--out", str(tmp / "check"), cwd=tmp)
    assert r.returncode == 0, r.stderr
    table = pl.read_parquet(tmp / "check" / "judge_check.parquet")
    assert table["judge"].to_list() == ["closer-length:0.1"]
    assert table["n_pairs"].to_list() == [len(rows)]
    # every verdict is the rule's on the documents' texts; agreement with the planted 'a' labels is the
    # paper's scoring (1 for 'a', 0.5 for a tie, 0 for 'b'), in percent
    texts = {d: Doc(d, p, s).text for d, p, s in pl.read_parquet(run / "corpus" / "corpus.parquet")
             .select("doc_id", "problem", "solution").iter_rows()}
    expected = {(r["query_id"], r["a"], r["b"]): closer_length_verdict(texts[r["query_id"]], texts[r["a"]],
                                                                        texts[r["b"]], 0.1) for r in rows}
    got = pl.read_parquet(tmp / "check" / "verdicts.parquet")
    assert {(q, a, b): v for q, a, b, v in got.select("query_id", "a", "b", "verdict").iter_rows()} == expected
    score = {"a": 1.0, "tie": 0.5, "b": 0.0}
    assert table["agreement"][0] == pytest.approx(100 * sum(score[v] for v in expected.values()) / len(rows))


def test_a_plugin_judge_on_graded_labels_reports_its_rank_correlation(work):
    """`saber judge-check --grades` with a plugin judge that defines candidate_scores: its per-query
    Spearman is scipy's on the rule's scores, as for a built-in proxy."""
    tmp, run, _ = work
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    texts = {d: Doc(d, p, s).text for d, p, s in pl.read_parquet(run / "corpus" / "corpus.parquet")
             .select("doc_id", "problem", "solution").iter_rows()}
    rows, want = [], []
    for k, ((q,), g) in enumerate(bench.sort("query_id", "position").group_by("query_id", maintain_order=True)):
        cands = g["cand_id"].to_list()
        grades = [(7 * k + 31 * i) % 101 for i in range(len(cands))]
        rows += [{"query_id": q, "doc_id": c, "score": s} for c, s in zip(cands, grades)]
        n = max(len(texts[q]), 1)
        if len(cands) >= 3:                      # fewer candidates: no rank correlation for the query
            want.append(stats.spearmanr([-abs(len(texts[c]) - n) / n for c in cands], grades).statistic)
    path = tmp / "grades.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = saber("judge-check", "--params", str(TINY), "--run-dir", str(run), "--grades", str(path),
              "--set", "run.plugins=[examples.plugins.length_judge]", "--judge", "closer-length:0.1",
              "--out", str(tmp / "graded"), cwd=tmp)
    assert r.returncode == 0, r.stderr
    row = pl.read_parquet(tmp / "graded" / "grade_check.parquet").row(0, named=True)
    assert row["judge"] == "closer-length:0.1"
    assert row["spearman"] == pytest.approx(float(np.nanmean(want)))


def test_a_plugin_judge_kind_in_the_profile_validates_once_run_plugins_loads_it(work):
    """tournament.judge and judge_validation.jv_second_judge of a plugin's kind: refused without its
    module, accepted with it in run.plugins (a fresh process, run from the working folder), and the
    plugin's file is an input of the tournament stage that uses the kind."""
    tmp, _, _ = work
    code = ("import sys\nfrom saber_lib.pipeline import runner, path_inputs\n"
            f"TINY = {str(TINY)!r}\n"
            "keys = {'tournament.judge': 'closer-length:0.2', 'judge_validation.jv_second_judge': 'closer-length'}\n"
            "try:\n    runner.load_run_profile(TINY, keys)\nexcept Exception as e:\n    print('refused:', e)\n"
            "p = runner.load_run_profile(TINY, {**keys, 'run.plugins': ['examples.plugins.length_judge']})\n"
            "print('judges:', p.values['tournament']['judge'], p.values['judge_validation']['jv_second_judge'])\n"
            "print('inputs:', sorted(path_inputs.plugin_input_hashes(p.values, ['tournament'])))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("refused:") and "tournament.judge: judge 'closer-length:0.2': unknown kind " \
        "'closer-length'" in lines[0]
    assert lines[1] == "judges: closer-length:0.2 closer-length"
    assert lines[2] == "inputs: ['plugin:examples.plugins.length_judge']"


def test_a_stage_kernel_finds_the_plugin_judge_through_the_environment(tmp_path):
    """A stage's notebook gets the run's plugins in the environment (core.plugins.ENV); the judge
    registry loads them before it looks a kind up, so the tournament's judge of a plugin's kind builds."""
    shutil.copytree(EXAMPLES, tmp_path / "work" / "examples" / "plugins")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           plugins.ENV: plugins.environment(["examples.plugins.length_judge"], tmp_path / "work")}
    code = ("from saber_lib.judging import build_judge\nfrom saber_lib.core import plugins\n"
            "j = build_judge('closer-length:0.3')\n"
            "print(j.name, j.judge_pairs([('aaaa', 'aaa', 'a'), ('aaaa', 'a', 'aaa'), ('aaaa', 'aaa', 'aaaaa')]))\n"
            "print(sorted(plugins.registered_names('examples.plugins.length_judge')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr
    # distances from the query's 4 characters: 1/4 vs 3/4 (a wins), 3/4 vs 1/4 (b), 1/4 vs 1/4 (tie)
    assert out.stdout.splitlines() == ["closer-length:0.3 [1, 2, 0]", "['closer-length']"]
    del env[plugins.ENV]
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode != 0 and "unknown kind 'closer-length'" in out.stderr


def test_a_plugin_judge_plays_the_tournament_of_saber_run(tiny_tournament_run, tmp_path):
    """tournament.judge of a plugin's kind through the command line: the stage's notebook loads the
    plugin in its own process, every judgment is the rule's, and the plugin's file is an input."""
    src, _ = tiny_tournament_run
    shutil.copytree(EXAMPLES, tmp_path / "examples" / "plugins")
    run = copy_run(src, tmp_path / "run")
    r = saber("run", "tournament", "--params", str(TINY), "--run-dir", str(run),
              "--set", "run.plugins=[examples.plugins.length_judge]", "--set", "tournament.judge=closer-length:0.1",
              "--set", f"run.figures_dir={tmp_path / 'fig'}", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[run ] tournament" in r.stdout and "[run ] select" not in r.stdout    # only the judge changed
    texts = {d: Doc(d, p, s).text for d, p, s in pl.read_parquet(run / "corpus" / "corpus.parquet")
             .select("doc_id", "problem", "solution").iter_rows()}
    got = pl.read_parquet(run / "tournament" / "judgments.parquet")
    assert got.height > 0 and set(got["judge"]) == {"closer-length:0.1"}
    for q, a, b, outcome in got.select("query_id", "a", "b", "outcome").iter_rows():
        assert outcome == closer_length_verdict(texts[q], texts[a], texts[b], 0.1), (q, a, b)
    manifest = json.loads((run / "tournament" / "manifest.json").read_text())
    assert "plugin:examples.plugins.length_judge" in manifest["input_hashes"]
