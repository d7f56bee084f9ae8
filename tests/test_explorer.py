"""The threshold explorer (05_thresholds): its counts, read-out, figure, and the profile it writes."""
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from saber_lib.core import config
from saber_lib.pipeline import cli, runner
from saber_lib.pipeline.stages import BY_NAME
from saber_lib.signals import SignalStore, bin_edges, pairs, thresholds
from saber_lib.signals.explorer import ExplorerModel, write_threshold_profile
from saber_lib.core.config_types import ProfileError
from saber_lib.signals.store import store_from_dense

ROOT = Path(__file__).resolve().parent.parent
DOMS = ["Algebra", "Geometry"]
B = 20


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("explorer")
    rng = np.random.default_rng(3)
    n = 90
    t = rng.beta(2, 3, (n, n)); s = rng.beta(1, 4, (n, n))
    t = (t + t.T) / 2; s = (s + s.T) / 2
    store_from_dense(t, s, d / "signals", [f"d{i}" for i in range(n)], hist_bins=B, floor_topic=0.3,
                           floor_summ=0.1)
    store = SignalStore.open(d / "signals")
    qd = [[DOMS[k] for k in range(2) if rng.random() < 0.6] for _ in range(n)]
    usable = rng.random(n) < 0.9
    sw = thresholds.sweep(store, qd, DOMS, k_values=[4], usable=usable)
    model = ExplorerModel(store, qd, DOMS, sw, usable=usable, floor_topic=0.3, floor_summ=0.1)
    return store, qd, usable, sw, model, d


def test_counts_and_eligible_match_the_sweep_and_the_reference(setup):
    store, qd, usable, sw, model, _ = setup
    ref = thresholds.HistogramExplorer(store, qd, DOMS, usable=usable)
    k = sw.k_index(4)
    for i in range(0, B + 1, 2):
        for j in range(0, B + 1, 3):
            assert np.array_equal(model.counts(i, j), ref.counts(i, j))
            st = model.state(model.edges[i], model.edges[j], 4, 3)
            assert [st.eligible[d] for d in DOMS] == sw.eligible[k, :, i, j].tolist()
            assert st.table["eligible"].to_list() == ref.domain_table(i, j, 4, 3)["eligible"].to_list()


def test_rule_read_out_names_the_rules_that_pick_the_point(setup):
    _, _, _, sw, model, _ = setup
    for rule in ("paper", "strictest", "quantile"):
        res = thresholds.find_thresholds(sw, K=4, Q_min=3, rule=rule, floor_topic=0.3, floor_summ=0.1)
        st = model.state(res["tau_topic"], res["tau_summ"], 4, 3)
        assert rule in st.rules and rule in st.rule_text()
    st = model.state(1.0, 1.0, 4, 3)
    assert st.rules == [] and "fixed" in st.rule_text() and not st.feasible and st.short == DOMS


def test_written_profile_validates_and_runs_with_the_fixed_thresholds(tmp_path):
    parent = ROOT / "params" / "tiny.yaml"
    p = write_threshold_profile(parent, "picked", tau_topic=0.85, tau_summ=0.2, K=3, Q_min=2, out_dir=tmp_path)
    assert p == tmp_path / "picked.yaml"
    data = yaml.safe_load(p.read_text())
    assert (tmp_path / data["inherit"]).resolve() == parent.resolve()
    assert data["thresholds"] == {"threshold_rule": "fixed", "tau_topic": 0.85, "tau_summ": 0.2, "K": 3, "Q_min": 2}
    assert cli.main(["validate", str(p)]) == 0                     # `saber validate`
    prof = config.load_profile(p)
    params = runner.stage_parameters(runner.RunContext(prof, tmp_path / "run"), BY_NAME["thresholds"])
    assert (params["threshold_rule"], params["tau_topic"], params["tau_summ"], params["K"]) == ("fixed", 0.85, 0.2, 3)
    # everything else is the parent's, so upstream stages of an existing run stay up to date
    tiny = config.load_profile(parent)
    for stage in ("corpus", "topics", "signals"):
        assert (runner.param_hash(runner.RunContext(prof, tmp_path), BY_NAME[stage])
                == runner.param_hash(runner.RunContext(tiny, tmp_path), BY_NAME[stage]))
    with pytest.raises(FileExistsError):
        write_threshold_profile(parent, "picked", tau_topic=0.5, tau_summ=0.2, out_dir=tmp_path)
    write_threshold_profile(parent, "picked", tau_topic=0.5, tau_summ=0.2, out_dir=tmp_path, overwrite=True)
    assert yaml.safe_load(p.read_text())["thresholds"]["tau_topic"] == 0.5
    with pytest.raises(ValueError):
        write_threshold_profile(parent, "../evil", tau_topic=0.5, tau_summ=0.2, out_dir=tmp_path)
    with pytest.raises(ValueError):
        write_threshold_profile(parent, "tiny", tau_topic=0.5, tau_summ=0.2)   # the parent itself
    with pytest.raises(ProfileError):                                   # out of range: nothing left behind
        write_threshold_profile(parent, "bad", tau_topic=1.5, tau_summ=0.2, out_dir=tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir() if x.is_file()) == ["picked.yaml"]


def test_widget_updates_figure_table_and_writes_the_profile(setup, tmp_path):
    from saber_lib.signals.explorer_ui import ThresholdExplorer

    *_, model, _ = setup
    ex = ThresholdExplorer(model, tau_topic=0.5, tau_summ=0.2, K=4, Q_min=3, profile=ROOT / "params" / "tiny.yaml",
                           run_name="t")
    img, table, read = ex.image.value, ex.table.value, ex.readout.value
    assert img[:2] == b"\xff\xd8" and "Algebra" in table
    ex.s_topic.value = 0.7
    assert ex.image.value != img and ex.table.value != table and ex.readout.value != read
    img = ex.image.value
    ex.s_k.value = ex.s_k.options[0]
    assert ex.image.value != img and ex.last_update_ms > 0
    ex.folder.value = str(tmp_path)
    ex.name.value = "mine"
    ex.button.click()
    assert ex.last_profile == tmp_path / "mine.yaml"
    v = config.load_profile(ex.last_profile).values["thresholds"]
    assert (v["threshold_rule"], v["tau_topic"], v["K"]) == ("fixed", 0.7, ex.s_k.options[0])
    ex.button.click()                                      # exists: asks first
    assert "click again" in ex.save_status.value
    ex.button.click()
    assert "wrote" in ex.save_status.value
    assert bin_edges(B)[model.index(0.7)] == pytest.approx(0.7)


@pytest.mark.pipeline
def test_the_thresholds_stage_runs_with_the_written_profile(setup, tmp_path):
    """`saber run thresholds --params <written profile>`: the stage notebook (explorer included) on a
    synthetic run (signals store + topics + summaries), with the fixed thresholds in its artifact."""
    store, qd, usable, *_, d = setup
    run_dir = tmp_path / "run"
    shutil.copytree(d / "signals", run_dir / "signals")
    ids = list(store.doc_ids)
    (run_dir / "topics").mkdir()
    pl.DataFrame({"doc_id": ids, "node_ids": [[1]] * len(ids), "urls": [["u"]] * len(ids), "domains": qd,
                  "failed": [False] * len(ids)}).write_parquet(run_dir / "topics" / "topics.parquet")
    (run_dir / "summaries").mkdir()
    pl.DataFrame({"doc_id": ids, "failed": [False] * len(ids), "no_core_idea": [False] * len(ids),
                  "summary_text": ["idea"] * len(ids)}).write_parquet(run_dir / "summaries" / "summaries.parquet")
    p = write_threshold_profile(ROOT / "params" / "tiny.yaml", "picked", tau_topic=0.6, tau_summ=0.2, K=3, Q_min=1,
                                out_dir=tmp_path)
    prof = config.load_profile(p, {"run.figures_dir": str(tmp_path / "figures"), "run.cache_dir": str(tmp_path / "cache")})
    man = runner.execute_stage(runner.RunContext(prof, run_dir), BY_NAME["thresholds"], log=lambda *a: None)
    res = json.loads((run_dir / "thresholds" / "thresholds.json").read_text())
    assert (res["rule"], res["tau_topic"], res["tau_summ"], res["K"]) == ("fixed", 0.6, 0.2, 3)
    assert man["profile"] == str(p) and man["info"]["rule"] == "fixed"


def test_the_maps_use_a_log_scale_grey_zeros_and_a_zoom_on_the_point(setup):
    from matplotlib.colors import LogNorm

    from saber_lib.signals.explorer_ui import ThresholdExplorer
    from saber_lib.signals.threshold_report import window_cells

    *_, sw, model, _ = setup
    ex = ThresholdExplorer(model, tau_topic=0.5, tau_summ=0.2, K=4, Q_min=3)
    fig, E = ex.figure, sw.eligible[sw.k_index(4)]
    im, ax = fig._images[0], fig.axes[0]
    assert isinstance(im.norm, LogNorm) and (im.norm.vmin, im.norm.vmax) == (1, max(2, E.max()))
    arr = im.get_array()
    assert np.array_equal(arr.data, E[0].T) and np.array_equal(np.ma.getmaskarray(arr), E[0].T == 0)
    assert ax.get_xlim() == pytest.approx((0.3, 1.0)) and ax.get_ylim() == pytest.approx((0.1, 1.0))   # the floors
    st = ex.state()
    assert [t.get_text() for t in fig.counts] == [str(st.eligible[d]) for d in DOMS]
    full = ex.image.value
    ex.zoom.value = True
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    assert x0 <= st.tau_topic <= x1 and y0 <= st.tau_summ <= y1 and x1 - x0 < 0.7 and ex.image.value != full
    cols, rows = window_cells(model.edges, (x0, x1, y0, y1))
    assert im.norm.vmax == max(2, E[:, cols][:, :, rows].max())          # the window's own scale
    ex.zoom.value = False
    assert ax.get_xlim() == pytest.approx((0.3, 1.0))
