"""Reading and writing the authors' published result layout, and reading workbench runs."""
import json

import numpy as np
import polars as pl
import pytest

from conftest import PUBLISHED, needs_published
from saber_lib.leaderboard import published as pub
from saber_lib.leaderboard.scopes import means_by_scope, scope_masks

DOMS = ["Algebra", "Geometry", "Number Theory", "Combinatorics", "Calculus and Analysis"]


@needs_published
def test_every_stored_mean_reproduced():
    files = sorted((PUBLISHED / "evaluation").glob("*.json"))
    assert len(files) == 5
    d = pub.read_published_dir(PUBLISHED)
    assert len(d.systems) == 5 and not d.skipped
    by_name = {s.name: s for s in d.systems}
    n_checked = 0
    for f in files:
        raw = json.loads(f.read_text())
        for name, rep in raw["reports"].items():
            s = by_name[name]
            for t in rep["tasks"]:
                vals = rep["ndcgs_by_task"][t["task"]]
                # independent computation from the raw JSON: numpy mean over the non-null values
                want = np.mean([v for v in vals if v is not None])
                assert abs(t["ndcg_at_k"] - want) <= 1e-12
                got = means_by_scope(s.scores[t["task"]], s.domains)
                assert abs(got["Overall"] - t["ndcg_at_k"]) <= 1e-12
                for br in t["branches"]:
                    dvals = [v for v, ds in zip(vals, raw["domains"]) if br["branch"] in ds and v is not None]
                    assert abs(np.mean(dvals) - br["ndcg_at_k"]) <= 1e-12
                    assert abs(got[br["branch"]] - br["ndcg_at_k"]) <= 1e-12
                    n_checked += 1
            assert pub.check_stored_means(s) == []
    assert n_checked == 5 * 3 * 5
    # a multi-domain query counts in each of its domains
    s = d.systems[0]
    sizes = {k: int(m.sum()) for k, m in scope_masks(s.domains).items()}
    assert sum(sizes[x] for x in DOMS) > sizes["Overall"] == 1000
    assert sizes["Geometry"] == 200
    # every system with per-query results has its stored intervals; the folder also holds the summaries
    # of systems published without per-query results
    assert set(by_name) <= set(d.confidence)
    assert len(d.confidence) == len(list((PUBLISHED / "confidence").glob("*.json")))


def tiny_file(tmp_path, name="sys", values=None, domains=None):
    domains = domains or [["Algebra"], ["Geometry", "Algebra"], ["Geometry"], ["Number Theory"]]
    values = values or {"statement-full": [0.5, None, 0.25, 1.0]}
    rec = pub.evaluation_record(name, {t: [np.nan if v is None else v for v in vs] for t, vs in values.items()},
                                domains)
    f = tmp_path / "evaluation" / f"{name}__p0.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(rec, indent=2))
    return f


def test_nulls_and_hand_means(tmp_path):
    f = tiny_file(tmp_path)
    raw = json.loads(f.read_text())
    assert raw["reports"]["sys"]["ndcgs_by_task"]["statement-full"] == [0.5, None, 0.25, 1.0]
    t = raw["reports"]["sys"]["tasks"][0]
    assert t["ndcg_at_k"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    br = {b["branch"]: b["ndcg_at_k"] for b in t["branches"]}
    assert br == pytest.approx({"Algebra": 0.5, "Geometry": 0.25, "Number Theory": 1.0})
    (s,), skipped = pub.read_evaluation_file(f)
    assert np.isnan(s.scores["statement-full"][1]) and s.query_ids == ["0", "1", "2", "3"]
    assert pub.check_stored_means(s) == []


def _corrupt(tmp_path, mutate):
    f = tiny_file(tmp_path)
    raw = json.loads(f.read_text())
    mutate(raw)
    f.write_text(json.dumps(raw))
    return f


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r.pop("domains"), "domains"),
    (lambda r: r["reports"]["sys"]["ndcgs_by_task"]["statement-full"].pop(), "reports.sys.ndcgs_by_task.statement-full"),
    (lambda r: r["reports"]["sys"]["ndcgs_by_task"]["statement-full"].__setitem__(2, "x"),
     "reports.sys.ndcgs_by_task.statement-full[2]"),
    (lambda r: r["reports"]["sys"]["ndcgs_by_task"]["statement-full"].__setitem__(0, 1.5),
     "reports.sys.ndcgs_by_task.statement-full[0]"),
    (lambda r: r["reports"]["sys"].pop("k"), "reports.sys.k"),
    (lambda r: r["reports"]["sys"]["tasks"][0]["branches"][0].pop("ndcg_at_k"), "reports.sys.tasks[0].branches[0].ndcg_at_k"),
    (lambda r: r["domains"].__setitem__(1, "Algebra"), "domains[1]"),
])
def test_bad_layout_names_file_and_field(tmp_path, mutate, field):
    f = _corrupt(tmp_path, mutate)
    with pytest.raises(pub.LayoutError) as e:
        pub.read_evaluation_file(f)
    assert str(f) in str(e.value) and f"'{field}'" in str(e.value)


def test_wrong_stored_mean_is_an_error(tmp_path):
    f = _corrupt(tmp_path, lambda r: r["reports"]["sys"]["tasks"][0].__setitem__("ndcg_at_k", 0.1))
    with pytest.raises(pub.LayoutError, match="sys__p0.json.*stored 0.1"):
        pub.read_published_dir(tmp_path)


def test_failed_report_skipped(tmp_path):
    f = tiny_file(tmp_path)
    raw = json.loads(f.read_text())
    raw["reports"]["broken"] = {"model": "x", "error": "CUDA out of memory"}
    f.write_text(json.dumps(raw))
    d = pub.read_published_dir(tmp_path)
    assert [s.name for s in d.systems] == ["sys"] and "broken" in d.skipped[0]


@needs_published
def test_round_trip_published(tmp_path):
    d = pub.read_published_dir(PUBLISHED)
    for s in d.systems:
        out = pub.write_evaluation_file(tmp_path / "evaluation" / f"{s.name}__p0.json", s)
        (s2,), _ = pub.read_evaluation_file(out)
        assert s2.name == s.name and s2.query_ids == s.query_ids and s2.domains == s.domains
        assert set(s2.scores) == set(s.scores)
        for t in s.scores:
            np.testing.assert_array_equal(s2.scores[t], s.scores[t])
            assert s2.stored[t] == s.stored[t]          # identical means, bit for bit
        raw = json.loads(out.read_text())
        assert "query_ids" not in raw                  # released order: no extra key


def fake_run(tmp_path, qids, retrievers=("mine", "other"), seed=0, settings=("statement-full",)):
    rng = np.random.default_rng(seed)
    rows = [{"retriever": r, "setting": st, "query_id": q, "ndcg": float(rng.random())}
            for r in retrievers for st in settings for q in qids]
    run = tmp_path / "run"
    (run / "evaluate").mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(run / "evaluate" / "ndcg.parquet")
    return run, pl.DataFrame(rows)


def test_run_aligned_with_released_queries(tmp_path):
    ref = pub.System("ref", "ref.json", [str(i) for i in range(6)],
                     [["Algebra"], ["Geometry"], ["Algebra", "Geometry"], ["Combinatorics"], ["Algebra"], ["Geometry"]],
                     {"statement-full": np.linspace(0, 1, 6)})
    # a run on the released benchmark, scoring queries 5, 3, 0, 1 (ids as strings, shuffled)
    run, df = fake_run(tmp_path, ["5", "3", "0", "1"])
    systems = pub.read_run(run, pub.query_domains_of(ref))
    assert [s.name for s in systems] == ["mine", "other"]
    al = pub.align(systems, ref)
    mine = al[0].scores["statement-full"]
    want = dict(df.filter(pl.col("retriever") == "mine").select("query_id", "ndcg").iter_rows())
    for i, q in enumerate(ref.query_ids):
        if q in want:
            assert mine[i] == want[q]
        else:
            assert np.isnan(mine[i])
    assert al[0].domains == ref.domains


def test_run_on_other_queries_rejected(tmp_path):
    ref = pub.System("ref", "ref.json", ["0", "1"], [["Algebra"], ["Geometry"]], {"statement-full": np.zeros(2)})
    run, _ = fake_run(tmp_path, ["syn:0", "syn:1"])
    with pytest.raises(pub.LayoutError, match="not the released benchmark"):
        pub.align(pub.read_run(run), ref)


def test_run_missing_column(tmp_path):
    run = tmp_path / "r"
    (run / "evaluate").mkdir(parents=True)
    pl.DataFrame({"retriever": ["a"], "query_id": ["0"], "ndcg": [0.1]}).write_parquet(run / "evaluate" / "ndcg.parquet")
    with pytest.raises(pub.LayoutError, match="ndcg.parquet: field 'setting'"):
        pub.read_run(run)


def test_file_from_run_has_the_authors_keys(tmp_path):
    doms = [["Algebra"], ["Geometry"], ["Number Theory", "Algebra"]]
    ref = pub.System("ref", "ref.json", ["0", "1", "2"], doms, {"statement-full": np.zeros(3)})
    run, df = fake_run(tmp_path, ["0", "1", "2"], settings=("statement-full", "full-full"))
    out = pub.evaluation_file_from_run(run, "mine", ref, tmp_path / "out" / "evaluation" / "mine__p0.json")
    raw = json.loads(out.read_text())
    assert set(raw) == {"domains", "reports"} and raw["domains"] == doms
    rep = raw["reports"]["mine"]
    assert set(rep) == {"model", "processor", "dcg_variant", "k", "tasks", "ndcgs_by_task", "prompt"}
    assert rep["dcg_variant"] == "exponent" and rep["k"] == 10
    assert set(rep["ndcgs_by_task"]) == {"statement-full", "full-full"}
    assert all(len(v) == 3 for v in rep["ndcgs_by_task"].values())
    for t in rep["tasks"]:
        assert set(t) == {"task", "ndcg_at_k", "branches"}
        assert [b["branch"] for b in t["branches"]] == ["Algebra", "Geometry", "Number Theory"]
        vals = df.filter((pl.col("retriever") == "mine") & (pl.col("setting") == t["task"])).sort("query_id")["ndcg"]
        assert t["ndcg_at_k"] == pytest.approx(float(np.mean(vals.to_numpy())), abs=1e-15)
    # and it reads back as a published system
    d = pub.read_published_dir(tmp_path / "out")
    assert d.systems[0].name == "mine"
