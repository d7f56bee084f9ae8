"""Cross-system readings of the leaderboard: MTEB against SABER-Math and the rephrased-copy rank
against nDCG@10. The correlation kernel against scipy.stats, the CSV and JSON-lines readers on the
shared files and on broken copies, and the command end to end, every statistic recomputed here from
the same files with csv/json and scipy."""
import csv
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from conftest import PUBLISHED, needs_published
from saber_lib.core import data
from saber_lib.core.seeds import rng_for
from saber_lib.leaderboard import mteb, rephrased
from saber_lib.leaderboard.published import LayoutError
from saber_lib.metrics import correlation as corr
from saber_lib.metrics.resample import resample_indices

ROOT = Path(__file__).resolve().parent.parent
MTEB_CSV = PUBLISHED / "mteb" / "leaderboard.csv"
DEDUP = PUBLISHED / "dedup_summaries.jsonl"
needs_cross = pytest.mark.skipif(not (MTEB_CSV.is_file() and DEDUP.is_file()),
                                 reason="the published MTEB snapshot and rephrased-rank summaries are not in the data folder")


def saber(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", "leaderboard", *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


# ----------------------------------------------------------------------------- kernel
def test_row_coefficients_equal_scipy_with_ties():
    rng = np.random.default_rng(1)
    X = rng.integers(0, 5, size=(40, 9)).astype(float)      # many ties
    Y = X + rng.integers(-2, 3, size=X.shape)
    for i in range(X.shape[0]):
        x, y = X[i], Y[i]
        if np.all(x == x[0]) or np.all(y == y[0]):
            continue
        assert corr.row_pearson(x, y)[0] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
        assert corr.row_spearman(x, y)[0] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert corr.row_kendall(x, y)[0] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert np.isnan(corr.row_pearson([1, 1, 1], [1, 2, 3])[0]) and np.isnan(corr.row_kendall([1, 1, 1], [1, 2, 3])[0])


def test_interval_is_the_percentile_interval_of_scipy_over_the_same_resampled_systems():
    rng = np.random.default_rng(2)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    got = corr.correlations_with_intervals(x, y, 200, rng_for(7, "t"))
    idx = resample_indices(12, 12, 200, rng_for(7, "t"))      # the same draws, recomputed with scipy
    for name, f in (("spearman", stats.spearmanr), ("kendall", stats.kendalltau), ("pearson", stats.pearsonr)):
        vals = np.array([f(x[i], y[i]).statistic for i in idx])
        ok = ~np.isnan(vals)
        assert got[name] == pytest.approx(f(x, y).statistic, abs=1e-12)
        assert got[f"{name}_low"] == pytest.approx(np.percentile(vals[ok], 2.5), abs=1e-9)
        assert got[f"{name}_high"] == pytest.approx(np.percentile(vals[ok], 97.5), abs=1e-9)
    assert got["n_systems"] == 12
    few = corr.correlations_with_intervals([1.0, 2.0], [2.0, 1.0], 10, rng_for(0))
    assert few["n_systems"] == 2 and np.isnan(few["spearman"]) and np.isnan(few["pearson_low"])


# ----------------------------------------------------------------------------- readers
def _by_hand_mteb(path):
    """Model name -> row, read with the csv module (markdown link text, or the plain cell)."""
    rows = list(csv.DictReader(open(path, encoding="utf-8", newline="")))
    return {(re.match(r"^\[(.*?)\]\(", r["Model"]).group(1) if r["Model"].startswith("[") else r["Model"]): r
            for r in rows}


@needs_cross
def test_the_snapshot_reads_with_its_mis_decoded_cells_and_plain_names():
    board = mteb.read_mteb(MTEB_CSV)
    hand = _by_hand_mteb(MTEB_CSV)
    assert set(board.scores) == set(hand) and len(board.scores) == 419
    assert hand["text-embedding-3-large"]["Zero-shot"].startswith("\u00e2")   # the mis-decoded warning sign
    for name, r in hand.items():
        for col in mteb.MTEB_COLUMNS:
            assert board.scores[name][col] == (float(r[col]) if r[col] else None)
    assert "baseline-random-encoder" in board.scores                          # a row without a link


def _write(path, text, encoding="utf-8"):
    path.write_text(text, encoding=encoding)
    return path


def test_broken_csv_rows_are_one_error_naming_file_and_line(tmp_path):
    head = ",Model,Retrieval,Mean (Task)\n"
    ok = "0,[a](u),50.0,40.0\n"
    cases = {
        "dup.csv": (",Model,Retrieval,Retrieval,Mean (Task)\n0,[a](u),1,2,3\n", "line 1: the header names column 'Retrieval' twice"),
        "width.csv": (head + ok + "1,[b](u),1.0\n", "line 3: 3 fields, the header has 4"),
        "number.csv": (head + ok + "1,[b](u),n/a,2\n", "line 3: column 'Retrieval': 'n/a' is not a number"),
        "quote.csv": (head + ok + '1,"[b](u),1,2\n', "unreadable CSV row"),
        "missing.csv": (",Model,Reranking\n0,[a](u),1\n", "line 1: column(s) ['Retrieval', 'Mean (Task)'] missing"),
    }
    for name, (text, msg) in cases.items():
        p = _write(tmp_path / name, text)
        with pytest.raises(LayoutError) as e:
            mteb.read_mteb(p)
        assert str(e.value).startswith(f"{p}: ") and msg in str(e.value), (name, str(e.value))
    latin = _write(tmp_path / "latin.csv", head + "0,[caf\xe9](u),50.0,40.0\n", encoding="latin-1")   # not UTF-8
    assert mteb.read_mteb(latin).scores == {"café": {"Retrieval": 50.0, "Mean (Task)": 40.0}}


def test_a_matched_model_listed_twice_is_an_error_naming_both_lines(tmp_path):
    p = _write(tmp_path / "twice.csv", ",Model,Retrieval,Mean (Task)\n0,[bge-m3](u),50,40\n1,[bge-m3](v),51,41\n")
    table = mteb.read_systems_table()
    with pytest.raises(LayoutError, match=r"twice.csv: line 3: model 'bge-m3' .*first on line 2"):
        mteb.matches([("bge-m3", "published", "bge-m3")], mteb.read_mteb(p), table)


@needs_published
def test_every_published_system_is_in_the_committed_table_and_rows_are_unique():
    table = mteb.read_systems_table()
    names = {Path(f).stem for f in glob.glob(str(PUBLISHED / "confidence" / "*.json"))}
    assert names <= {n for (s, n) in table if s == "published"}
    used = [t["mteb_model"] for t in table.values() if t["mteb_model"]]
    assert len(used) == len(set(used))


def test_the_systems_table_refuses_a_duplicate_or_an_unknown_kind(tmp_path):
    head = "source,system,category,recent,mteb_model,note\n"
    p = _write(tmp_path / "t.csv", head + "published,a,embedding,yes,A,\npublished,a,embedding,no,,\n")
    with pytest.raises(LayoutError, match=r"t.csv: line 3: system 'a' \(published\) already listed on line 2"):
        mteb.read_systems_table(p)
    p = _write(tmp_path / "u.csv", head + "published,a,dense,yes,A,\n")
    with pytest.raises(LayoutError, match=r"u.csv: line 2: category 'dense'"):
        mteb.read_systems_table(p)


def test_dedup_lines_are_checked_with_file_and_line(tmp_path):
    good = {"model": "m", "n_queries": 3, "insert_per_query": {a: 1.0 for a in rephrased.READINGS},
            "insert_all_rephrased": None}
    p = _write(tmp_path / "d.jsonl", json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(LayoutError, match=r"d.jsonl: line 2: system 'm' already on line 1"):
        rephrased.read_dedup_summaries(p)
    bad = {**good, "insert_per_query": {**good["insert_per_query"], "avg_rank": "x"}}
    p = _write(tmp_path / "e.jsonl", "\n" + json.dumps(bad) + "\n")
    with pytest.raises(LayoutError, match=r"e.jsonl: line 2: field 'insert_per_query.avg_rank'"):
        rephrased.read_dedup_summaries(p)
    p = _write(tmp_path / "f.jsonl", "{not json\n")
    with pytest.raises(LayoutError, match=r"f.jsonl: line 1: not valid JSON"):
        rephrased.read_dedup_summaries(p)


# ----------------------------------------------------------------------------- end to end
def _confidence_means():
    out = {}
    for f in glob.glob(str(PUBLISHED / "confidence" / "*.json")):
        out[Path(f).stem] = {t["task"]: t["mean"] for t in json.loads(Path(f).read_text())["tasks"]}
    return out


def _run_with_robustness(tmp_path, names=("minilm", "bm25", "tfidf", "jaccard", "mpnet")):
    """A run scored on the released queries (statement-full) with a rephrased-rank table, both stages
    recorded as finished."""
    rng = np.random.default_rng(5)
    run = tmp_path / "myrun"
    for st in ("evaluate", "robustness"):
        (run / st).mkdir(parents=True)
    rows = [{"retriever": r, "setting": "statement-full", "query_id": str(q), "ndcg": float(rng.random() * (k + 1) / 6)}
            for k, r in enumerate(names) for q in range(1000)]
    pl.DataFrame(rows).write_parquet(run / "evaluate" / "ndcg.parquet")
    summ = pl.DataFrame([{"retriever": r, "pool": pool, "rewriter": "w", "n_queries": 40,
                          "mean_rank": float(rng.uniform(1, 30)), "median_rank": float(rng.uniform(1, 10)),
                          "top1": float(rng.random())} for r in names for pool in ("candidates", "candidates_all")])
    summ.write_parquet(run / "robustness" / "rephrased_rank.parquet")
    for st in ("evaluate", "robustness"):
        recs = data.output_records(run / st)
        data.write_json(run / st / "manifest.json", {"outputs": recs, "output_hash": data.output_hash_of(recs)})
    means = pl.DataFrame(rows).group_by("retriever").agg(pl.col("ndcg").mean())
    return run, summ, dict(means.iter_rows())


@pytest.mark.pipeline
@needs_cross
def test_end_to_end_statistics_equal_scipy_on_the_same_files(tmp_path):
    run, run_summ, run_means = _run_with_robustness(tmp_path)
    out = tmp_path / "out"
    r = saber("--published", "../shared/data/published" if (ROOT.parent / "shared/data/published") == PUBLISHED
              else PUBLISHED, "--run-dir", run, "--n-resamples", 200, "--seed", 4, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "MTEB Retrieval vs statement-full (recent)" in r.stdout
    conf = _confidence_means()
    board = _by_hand_mteb(MTEB_CSV)
    table = list(csv.DictReader(open(mteb.SYSTEMS_TABLE)))
    kind = {(t["source"], t["system"]): t for t in table}

    # matches: exactly the committed table's rows that the snapshot holds, the others empty
    got = list(csv.DictReader(open(out / "mteb_matches.csv")))
    assert list(got[0]) == ["system", "mteb_model"]
    match = {g["system"]: g["mteb_model"] for g in got}
    for name in conf:
        want = kind[("published", name)]["mteb_model"]
        assert match[name] == (want if want in board else "")
    assert match["minilm"] == "all-MiniLM-L6-v2" and match["myrun/bm25"] == "" and match["bm25"] == ""

    quality = {**{n: m for n, m in conf.items()}, "minilm": {"statement-full": run_means["minilm"]},
               "mpnet": {"statement-full": run_means["mpnet"]}}
    source = {"minilm": "workbench", "mpnet": "workbench"}
    cm = pl.read_parquet(out / "mteb_correlation.parquet")
    assert cm["task"].unique(maintain_order=True).to_list()[0] == "statement-full"
    assert set(cm["scope"]) == {"all", "embedding", "recent"} and set(cm["mteb_column"]) == {"Retrieval", "Mean (Task)"}
    for row in cm.iter_rows(named=True):
        x, y, names = [], [], []
        for name, m in match.items():
            if not m or row["task"] not in quality.get(name, {}) or board[m][row["mteb_column"]] == "":
                continue
            t = kind[(source.get(name, "published"), name)]
            if row["scope"] != "all" and t["category"] != "embedding" or row["scope"] == "recent" and t["recent"] != "yes":
                continue
            x.append(float(board[m][row["mteb_column"]]))
            y.append(quality[name][row["task"]])
            names.append(name)
        assert row["n_systems"] == len(x) and sorted(row["systems"].split(", ")) == sorted(names)
        assert row["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert row["kendall"] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert row["pearson"] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
        assert row["spearman_low"] <= row["spearman"] <= row["spearman_high"]
    sf = cm.filter((pl.col("task") == "statement-full") & (pl.col("mteb_column") == "Retrieval"))
    assert dict(sf.select("scope", "n_systems").iter_rows()) == {"all": 19, "embedding": 19, "recent": 13}

    # rephrased-copy rank: published summaries and the run's table, Spearman by scipy
    dedup = [json.loads(line) for line in DEDUP.read_text().splitlines() if line.strip()]
    rc = pl.read_parquet(out / "rephrased_correlation.parquet")
    pools = {"one copy": "insert_per_query", "all copies": "insert_all_rephrased"}
    fields = {"mean_rank": "avg_rank", "median_rank": "median_rank", "top1": "top_1"}
    pub_rows = rc.filter(pl.col("source") == "published")
    assert pub_rows.height == 2 * 3 * 3
    for row in pub_rows.iter_rows(named=True):
        pairs = [(d[pools[row["pool"]]][fields[row["reading"]]], conf[d["model"]][row["task"]]) for d in dedup
                 if d[pools[row["pool"]]] is not None and row["task"] in conf.get(d["model"], {})]
        assert row["n_systems"] == len(pairs)
        assert row["spearman"] == pytest.approx(stats.spearmanr(*zip(*pairs)).statistic, abs=1e-12)
    runs = rc.filter(pl.col("source") == "myrun")
    assert set(runs["pool"]) == {"one copy", "all copies"} and set(runs.filter(pl.col("spearman").is_not_nan())["task"]) == {"statement-full"}
    for row in runs.filter(pl.col("task") == "statement-full").iter_rows(named=True):
        pool = {"one copy": "candidates", "all copies": "candidates_all"}[row["pool"]]
        s = run_summ.filter(pl.col("pool") == pool).sort("retriever")
        want = stats.spearmanr(s[row["reading"]].to_list(), [run_means[n] for n in s["retriever"]]).statistic
        assert row["n_systems"] == 5 and row["spearman"] == pytest.approx(want, abs=1e-12)
    man = json.loads((out / "manifest.json").read_text())
    for f in ("mteb_matches.csv", "mteb_correlation.parquet", "mteb_scatter_statement-full.png",
              "rephrased_correlation.parquet", "rephrased_vs_ndcg.png", "rephrased_vs_ndcg_myrun.png"):
        assert (out / f).is_file() and f in man["files"]

    # same parameters, byte-identical tables
    again = tmp_path / "again"
    assert saber("--published", PUBLISHED, "--run-dir", run, "--n-resamples", 200, "--seed", 4, "--out",
                 again).returncode == 0
    for f in ("mteb_correlation.parquet", "rephrased_correlation.parquet", "mteb_matches.csv"):
        assert (out / f).read_bytes() == (again / f).read_bytes()


@pytest.mark.pipeline
@needs_cross
def test_bad_mteb_or_dedup_file_is_one_error_line(tmp_path):
    bad = _write(tmp_path / "lb.csv", ",Model,Retrieval,Retrieval,Mean (Task)\n")
    r = saber("--published", PUBLISHED, "--mteb", bad, "--n-resamples", 20, "--out", tmp_path / "o")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert f"{bad}: line 1: the header names column 'Retrieval' twice" in r.stderr
    badj = _write(tmp_path / "d.jsonl", '{"model": "x", "insert_per_query": 3}\n')
    r = saber("--published", PUBLISHED, "--dedup", badj, "--n-resamples", 20, "--out", tmp_path / "o2")
    assert r.returncode == 2 and f"{badj}: line 1: field 'insert_per_query'" in r.stderr
    r = saber("--published", PUBLISHED, "--mteb", tmp_path / "nope.csv", "--n-resamples", 20, "--out", tmp_path / "o3")
    assert r.returncode == 2 and "nope.csv: file not found" in r.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_across_a_runs_retrievers_equals_scipy_on_the_robustness_table():
    rng = np.random.default_rng(9)
    names = ["a", "b", "c", "d", "e", "f"]
    ndcg = pl.DataFrame([{"retriever": r, "setting": s, "query_id": str(q), "ndcg": float(rng.random())}
                         for r in names for s in ("statement-statement", "statement-full") for q in range(30)])
    ndcg = ndcg.with_columns(pl.when(pl.col("query_id") == "0").then(None).otherwise(pl.col("ndcg")).alias("ndcg"))
    table = pl.DataFrame([{"retriever": r, "pool": p, "rewriter": "w", "n_queries": 30,
                           "mean_rank": float(rng.uniform(1, 9)), "median_rank": float(rng.integers(1, 4)),
                           "top1": float(rng.random())} for r in names + ["only-here"] for p in ("candidates", "corpus")])
    got = rephrased.across_retrievers(table, ndcg, 100, 0)
    assert got["task"].unique(maintain_order=True).to_list() == ["statement-full", "statement-statement"]
    assert set(got["pool"]) == {"one copy", "corpus"}
    means = ndcg.drop_nulls().group_by("retriever", "setting").agg(pl.col("ndcg").mean())
    for row in got.iter_rows(named=True):
        pool = {"one copy": "candidates", "corpus": "corpus"}[row["pool"]]
        t = table.filter((pl.col("pool") == pool) & pl.col("retriever").is_in(names)).sort("retriever")
        q = dict(means.filter(pl.col("setting") == row["task"]).select("retriever", "ndcg").iter_rows())
        want = stats.spearmanr(t[row["reading"]].to_list(), [q[n] for n in t["retriever"]]).statistic
        assert row["n_systems"] == 6 and row["spearman"] == pytest.approx(want, abs=1e-12)
        assert row["spearman_low"] <= row["spearman_high"]


class _Ctx:
    """The two things the stage recipe uses of a StageContext: a path in the stage folder and a record."""

    def __init__(self, d):
        self.dir, self.info = d, {}

    def path(self, name):
        p = self.dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def record(self, **kw):
        self.info.update(kw)


@needs_cross
def test_the_stage_writes_the_same_readings_into_its_folder(tmp_path):
    from saber_lib.leaderboard import published as pub
    from saber_lib.leaderboard import stage

    ctx = _Ctx(tmp_path / "leaderboard")
    said = stage.cross_system(ctx, PUBLISHED, pub.read_published_dir(PUBLISHED), [], {"lb_n_resamples": 50, "seed": 1})
    out = ctx.dir / "cross_system"
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".csv", ".parquet")) == [
        "mteb_correlation.parquet", "mteb_matches.csv", "rephrased_correlation.parquet", "rephrased_summaries.parquet"]
    assert "MTEB Retrieval vs statement-full (recent): 13 systems" in said
    assert ctx.info["mteb_matched"] == 20 and ctx.info["rephrased_sources"] == ["published"]
    empty = _Ctx(tmp_path / "other")
    bare = tmp_path / "bare"
    bare.mkdir()
    assert "no cross-system readings" in stage.cross_system(empty, bare, pub.read_published_dir(PUBLISHED), [],
                                                            {"lb_n_resamples": 50, "seed": 1})


@needs_cross
def test_the_stage_goes_stale_when_a_cross_system_input_changes():
    from saber_lib.pipeline.stages import published_files

    files = published_files({"leaderboard": {"published_dir": str(PUBLISHED)}, "run": {"data_dir": None}})
    assert str(MTEB_CSV.resolve()) in files and str(DEDUP.resolve()) in files
    assert str(mteb.SYSTEMS_TABLE.resolve()) in files
