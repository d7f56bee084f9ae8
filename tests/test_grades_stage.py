"""The judge-validation stage with graded labels (judge_validation.jv_grades), run as a user would
(`saber run judge_validation --set judge_validation.jv_grades=FILE` on a copy of the tiny run), and its
numbers recomputed independently from the run's files with numpy and scipy; `saber judge-check --grades`."""
import json
import math
import os
import subprocess
import sys
from itertools import combinations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from conftest import ROOT, copy_run

pytestmark = pytest.mark.pipeline
TINY = ROOT / "params" / "tiny.yaml"


def saber(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=timeout)


def plant_grades(bench: pl.DataFrame, path, n_queries=3):
    """Grades 0-100 for every candidate of the first queries (seeded), a second annotator on the first
    query, and one query graded in part (left out of every statistic)."""
    rng = np.random.default_rng(7)
    qs = sorted(bench["query_id"].unique())
    rows = []
    for k, q in enumerate(qs[:n_queries + 1]):
        cands = bench.filter(pl.col("query_id") == q)["cand_id"].to_list()
        if k == n_queries:
            cands = cands[:2]                                   # partly graded
        for c in cands:
            s = int(rng.integers(0, 101))
            rows.append({"query_id": q, "doc_id": c, "score": s, "annotator": "a1", "reason": "planted"})
            if k == 0:
                rows.append({"query_id": q, "doc_id": c, "score": min(100, s + int(rng.integers(0, 5))),
                             "annotator": "a2", "reason": "planted"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return qs[:n_queries], rows


def ndcg10(rel_in_rank_order, rel_all):
    def dcg(v):
        return sum((2 ** r - 1) / math.log2(i + 2) for i, r in enumerate(v[:10]))
    ideal = dcg(sorted(rel_all, reverse=True))
    return dcg(rel_in_rank_order) / ideal if ideal > 0 else 0.0


def test_stage_writes_grade_agreement_and_system_fidelity_equal_to_an_independent_computation(tiny_full_run, tmp_path):
    # the session's whole tiny run (its evaluate stage done), the stage under test as if it had never run
    run = copy_run(tiny_full_run[0], tmp_path / "run", without=("judge_validation",))
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    covered, rows = plant_grades(bench, tmp_path / "grades.jsonl", n_queries=4)
    r = saber("run", "judge_validation", "--params", TINY, "--run-dir", run, "--set",
              f"judge_validation.jv_grades={tmp_path / 'grades.jsonl'}", "--set", f"run.figures_dir={tmp_path / 'fig'}",
              "--set", "judge_validation.jv_n_resamples=300")
    assert r.returncode == 0, r.stdout + r.stderr
    d = run / "judge_validation"
    # --- the grades: mean per pair, covered queries only
    g = pl.DataFrame(rows).group_by("query_id", "doc_id").agg(pl.col("score").mean())
    grade = {(q, c): s for q, c, s in g.iter_rows()}
    ratings = pl.read_parquet(run / "tournament" / "ratings.parquet")
    rating = {(q, c): x for q, c, x in ratings.select("query_id", "cand_id", "rating").iter_rows()}
    # --- pairwise accuracy and Spearman of the benchmark's ratings
    right = n = 0
    rhos = []
    for q in covered:
        cands = bench.filter(pl.col("query_id") == q)["cand_id"].to_list()
        for a, b in combinations(cands, 2):
            if abs(grade[q, a] - grade[q, b]) >= 10:
                n += 1
                right += (rating[q, a] - rating[q, b]) * (grade[q, a] - grade[q, b]) > 0
        rhos.append(stats.spearmanr([rating[q, c] for c in cands], [grade[q, c] for c in cands]).statistic)
    t = pl.read_parquet(d / "grade_agreement.parquet")
    row = t.filter(pl.col("method") == "swiss ranking (the benchmark's)").row(0, named=True)
    assert row["n_pairs"] == n and row["n_queries"] == len(covered)
    assert row["spearman"] == pytest.approx(float(np.mean(rhos)))
    # the benchmark's ranking breaks equal ratings by theta: compare on the pairs without a rating tie
    assert abs(row["pairwise_accuracy"] - 100 * right / n) <= 100 * sum(
        1 for q in covered for a, b in combinations(bench.filter(pl.col("query_id") == q)["cand_id"].to_list(), 2)
        if abs(grade[q, a] - grade[q, b]) >= 10 and rating[q, a] == rating[q, b]) / n + 1e-9
    assert any(m.startswith("pairwise judge (proxy:") for m in t["method"]) and "random ranking" in t["method"].to_list()
    # --- system fidelity: nDCG@10 under the ratings and under grade / 20, the benchmark's order of candidates
    scores = pl.read_parquet(run / "evaluate" / "scores.parquet").filter(pl.col("setting") == "statement-full")
    pos = {(q, c): p for q, c, p in bench.select("query_id", "cand_id", "position").iter_rows()}
    mine, ref, per_a, per_b = {}, {}, {}, {}
    for (ret,), part in scores.group_by("retriever"):
        a, b = [], []
        for q in covered:
            p = part.filter(pl.col("query_id") == q)
            order = sorted(zip(p["cand_id"], p["score"]), key=lambda x: (-x[1], pos[q, x[0]]))
            cands = [c for c, _ in order]
            a.append(ndcg10([rating[q, c] for c in cands], [rating[q, c] for c in cands]))
            b.append(ndcg10([grade[q, c] / 20 for c in cands], [grade[q, c] / 20 for c in cands]))
        mine[ret], ref[ret] = float(np.mean(a)), float(np.mean(b))
        per_a[ret], per_b[ret] = a, b
    f = pl.read_parquet(d / "system_fidelity.parquet").filter(pl.col("setting") == "statement-full")
    got = {r["retriever"]: (r["ndcg_ratings"], r["ndcg_reference"]) for r in f.iter_rows(named=True)}
    assert set(got) == set(mine)
    for k in mine:
        assert got[k] == pytest.approx((mine[k], ref[k]))
    # each retriever's rank shift: its rank among the retrievers under the grades minus under the ratings,
    # query by query (scipy's average ranks, 1 = best), mean over queries
    names_ = sorted(per_a)
    ra = stats.rankdata(-np.array([per_a[k] for k in names_]), axis=0)
    rb = stats.rankdata(-np.array([per_b[k] for k in names_]), axis=0)
    bias = {r["retriever"]: r["rank_shift"] for r in f.iter_rows(named=True)}
    for i, k in enumerate(names_):
        assert bias[k] == pytest.approx(float(np.mean(rb[i] - ra[i])), abs=1e-12)
    summary = json.loads((d / "system_fidelity.json").read_text())
    names = sorted(mine)
    want = stats.kendalltau([mine[k] for k in names], [ref[k] for k in names]).statistic
    assert summary["kendall_tau"] == pytest.approx(want) and summary["n_systems"] == len(names)
    assert summary["n_queries"] == len(covered) and summary["setting"] == "statement-full"
    assert summary["ci_low"] <= summary["ci_high"]
    # the ceiling: the grades themselves as the tournament's judge
    assert -1 <= summary["ceiling_kendall_tau"] <= 1 and summary["ceiling_ci_low"] <= summary["ceiling_ci_high"]
    check_fidelity_limits(d, summary, names, per_b, bench, grade, covered, scores, pos)
    check_evaluate_stability(run)
    inter = pl.read_parquet(d / "grades_inter_annotator.parquet")
    assert inter.height == 1 and inter["n_docs"][0] == bench.filter(pl.col("query_id") == covered[0]).height
    man = json.loads((d / "manifest.json").read_text())
    assert man["input_hashes"]["input:judge_validation.jv_grades"]
    assert man["info"]["grades_file"]["queries_covered"] == len(covered)
    assert len(man["info"]["grades_file"]["queries_partly_graded"]) == 1
    assert (tmp_path / "fig" / "run" / "system_fidelity.png").is_file()
    # --- judge-check --grades: the same pairs, a proxy judge and the profile's judge
    out = tmp_path / "gc"
    r2 = saber("judge-check", "--params", TINY, "--run-dir", run, "--grades", tmp_path / "grades.jsonl",
               "--judge", "profile", "--judge", "first", "--out", out, "--set", f"run.figures_dir={tmp_path / 'fig'}")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    gc = pl.read_parquet(out / "grade_check.parquet")
    first = gc.filter(pl.col("judge") == "first").row(0, named=True)
    v = pl.read_parquet(out / "grade_verdicts.parquet").filter(pl.col("judge") == "first")
    assert first["pairwise_accuracy"] == pytest.approx(100 * float((v["label"] == "a").mean()))
    assert first["spearman"] is None and gc.filter(pl.col("judge") == "profile")["spearman"][0] is not None
    # --- judge-check --fidelity: the profile's judge replays the run's tournament on the graded queries,
    # so its system order and its ceiling are the stage's; another judge gives its own
    out_f = tmp_path / "gcf"
    r4 = saber("judge-check", "--params", TINY, "--run-dir", run, "--grades", tmp_path / "grades.jsonl", "--fidelity",
               "--judge", "profile", "--judge", "first", "--out", out_f, "--set", f"run.figures_dir={tmp_path / 'fig'}",
               "--set", "judge_validation.jv_n_resamples=300")
    assert r4.returncode == 0, r4.stdout + r4.stderr
    assert "fidelity_check.md" in r4.stdout
    fc = {r["judge"]: r for r in pl.read_parquet(out_f / "fidelity_check.parquet").iter_rows(named=True)}
    assert list(fc) == ["profile", "first", "the grades themselves (ceiling)"]
    # every row names what answered: the profile's proxy scorer, the floor, the grades
    assert fc["profile"]["detail"] == "proxy:use-m-cosine" and fc["first"]["detail"] == "always the candidate shown first"
    assert "Judges: profile = proxy:use-m-cosine; first = " in (out_f / "fidelity_check.md").read_text()
    for key in ("kendall_tau", "ci_low", "ci_high", "spearman"):
        assert fc["profile"][key] == pytest.approx(summary[key])
    for key in ("kendall_tau", "ci_low", "ci_high"):
        assert fc["the grades themselves (ceiling)"][key] == pytest.approx(summary[f"ceiling_{key}"])
    assert fc["profile"]["favoured"] == ", ".join(summary["favoured"])
    fs = pl.read_parquet(out_f / "fidelity_systems.parquet").filter(pl.col("setting") == "statement-full")
    prof = {r["retriever"]: (r["ndcg_ratings"], r["ndcg_reference"], r["rank_shift"])
            for r in fs.filter(pl.col("judge") == "profile").iter_rows(named=True)}
    assert set(prof) == set(mine)
    for k in mine:
        assert prof[k] == pytest.approx((mine[k], ref[k], bias[k]))
    # "first" prefers the candidate shown first (a seeded coin flip per pair): its own ratings, the same grades
    firsts = {r["retriever"]: r for r in fs.filter(pl.col("judge") == "first").iter_rows(named=True)}
    assert {k: v["ndcg_reference"] for k, v in firsts.items()} == pytest.approx(ref)
    assert {k: v["ndcg_ratings"] for k, v in firsts.items()} != pytest.approx(mine)
    # --fidelity needs graded labels: one line, nothing written
    r5 = saber("judge-check", "--params", TINY, "--run-dir", run, "--reference", tmp_path / "grades.jsonl", "--fidelity",
               "--judge", "first", "--out", tmp_path / "gcf_bad")
    assert r5.returncode == 2 and "--fidelity" in r5.stderr and not (tmp_path / "gcf_bad").exists()
    # a bad grades file is one line naming file and line, and writes nothing
    (tmp_path / "bad.jsonl").write_text(json.dumps({"query_id": "q", "doc_id": "d", "score": 140}) + "\n")
    r3 = saber("judge-check", "--params", TINY, "--run-dir", run, "--grades", tmp_path / "bad.jsonl",
               "--judge", "first", "--out", tmp_path / "gc_bad", "--set", f"run.figures_dir={tmp_path / 'fig'}")
    assert r3.returncode == 2 and len(r3.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'bad.jsonl'}, line 1: score 140 is outside [0, 100]" in r3.stderr
    assert not (tmp_path / "gc_bad").exists()


def split_taus(M, n):
    """scipy's tau of the two halves' means over every ordered pair of disjoint halves of size n."""
    Q = M.shape[1]
    out = []
    for a in combinations(range(Q), n):
        rest = [q for q in range(Q) if q not in a]
        for b in combinations(rest, n):
            out.append(stats.kendalltau(M[:, list(a)].mean(1), M[:, list(b)].mean(1)).statistic)
    return np.array(out)


def check_fidelity_limits(d, summary, names, per_b, bench, grade, covered, scores, pos):
    """noise_floor.json and ceiling_design.parquet recomputed from the run's own files."""
    floor = json.loads((d / "noise_floor.json").read_text())
    B = np.array([per_b[k] for k in names])                      # retrievers x graded queries, under the grades
    assert floor["n_queries"] == len(covered) == 4 and [m["n"] for m in floor["measured"]] == [1, 2]
    for m in floor["measured"]:
        want = np.nanmean(split_taus(B, m["n"]))
        assert m["tau_mean"] == pytest.approx(want, abs=0.05)   # 2,000 seeded splits vs every split
    x = [(m["n"], m["tau_mean"]) for m in floor["measured"] if m["tau_mean"] is not None and 0 < m["tau_mean"] < 1]
    if len(x) == 2:                                              # 1 - tau = a n^-b through the two points, at n = 4
        (n1, t1), (n2, t2) = x
        b = -math.log((1 - t2) / (1 - t1)) / math.log(n2 / n1)
        assert floor["tau"] == pytest.approx(1 - (1 - t1) * (4 / n1) ** -b) and floor["extrapolated"] is True
        judge = summary["ci_high"] < floor["tau"]
        assert floor["limiting_factor"] == ("judge" if judge else "queries")
    else:
        assert floor["tau"] is None and floor["limiting_factor"] == "undetermined"
    assert floor["fidelity_tau"] == summary["kendall_tau"]
    cd = pl.read_parquet(d / "ceiling_design.parquet")
    assert cd.columns[:6] == ["rescaling", "schedule", "rounds", "judgments", "ceiling_tau", "ci_low"] and "ci_high" in cd.columns
    # tiny grid: rounds [4, 0] x [min-max, theta, [0,5] linear], and the grades without a tournament (no theta)
    assert cd.height == 2 * 3 + 2
    bench_row = cd.filter((pl.col("rescaling") == "min-max") & (pl.col("schedule") == "swiss")).row(0, named=True)
    assert bench_row["rounds"] == 4                              # the run's own design: the stage's ceiling
    for key in ("kendall_tau", "ci_low", "ci_high"):
        assert bench_row[{"kendall_tau": "ceiling_tau"}.get(key, key)] == pytest.approx(summary[f"ceiling_{key}"])
    ex = cd.filter((pl.col("rescaling") == "min-max") & (pl.col("schedule") == "exhaustive")).row(0, named=True)
    sizes = [bench.filter(pl.col("query_id") == q).height for q in covered]
    assert ex["judgments"] == sum(n * (n - 1) // 2 for n in sizes)
    # the grades themselves, min-max per query onto [0, 5], through the exponential gain
    want = {}
    for (ret,), part in scores.group_by("retriever"):
        vals = []
        for q in covered:
            p = part.filter(pl.col("query_id") == q)
            order = [c for c, _ in sorted(zip(p["cand_id"], p["score"]), key=lambda x: (-x[1], pos[q, x[0]]))]
            g = {c: grade[q, c] for c in order}
            lo, hi = min(g.values()), max(g.values())
            r = {c: 5 * (v - lo) / (hi - lo) for c, v in g.items()}
            vals.append(ndcg10([r[c] for c in order], list(r.values())))
        want[ret] = float(np.mean(vals))
    ref_means = B.mean(axis=1)
    tau = stats.kendalltau([want[k] for k in names], ref_means).statistic
    g_row = cd.filter((pl.col("rescaling") == "min-max") & (pl.col("schedule") == "none")).row(0, named=True)
    assert g_row["ceiling_tau"] == pytest.approx(tau) and g_row["judgments"] == 0
    assert (d.parent / "judge_validation" / "ceiling_design.parquet").is_file()


def check_evaluate_stability(run):
    """evaluate/stability.parquet: the split-half tau of the run's own retrievers by scipy."""
    ndcg = pl.read_parquet(run / "evaluate" / "ndcg.parquet")
    st = pl.read_parquet(run / "evaluate" / "stability.parquet")
    for c in ["setting", "n", "tau_mean", "tau_median", "tau_p5", "swap_rate", "discriminative_power",
              "discriminative_power_holm", "n_systems", "n_splits"]:
        assert c in st.columns
    for (setting,), part in ndcg.group_by("setting"):
        wide = part.pivot(on="query_id", index="retriever", values="ndcg").sort("retriever")
        M = wide.drop("retriever").to_numpy()
        rows = st.filter(pl.col("setting") == setting).sort("n")
        assert rows["n"].max() == M.shape[1] // 2 and (rows["n_systems"] == M.shape[0]).all()
        for r in rows.iter_rows(named=True):
            taus = split_taus(M, r["n"])
            assert r["tau_mean"] == pytest.approx(np.nanmean(taus), abs=0.05)
            assert r["n_splits"] == 2000
            # one query: the sign-flip test cannot separate any pair
            if r["n"] == 1:
                assert r["discriminative_power"] == 0.0
    needed = pl.read_parquet(run / "evaluate" / "stability_needed.parquet")
    assert set(needed["statistic"]) == {"tau_median", "tau_p5", "tau_mean"}
