"""The corpus stage's recipes (saber_lib.corpus.stage) on hand-made frames."""
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest

from saber_lib.core.config import DOMAINS
from saber_lib.corpus import stage

PARAMS = dict(sources=["aime", "math"], max_records_per_source=3, shingle_size=5, minhash_bands=14, minhash_rows=8,
              minhash_seed=1, near_dup_threshold=0.5, near_dup_number_check=True, allow_empty_sources=False,
              run_dir="runs/x", seed=7)


def test_build_params_take_the_corpus_keys_only():
    got = stage.build_params(PARAMS)
    assert set(got) == set(stage.BUILD_KEYS) and got["minhash_rows"] == 8 and "run_dir" not in got
    with pytest.raises(KeyError):
        stage.build_params({"sources": ["aime"]})


def test_dedup_backend_names_shape_shingles_threshold_and_check():
    line = stage.dedup_backend(PARAMS)
    assert line.endswith("(14x8, word 5-grams, J>=0.5, number check)")
    assert stage.dedup_backend({**PARAMS, "near_dup_number_check": False}).endswith("(14x8, word 5-grams, J>=0.5)")


def test_manifest_record_rounds_timings_and_keeps_installed_packages():
    result = SimpleNamespace(report={"total": {"raw": 10, "kept": 7}}, timings={"load": 1.23456, "dedup": 0.0004})
    rec = stage.manifest_record(result, "minhash", 2.71828)
    assert rec["backend"] == "minhash" and rec["counts"] == {"raw": 10, "kept": 7}
    assert rec["timings_s"] == {"load": 1.235, "dedup": 0.0, "build_corpus_s": 2.718}
    assert "polars" in rec["packages"] and None not in rec["packages"].values()


def test_present_sources_keep_profile_order():
    lengths = pl.DataFrame({"source": ["math", "aime", "math"]})
    assert stage.present_sources(lengths, ["champ", "aime", "math"]) == ["aime", "math"]


def test_domain_shares_by_hand():
    dom = pl.DataFrame({"source": ["a", "b"], **{d: [0, 0] for d in DOMAINS}, "unmapped": [1, 0]})
    dom = dom.with_columns(pl.Series("Algebra", [3, 0]))
    names, shares = stage.source_domain_shares(dom, DOMAINS)
    assert names == ["a (4)", "b (0)"]
    assert shares["Algebra"].tolist() == [0.75, 0.0] and shares["unmapped"].tolist() == [0.25, 0.0]
    assert list(shares) == list(DOMAINS) + ["unmapped"]
    fig = stage.domain_share_figure(dom, DOMAINS)
    widths = sorted(round(p.get_width(), 6) for p in fig.axes[0].patches if p.get_width() > 0)
    assert widths == [0.25, 0.75]
    plt.close(fig)


def test_figures_draw_the_counts():
    log = pl.DataFrame({"rule": ["near-cross-source", "exact-within-source", "near-cross-source"],
                        "similarity": [0.6, 1.0, 0.9]})
    fig = stage.near_duplicate_figure(log, 0.5)
    assert sum(p.get_height() for p in fig.axes[0].patches) == 2      # exact duplicates not drawn
    plt.close(fig)
    subj = pl.DataFrame({"source": ["aime", "math"], "subject": ["Algebra", "Geometry"], "n": [5, 2]})
    fig = stage.subjects_figure(subj)
    assert [p.get_width() for p in fig.axes[0].patches] == [5, 2]
    plt.close(fig)
    lengths = pl.DataFrame({"source": ["aime", "math"], "problem_chars": [10, 0], "solution_chars": [100, 5]})
    fig = stage.lengths_figure(lengths, ["aime", "math"])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["aime", "math"]
    drawn = np.concatenate([line.get_xdata() for line in fig.axes[0].lines])
    assert drawn.min() == 1 and drawn.max() == 10   # a zero length is drawn at 1 (log scale)
    plt.close(fig)


def test_run_build_sends_the_signatures_to_the_pool_only_with_dask(monkeypatch):
    calls, opened = [], []

    class Pool:
        def __enter__(self):
            opened.append("enter")
            return "the pool"

        def __exit__(self, *exc):
            opened.append("exit")

    monkeypatch.setattr(stage, "build_corpus", lambda data_dir, params, **kw: calls.append((data_dir, params, kw)) or "built")
    monkeypatch.setattr(stage, "make_executor", lambda *args: opened.append(args) or Pool())
    result, wall = stage.run_build("/data", PARAMS)
    assert result == "built" and wall >= 0 and opened == []
    assert calls[-1] == ("/data", stage.build_params(PARAMS), {})
    stage.run_build("/data", PARAMS, "dask", 4, "tcp://s:8786", 2)
    assert opened == [("dask", 4, "tcp://s:8786", 2), "enter", "exit"]
    assert calls[-1][2] == {"executor": "the pool"}
