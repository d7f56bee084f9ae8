"""Fault cases with hostile or unlucky input files: the threshold explorer saving over a profile that
others rely on, a YAML alias bomb, out-of-range counts, a selection with no query, two run files
with one name, a published domain without a scored query, a damaged stored tournament round.

Old behaviour is given per test. Profiles are real files in a temporary folder (copies of the
project's profiles); stores and result files are built small by hand.
"""
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.core import config as cfg
from saber_lib.pipeline.runner import load_run_profile
from saber_lib.judging.tournament import JudgmentStore
from saber_lib.leaderboard import published as pub
from saber_lib.selection import benchmark
from saber_lib.signals import SignalStore, pairs
from saber_lib.signals import explorer
from test_profile_faults import _error   # one line naming the file and key (tests/faults)
from saber_lib.signals.store import store_from_dense

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "params"


@pytest.fixture
def profiles(tmp_path):
    """Copies of the shipped profiles (paper <- demo <- tiny, ...) in a folder of their own."""
    d = tmp_path / "params"
    d.mkdir()
    for p in PARAMS.glob("*.yaml"):
        shutil.copy(p, d / p.name)
    return d


def _point(**kw):
    return {"tau_topic": 0.5, "tau_summ": 0.25, "K": 2, "Q_min": 1, **kw}


# --------------------------------------------------------------------------- the explorer's save
def test_saving_over_a_profile_in_the_parents_chain_is_refused(profiles):
    # old: "Save as profile" named `paper` on a run of tiny, second click (overwrite=True), replaced
    # paper.yaml by `inherit: tiny.yaml`: every profile then failed with an inherit cycle
    before = (profiles / "paper.yaml").read_bytes()
    with pytest.raises(ValueError, match="inherit cycle") as e:
        explorer.write_threshold_profile(profiles / "tiny.yaml", "paper", overwrite=True, **_point())
    assert str(profiles / "paper.yaml") in str(e.value)
    assert (profiles / "paper.yaml").read_bytes() == before
    assert not list(profiles.glob("*.tmp*"))
    for name in ("paper", "demo", "tiny", "cluster", "released"):
        cfg.load_profile(profiles / f"{name}.yaml")   # every profile still loads


def test_saving_over_a_profile_another_inherits_from_is_refused(profiles):
    # old: overwritten; mine.yaml then inherited the threshold override instead of paper.yaml
    base = profiles / "base.yaml"
    base.write_text("inherit: paper.yaml\nselect:\n  n_queries: 7\n")
    (profiles / "mine.yaml").write_text("inherit: base.yaml\n")
    before = base.read_bytes()
    with pytest.raises(ValueError, match="inherited by") as e:
        explorer.write_threshold_profile(profiles / "demo.yaml", "base", overwrite=True, **_point())
    assert str(profiles / "mine.yaml") in str(e.value) and str(base) in str(e.value)
    assert base.read_bytes() == before
    # a profile nobody inherits is still overwritten on the second click, as before
    p = explorer.write_threshold_profile(profiles / "demo.yaml", "free", **_point())
    assert explorer.write_threshold_profile(profiles / "demo.yaml", "free", overwrite=True,
                                            **_point(K=3)) == p
    assert cfg.load_profile(p).values["thresholds"]["K"] == 3


def test_saving_over_a_shipped_profile_is_refused():
    # old: released.yaml (inherited by nothing) in the project's params/ was overwritten
    target = PARAMS / "released.yaml"
    before = target.read_bytes()
    try:
        with pytest.raises(ValueError, match="shipped profiles"):
            explorer.write_threshold_profile(PARAMS / "tiny.yaml", "released", overwrite=True, **_point())
    finally:
        if target.read_bytes() != before:   # old code: put the project's file back
            target.write_bytes(before)
    assert target.read_bytes() == before


def test_shipped_profile_list_is_the_projects_params_folder():
    r = subprocess.run(["git", "ls-files", "params"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip("not a git checkout")
    tracked = {Path(line).stem for line in r.stdout.split() if line.endswith(".yaml")}
    assert tracked == set(explorer.SHIPPED_PROFILES)
    assert explorer.PROJECT_PARAMS == PARAMS


# --------------------------------------------------------------------------- YAML alias bomb
def _bomb(levels=9, width=9) -> str:
    lines = ["llm:", "  engine_kwargs:", "    l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "inherit: paper.yaml\n" + "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_when_the_profile_is_read(profiles):
    # old: passed `saber validate`; `saber status` hashed the llm section and died with MemoryError
    bomb = profiles / "bomb.yaml"
    bomb.write_text(_bomb())
    assert len(bomb.read_bytes()) < 600      # 9 ** 9 = 387 million strings from a few hundred bytes
    msg = _error(bomb)
    assert str(bomb) in msg and "alias" in msg
    r = subprocess.run([*_saber(), "validate", str(bomb)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and str(bomb) in r.stderr and "MemoryError" not in r.stderr


def test_oversized_profile_is_refused_and_small_aliases_still_load(profiles):
    big = profiles / "big.yaml"
    big.write_text("inherit: paper.yaml\n" + "# padding\n" * 120_000)
    msg = _error(big)
    assert str(big) in msg and "bytes" in msg
    ok = profiles / "ok.yaml"   # a modest use of anchors and merges is fine
    ok.write_text("inherit: paper.yaml\nllm:\n  engine_kwargs:\n    base: &b {a: 1, b: [1, 2]}\n"
                  "    more: {<<: *b, c: 3}\n    again: *b\n")
    kw = cfg.load_profile(ok).values["llm"]["engine_kwargs"]
    assert kw["more"] == {"a": 1, "b": [1, 2], "c": 3} and kw["again"] == {"a": 1, "b": [1, 2]}


def _saber():
    import sys

    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from saber_lib.pipeline.cli import main; raise SystemExit(main())"]


# --------------------------------------------------------------------------- ranges
@pytest.mark.parametrize("key,value", [("thresholds.K", 10**23), ("thresholds.Q_min", 2**31),
                                       ("select.n_queries", 10**19)])
def test_huge_counts_are_refused_at_load(profiles, key, value):
    # old: validated, then OverflowError inside the thresholds / select stage
    sec, name = key.split(".")
    child = profiles / "huge.yaml"
    child.write_text(f"inherit: paper.yaml\n{sec}:\n  {name}: {value}\n")
    msg = _error(child)
    assert str(child) in msg and key in msg and "above the maximum" in msg
    assert key in _error(profiles / "paper.yaml", {key: value})


def test_selection_with_no_eligible_query_names_the_thresholds_and_the_explorer(tmp_path):
    # old: an empty benchmark, `select` done with 0 queries, then ZeroDivisionError in the tournament
    n = 8   # queries 0, 1; candidates 2..7, two per group for each query
    t, s = np.zeros((n, n)), np.zeros((n, n))
    for q in (0, 1):
        for c, (a, b) in zip(range(2, 8), [(0.9, 0.1)] * 2 + [(0.1, 0.9)] * 2 + [(0.9, 0.9)] * 2):
            t[q, c], s[q, c] = a, b
    store_from_dense(t, s, tmp_path / "s", [f"d{i}" for i in range(n)], hist_bins=10,
                           floor_topic=0.0, floor_summ=0.0)
    store = SignalStore.open(tmp_path / "s")
    qd = [["Algebra"], ["Geometry"]] + [[]] * 6
    kw = dict(tau_topic=0.5, tau_summ=0.5, n_queries=2, domains=["Algebra", "Geometry"], seed=0)
    df, _ = benchmark.select_benchmark(store, qd, K=2, **kw)
    assert df["query_id"].n_unique() == 2 and len(df) == 12      # the same store selects with K = 2
    with pytest.raises(ValueError) as e:
        benchmark.select_benchmark(store, qd, K=3, **kw)
    msg = str(e.value)
    assert "no query is eligible" in msg and "tau_topic=0.5" in msg and "K=3" in msg
    assert "thresholds.K" in msg and "05_thresholds" in msg and "make lab" in msg


# --------------------------------------------------------------------------- names and files
def test_two_run_files_with_one_file_name_are_refused_naming_both(profiles, tmp_path):
    # old: loaded; evaluate then failed with "candidates scored twice, e.g. [('run:sys', ...)]"
    a, b = tmp_path / "a" / "sys.trec", tmp_path / "b" / "sys.trec"
    msg = _error(profiles / "paper.yaml", {"evaluate.retrievers": ["bm25", f"run:{a}", f"run:{b}"]})
    assert str(a) in msg and str(b) in msg and "evaluate.retrievers" in msg and "'sys'" in msg
    load_run_profile(profiles / "paper.yaml", {"evaluate.retrievers": [f"run:{a}", f"run:{tmp_path}/c.trec"]})


def test_published_domain_without_a_scored_query_is_named(tmp_path):
    # old: "field 'reports.sys.tasks': sys/statement-full/Number Theory: stored 0.0, recomputed nan"
    domains = [["Algebra"], ["Geometry", "Algebra"], ["Geometry"], ["Number Theory"]]
    rec = pub.evaluation_record("sys", {"statement-full": [0.5, 0.75, 0.25, np.nan]}, domains)
    for br in rec["reports"]["sys"]["tasks"][0]["branches"]:
        if br["branch"] == "Number Theory":
            br["ndcg_at_k"] = 0.0     # a number (NaN JSON is a question of its own)
    f = tmp_path / "evaluation" / "sys__p0.json"
    f.parent.mkdir()
    f.write_text(json.dumps(rec))
    with pytest.raises(pub.LayoutError) as e:
        pub.read_published_dir(tmp_path)
    msg = str(e.value)
    assert str(f) in msg and "no query of domain 'Number Theory' has a score" in msg and "recomputed" not in msg


def test_damaged_tournament_round_names_the_file_and_how_to_recover(tmp_path):
    # old: polars' "parquet: File out of specification" (or similar) without the file's name
    store = JudgmentStore(tmp_path / "rounds", {"schedule": "swiss"})
    row = pl.DataFrame({"query_id": ["q"], "round": [0], "a": ["x"], "b": ["y"], "outcome": ["a"]})
    store.append(0, row)
    store.append(1, row.with_columns(pl.col("round") + 1))
    assert len(store.load()) == 2
    damaged = tmp_path / "rounds" / "round_0001.parquet"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2:] = b"\0" * (len(data) - len(data) // 2)
    damaged.write_bytes(bytes(data))
    with pytest.raises(ValueError) as e:
        store.load()
    msg = str(e.value)
    assert str(damaged) in msg and "damaged" in msg and "--force" in msg and "remove" in msg
