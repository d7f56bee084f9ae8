"""Every command the README shows, run as a subprocess on the tiny profile: ``saber run``,
``saber status``, ``saber validate`` (the other profiles through the same ``main`` in-process),
``saber export``, ``saber leaderboard``. One module-scoped run of the stages export needs (up to the tournament)
is shared. The leaderboard stage on a built run is checked on the whole pipeline's run (tests/test_pipeline.py),
and that it runs without the evaluate stage there by ``stages.upstream_closure`` (tests/test_released.py)."""
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import copy_run, needs_data
from saber_lib.pipeline import cli

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [needs_data("sources"), pytest.mark.pipeline]
BUILT = ["corpus", "ontology", "topics", "summaries", "signals", "thresholds", "select", "tournament"]


def saber(*args, timeout=1200):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tournament_run):
    """A copy of the session's tiny run up to the tournament (``saber run tournament``), and its output."""
    src, out = tiny_tournament_run
    tmp = tmp_path_factory.mktemp("cli")
    copy_run(src, tmp / "run")
    sets = ["--set", f"run.figures_dir={tmp / 'figures'}"]
    return tmp, sets, out


def test_run_executes_what_the_stage_needs_then_skips_it(tiny):
    tmp, sets, out = tiny
    assert sorted(line.split()[2] for line in out.splitlines() if line.startswith("[run ]")) == sorted(BUILT)  # several at once (--jobs)
    again = saber("run", "tournament", "--params", "params/tiny.yaml", "--run-dir", str(tmp / "run"), *sets)
    assert again.returncode == 0, again.stderr
    assert [line.split()[1] for line in again.stdout.splitlines() if line.startswith("[skip]")] == \
        [f"{s}:" for s in BUILT]


def test_status_lists_done_and_missing_stages(tiny):
    tmp, sets, _ = tiny
    r = saber("status", "--run-dir", str(tmp / "run"), *sets)
    assert r.returncode == 0, r.stderr
    states = dict(line.split()[:2] for line in r.stdout.splitlines())
    assert all(states[s] == "done" for s in BUILT)
    assert states["evaluate"] == states["leaderboard"] == states["released"] == "missing"


def test_validate(tmp_path, capsys):
    r = saber("validate", "params/tiny.yaml")
    assert r.returncode == 0 and r.stdout.strip().endswith("keys)"), r.stderr
    for prof in ("demo", "paper", "released"):       # the same command in this process (no interpreter start)
        assert cli.main(["validate", str(ROOT / "params" / f"{prof}.yaml")]) == 0
        assert capsys.readouterr().out.strip().endswith("keys)")
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"inherit: {ROOT / 'params' / 'tiny.yaml'}\nevaluate:\n  tie_policy: random\n")
    r = saber("validate", str(bad))
    assert r.returncode == 2 and "evaluate.tie_policy" in r.stderr and "'random' is not one of" in r.stderr


def test_export_writes_the_beir_layout(tiny):
    tmp, _, _ = tiny
    r = saber("export", "--run-dir", str(tmp / "run"), "--out", str(tmp / "beir"))
    assert r.returncode == 0, r.stderr
    ratings = pl.read_parquet(tmp / "run" / "tournament" / "ratings.parquet")
    qrels = (tmp / "beir" / "qrels" / "test.tsv").read_text().splitlines()
    assert qrels[0] == "query-id\tcorpus-id\tscore" and len(qrels) == 1 + ratings.height
    queries = [json.loads(x)["_id"] for x in (tmp / "beir" / "queries.jsonl").read_text().splitlines()]
    assert queries == sorted(set(ratings["query_id"]))
    missing = saber("export", "--run-dir", str(tmp / "nothing"), "--out", str(tmp / "beir2"))
    assert missing.returncode == 1 and "no benchmark to export" in missing.stderr


def test_leaderboard_command_on_the_published_results(tmp_path, published_ranking):
    r = saber("leaderboard", "--published", str(published_ranking), "--n-resamples", "200",
              "--out", str(tmp_path / "lb"))
    assert r.returncode == 0, r.stderr
    assert "statement-full: 5 systems" in r.stdout
    lb = pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")
    assert {"system", "task", "scope", "mean", "ci_low", "ci_high", "n_queries", "n_missing"} <= set(lb.columns)
    assert set(pl.read_parquet(tmp_path / "lb" / "pairwise.parquet")["task"]) == {"statement-full"}
    bad = saber("leaderboard", "--published", str(tmp_path / "nowhere"), "--out", str(tmp_path / "lb2"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1

