"""Fault cases of a user's plugins (retrievers, judges, corpus sources) and of the registries that
hold them: counts of scores and verdicts checked before anything uses them, the plugin code a stage
reads hashed whatever file it lives in, nothing incomplete kept by a resumable tournament, one
circularity rule through every combined judge spec, and names, scores and verdicts that only look
right refused.

Old behaviour is given per test. Most cases run in this process on small hand-made inputs (each test
registers names of its own, so the registries of the process are not disturbed); the judge-check
cases run the command line on a copy of the tiny run, as a user runs it.
"""
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import copy_run, needs_data, one_line_error as _one_line, saber_cli as saber
from saber_lib.core import plugins
from saber_lib.core.config_types import ProfileError
from saber_lib.corpus import loaders
from saber_lib.corpus.readers import SourceLoad, make_record
from saber_lib.evaluate.stage import score_benchmark
from saber_lib.judging import Judge
from saber_lib.judging.outcomes import outcome_label
from saber_lib.judging.tournament import Doc, run_tournament
from saber_lib.pipeline import path_inputs
from saber_lib.pipeline.runner import load_run_profile
from saber_lib.retrieval import registry as rreg
from saber_lib.retrieval.base import wrap
from saber_lib.validation.grades_stage import pointwise_scores

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"
DEMO = ROOT / "params" / "demo.yaml"


def _module(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- 1: score_many's count of lists
class ShiftedMany:
    """A plugin whose ``score_many`` puts one list too many in front: every query gets the previous one's."""

    def score(self, query, documents):
        return [float(len(set(query.split()) & set(d.split()))) for d in documents]

    def score_many(self, queries, document_lists):
        return [[0.0] * len(document_lists[0])] + [self.score(q, d) for q, d in zip(queries, document_lists)]


def test_score_many_returning_one_list_too_many_is_refused():
    # old: zip() cut the extra list off the end: each query was ranked with the previous query's scores
    bench = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2"], "cand_id": ["a", "b", "a", "b"], "position": [0, 1, 0, 1]})
    corpus = pl.DataFrame({"doc_id": ["q1", "q2", "a", "b"], "problem": ["x y", "z w", "x z", "w y x"],
                           "solution": ["s", "s", "s", "s"]})
    good = score_benchmark(wrap(_Aligned(), "aligned"), bench, corpus, "statement-statement")
    # aligned: the overlap of each query's words with each candidate's, computed here by hand
    assert good["score"].to_list() == [1.0, 2.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"retriever 'shifted'.*3 score lists for 2 queries"):
        score_benchmark(wrap(ShiftedMany(), "shifted"), bench, corpus, "statement-statement")


class _Aligned(ShiftedMany):
    def score_many(self, queries, document_lists):
        return [self.score(q, d) for q, d in zip(queries, document_lists)]


# --------------------------------------------------------------------------- 2: the plugin code a stage reads
def test_every_file_of_plugin_code_a_stage_uses_is_hashed(tmp_path, monkeypatch):
    # old: only the file of the module named in run.plugins was hashed: a helper module it imports, the
    # submodules of a plugin package and every entry-point plugin were edited without the stage going stale
    tag = "faultplug" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]
    helper = _module(tmp_path, f"{tag}_helper", "WEIGHT = 1.0\n")
    _module(tmp_path, f"{tag}_mod", f"from {tag}_helper import WEIGHT\n"
            "from saber_lib.retrieval import register_retriever\n\n"
            f"@register_retriever('{tag}-mod')\ndef make():\n    return None\n")
    pkg = tmp_path / f"{tag}_pkg"
    _module(pkg, "__init__", "from . import scorer\n")
    sub = _module(pkg, "scorer", f"from saber_lib.retrieval import register_retriever\n\n"
                  f"@register_retriever('{tag}-pkg')\ndef make():\n    from . import lazy\n    return lazy\n")
    lazy = _module(pkg, "lazy", "def score(query, documents):\n    return [0.0] * len(documents)\n")
    ep_file = _module(tmp_path, f"{tag}_ep", f"from saber_lib.retrieval import register_retriever\n\n"
                      f"@register_retriever('{tag}-ep')\ndef make():\n    return None\n")
    import importlib.metadata as md
    eps = [md.EntryPoint(name="mine", value=f"{tag}_ep", group="saber.retrievers")]
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda group: eps if group == "saber.retrievers" else [])
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_DONE", [False])
    monkeypatch.setattr(plugins, "_ENTRY_MODULES", [], raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.load_plugins([f"{tag}_mod", f"{tag}_pkg"], search_path=tmp_path)
    plugins.load_entry_points()
    values = {"run": {"plugins": [f"{tag}_mod", f"{tag}_pkg"]},
              "evaluate": {"retrievers": ["bm25", f"{tag}-mod", f"{tag}-pkg", f"{tag}-ep"]}}
    before = path_inputs.plugin_input_hashes(values, ["evaluate"])
    assert before == path_inputs.plugin_input_hashes(values, ["evaluate"])         # the same files, the same hashes
    assert not path_inputs.plugin_input_hashes({**values, "evaluate": {"retrievers": ["bm25"]}}, ["evaluate"])
    for path, module in ((helper, f"{tag}_mod"), (sub, f"{tag}_pkg"), (lazy, f"{tag}_pkg"), (ep_file, f"{tag}_ep")):
        text = path.read_text()
        path.write_text(text + "# edited\n")
        after = path_inputs.plugin_input_hashes(values, ["evaluate"])
        changed = [k for k in after if after[k] != before.get(k)]
        assert len(changed) == 1, (path, changed)
        reason = path_inputs.changed_reason(changed[0], values)
        assert reason.startswith(f"plugin {module} ") and str(path.resolve()) in reason, reason
        path.write_text(text)
    assert path_inputs.plugin_input_hashes(values, ["evaluate"]) == before


# --------------------------------------------------------------------------- 3 and 19: a judge's candidate scores
class ScoringJudge(Judge):
    name = "scores given"

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def judge_pairs(self, items):
        return self._count([1 for _ in items])

    def candidate_scores(self, items):
        return self.scores


@pytest.mark.parametrize("scores, why", [([0.1, 0.2, 0.3, 0.4], "4 scores for 3"),
                                         ([0.1, 0.2], "2 scores for 3"),
                                         (["0.1", "0.2", "0.3"], "'0.1'"),
                                         ([True, 0.2, 0.3], "True")])
def test_candidate_scores_of_the_wrong_count_or_kind_are_refused(scores, why):
    # old: zip() paired the first three of four scores with the three candidates (a misaligned Spearman);
    # numeric strings and booleans were read as numbers by float()
    docs = {d: Doc(d, d) for d in ("q", "a", "b", "c")}
    keys = [("q", "a"), ("q", "b"), ("q", "c")]
    assert pointwise_scores(ScoringJudge([0.5, 1, np.float32(2.0)]), keys, docs) == {
        ("q", "a"): 0.5, ("q", "b"): 1.0, ("q", "c"): 2.0}
    with pytest.raises(ValueError, match=rf"judge 'scores given'.*{why}"):
        pointwise_scores(ScoringJudge(scores), keys, docs)


# --------------------------------------------------------------------------- 4: a tournament round short of a verdict
class ShortJudge(Judge):
    """The candidate with the smaller id wins; in round ``short_round`` one verdict is left out."""

    name = "smaller id wins"

    def __init__(self, short_round=None):
        super().__init__()
        self.short_round, self.calls = short_round, 0

    def judge_pairs(self, items):
        self.calls += 1
        out = [1 if a.id < b.id else 2 for _q, a, b in items]
        return self._count(out[:-1] if self.calls == self.short_round else out)


def test_a_round_short_of_a_verdict_is_not_stored(tmp_path):
    # old: the round was written to the store before the count was checked; the rerun resumed after it and
    # finished with exit 0 and one judgment missing
    cands = [f"c{i}" for i in range(6)]
    bench = pl.DataFrame({"query_id": ["q"] * 6 + ["r"] * 6, "cand_id": cands * 2, "position": list(range(6)) * 2})
    docs = {d: Doc(d, d) for d in ["q", "r", *cands]}
    kw = dict(schedule="swiss", rounds=4, seed=3)
    with pytest.raises(ValueError, match=r"round 2: judge 'smaller id wins': returned 5 verdicts for 6 pairs"):
        run_tournament(bench, docs, ShortJudge(short_round=2), store_dir=tmp_path / "store", **kw)
    assert sorted(p.name for p in (tmp_path / "store").glob("round_*")) == ["round_0001.parquet"]
    resumed = run_tournament(bench, docs, ShortJudge(), store_dir=tmp_path / "store", **kw)
    whole = run_tournament(bench, docs, ShortJudge(), store_dir=tmp_path / "fresh", **kw)
    assert resumed.judgments.equals(whole.judgments) and resumed.ratings.equals(whole.ratings)   # nothing missing
    assert sorted(set(whole.judgments["round"])) == [1, 2, 3, 4] and whole.judge_calls == whole.judgments.height


# --------------------------------------------------------------------------- 17: a corpus source's repeated doc ids
def test_a_source_plugin_giving_one_doc_id_three_times_quarantines_the_repeats(monkeypatch):
    # old: the three records went into the corpus (and topics and summaries) under one doc_id
    monkeypatch.setattr(loaders, "LOADERS", dict(loaders.LOADERS))
    monkeypatch.setattr(loaders, "FILES", dict(loaders.FILES))

    @loaders.register("fault-repeats")
    def load(data_dir, limit=0, allow_empty=False):
        recs = [make_record("fault-repeats", sid, f"problem {k}", [f"solution {k}"])
                for k, sid in enumerate(["1", "1", "2", "1"])]
        return SourceLoad("fault-repeats", recs, [], raw=4)

    got = loaders.load_source("fault-repeats", None)
    assert [(r["doc_id"], r["problem"]) for r in got.records] == [("fault-repeats:1", "problem 0"),
                                                                 ("fault-repeats:2", "problem 2")]
    assert got.raw == len(got.records) + len(got.quarantine) == 4
    assert [q["record"] for q in got.quarantine] == ["record 2", "record 4"]
    assert all("duplicate doc_id 'fault-repeats:1'" in q["reason"] and "record 1" in q["reason"]
               for q in got.quarantine)

    @loaders.register("fault-not-a-load")
    def load_list(data_dir, limit=0, allow_empty=False):
        return [make_record("fault-not-a-load", "1", "p", ["s"])]

    with pytest.raises(ValueError, match=rf"corpus source 'fault-not-a-load' \(module {re.escape(__name__)}\).*list"):
        loaders.load_source("fault-not-a-load", None)


# --------------------------------------------------------------------------- 18: one circularity rule
@pytest.mark.parametrize("judge, evaluated", [
    ("retriever:minilm-bf16", "'minilm'"),                     # the same model as the evaluated minilm
    ("majority:3:proxy:minilm", "'minilm'"),                  # a proxy inside a majority
    ("majority:3:retriever:bm25", "'bm25'"),
    ("blend:first+majority:3:proxy:minilm-int8", "'minilm'"),   # two levels down
])
def test_the_circularity_rule_holds_through_every_combined_spec(judge, evaluated):
    # old: retriever:minilm-bf16 was compared by name (not model) and majority:3:<spec> was never checked:
    # the profile passed and the stage failed (or rated the benchmark with the model it evaluates)
    with pytest.raises(ProfileError) as e:
        load_run_profile(DEMO, {"tournament.judge": judge})
    msg = str(e.value)
    assert "tournament.judge" in msg and evaluated in msg and "evaluate.retrievers" in msg and "\n" not in msg
    # the same spec over retrievers it does not evaluate is a judge
    p = load_run_profile(DEMO, {"tournament.judge": judge, "evaluate.retrievers": ["tfidf", "e5-small"]})
    assert p.values["tournament"]["judge"] == judge


# --------------------------------------------------------------------------- 19: registrations, scores, verdicts
def test_one_module_registering_a_retriever_name_twice_is_refused():
    # old: the second registration replaced the first without a word
    def first():
        return None

    def second():
        return None

    rreg.register_retriever("fault-twice", module="fault_twice_plugin")(first)
    try:
        rreg.register_retriever("fault-twice", module="fault_twice_plugin")(first)   # the module imported again
        with pytest.raises(rreg.RetrieverNameError, match=r"fault_twice_plugin.*'fault-twice' twice"):
            rreg.register_retriever("fault-twice", module="fault_twice_plugin")(second)
        assert rreg.lookup("fault-twice")[0].factory is first
    finally:
        rreg._ENTRIES.pop("fault-twice", None)


@pytest.mark.parametrize("name", ["bm25>mine", "my:retriever", "my retriever", "a@b", "a+b"])
def test_retriever_names_that_clash_with_the_spec_syntax_are_refused(name):
    # old: registered; 'bm25>mine' then read as a two-stage system, 'my:retriever' as a prefix, ...
    with pytest.raises(rreg.RetrieverNameError, match="retriever name"):
        rreg.register_retriever(name, module="fault_names_plugin")(lambda: None)
    assert name not in rreg._ENTRIES


class StringScores:
    def score(self, query, documents):
        return [str(len(d)) for d in documents]


def test_a_retriever_giving_numeric_strings_is_refused():
    # old: np.asarray(..., dtype=float64) turned '3' into 3.0
    with pytest.raises(ValueError, match=r"retriever 'strings'.*'3'.*not a number"):
        wrap(StringScores(), "strings").score("q", ["abc", "de"])


def test_a_verdict_of_true_is_not_read_as_the_first_candidate():
    # old: True == 1, so True was recorded as 'a'
    assert outcome_label(1) == ("a", None)
    with pytest.raises(ValueError, match="True"):
        outcome_label(True)
    with pytest.raises(ValueError, match="False"):
        outcome_label(False)


# --------------------------------------------------------------------------- 13: judge-check and a misbehaving plugin
JUDGES = '''
from saber_lib.judging import Judge, register_judge
from saber_lib.retrieval import register_retriever


class Bad(Judge):
    def __init__(self, how):
        super().__init__()
        self.how, self.name = how, f"bad {how}"

    def judge_pairs(self, items):
        if self.how == "raises":
            raise RuntimeError("the model file is gone")
        if self.how == "count":
            return [1 for _ in items][1:]
        if self.how == "invalid":
            return ["first" for _ in items]
        return [1 for _ in items]

    def candidate_scores(self, items):
        return ["0.5" for _ in items]


@register_judge("bad")
def bad(arg):
    return "a verdict" if arg == "notjudge" else Bad(arg)


class Short:
    def score(self, query, documents):
        return [1.0 for _ in documents][1:]


@register_retriever("fault-short")
def short():
    return Short()
'''


@pytest.fixture(scope="module")
def checked(tmp_path_factory, tiny_tournament_run):
    tmp = tmp_path_factory.mktemp("plugin_faults")
    run = copy_run(tiny_tournament_run[0], tmp / "run")
    (tmp / "fault_judges.py").write_text(JUDGES)
    bench = pl.read_parquet(run / "select" / "benchmark.parquet").sort("query_id", "position")
    rows, grades = [], []
    for (q,), g in bench.group_by("query_id", maintain_order=True):
        cands = g["cand_id"].to_list()
        rows += [{"query_id": q, "a": cands[i], "b": cands[i + 1], "label": "a", "annotator": "ann1", "reason": "r"}
                 for i in range(0, min(len(cands) - 1, 6), 2)]
        grades += [{"query_id": q, "doc_id": c, "score": (17 * i) % 101} for i, c in enumerate(cands)]
    (tmp / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "grades.jsonl").write_text("".join(json.dumps(r) + "\n" for r in grades))
    return tmp, run


@pytest.mark.pipeline
@needs_data("sources")
@pytest.mark.parametrize("judge, labels, fragment", [
    ("bad:raises", "reference", "RuntimeError: the model file is gone"),
    ("bad:count", "reference", "verdicts for"),
    ("bad:invalid", "reference", "'first'"),
    ("bad:notjudge", "reference", "not a saber_lib.judging.Judge"),
    ("bad:strings", "grades", "'0.5'"),
    ("retriever:fault-short", "reference", "scores for"),
])
def test_judge_check_with_a_misbehaving_plugin_is_one_line(checked, judge, labels, fragment):
    # old: tracebacks (RuntimeError, ValueError, TypeError, KeyError from the retriever judge's score table)
    tmp, run = checked
    out = tmp / f"out-{judge.replace(':', '-')}"
    r = saber("judge-check", "--params", TINY, "--run-dir", run, f"--{labels}", tmp / f"{'ref' if labels == 'reference' else 'grades'}.jsonl",
              "--set", "run.plugins=[fault_judges]", "--judge", judge, "--out", out,
              "--set", f"run.figures_dir={tmp / 'figures'}", cwd=tmp)
    msg = _one_line(r, "fault_judges", fragment, code=2)
    assert judge in msg, msg
    assert not out.exists()
