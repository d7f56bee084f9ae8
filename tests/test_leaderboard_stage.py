"""The leaderboard stage's recipes (saber_lib.leaderboard.stage) on a hand-made run."""
import json
from pathlib import Path

import numpy as np
import polars as pl

from saber_lib.leaderboard import published as pub
from saber_lib.leaderboard import stage
from saber_lib.pipeline.context import StageContext


def _run(tmp_path, benchmark=None):
    run = tmp_path / "run"
    if benchmark is not None:
        (run / "evaluate").mkdir(parents=True)
        pl.DataFrame({"retriever": ["run:b/x", "bm25", "bm25"], "setting": ["statement-full"] * 3,
                      "query_id": ["0", "0", "1"], "ndcg": [0.5, 0.25, 0.75]}).write_parquet(run / "evaluate" / "ndcg.parquet")
        (run / "evaluate" / "manifest.json").write_text(json.dumps({"info": {"benchmark": benchmark}}))
    return StageContext(run, "leaderboard", figures_dir=tmp_path / "fig")


def test_published_folder_defaults_to_the_data_dir():
    assert stage.published_folder("/x/pub", "/data") == Path("/x/pub")
    assert stage.published_folder(None, "/data") == Path("/data/published")


def test_only_a_run_on_the_release_joins(tmp_path):
    assert stage.release_runs(_run(tmp_path / "none")) == (False, [])
    assert stage.release_runs(_run(tmp_path / "built", "built")) == (False, [])
    ctx = _run(tmp_path / "rel", "released")
    assert stage.release_runs(ctx) == (True, [ctx.run_dir])


def _pub_dir():
    ref = pub.System("ref", "ref.json", ["0", "1"], [["Algebra"], ["Geometry"]], {"statement-full": np.zeros(2)})
    return pub.PublishedDir([ref], {}, ["bad.json: no reports"], ["/p/evaluation/ref__p0.json"])


def test_provenance_and_manifest_record():
    params = {"lb_ci_scheme": "authors", "lb_n_resamples": 50, "seed": 3, "lb_alpha": 0.1, "lb_min_coverage": 0.5}
    prov = stage.provenance(_pub_dir(), [Path("/runs/r")], params)
    assert (prov.ci_scheme, prov.n_resamples, prov.seed, prov.alpha, prov.min_coverage) == ("authors", 50, 3, 0.1, 0.5)
    assert prov.run_dirs == ["/runs/r"] and prov.skipped == ["bad.json: no reports"]
    assert prov.published_files == ["/p/evaluation/ref__p0.json"]
    systems = _pub_dir().systems * 3            # one published system and two from runs
    rec = stage.manifest_record(Path("/p"), systems, _pub_dir(), True, pl.DataFrame({"a": [1, 2, 3]}), 1)
    assert rec == {"published_dir": "/p", "n_systems": 3, "run_systems": 2, "on_release": True, "n_pairs": 3,
                   "n_significant": 1, "backend": "published results (authors)"}


def test_contributions_one_file_per_retriever_with_safe_names(tmp_path):
    assert stage.contribution_name("run:b/x") == "run_b_x__p0.json"
    ctx = _run(tmp_path, "released")
    outs = stage.write_contributions(ctx, _pub_dir().systems[0])
    assert [o.name for o in outs] == ["bm25__p0.json", "run_b_x__p0.json"]
    assert all(o.parent == ctx.dir / "contribute" for o in outs)
    raw = json.loads(outs[0].read_text())
    assert raw["reports"]["bm25"]["ndcgs_by_task"]["statement-full"] == [0.25, 0.75]
