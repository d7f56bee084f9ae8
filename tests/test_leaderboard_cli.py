"""The leaderboard CLI end to end (a subprocess on the shared published files), its error
handling, the report helpers and notebook 13 executed by papermill."""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import polars as pl
import pytest
from PIL import Image

from conftest import PUBLISHED, needs_published
from saber_lib.core import data
from saber_lib.leaderboard import published as pub
from saber_lib.leaderboard import report
from saber_lib.report import tables
from saber_lib.report.figures import save_figure

ROOT = Path(__file__).resolve().parent.parent
NAMES = {"bm25", "jaccard", "qwen3-embedding-0.6b", "text-embedding-3-small", "tf-idf-no-tok"}


def cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "saber_lib.leaderboard.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def released_run(tmp_path, name="myrun", retrievers=("my-retriever",), seed=0, qids=None):
    """A run directory as if `saber run evaluate` had scored the released queries."""
    rng = np.random.default_rng(seed)
    qids = qids if qids is not None else [str(i) for i in range(1000)]
    rows = [{"retriever": r, "setting": "statement-full", "query_id": q, "ndcg": float(rng.random())}
            for r in retrievers for q in qids]
    run = tmp_path / name
    (run / "evaluate").mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(run / "evaluate" / "ndcg.parquet")
    recs = data.output_records(run / "evaluate")   # recorded as the runner records a finished stage
    data.write_json(run / "evaluate" / "manifest.json", {"outputs": recs, "output_hash": data.output_hash_of(recs)})
    return run, pl.DataFrame(rows)


@pytest.mark.pipeline
@needs_published
def test_end_to_end_on_the_shared_files(tmp_path, published_ranking):
    run, rows = released_run(tmp_path, retrievers=("my-retriever", "bm25"))
    out = tmp_path / "out"
    r = cli("--published", published_ranking, "--run-dir", run, "--n-resamples", 300, "--seed", 3, "--out", out)
    assert r.returncode == 0, r.stderr
    lb = pl.read_parquet(out / "leaderboard.parquet")
    assert lb.columns == ["system", "task", "scope", "mean", "ci_low", "ci_high", "n_queries", "n_missing",
                          "coverage", "rank"]
    # 5 published + 2 from the run ("bm25" exists: the run's one is qualified by the run name)
    assert set(lb["system"]) == NAMES | {"my-retriever", "myrun/bm25"}
    assert set(lb["scope"]) == {"Overall", "Algebra", "Geometry", "Number Theory", "Combinatorics",
                                "Calculus and Analysis"}
    assert (lb["ci_low"] <= lb["mean"]).all() and (lb["mean"] <= lb["ci_high"]).all()
    # published means are the stored ones
    raw = json.loads((PUBLISHED / "evaluation" / "bm25__p0.json").read_text())
    stored = {t["task"]: t for t in raw["reports"]["bm25"]["tasks"]}["statement-full"]
    row = lb.filter((pl.col("system") == "bm25") & (pl.col("scope") == "Overall"))
    assert abs(row["mean"][0] - stored["ndcg_at_k"]) <= 1e-12 and row["n_queries"][0] == 1000
    geo = lb.filter((pl.col("system") == "my-retriever") & (pl.col("scope") == "Geometry"))
    geo_ids = {str(i) for i, d in enumerate(raw["domains"]) if "Geometry" in d}
    want = rows.filter((pl.col("retriever") == "my-retriever") & pl.col("query_id").is_in(list(geo_ids)))["ndcg"]
    assert geo["mean"][0] == pytest.approx(float(want.mean()), abs=1e-12) and geo["n_queries"][0] == 200
    pw = pl.read_parquet(out / "pairwise.parquet")
    for c in ["task", "a", "b", "mean_diff", "diff_low", "diff_high", "p_value", "p_adjusted", "test"]:
        assert c in pw.columns
    assert pw.height == 7 * 6 // 2
    assert ((pw["p_adjusted"] >= pw["p_value"]) & (pw["p_adjusted"] <= 1)).all()
    x = pw.filter((pl.col("a") == "qwen3-embedding-0.6b") & (pl.col("b") == "bm25"))
    assert x["mean_diff"][0] > 0 and x["diff_low"][0] <= x["mean_diff"][0] <= x["diff_high"][0]
    # every output names its inputs
    files = {p.name for p in out.iterdir()}
    for f in ["leaderboard_statement-full.md", "leaderboard_statement-full.tex", "pairwise_statement-full.md",
              "forest_statement-full.png", "forest_statement-full.pdf", "pvalues_statement-full.png", "manifest.json"]:
        assert f in files
    for f in ["leaderboard_statement-full.md", "leaderboard_statement-full.tex", "pairwise_statement-full.md"]:
        text = (out / f).read_text()
        assert "bm25" in text and "myrun" in text and "300 resamples" in text and "seed 3" in text
    meta = pl.read_parquet_metadata(out / "leaderboard.parquet")
    prov = json.loads(meta["provenance"])
    assert prov["ci_scheme"] == "correct" and prov["n_resamples"] == 300 and str(run.resolve()) in prov["run_dirs"]
    assert any(f.endswith("bm25__p0.json") for f in prov["published_files"])
    png = (out / "forest_statement-full.png").read_bytes()
    assert b"300 resamples" in png                              # caption in the PNG text chunk
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]   # no temp folder left


@pytest.mark.pipeline
@needs_published
def test_authors_scheme_via_cli(tmp_path, published_ranking):
    out = tmp_path / "o"
    r = cli("--published", published_ranking, "--ci-scheme", "authors", "--n-resamples", 2000, "--out", out)
    assert r.returncode == 0, r.stderr
    lb = pl.read_parquet(out / "leaderboard.parquet")
    conf = json.loads((PUBLISHED / "confidence" / "jaccard.json").read_text())
    t = {x["task"]: x for x in conf["tasks"]}["statement-full"]
    geo = {b["branch"]: b for b in t["branches"]}["Geometry"]
    row = lb.filter((pl.col("system") == "jaccard") & (pl.col("scope") == "Geometry"))
    assert abs(row["ci_low"][0] - geo["confidence_interval"][0]) < 0.003     # 2,000 resamples: a bit noisier
    assert abs(row["ci_high"][0] - geo["confidence_interval"][1]) < 0.003


@pytest.mark.pipeline
def test_errors_are_one_line_exit_2(tmp_path):
    (tmp_path / "pub" / "evaluation").mkdir(parents=True)
    bad = tmp_path / "pub" / "evaluation" / "x__p0.json"
    bad.write_text(json.dumps({"domains": [["Algebra"]], "reports": {"x": {"k": 10, "tasks": [],
                                                                         "ndcgs_by_task": {"statement-full": [0.5, 0.1]}}}}))
    out = tmp_path / "out"
    r = cli("--published", tmp_path / "pub", "--out", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "ndcgs_by_task.statement-full" in lines[0]
    assert not out.exists()
    r = cli("--published", tmp_path / "nowhere", "--out", out)
    assert r.returncode == 2 and "nowhere" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("--published", tmp_path / "pub", "--ci-scheme", "bogus", "--out", out)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.pipeline
@needs_published
def test_run_not_on_the_released_benchmark_is_refused(tmp_path, published_ranking):
    run, _ = released_run(tmp_path, qids=["syn:0", "syn:1"])
    out = tmp_path / "out"
    r = cli("--published", published_ranking, "--run-dir", run, "--n-resamples", 50, "--out", out)
    assert r.returncode == 2 and str(run) in r.stderr and "released benchmark" in r.stderr
    assert not out.exists()


def test_markdown_and_latex_helpers():
    df = pl.DataFrame({"system": ["a_b", "c|d"], "mean": [0.12345, float("nan")], "n": [3, 4]})
    md = tables.to_markdown(df, "Caption: x", **report.MARKDOWN_STYLE)
    assert md.splitlines()[0] == "Caption: x"
    assert "| system | mean | n |" in md and "| a_b | 0.123 | 3 |" in md and "| c\\|d | - | 4 |" in md
    tex = tables.to_latex(df, "50% of x_y", **report.LATEX_STYLE)
    assert r"\caption{50\% of x\_y}" in tex and r"a\_b & 0.123 & 3 \\" in tex
    assert tex.count(r"\begin{tabular}{llr}") == 1 and r"\bottomrule" in tex


def test_forest_and_heatmap_helpers(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    rng = np.random.default_rng(0)
    doms = [["Algebra"], ["Geometry"]] * 50
    systems = [pub.System(f"s{i}", "x", [str(q) for q in range(100)], doms,
                          {"statement-full": np.clip(rng.random(100) * 0.3 + 0.1 * i, 0, 1)}) for i in range(4)]
    lb = report.leaderboard_frame(systems, ["statement-full"], "correct", 200, 0)
    pw = report.pairwise_frame(systems, ["statement-full"], 200, 0)
    assert pw["a"][0] == "s3"                    # a = the better system
    L = report.letters(lb, pw, "statement-full")
    assert L["s3"] == "a" and len(set(L.values())) == 4
    files = save_figure(report.forest_plot(lb, pw, "statement-full", caption="cap"), tmp_path / "f", caption="cap",
                        **report.FIGURE_STYLE)
    files += save_figure(report.pvalue_heatmap(pw, "statement-full"), tmp_path / "h", caption="cap",
                         **report.FIGURE_STYLE)
    assert all(f.stat().st_size > 1000 for f in files)
    png = Image.open(tmp_path / "f.png")
    assert png.text == {"Software": "saber_lib.leaderboard", "Description": "cap"}   # no title, no library version
    assert png.info["dpi"] == pytest.approx((150, 150), abs=0.05)   # pixels per metre, rounded
    pdf = (tmp_path / "f.pdf").read_bytes()
    assert b"/Creator (saber_lib.leaderboard)" in pdf and b"/Subject (cap)" in pdf and b"CreationDate" not in pdf


def test_pvalue_heatmap_writes_values_up_to_annotate_max_systems():
    """Every off-diagonal cell carries its p-value while the systems fit ``annotate_max``; above it the
    cells are colour alone (50 systems: 2,450 labels too small to read) and the title says so."""
    import matplotlib
    matplotlib.use("Agg")
    rng = np.random.default_rng(2)
    systems = [pub.System(f"s{i}", "x", [str(q) for q in range(40)], [["Algebra"]] * 40,
                          {"statement-full": rng.random(40)}) for i in range(4)]
    pw = report.pairwise_frame(systems, ["statement-full"], 50, 0)
    p = dict(zip(zip(pw["a"], pw["b"]), pw["p_adjusted"]))
    fig = report.pvalue_heatmap(pw, "statement-full")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert len(labels) == 12 and "" not in labels                    # 4 x 4 minus the diagonal
    a, b = next(iter(p))
    assert any(lab in labels for lab in ("<1e-4", f"{p[(a, b)]:.3f}", f"{p[(a, b)]:.0e}"))
    fig = report.pvalue_heatmap(pw, "statement-full", annotate_max=3)
    assert len(fig.axes[0].texts) == 0 and "4 systems" in fig.axes[0].get_title()


def _coverage_systems():
    """Three full systems (s2 best) and one scored on 3 of the 100 queries, with a high mean there."""
    rng = np.random.default_rng(1)
    doms = [["Algebra"], ["Geometry"]] * 50
    full = [pub.System(f"s{i}", "x", [str(q) for q in range(100)], doms,
                       {"statement-full": np.clip(rng.random(100) * 0.3 + 0.2 * i, 0, 1)}) for i in range(3)]
    part = np.full(100, np.nan)
    part[[0, 1, 2]] = [0.99, 0.98, 1.0]
    return full + [pub.System("partial", "x", [str(q) for q in range(100)], doms, {"statement-full": part})]


def test_a_system_scored_on_3_of_100_queries_gets_no_rank_and_is_listed_apart(tmp_path):
    systems = _coverage_systems()
    lb = report.leaderboard_frame(systems, ["statement-full"], "correct", 200, 0)
    pw = report.pairwise_frame(systems, ["statement-full"], 200, 0)
    o = {r["system"]: r for r in lb.filter(pl.col("scope") == "Overall").iter_rows(named=True)}
    assert o["partial"]["coverage"] == pytest.approx(0.03) and o["partial"]["rank"] is None
    assert o["partial"]["mean"] == pytest.approx(0.99)              # its own 3-query mean: the highest
    assert [o[s]["rank"] for s in ("s2", "s1", "s0")] == [1, 2, 3] and o["s0"]["coverage"] == 1.0
    # per domain: the partial system covers 2 of 50 Algebra and 1 of 50 Geometry queries
    alg = lb.filter((pl.col("scope") == "Algebra") & (pl.col("system") == "partial")).row(0, named=True)
    assert alg["coverage"] == pytest.approx(2 / 50) and alg["rank"] is None
    table = report.display_table(lb, pw, "statement-full")
    assert table["system"].to_list() == ["s2", "s1", "s0"] and table["rank"].to_list() == ["1", "2", "3"]
    assert table["coverage"].to_list() == ["1.000"] * 3
    apart = report.unranked_table(lb, "statement-full")
    assert apart.height == 1 and apart.row(0)[:3] == ("partial", "0.030", "3 of 100")
    lo, hi = map(float, apart.row(0)[3].removeprefix("0.990 [").removesuffix("]").split(", "))
    assert 0.98 <= lo <= 0.99 <= hi <= 1.0                            # resampling 3 values in [0.98, 1]
    assert "partial" not in report.letters(lb, pw, "statement-full")
    # the paired tests say on how many queries they compare
    pairs = report.pairwise_display(pw, "statement-full")
    n_common = {frozenset((a, b)): n for a, b, n in pairs.select("a", "b", "n common").iter_rows()}
    assert n_common[frozenset(("partial", "s2"))] == "3" and n_common[frozenset(("s1", "s2"))] == "100"
    # min_coverage 0 ranks everyone (the partial system first, by its 3-query mean); 0.03 is enough too
    for m in (0.0, 0.03):
        every = report.leaderboard_frame(systems, ["statement-full"], "correct", 200, 0, min_coverage=m)
        assert every.filter((pl.col("scope") == "Overall") & (pl.col("system") == "partial"))["rank"][0] == 1
    files = report.write_leaderboard(tmp_path, lb, pw, ["statement-full"], report.Provenance())
    assert tmp_path / "unranked_statement-full.md" in files
    text = (tmp_path / "unranked_statement-full.md").read_text()
    assert "| partial | 0.030 | 3 of 100 |" in text and "under 95% of its queries" in text
    assert "| partial |" not in (tmp_path / "leaderboard_statement-full.md").read_text()


def test_equal_means_share_a_rank():
    systems = _coverage_systems()[:3]
    twin = pub.System("twin", "x", systems[1].query_ids, systems[1].domains, dict(systems[1].scores))
    lb = report.leaderboard_frame(systems + [twin], ["statement-full"], "correct", 50, 0)
    ranks = dict(lb.filter(pl.col("scope") == "Overall").select("system", "rank").iter_rows())
    assert ranks == {"s2": 1, "s1": 2, "twin": 2, "s0": 4}


@needs_published
def test_cli_min_coverage(tmp_path, published_ranking):
    run, _ = released_run(tmp_path, retrievers=("three-queries",), qids=["0", "1", "2"])
    out = tmp_path / "out"
    r = cli("--published", published_ranking, "--run-dir", run, "--n-resamples", 50, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "(1 not ranked: coverage under 0.95)" in r.stdout
    lb = pl.read_parquet(out / "leaderboard.parquet").filter(pl.col("scope") == "Overall")
    row = lb.filter(pl.col("system") == "three-queries").row(0, named=True)
    assert row["rank"] is None and row["coverage"] == pytest.approx(3 / 1000) and row["n_queries"] == 3
    assert lb.filter(pl.col("system") != "three-queries")["rank"].null_count() == 0
    assert "| three-queries | 0.003 | 3 of 1000 |" in (out / "unranked_statement-full.md").read_text()
    assert json.loads((out / "manifest.json").read_text())["min_coverage"] == 0.95
    bad = cli("--published", published_ranking, "--min-coverage", 1.5, "--out", tmp_path / "o2")
    assert bad.returncode == 2 and "--min-coverage must be in [0, 1], got 1.5" in bad.stderr


NB = ROOT / "notebooks" / "14_leaderboard.ipynb"


def test_notebook_is_clean_and_parameterized():
    """The stage notebook: the `leaderboard` section's keys and the runner's paths."""
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    for p in ("published_dir", "lb_task", "lb_ci_scheme", "lb_n_resamples", "lb_alpha", "lb_min_coverage", "seed", "run_dir",
              "figures_dir", "data_dir"):
        assert f"{p} =" in code[0].source
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)


@pytest.mark.pipeline
@needs_published
def test_notebook_runs_headlessly(tmp_path, monkeypatch, published_ranking):
    import papermill as pm

    run = tmp_path / "run"
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pm.execute_notebook(str(NB), str(tmp_path / "14.ipynb"), cwd=str(tmp_path), kernel_name="python3",
                        progress_bar=False, parameters={"published_dir": str(published_ranking), "lb_n_resamples": 200,
                                                        "seed": 1, "run_dir": str(run), "run_name": "lb",
                                                        "figures_dir": str(tmp_path / "fig"),
                                                        "lb_ci_scheme": "authors"})
    assert (run / "leaderboard" / "leaderboard.parquet").is_file()
    assert (tmp_path / "fig" / "lb" / "leaderboard_forest.png").is_file()
    done = nbformat.read(tmp_path / "14.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in done.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "authors bootstrap scheme, 200 resamples, seed 1" in text


def test_interval_widths_per_scope_are_means_over_systems():
    widths = pl.DataFrame({"system": ["a", "b", "a", "b"], "scope": ["Overall", "Overall", "Algebra", "Algebra"],
                           "n_queries": [10, 10, 4, 4], "width_correct": [0.1, 0.3, 0.2, 0.4],
                           "width_authors": [0.1, 0.3, 0.1, 0.2], "width_published": [None, 0.5, None, None],
                           "authors_over_correct": [1.0, 1.0, 0.5, 0.5]})
    per = report.widths_per_scope(widths)
    assert per.rows() == [("Overall", 10, pytest.approx(0.2), pytest.approx(0.2), 0.5, 1.0),
                          ("Algebra", 4, pytest.approx(0.3), pytest.approx(0.15), None, 0.5)]
