"""`saber leaderboard --stability` on a small published folder written in the authors' layout: the
split-half tau against scipy over every possible split, the discriminative power at all queries
against a hand-written exact randomization test, the figure, the manifest and the option checks."""
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from saber_lib.leaderboard import published as pub

ROOT = Path(__file__).resolve().parent.parent
DOMS = ["Algebra", "Geometry"]


def cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "saber_lib.leaderboard.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def published_folder(tmp_path, n_systems=4, n_queries=12, seed=0):
    """``n_systems`` evaluation files with per-query nDCG in the three settings; query 0 of system 0
    left unscored in statement-full (so that setting keeps ``n_queries - 1`` queries)."""
    rng = np.random.default_rng(seed)
    domains = [[DOMS[q % 2]] for q in range(n_queries)]
    X = {}
    for i in range(n_systems):
        scores = {t: np.clip(rng.random(n_queries) * 0.6 + 0.1 * i, 0, 1) for t in pub.TASKS}
        if i == 0:
            scores["statement-full"][0] = np.nan
        X[f"sys{i}"] = scores
        s = pub.System(name=f"sys{i}", source="", query_ids=[str(q) for q in range(n_queries)], domains=domains,
                       scores=scores)
        pub.write_evaluation_file(tmp_path / "published" / "evaluation" / f"sys{i}__p0.json", s)
    return tmp_path / "published", X


def exact_p(d):
    obs = abs(np.mean(d))
    return np.mean([abs(np.mean(np.array(s) * d)) >= obs - 1e-12 for s in itertools.product((1, -1), repeat=len(d))])


@pytest.mark.pipeline
def test_stability_files_agree_with_scipy_over_every_split_and_an_exact_randomization_test(tmp_path):
    folder, X = published_folder(tmp_path)
    out = tmp_path / "out"
    r = cli("--published", folder, "--stability", "--stability-splits", 3000, "--stability-subsets", 20,
            "--stability-permutations", 5000, "--n-resamples", 200, "--seed", 4, "--out", out)
    assert r.returncode == 0, r.stderr
    st = pl.read_parquet(out / "stability.parquet")
    for c in ["setting", "n", "tau_mean", "tau_median", "tau_p5", "swap_rate", "discriminative_power",
              "discriminative_power_holm", "n_systems", "n_splits"]:
        assert c in st.columns
    assert set(st["setting"]) == set(pub.TASKS) and (st["n_systems"] == 4).all()
    sf = st.filter(pl.col("setting") == "statement-full")
    M = np.vstack([X[f"sys{i}"]["statement-full"] for i in range(4)])[:, 1:]     # query 0 is unscored by sys0
    assert sf["n_queries"].unique().to_list() == [11]
    assert sf["n"].to_list() == [1, 2, 3, 5, 11]            # half of 11 queries is 5; all 11 for the power
    # mean split-half tau at n = 5 against scipy over every ordered pair of disjoint halves
    taus = []
    for a in itertools.combinations(range(11), 5):
        rest = [q for q in range(11) if q not in a]
        for b in itertools.combinations(rest, 5):
            taus.append(stats.kendalltau(M[:, list(a)].mean(1), M[:, list(b)].mean(1)).statistic)
    row = sf.filter(pl.col("n") == 5).row(0, named=True)
    assert row["tau_mean"] == pytest.approx(np.mean(taus), abs=0.03) and row["n_splits"] == 3000
    # discriminative power on all 11 queries: the exact test (2^11 <= 5000 patterns) by hand
    p = [exact_p(M[i] - M[j]) for i, j in itertools.combinations(range(4), 2)]
    row = sf.filter(pl.col("n") == 11).row(0, named=True)
    assert row["discriminative_power"] == pytest.approx(np.mean(np.array(p) < 0.05))
    assert row["n_splits"] == 0 and np.isnan(row["tau_mean"])
    needed = pl.read_parquet(out / "stability_needed.parquet")
    assert set(needed["statistic"]) == {"tau_median", "tau_p5", "tau_mean"} and needed.height == 9
    swaps = pl.read_parquet(out / "stability_swaps.parquet")
    tot = swaps.filter((pl.col("setting") == "statement-full") & (pl.col("n") == 5))
    assert tot["pairs"].sum() == 3000 * 6
    assert tot["swaps"].sum() / tot["pairs"].sum() == pytest.approx(sf.filter(pl.col("n") == 5)["swap_rate"][0])
    for t in pub.TASKS:
        assert (out / f"stability_{t}.png").stat().st_size > 0 and (out / f"stability_{t}.pdf").is_file()
    man = json.loads((out / "manifest.json").read_text())
    assert {"stability.parquet", "stability_needed.parquet", "stability.md"} <= set(man["files"])
    assert set(man["stability_needed"]) == set(pub.TASKS)
    assert "stability statement-full:" in r.stdout
    # the same seed: the same table
    out2 = tmp_path / "out2"
    r2 = cli("--published", folder, "--stability", "--stability-splits", 3000, "--stability-subsets", 20,
             "--stability-permutations", 5000, "--n-resamples", 200, "--seed", 4, "--out", out2)
    assert r2.returncode == 0, r2.stderr
    assert pl.read_parquet(out2 / "stability.parquet").equals(st)


def test_stability_options_are_checked(tmp_path):
    folder, _ = published_folder(tmp_path, n_queries=6)
    r = cli("--published", folder, "--stability", "--stability-splits", 0, "--out", tmp_path / "o")
    assert r.returncode == 2 and "--stability-splits must be >= 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("--published", folder, "--stability", "--stability-target", 1.0, "--out", tmp_path / "o")
    assert r.returncode == 2 and "--stability-target" in r.stderr
