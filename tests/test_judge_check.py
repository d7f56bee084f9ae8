"""``saber judge-check`` end to end and the judge-validation stage's reference file, on a copy of the
tiny run: reference files are built here from the run's own benchmark with planted labels, so the
expected agreement of each judge is known (computed here independently of the library)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import DATA_DIR, copy_run, needs_data
from saber_lib.core import config as cfg
from saber_lib.judging.simulated import SimulatedJudge
from saber_lib.judging.tournament import corpus_docs
from saber_lib.ontology.tree import ontology_from_nodes
from saber_lib.pipeline import runner
from saber_lib.pipeline.stages import BY_NAME
from saber_lib.signals.pair_values import PairSignals
from saber_lib.validation.reference import source_ids

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [needs_data("sources"), pytest.mark.pipeline]
TINY = ROOT / "params" / "tiny.yaml"


def saber(*args, timeout=1200):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def paper(x, y):
    return 1.0 if x == y else 0.5 if "tie" in (x, y) else 0.0


def pairs_of(bench: pl.DataFrame, per_query: int = 6) -> list[tuple[str, str, str]]:
    """Seeded (query, a, b) triples of benchmark candidates, a shown first."""
    rng = np.random.default_rng(3)
    out = []
    for (q,), g in bench.sort("query_id", "position").group_by("query_id", maintain_order=True):
        cands = g["cand_id"].to_list()
        seen = set()
        while len(seen) < min(per_query, len(cands) * (len(cands) - 1) // 2):
            i, j = (int(x) for x in rng.choice(len(cands), 2, replace=False))
            if frozenset((i, j)) not in seen:
                seen.add(frozenset((i, j)))
                out.append((q, cands[i], cands[j]))
    return out


def write_reference(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(t, label, annotator="ann1"):
    return {"query_id": t[0], "a": t[1], "b": t[2], "label": label, "annotator": annotator, "reason": "planted"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tournament_run):
    src, _ = tiny_tournament_run
    tmp = tmp_path_factory.mktemp("judge_check")
    run = copy_run(src, tmp / "run")
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    corpus = pl.read_parquet(run / "corpus" / "corpus.parquet")
    return tmp, run, bench, corpus


def outside_doc(corpus: pl.DataFrame) -> str:
    """A document of a source that the tiny corpus (its first records per source) does not hold."""
    return sorted(source_ids(DATA_DIR, "minif2f") - set(corpus["doc_id"]))[0]


def test_pair_signals_are_the_signals_the_benchmark_was_selected_with(tiny):
    _, run, bench, corpus = tiny
    prof = cfg.load_profile(TINY)
    sig = PairSignals(corpus["doc_id"].to_list(), pl.read_parquet(run / "topics" / "topics.parquet"),
                      pl.read_parquet(run / "summaries" / "summaries.parquet"),
                      ontology_from_nodes(run / "ontology" / "nodes.parquet"), prof.values["signals"]["jaccard_empty"])
    pairs = list(bench.select("query_id", "cand_id").iter_rows())
    np.testing.assert_allclose(sig.topic(pairs), bench["sim_topic"].to_numpy(), atol=2e-3)
    np.testing.assert_allclose(sig.summary(pairs), bench["sim_summ"].to_numpy(), atol=2e-3)


def test_judge_check_command_end_to_end(tiny):
    tmp, run, bench, corpus = tiny
    summ = {(q, c): s for q, c, s in bench.select("query_id", "cand_id", "sim_summ").iter_rows()}
    # planted: the candidate with the higher summary signal as the select stage stored it (ties when equal);
    # pairs whose stored signals differ by less than the store's rounding are left out
    trips = [t for t in pairs_of(bench) if abs(summ[t[0], t[1]] - summ[t[0], t[2]]) > 5e-3
             or summ[t[0], t[1]] == summ[t[0], t[2]]]
    labels = ["a" if summ[q, a] > summ[q, b] else "b" if summ[q, b] > summ[q, a] else "tie" for q, a, b in trips]
    rows = [row(t, lab) for t, lab in zip(trips, labels)]
    rows += [row(t, "tie", "ann2") for t in trips[:4]]                       # four triples labelled twice
    rows.append(row((trips[0][0], outside_doc(corpus), trips[0][2]), "a"))  # a document outside the run's corpus
    ref = write_reference(tmp / "reference.jsonl", rows)
    out = tmp / "check"
    r = saber("judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref),
              "--judge", "simulated", "--judge", "signal:summary", "--judge", "profile",
              "--judge", "blend:signal:topic+signal:summary:0.25", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["judge_check.md", "judge_check.parquet", "verdicts.parquet"]
    table = pl.read_parquet(out / "judge_check.parquet")
    assert table["judge"].to_list() == ["simulated", "signal:summary", "profile", "blend:signal:topic+signal:summary:0.25"]
    assert table["n_pairs"].to_list() == [len(trips)] * 4
    assert table["detail"][2].startswith("proxy:use-m")                  # the tiny profile's tournament judge
    all_labels = [[lab] + (["tie"] if k < 4 else []) for k, lab in enumerate(labels)]

    def expected(verdicts):
        return 100 * np.mean([np.mean([paper(v, x) for x in labs]) for v, labs in zip(verdicts, all_labels)])

    prof = cfg.load_profile(TINY).values
    sim = SimulatedJudge(prof["tournament"]["judge_sim_agreement"], seed=prof["run"]["seed"])
    got = dict(zip(table["judge"], table["agreement"]))
    assert got["signal:summary"] == pytest.approx(expected(labels))
    assert got["simulated"] == pytest.approx(expected([sim(*t) for t in trips]))
    assert all(lo <= a <= hi for a, lo, hi in table.select("agreement", "ci_low", "ci_high").iter_rows())
    verdicts = pl.read_parquet(out / "verdicts.parquet")
    assert verdicts.columns[:7] == ["judge", "query_id", "a", "b", "verdict", "margin", "label"]
    mine = verdicts.filter(pl.col("judge") == "signal:summary")
    assert mine["verdict"].to_list() == labels and mine["label"].to_list() == labels
    assert (mine["margin"] > 0).to_list() == [lab == "a" for lab in labels]
    blend = verdicts.filter(pl.col("judge") == "blend:signal:topic+signal:summary:0.25")
    assert blend["verdict"].to_list() == ["a" if m > 0 else "b" if m < 0 else "tie" for m in blend["margin"]]
    decided = [lab for lab in labels if lab != "tie"]
    row2 = table.row(1, named=True)
    assert row2["ties"] == pytest.approx(labels.count("tie") / len(labels))
    assert row2["first_share"] == pytest.approx(decided.count("a") / len(decided))
    md = (out / "judge_check.md").read_text()
    assert "1 rows (1 triples) skipped" in md and "signal: summary similarity" in md
    # the same folder again is fine (the command wrote it); a folder someone else filled is refused
    again = saber("judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref),
                  "--judge", "first", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert pl.read_parquet(out / "judge_check.parquet")["judge"].to_list() == ["first"]
    (tmp / "taken").mkdir()
    (tmp / "taken" / "notes.txt").write_text("mine")
    taken = saber("judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref),
                  "--judge", "first", "--out", str(tmp / "taken"))
    assert taken.returncode == 1 and "was not written by saber judge-check" in taken.stderr


def test_judge_check_bad_spec_and_bad_row_are_one_line(tiny):
    tmp, run, bench, _ = tiny
    good = row(pairs_of(bench)[0], "a")
    ref = tmp / "bad.jsonl"
    ref.write_text(json.dumps(good) + "\n" + json.dumps({**good, "label": "first", "annotator": "x"}) + "\n")
    base = ["judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref), "--out",
            str(tmp / "bad_out")]
    spec = saber(*base, "--judge", "proxy:nope")
    assert spec.returncode == 2 and len(spec.stderr.strip().splitlines()) == 1 and "'proxy:nope'" in spec.stderr
    bad = saber(*base, "--judge", "first")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert f"{ref}, line 2: label 'first'" in bad.stderr
    ref.write_text(json.dumps(good) + "\n")
    no_llm = saber(*base, "--judge", "llm")                 # the tiny profile has no LLM backend
    assert no_llm.returncode == 1 and len(no_llm.stderr.strip().splitlines()) == 1
    assert "llm.backend is 'none'" in no_llm.stderr
    assert not (tmp / "bad_out").exists()


def test_stage_scores_every_method_on_the_reference_file(tiny):
    tmp, src, bench, _ = tiny
    run = copy_run(src, tmp / "stage_run")
    ratings = pl.read_parquet(run / "tournament" / "ratings.parquet")
    rating = {(q, c): r for q, c, r in ratings.select("query_id", "cand_id", "rating").iter_rows()}
    trips = pairs_of(bench, per_query=4)
    # planted: the benchmark's own ranking (higher rating wins), so the Swiss ranking agrees on every triple
    labels = ["a" if rating[q, a] > rating[q, b] else "b" if rating[q, b] > rating[q, a] else "tie" for q, a, b in trips]
    ref = write_reference(tmp / "stage_reference.jsonl", [row(t, lab) for t, lab in zip(trips, labels)]
                          + [row(trips[0], "tie", "ann2")])
    over = {"run.figures_dir": str(tmp / "figures"), "judge_validation.jv_reference": str(ref),
            "judge_validation.jv_schedules": ["swiss", "random"], "judge_validation.jv_n_resamples": 300}
    ctx = runner.RunContext(runner.load_run_profile(TINY, over), run.resolve())
    stage = BY_NAME["judge_validation"]
    man = runner.execute_stage(ctx, stage, log=lambda *a: None)
    d = run / "judge_validation"
    t = pl.read_parquet(d / "reference_agreement.parquet")
    assert t.columns == ["method", "n_pairs", "agreement", "ci_low", "ci_high"]
    methods = dict(zip(t["method"], t["agreement"]))
    # every triple agrees; the first also carries a tie label: it scores the mean of 1 and paper(label, tie)
    first = (1 + paper(labels[0], "tie")) / 2
    assert methods["swiss ranking (the benchmark's)"] == pytest.approx(100 * (len(trips) - 1 + first) / len(trips))
    assert any(m.startswith("second judge (proxy:") for m in methods) and "random ranking" in methods
    assert any(m.startswith("pairwise judge (proxy:use-m") for m in methods)
    assert set(t["n_pairs"]) == {len(trips)}
    gap = pl.read_parquet(d / "reference_by_gap.parquet")
    assert gap.height == t.height * len(ctx.profile.values["judge_validation"]["jv_deltas"])
    inter = pl.read_parquet(d / "reference_inter_annotator.parquet").row(0, named=True)
    assert inter["n_pairs"] == 1 and inter["agreement"] == pytest.approx(100 * paper(labels[0], "tie"))
    assert man["info"]["reference_file"]["triples"] == len(trips) and man["info"]["reference_file"]["skipped_rows"] == 0
    assert (tmp / "figures" / "stage_run" / "reference_agreement.md").read_text().count("reference labels") >= 1
    assert pl.read_parquet(d / "agreement.parquet").height > 0          # the sampled pairs' table stays
    # the reference file is an input of the stage: editing it makes the stage stale
    assert man["input_hashes"]["input:judge_validation.jv_reference"]   # a path-valued key (pipeline/path_inputs)
    assert runner.stage_state(ctx, stage, {s: "done" for s in stage.deps}) == "done"
    ref.write_text(ref.read_text().replace('"planted"', '"edited"', 1))
    assert runner.stage_state(ctx, stage, {s: "done" for s in stage.deps}) == "stale"


PLUGIN_CLI = ("import runpy, shorter_judge  # the user's judge plugin registers the kind 'shorter'\n"
              "runpy.run_module('saber_lib.pipeline.cli', run_name='__main__')")


def test_a_judge_registered_by_a_plugin_answers_in_judge_check(tiny):
    tmp, run, bench, corpus = tiny
    trips = pairs_of(bench)[:12]
    docs = corpus_docs(corpus, ids={d for t in trips for d in t})
    size = {d: len(doc.text) for d, doc in docs.items()}
    verdict = ["a" if size[a] < size[b] else "b" if size[b] < size[a] else "tie" for _, a, b in trips]
    # planted: the plugin's verdict on the first 9 triples, the other candidate on the last 3
    flip = {"a": "b", "b": "a", "tie": "tie"}
    labels = verdict[:9] + [flip[v] for v in verdict[9:]]
    ref = write_reference(tmp / "reference_plugin.jsonl", [row(t, lab) for t, lab in zip(trips, labels)])
    out = tmp / "check_plugin"
    args = ["judge-check", "--params", str(TINY), "--run-dir", str(run), "--reference", str(ref),
            "--judge", "shorter", "--judge", "blend:shorter+first:0.5", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests' / 'plugins'}:{ROOT}"}
    r = subprocess.run([sys.executable, "-c", PLUGIN_CLI, *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    table = pl.read_parquet(out / "judge_check.parquet")
    assert table["detail"][0] == "shorter text wins"
    expected = 100 * np.mean([paper(v, lab) for v, lab in zip(verdict, labels)])
    assert table["agreement"][0] == pytest.approx(expected)
    mine = pl.read_parquet(out / "verdicts.parquet").filter(pl.col("judge") == "shorter")
    assert mine["verdict"].to_list() == verdict
    # without the plugin the kind is unknown: one line naming it, exit 2, nothing written
    plain = saber(*args[:-2], "--out", str(tmp / "check_plain"))
    assert plain.returncode == 2 and "unknown kind 'shorter'" in plain.stderr and not (tmp / "check_plain").exists()
