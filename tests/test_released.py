"""The released-benchmark import (stage ``released``): reading, every bad-row error, the artifacts,
the profile-dependent stage dependencies, and ``saber run evaluate`` on a hand-made release with a
TREC run against hand-computed nDCG (end to end, as a subprocess). No network: the fixtures are
written in the released layout into temporary folders (``tests/released_fixture.py``)."""
import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import PUBLISHED, extra_module, missing
from released_fixture import make_release, write_release
from saber_lib.core import config
from saber_lib.released import stage as released
from saber_lib.pipeline import stages
from saber_lib.evaluate.stage import score_benchmark
from saber_lib.retrieval.base import Retriever

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_reads_and_converts_a_release(tmp_path, fmt):
    q, d = make_release(n_queries=6, n_docs=12, n_candidates=5)
    write_release(tmp_path, q, d, fmt)
    rel = released.read_released(tmp_path, n_candidates=5)
    assert rel.files["queries"].name == f"queries.{fmt}"
    art = released.to_artifacts(rel)
    assert art["queries"]["query_id"].to_list() == [str(i) for i in range(6)]
    assert sorted(art["documents"]["doc_id"]) == sorted(x["id"] for x in d)
    b, r = art["benchmark"], art["ratings"]
    assert b.height == r.height == 6 * 5
    # candidates are row indices into the documents set; ratings are the released scores
    row = r.filter(pl.col("query_id") == "2").sort("position")
    assert row["cand_id"].to_list() == [d[i]["id"] for i in q[2]["candidates"]]
    assert row["rating"].to_list() == q[2]["relevance_scores"]
    assert b.filter(pl.col("query_id") == "3")["query_domains"][0].to_list() == ["Number Theory", "Algebra"]


def test_the_release_has_150_candidates_unless_the_profile_says_otherwise(tmp_path):
    assert config.load_profile(ROOT / "params" / "paper.yaml").values["released"]["released_candidates"] == 150
    q, d = make_release(n_candidates=5)
    write_release(tmp_path, q, d)
    with pytest.raises(released.ReleasedError, match=r"row 0: field 'candidates': expected a list of 150"):
        released.read_released(tmp_path)


def _as_floats(q, key):
    for row in q:
        row[key] = [float(x) for x in row[key]]


def _mutations(fmt="jsonl"):
    def m(fn):
        return fn
    # Parquet columns have one type, so three bad values take their Parquet form there
    parquet = {
        "score not a number": (m(lambda q, d: q[1]["relevance_scores"].__setitem__(0, float("nan"))), "queries", 1,
                               "relevance_scores", "entry 0: nan is not a finite number"),
        "float index": (m(lambda q, d: (_as_floats(q, "candidates"), q[0]["candidates"].__setitem__(1, 1.5))),
                        "queries", 0, "candidates", "is not an integer row index"),   # every entry is a float
        "missing field": (m(lambda q, d: [row.pop("domains") for row in q]), "queries", 0, "domains", "missing"),
    }
    return ({} if fmt != "parquet" else parquet) | {k: v for k, v in {
        "few candidates": (m(lambda q, d: q[1].update(candidates=q[1]["candidates"][:4], relevance_scores=q[1]["relevance_scores"][:4])),
                           "queries", 1, "candidates", "expected a list of 5"),
        "index out of range": (m(lambda q, d: q[2]["candidates"].__setitem__(3, 12)), "queries", 2, "candidates",
                               "entry 3: row index 12 is outside the documents set (0..11)"),
        "negative index": (m(lambda q, d: q[0]["candidates"].__setitem__(0, -1)), "queries", 0, "candidates", "outside"),
        "float index": (m(lambda q, d: q[0]["candidates"].__setitem__(1, 1.5)), "queries", 0, "candidates",
                        "not an integer row index"),
        "candidate twice": (m(lambda q, d: q[4]["candidates"].__setitem__(1, q[4]["candidates"][0])), "queries", 4,
                            "candidates", "listed twice"),
        "score above 5": (m(lambda q, d: q[3]["relevance_scores"].__setitem__(2, 5.5)), "queries", 3,
                          "relevance_scores", "entry 2: 5.5 is outside [0, 5]"),
        "negative score": (m(lambda q, d: q[3]["relevance_scores"].__setitem__(0, -0.1)), "queries", 3,
                           "relevance_scores", "outside [0, 5]"),
        "score not a number": (m(lambda q, d: q[1]["relevance_scores"].__setitem__(0, "high")), "queries", 1,
                               "relevance_scores", "not a finite number"),
        "scores misaligned": (m(lambda q, d: q[5]["relevance_scores"].pop()), "queries", 5, "relevance_scores",
                              "expected 5 scores"),
        "query id twice": (m(lambda q, d: q[4].update(id=1)), "queries", 4, "id", "also the id of row 1"),
        "document id twice": (m(lambda q, d: d[7].update(id="d3")), "documents", 7, "id", "also the id of row 3"),
        "empty problem": (m(lambda q, d: q[2].update(problem="  ")), "queries", 2, "problem", "non-empty text"),
        "empty solution": (m(lambda q, d: d[5].update(solution="")), "documents", 5, "solution", "non-empty text"),
        "missing field": (m(lambda q, d: q[0].pop("domains")), "queries", 0, "domains", "missing"),
        "unknown domain": (m(lambda q, d: q[1].update(domains=["Topology"])), "queries", 1, "domains",
                           "'Topology' is not one of"),
        "no id": (m(lambda q, d: d[0].update(id=None)), "documents", 0, "id", "is not an id"),
    }.items() if fmt != "parquet" or k not in parquet}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("case", sorted(_mutations()))
def test_a_bad_row_is_one_error_naming_file_row_and_field(tmp_path, case, fmt):
    mutate, name, row, fld, msg = _mutations(fmt)[case]
    q, d = make_release(n_queries=6, n_docs=12, n_candidates=5)
    q, d = copy.deepcopy(q), copy.deepcopy(d)
    mutate(q, d)
    write_release(tmp_path, q, d, fmt)
    with pytest.raises(released.ReleasedError) as e:
        released.read_released(tmp_path, n_candidates=5)
    text = str(e.value)
    assert text.startswith(f"{tmp_path / f'{name}.{fmt}'}: row {row}: field '{fld}': "), text
    assert msg in text and "\n" not in text


def test_broken_files_and_folders_are_named(tmp_path):
    with pytest.raises(released.ReleasedError, match="benchmark folder not found"):
        released.read_released(tmp_path / "nowhere")
    q, d = make_release()
    write_release(tmp_path, q, d, "jsonl")
    (tmp_path / "queries.jsonl").write_text((tmp_path / "queries.jsonl").read_text() + "{not json\n")
    with pytest.raises(released.ReleasedError, match=r"queries.jsonl: row 6 \(line 7\): not valid JSON"):
        released.read_released(tmp_path, n_candidates=5)
    write_release(tmp_path, q, d, "parquet")
    with pytest.raises(released.ReleasedError, match="queries is given twice"):
        released.read_released(tmp_path, n_candidates=5)
    (tmp_path / "queries.jsonl").unlink()
    (tmp_path / "documents.parquet").unlink()
    (tmp_path / "documents.jsonl").unlink()
    with pytest.raises(released.ReleasedError, match="no documents.parquet, documents.jsonl"):
        released.read_released(tmp_path, n_candidates=5)


# ----------------------------------------------------------------------------- written by `datasets`
def _features(datasets, doc_id: str, score: str):
    """The release's columns and types as `datasets` features (query ids are integers, the documents'
    ids ``doc_id``: ``int64`` or ``string``; scores ``score``: ``float64`` or ``float32``)."""
    value, seq = datasets.Value, datasets.List
    queries = datasets.Features({"id": value("int64"), "problem": value("string"), "solution": value("string"),
                                 "domains": seq(value("string")), "candidates": seq(value("int64")),
                                 "relevance_scores": seq(value(score))})
    documents = datasets.Features({"id": value(doc_id), "problem": value("string"), "solution": value("string")})
    return queries, documents


def _write_with_datasets(datasets, folder, q, d, layout: str, doc_id="string", score="float64"):
    """Both sets written by `datasets` itself in one of the layouts the README offers."""
    fq, fd = _features(datasets, doc_id, score)
    for name, rows, feats in (("queries", q, fq), ("documents", d, fd)):
        ds = datasets.Dataset.from_list(rows, features=feats)
        if layout == "save_to_disk":
            ds.save_to_disk(str(folder / name))
        elif layout == "save_to_disk-train":            # a DatasetDict, as load_dataset(...) without split
            datasets.DatasetDict({"train": ds}).save_to_disk(str(folder / name))
        elif layout == "parquet":                       # Dataset.to_parquet, as the README's download line
            ds.to_parquet(str(folder / f"{name}.parquet"))
        else:
            ds.to_json(str(folder / f"{name}.jsonl"))    # JSON lines (datasets' default)
    return folder


LAYOUTS = ["save_to_disk", "save_to_disk-train", "parquet", "jsonl"]


@pytest.mark.parametrize("doc_id", ["string", "int64"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_release_written_by_datasets_gives_the_same_artifacts_in_every_layout(tmp_path, layout, doc_id):
    datasets = extra_module("datasets", "released")
    q, d = make_release(n_queries=6, n_docs=12, n_candidates=5)
    if doc_id == "int64":
        d = [{**row, "id": 100 + k} for k, row in enumerate(d)]
    reference = released.to_artifacts(released.read_released(write_release(tmp_path / "ref", q, d, "jsonl"),
                                                             n_candidates=5))
    folder = _write_with_datasets(datasets, tmp_path / "bench", q, d, layout, doc_id=doc_id)
    rel = released.read_released(folder, n_candidates=5)
    assert rel.files["queries"].name == {"parquet": "queries.parquet", "jsonl": "queries.jsonl"}.get(layout, "queries")
    art = released.to_artifacts(rel)
    for name in ("queries", "documents", "benchmark", "ratings"):
        assert art[name].equals(reference[name]), name
    assert art["documents"]["doc_id"].to_list()[:2] == (["100", "101"] if doc_id == "int64" else ["d0", "d1"])
    assert art["ratings"].filter(pl.col("query_id") == "2")["rating"].to_list() == q[2]["relevance_scores"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_single_precision_scores_are_read_as_their_values(tmp_path, layout):
    datasets = extra_module("datasets", "released")
    q, d = make_release(n_queries=6, n_docs=12, n_candidates=5)
    folder = _write_with_datasets(datasets, tmp_path / "bench", q, d, layout, score="float32")
    ratings = released.to_artifacts(released.read_released(folder, n_candidates=5))["ratings"]
    want = {(str(row["id"]), d[c]["id"]): s for row in q for c, s in zip(row["candidates"], row["relevance_scores"])}
    got = {(qid, cid): r for qid, cid, r in ratings.select("query_id", "cand_id", "rating").iter_rows()}
    assert got.keys() == want.keys()
    assert got == pytest.approx(want, abs=1e-6)       # float32 keeps about 7 digits of e.g. 3.217


def test_a_bad_row_in_a_save_to_disk_folder_is_named_and_splits_must_be_clear(tmp_path):
    datasets = extra_module("datasets", "released")
    q, d = make_release(n_queries=6, n_docs=12, n_candidates=5)
    bad = copy.deepcopy(q)
    bad[3]["relevance_scores"][2] = 5.5
    folder = _write_with_datasets(datasets, tmp_path / "bench", bad, d, "save_to_disk")
    with pytest.raises(released.ReleasedError) as e:
        released.read_released(folder, n_candidates=5)
    assert str(e.value).startswith(f"{folder / 'queries'}: row 3: field 'relevance_scores': entry 2: 5.5 is outside")
    two = datasets.DatasetDict({"test": datasets.Dataset.from_list(d), "validation": datasets.Dataset.from_list(d)})
    two.save_to_disk(str(folder / "documents2"))
    with pytest.raises(released.ReleasedError, match=r"documents2: splits \['test', 'validation'\]; expected one"):
        released.read_rows(folder / "documents2")


def test_query_and_document_ids_may_collide():
    """Query 0 and document 0 are different problems: each text comes from its own table."""
    class QueryLength(Retriever):
        name = "qlen"

        def score(self, query, candidates):
            return np.full(len(candidates), float(len(query)))

    docs = pl.DataFrame({"doc_id": ["0", "1"], "problem": ["a", "bb"], "solution": ["s", "s"]})
    queries = pl.DataFrame({"query_id": ["0"], "problem": ["the query text"], "solution": ["x"]})
    bench = pl.DataFrame({"query_id": ["0", "0"], "cand_id": ["0", "1"], "position": [0, 1]})
    s = score_benchmark(QueryLength(), bench, docs, "statement-full", queries=queries)
    assert s["score"].to_list() == [14.0, 14.0]
    assert score_benchmark(QueryLength(), bench, docs, "statement-full")["score"].to_list() == [1.0, 1.0]


def test_stage_dependencies_follow_the_benchmark():
    built = config.load_profile(ROOT / "params" / "tiny.yaml").values
    rel = config.load_profile(ROOT / "params" / "released.yaml", {"released.benchmark_dir": "/x"}).values
    assert stages.upstream_closure(["evaluate"], rel) == ["released", "evaluate"]
    assert stages.upstream_closure(["evaluate"], built) == ["corpus", "ontology", "topics", "summaries", "signals",
                                                           "thresholds", "select", "tournament", "evaluate"]
    assert stages.upstream_closure(["leaderboard"], built) == ["leaderboard"]
    assert stages.upstream_closure(["leaderboard"], rel) == ["released", "evaluate", "leaderboard"]
    order = stages.upstream_closure([s.name for s in stages.STAGES], rel)
    assert order.index("released") < order.index("evaluate") < order.index("leaderboard")
    assert stages.BY_NAME["released"].data_files_for(built) == ()
    assert stages.BY_NAME["released"].data_files_for(rel) == ("/x/queries.parquet", "/x/documents.parquet")


# ----------------------------------------------------------------------------- end to end
# A hand-made release: document ids collide with query ids on purpose.
HAND_QUERIES = [
    {"id": 0, "problem": "Query zero.", "solution": "S0.", "domains": ["Algebra"],
     "candidates": [0, 1, 2], "relevance_scores": [3.0, 0.0, 1.0]},
    {"id": 1, "problem": "Query one.", "solution": "S1.", "domains": ["Geometry"],
     "candidates": [1, 3, 0], "relevance_scores": [5.0, 2.0, 0.0]},
    {"id": 2, "problem": "Query two.", "solution": "S2.", "domains": ["Number Theory", "Algebra"],
     "candidates": [0, 2, 3], "relevance_scores": [0.0, 4.0, 2.0]},
]
HAND_DOCS = [{"id": i, "problem": f"Document {i}.", "solution": f"Proof {i}."} for i in range(4)]
# query 0: d2 then d0, d1 unlisted (scores below both); query 1: d3, d1, d0 unlisted;
# query 2: every candidate tied (ties keep the candidate order under tie_policy "position")
TREC = """0 Q0 2 1 2.0 hand
0 Q0 0 2 1.0 hand
1 Q0 3 1 9.0 hand
1 Q0 1 2 8.0 hand
2 Q0 0 1 1.0 hand
2 Q0 2 2 1.0 hand
2 Q0 3 3 1.0 hand
"""
L3 = math.log2(3)
HAND_NDCG = {                       # gain 2^rel - 1, discount 1 / log2(rank + 1), ideal over all candidates
    "0": (1 + 7 / L3) / (7 + 1 / L3),           # order d2 (1), d0 (7), d1 (0)
    "1": (3 + 31 / L3) / (31 + 3 / L3),         # order d3 (3), d1 (31), d0 (0)
    "2": (0 + 15 / L3 + 3 / 2) / (15 + 3 / L3),  # tied: d0 (0), d2 (15), d3 (3)
}
HAND_EXPECTED_2 = (6 * (1 + 1 / L3 + 1 / 2)) / (15 + 3 / L3)   # mean gain 18/3 on each of the 3 ranks


def _saber(*args, cwd=ROOT, timeout=900):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def hand_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("released")
    write_release(tmp / "bench", HAND_QUERIES, HAND_DOCS, "jsonl")
    (tmp / "hand.trec").write_text(TREC)
    sets = ["--set", f"released.benchmark_dir={tmp / 'bench'}", "--set", "released.released_candidates=3",
            "--set", f"evaluate.retrievers=['run:{tmp / 'hand.trec'}']", "--set", f"run.figures_dir={tmp / 'fig'}",
            "--set", "evaluate.n_bootstrap=20", "--set", "leaderboard.lb_n_resamples=200"]
    r = _saber("run", "evaluate", "--params", "params/released.yaml", "--run-dir", str(tmp / "run"), *sets)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, sets, r.stdout


@pytest.mark.pipeline
def test_evaluate_on_the_release_runs_only_what_it_reads(hand_run):
    tmp, _, out = hand_run
    assert "[run ] released" in out and "[run ] evaluate" in out
    assert not any(f"[run ] {s}" in out for s in ("corpus", "topics", "select", "tournament"))
    man = json.loads((tmp / "run" / "evaluate" / "manifest.json").read_text())
    # the released stage's output and the TREC run file it scores (an external input),
    # besides its notebook and the library files the notebook runs
    files = sorted(k for k in man["input_hashes"] if not k.startswith(("notebook:", "code:")))
    assert files == sorted([f"file:{tmp / 'hand.trec'}", "stage:released"])
    assert {"notebook:09_evaluate.ipynb", "code:saber_lib/evaluate/tables.py"} <= set(man["input_hashes"])
    inputs = json.loads((tmp / "run" / "released" / "manifest.json").read_text())["input_hashes"]
    files = sorted(k for k in inputs if not k.startswith(("notebook:", "code:")))
    # the two sets it reads, and the folder the profile names (a path-valued key, hashed file by file)
    assert files == [f"data:{tmp / 'bench' / 'documents.jsonl'}", f"data:{tmp / 'bench' / 'queries.jsonl'}",
                     "input:released.benchmark_dir"]


@pytest.mark.pipeline
def test_per_query_ndcg_of_a_trec_run_matches_hand_computed_values(hand_run):
    tmp, _, _ = hand_run
    nd = pl.read_parquet(tmp / "run" / "evaluate" / "ndcg.parquet")
    assert set(nd["setting"]) == set(config.load_profile(ROOT / "params" / "released.yaml").values["evaluate"]["settings"])
    for setting in nd["setting"].unique():
        got = dict(nd.filter(pl.col("setting") == setting).select("query_id", "ndcg").iter_rows())
        assert got == pytest.approx(HAND_NDCG, abs=1e-12)
    sc = pl.read_parquet(tmp / "run" / "evaluate" / "scores.parquet")
    assert sorted(set(sc["cand_id"])) == ["0", "1", "2", "3"] and sorted(set(sc["query_id"])) == ["0", "1", "2"]
    ties = pl.read_parquet(tmp / "run" / "evaluate" / "ties.parquet").filter(pl.col("tied"))
    assert ties["query_id"].unique().to_list() == ["2"]


@pytest.mark.pipeline
def test_status_then_expected_ties_rerun_only_evaluate(hand_run):
    tmp, sets, _ = hand_run
    st = _saber("status", "--run-dir", str(tmp / "run"), *sets)
    assert st.returncode == 0, st.stderr
    lines = dict(line.split()[:2] for line in st.stdout.splitlines())
    assert lines["released"] == lines["evaluate"] == "done" and lines["corpus"] == "missing"
    r = _saber("run", "evaluate", "--params", "params/released.yaml", "--run-dir", str(tmp / "run"), *sets,
               "--set", "evaluate.tie_policy=expected")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[skip] released" in r.stdout and "[run ] evaluate" in r.stdout
    nd = pl.read_parquet(tmp / "run" / "evaluate" / "ndcg.parquet").filter(pl.col("setting") == "statement-full")
    got = dict(nd.select("query_id", "ndcg").iter_rows())
    assert got == pytest.approx({**HAND_NDCG, "2": HAND_EXPECTED_2}, abs=1e-12)


@pytest.mark.pipeline
def test_export_and_leaderboard_of_a_released_run(hand_run, published_ranking):
    tmp, _, _ = hand_run
    r = _saber("export", "--run-dir", str(tmp / "run"), "--out", str(tmp / "beir"))
    assert r.returncode == 0, r.stderr
    queries = [json.loads(x) for x in (tmp / "beir" / "queries.jsonl").read_text().splitlines()]
    assert [q["text"] for q in queries] == ["Query zero.", "Query one.", "Query two."]
    assert len((tmp / "beir" / "qrels" / "test.tsv").read_text().splitlines()) == 1 + 9
    if not (PUBLISHED / "evaluation").is_dir():
        missing(f"{PUBLISHED / 'evaluation'} (the authors' published result files in the data folder)")
    r = _saber("leaderboard", "--published", str(published_ranking), "--run-dir", str(tmp / "run"), "--n-resamples", "200",
               "--out", str(tmp / "lb"))
    assert r.returncode == 0, r.stderr
    lb = pl.read_parquet(tmp / "lb" / "leaderboard.parquet")
    assert "run:hand" in set(lb["system"])
    row = lb.filter((pl.col("system") == "run:hand") & (pl.col("scope") == "Overall"))
    nd = pl.read_parquet(tmp / "run" / "evaluate" / "ndcg.parquet").filter(pl.col("setting") == "statement-full")
    assert row["n_queries"][0] == 3 and row["mean"][0] == pytest.approx(nd["ndcg"].mean(), abs=1e-12)
