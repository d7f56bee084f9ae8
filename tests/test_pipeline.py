"""Every stage notebook, executed headlessly by papermill on params/tiny.yaml, on the real data.

The session's run of the whole pipeline (conftest's ``tiny_full_run``: ``saber run all`` on a copy of
the session's tiny run up to the tournament, whose stages ran from scratch through ``saber run
tournament``, which tests/test_cli.py checks stage by stage), so that run executes every later stage and
skips the copied ones; other files copy it too. The tests check the artifacts against the contracts in
CONTRIBUTING.md, that a second run skips every stage, and that the figures were made by it.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import copy_run, needs_data
from saber_lib.core import scales
from saber_lib.pipeline import runner
from saber_lib.pipeline.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [needs_data("sources"), pytest.mark.pipeline]


BUILT = ["corpus", "ontology", "topics", "summaries", "signals", "thresholds", "select", "tournament"]


def run_result(stdout: str) -> dict[str, str]:
    """``saber run``'s lines -> {stage: "ran" | "skipped"} in the order it took them (as ``runner.run`` returns)."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("[skip] "):
            out[line.split()[1].rstrip(":")] = "skipped"
        elif line.startswith("[run ] "):
            out[line.split()[2]] = "ran"
    return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_tournament_run, tiny_full_run):
    """(folder holding a copy of the whole run as ``run`` and of its figures as ``figures/run``, the
    overrides naming that figures folder, {stage: ran | skipped} of the run's ``saber run all``)."""
    tmp = tmp_path_factory.mktemp("pipeline")
    # several stages at once (--jobs): the order of the [run ] lines may vary, the set may not
    assert sorted(line.split()[2] for line in tiny_tournament_run[1].splitlines() if line.startswith("[run ]")) == sorted(BUILT)
    src, figures, out = tiny_full_run
    copy_run(src, tmp / "run")
    shutil.copytree(figures, tmp / "figures" / "run")
    overrides = {"run.figures_dir": str(tmp / "figures")}
    return tmp, overrides, run_result(out)


def test_every_stage_ran(tiny_run):
    _, _, result = tiny_run
    assert sorted(result) == sorted(s.name for s in STAGES)
    assert result == {s.name: "skipped" if s.name in BUILT else "ran" for s in STAGES}


def test_second_run_skips_every_stage(tiny_run):
    tmp, overrides, _ = tiny_run
    again = runner.run(ROOT / "params" / "tiny.yaml", ["all"], run_dir=tmp / "run", overrides=overrides)
    assert set(again.values()) == {"skipped"}


def test_manifests_name_backends_and_notebooks_are_saved(tiny_run):
    tmp, _, _ = tiny_run
    for s in STAGES:
        man = json.loads((tmp / "run" / s.name / "manifest.json").read_text())
        assert man["param_hash"] and man["output_hash"]
        assert (tmp / "run" / "notebooks" / s.notebook).exists()
    for s in ("topics", "summaries", "tournament"):
        man = json.loads((tmp / "run" / s / "manifest.json").read_text())
        assert man["backend"], f"{s} does not name its backend"


def test_corpus_artifacts(tiny_run):
    tmp, _, _ = tiny_run
    corpus = pl.read_parquet(tmp / "run" / "corpus" / "corpus.parquet")
    assert {"doc_id", "source", "source_id", "problem", "solution", "source_subject", "source_level",
            "license"} <= set(corpus.columns)
    assert corpus["doc_id"].n_unique() == corpus.height
    report = json.loads((tmp / "run" / "corpus" / "report.json").read_text())
    assert isinstance(report, dict) and report


def test_benchmark_and_ratings_contracts(tiny_run):
    tmp, _, _ = tiny_run
    bench = pl.read_parquet(tmp / "run" / "select" / "benchmark.parquet")
    assert {"query_id", "query_domains", "cand_id", "position", "group", "sim_topic", "sim_summ"} <= set(bench.columns)
    assert bench.filter(pl.col("query_id") == pl.col("cand_id")).height == 0
    ratings = pl.read_parquet(tmp / "run" / "tournament" / "ratings.parquet")
    assert ratings["rating"].min() >= 0 and ratings["rating"].max() <= 5.0 + 1e-9
    assert ratings.height == bench.height


def test_evaluation_tables_and_figures_exist(tiny_run):
    tmp, _, _ = tiny_run
    ndcg = pl.read_parquet(tmp / "run" / "evaluate" / "ndcg.parquet")
    assert ndcg["ndcg"].min() >= 0 and ndcg["ndcg"].max() <= 1 + 1e-9
    figs = sorted((tmp / "figures" / "run").glob("*.png"))
    assert len(figs) >= 5
    for p in figs:
        assert p.with_suffix(".pdf").exists()


def test_cli_status_reports_done(tiny_run):
    tmp, _, _ = tiny_run
    out = subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", "status", "--run-dir", str(tmp / "run"),
                          "--params", str(ROOT / "params" / "tiny.yaml")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    # figures_dir differs from the profile's default, which is not a computing parameter: all done
    assert all(" done" in line for line in out.stdout.strip().splitlines()), out.stdout


def test_leaderboard_stage_shows_the_published_systems_alone_on_a_built_run(tiny_run):
    """(Its dependencies on a built run, the leaderboard alone without evaluate: test_released.py's
    test_stage_dependencies_follow_the_benchmark.)"""
    tmp, _, result = tiny_run
    assert result["leaderboard"] == "ran"
    lb = pl.read_parquet(tmp / "run" / "leaderboard" / "leaderboard.parquet")
    assert lb["system"].n_unique() == 5
    info = json.loads((tmp / "run" / "leaderboard" / "manifest.json").read_text())["info"]
    assert info["on_release"] is False and info["n_systems"] == 5
    assert (tmp / "figures" / "run" / "leaderboard.md").exists()
    assert (tmp / "figures" / "run" / "leaderboard_forest.png").exists()
    nb = (tmp / "run" / "notebooks" / "14_leaderboard.ipynb").read_text()
    assert "the published systems are shown alone" in nb


def test_open_corpus_artifacts(tiny_run):
    tmp, _, _ = tiny_run
    d = tmp / "run" / "open_corpus"
    metrics = pl.read_parquet(d / "metrics.parquet")
    assert {"qrels", "system", "representation", "metric", "k", "mean", "ci_low", "ci_high", "judged_at_k"} <= set(metrics.columns)
    assert set(metrics["representation"]) == {"statement", "full", "summary"}
    pool = pl.read_parquet(d / "pool.parquet")
    qrels = pl.read_parquet(d / "qrels.parquet")
    ratings = pl.read_parquet(tmp / "run" / "tournament" / "ratings.parquet")
    assert set(qrels["source"]) <= {"benchmark", "pool"}
    assert qrels.filter(pl.col("source") == "benchmark").height == ratings.height
    pooled = set(qrels.filter(pl.col("source") == "pool").select("query_id", "cand_id").rows())
    assert pooled <= set(pool.select("query_id", "cand_id").rows())
    assert qrels.select("query_id", "cand_id").is_duplicated().sum() == 0


def test_the_evaluate_stage_writes_every_analysis_and_reruns_to_the_same_output_hash(tiny_run, tiny_one_job_run):
    """The evaluate analyses (rescaling, instruction arms, latency) are outputs of the stage the whole
    run wrote; evaluate run again on the same inputs (the session's one-job run of the stages after the
    tournament, conftest) gives the same output hash, while the timings, kept outside the hash, change."""
    tmp, overrides, _ = tiny_run
    prof = runner.load_run_profile(ROOT / "params" / "tiny.yaml").values["evaluate"]
    run, again_figures, _ = tiny_one_job_run
    first = json.loads((tmp / "run" / "evaluate" / "manifest.json").read_text())
    lat0 = pl.read_parquet(tmp / "run" / "evaluate" / "latency.parquet")
    again = json.loads((run / "evaluate" / "manifest.json").read_text())
    assert first["output_hash"] == again["output_hash"]
    for man in (first, again):
        assert "latency.parquet" not in man["outputs"]
        assert {"rescaling.parquet", "instruction_arms.parquet", "instruction_arm_summary.parquet",
                "ndcg.parquet"} <= set(man["outputs"])
    lat = pl.read_parquet(run / "evaluate" / "latency.parquet")
    assert not lat0["seconds"].equals(lat["seconds"])          # the timings did change
    n_q = pl.read_parquet(run / "evaluate" / "ndcg.parquet")["query_id"].n_unique()
    assert prof["latency_settings"] == ["statement-full"] and set(lat["setting"]) == {"statement-full"}
    assert lat.group_by("retriever").len()["len"].to_list() == [n_q] * len(prof["retrievers"])
    resc = pl.read_parquet(run / "evaluate" / "rescaling.parquet")
    assert resc["scheme"].to_list() == [scales.parse_scheme(s).label for s in prof["rescaling_schemes"]]
    arms = pl.read_parquet(run / "evaluate" / "instruction_arms.parquet")
    assert set(arms["retriever"]) == {"minilm"} and set(arms["arm"]) == set(prof["instruction_arms"])
    summary = pl.read_parquet(run / "evaluate" / "instruction_arm_summary.parquet")
    full = arms.filter(pl.col("setting") == "statement-full")
    for arm, delta in full.filter(pl.col("arm") != "p0").select("arm", "delta_vs_p0").iter_rows():
        row = summary.filter((pl.col("scope") == "category") & (pl.col("group") == "all models") & (pl.col("arm") == arm))
        assert row["n_models"].to_list() == [1] and row["mean_delta"][0] == pytest.approx(delta)
    for figures in (tmp / "figures" / "run", again_figures):
        for name in ("evaluate_rescaling", "evaluate_latency", "evaluate_instruction_arms", "latency_quality",
                     "evaluate_latency_pareto", "evaluate_instruction_arms_by_category",
                     "evaluate_instruction_arms_by_domain"):
            assert list(figures.glob(f"{name}.*")), (figures, name)
