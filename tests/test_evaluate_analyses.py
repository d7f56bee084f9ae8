"""The evaluate stage's further analyses: rescaling robustness (planted swaps, invariants), per-query
latency (same scores, one row per query, outside the output hash) and the instruction arms (texts
reach the encoder, delta and p-value on a hand case)."""
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.core import config, data, names
from saber_lib import embed
from saber_lib.evaluate import analyses as evaluate_analyses
from saber_lib.evaluate import tables as evaluate
from saber_lib.embed.base import Encoder
from saber_lib.embed.instructions import ARMS, TEMPLATE, instructed
from saber_lib.evaluate.stage import BenchmarkInputs
from saber_lib.core import scales
from saber_lib.metrics import ndcg as ndcg_kernel, rescaling
from saber_lib.evaluate.retrievers import DenseRetriever, get_retriever, score_benchmark

ROOT = Path(__file__).resolve().parent.parent
LOG3 = math.log2(3)


# ----------------------------------------------------------------------------- rescaling
# One query, five candidates rated [5, 4, 4, 0, 0]; nDCG@2. Three rankings:
#   X = c0 c3 ..: exp 31 / (31 + 15/log2 3),      linear 5 / (5 + 4/log2 3)
#   Y = c1 c2 ..: exp 15 (1 + 1/log2 3) / ideal,  linear 4 (1 + 1/log2 3) / ideal
#   Z = c3 c4 ..: 0 under both gains
# so X beats Y with the exponential gain and loses with the linear one. A system "X at level f" ranks
# X on a share f of the queries and Z on the others (mean f * x); levels 1, 1/4, 1/16 are far enough
# apart (x / y is within [0.7, 1.4]) that only the X/Y pair of one level flips: k levels, k swaps.
RATED = [5.0, 4.0, 4.0, 0.0, 0.0]
ORDERS = {"X": [0, 3, 1, 2, 4], "Y": [1, 2, 0, 3, 4], "Z": [3, 4, 0, 1, 2]}
EXP_IDEAL, LIN_IDEAL = 31 + 15 / LOG3, 5 + 4 / LOG3
X_EXP, Y_EXP = 31 / EXP_IDEAL, 15 * (1 + 1 / LOG3) / EXP_IDEAL
X_LIN, Y_LIN = 5 / LIN_IDEAL, 4 * (1 + 1 / LOG3) / LIN_IDEAL


def _planted(levels: int):
    n_q = 4 ** (levels - 1)
    systems = {"Z": ["Z"] * n_q}
    for lvl in range(levels):
        share = n_q // 4 ** lvl
        for kind in "XY":
            systems[f"{kind}{lvl}"] = [kind] * share + ["Z"] * (n_q - share)
    rows, rat = [], []
    for q in range(n_q):
        for c, r in enumerate(RATED):
            rat.append((f"q{q}", f"c{c}", c, r))
        for name, plan in systems.items():
            order = ORDERS[plan[q]]
            for rank, c in enumerate(order):
                rows.append((name, "statement-full", f"q{q}", f"c{c}", float(len(order) - rank)))
    scores = pl.DataFrame(rows, schema=["retriever", "setting", "query_id", "cand_id", "score"], orient="row")
    ratings = pl.DataFrame(rat, schema=["query_id", "cand_id", "position", "rating"], orient="row")
    return scores, ratings, systems


@pytest.mark.parametrize("levels", [1, 2, 3])
def test_linear_gain_swaps_exactly_the_planted_pairs(levels):
    scores, ratings, systems = _planted(levels)
    ndcg = evaluate.ndcg_table(scores, ratings, k=2)
    means = dict(ndcg.group_by("retriever").agg(pl.col("ndcg").mean()).iter_rows())
    assert means["X0"] == pytest.approx(X_EXP) and means["Y0"] == pytest.approx(Y_EXP) and means["Z"] == 0
    tab = evaluate_analyses.rescaling_table(ndcg, scores, ratings, ["[0,5] linear", "[0,5] exp", "[0,5] exp round"],
                                            top=5.0, k=2)
    assert tab.columns == list(rescaling.COLUMNS)
    lin, same, same_rounded = tab.rows(named=True)
    n = len(systems)
    assert lin["scheme"] == "[0,5] linear" and lin["system_pairs"] == n * (n - 1) // 2
    assert lin["swapped_pairs"] == levels
    assert lin["kendall"] == pytest.approx((n * (n - 1) / 2 - 2 * levels) / (n * (n - 1) / 2))   # no ties
    assert lin["max_swapped_gap"] == pytest.approx(X_EXP - Y_EXP)           # the level-1 pair
    assert lin["max_abs_delta"] == pytest.approx(Y_LIN - Y_EXP)
    assert lin["pearson"] < 1
    for row in (same, same_rounded):   # the benchmark's own scale and gain (ratings already whole)
        assert row["pearson"] == pytest.approx(1) and row["spearman"] == pytest.approx(1)
        assert row["kendall"] == pytest.approx(1)
        assert row["swapped_pairs"] == 0 and row["max_swapped_gap"] == 0 and row["max_abs_delta"] == pytest.approx(0)


def test_scaling_a_linear_gain_changes_nothing_and_the_exponential_gain_is_scale_sensitive():
    scores, ratings, _ = _planted(2)
    ndcg = evaluate.ndcg_table(scores, ratings, k=2)
    tab = evaluate_analyses.rescaling_table(ndcg, scores, ratings, ["[0,5] linear", "[0,3] linear", "[0,1] exp"],
                                            top=5.0, k=2)
    a, b, c = tab.rows(named=True)
    assert {k: v for k, v in a.items() if k != "scheme"} == pytest.approx({k: v for k, v in b.items() if k != "scheme"})
    # [0,1] exp: gains 2^(r/5) - 1 are nearly linear in r on [0, 1]; X and Y flip as under the linear gain
    assert c["swapped_pairs"] == 2


def test_rescale_maps_linearly_and_rounds_halves_up():
    r = np.array([0.0, 2.5, 5.0, 4.2])
    s = scales.parse_scheme("[0,3] exp round")
    assert s == scales.Scheme(0, 3, "exp", True) and s.label == "[0,3] exp round"
    assert rescaling.rescale_to_scheme(r, s, 5.0).tolist() == [0, 2, 3, 3]             # 1.5 -> 2, 2.52 -> 3
    assert rescaling.rescale_to_scheme(r, scales.parse_scheme("[0,1] linear round"), 5.0).tolist() == [0, 1, 1, 1]
    assert rescaling.rescale_to_scheme(r, scales.parse_scheme(" [ 1 , 3 ]  linear"), 5.0) == pytest.approx([1, 2, 3, 2.68])
    with pytest.raises(ValueError, match=r"ratings must lie in \[0, 5\]"):
        rescaling.rescale_to_scheme([6.0], s, 5.0)


def test_rank_scheme_replaces_ratings_by_within_query_ranks():
    s = scales.parse_scheme("[0,3] linear rank")
    assert s == scales.Scheme(0, 3, "linear", False, True) and s.label == "[0,3] linear rank"
    assert scales.parse_scheme("[0,5] exp rank round").label == "[0,5] exp rank round"
    assert scales.scheme_error("[0,5] exp round rank")            # the grammar's order: rank, then round
    # q0: 5 > 4.9 > 0 -> ranks 2, 1, 0 of 2 -> [5, 2.5, 0] on [0, 5] -> [3, 1.5, 0] on [0, 3]
    # q1: 1 = 1 < 3, 0 lowest -> ranks 1.5, 1.5, 3, 0 of 3 -> [2.5, 2.5, 5, 0]; q2: one candidate -> top
    r = [5.0, 4.9, 0.0, 1.0, 1.0, 3.0, 0.0, 2.0]
    q = ["q0", "q0", "q0", "q1", "q1", "q1", "q1", "q2"]
    assert rescaling.within_query_ranks(r, q, 5.0) == pytest.approx([5, 2.5, 0, 2.5, 2.5, 5, 0, 5])
    assert rescaling.scheme_ratings(r, q, s, 5.0) == pytest.approx([3, 1.5, 0, 1.5, 1.5, 3, 0, 3])
    assert rescaling.scheme_ratings(r, q, scales.parse_scheme("[0,3] linear rank round"), 5.0).tolist() == [
        3, 2, 0, 2, 2, 3, 0, 3]
    with pytest.raises(ValueError, match=r"ratings must lie in \[0, 5\]"):
        rescaling.scheme_ratings([6.0, 1.0], ["a", "a"], s, 5.0)


def test_rank_rescaling_equals_scoring_the_hand_ranked_ratings():
    scores, ratings, _ = _planted(2)
    ndcg = evaluate.ndcg_table(scores, ratings, k=2)
    # [5, 4, 4, 0, 0]: ascending ranks 4, 2.5, 2.5, 0.5, 0.5 of 4 -> 5 * rank / 4
    by_hand = ratings.with_columns(pl.Series("rating", [5.0, 3.125, 3.125, 0.625, 0.625] * (ratings.height // 5)))
    tab = evaluate_analyses.rescaling_table(ndcg, scores, ratings, ["[0,5] exp rank"], top=5.0, k=2)
    ref = evaluate_analyses.rescaling_table(ndcg, scores, by_hand, ["[0,5] exp"], top=5.0, k=2)
    assert tab["scheme"].to_list() == ["[0,5] exp rank"]
    assert tab.drop("scheme").rows() == pytest.approx(ref.drop("scheme").rows())
    # ratings already evenly spaced within their query: the rank scheme is the benchmark itself
    even = ratings.with_columns(pl.Series("rating", [5.0, 3.75, 2.5, 1.25, 0.0] * (ratings.height // 5)))
    nd_even = evaluate.ndcg_table(scores, even, k=2)
    same = evaluate_analyses.rescaling_table(nd_even, scores, even, ["[0,5] exp rank"], top=5.0, k=2).row(0, named=True)
    assert same["swapped_pairs"] == 0 and same["max_abs_delta"] == pytest.approx(0)


@pytest.mark.parametrize("bad", ["[3,0] exp", "[0,3] cubic", "0-3 exp", "[0,3]", "[0,3] exp rounded", 3])
def test_a_bad_scheme_is_refused_naming_the_profile_key(bad):
    assert scales.scheme_error(bad)
    with pytest.raises(config.ProfileError, match=r"evaluate.rescaling_schemes"):
        config.load_profile(ROOT / "params" / "tiny.yaml", {"evaluate.rescaling_schemes": ["[0,3] exp", bad]})


def test_compare_systems_needs_the_same_systems_and_degrades_to_nan():
    with pytest.raises(ValueError, match="systems differ"):
        rescaling.compare_systems({"a": 1.0}, {"b": 1.0})
    one = rescaling.compare_systems({"a": 0.3}, {"a": 0.5})
    assert math.isnan(one["pearson"]) and one["system_pairs"] == 0 and one["max_abs_delta"] == pytest.approx(0.2)
    tie = rescaling.compare_systems({"a": 0.3, "b": 0.5}, {"a": 0.4, "b": 0.4})   # a tie is not a swap
    assert tie["swapped_pairs"] == 0 and math.isnan(tie["kendall"])


def test_the_linear_gain_is_the_rating_itself():
    rel, s = [3.0, 0.0, 1.0], [0.1, 0.9, 0.5]
    ideal = 3 + 1 / LOG3
    assert ndcg_kernel.ndcg_at_k(rel, s, k=3, gain="linear") == pytest.approx((0 + 1 / LOG3 + 3 / 2) / ideal)
    assert ndcg_kernel.expected_ndcg_at_k(rel, s, k=3, gain="linear") == pytest.approx((1 / LOG3 + 3 / 2) / ideal)
    with pytest.raises(ValueError, match="gain must be one of"):
        ndcg_kernel.ndcg_at_k(rel, s, k=3, gain="log")


# ----------------------------------------------------------------------------- a fake encoder
class RecordingEncoder(Encoder):
    """Deterministic vectors from the text's bytes; remembers every text it embedded, by side."""

    name, model_id, dim = "recording", "recording-v1", 8

    def __init__(self):
        super().__init__(None)
        self.seen: list[tuple[str, str]] = []

    def _embed_pieces(self, texts, kind, batch_size):
        self.seen += [(kind, t) for t in texts]
        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            for j, ch in enumerate(t.encode()):
                out[i, (ch + j) % self.dim] += 1.0
        return out + 1e-3


def _dense(enc, name="minilm"):
    r = DenseRetriever.__new__(DenseRetriever)
    r.encoder, r.store, r.batch_size, r.name, r.backend = enc, None, 32, name, enc.model_id
    return r


def _inputs():
    corpus = pl.DataFrame({"doc_id": ["q1", "q2", "a", "b", "c"],
                           "problem": ["sum of primes", "area of a circle", "primes below ten", "circle area", "dice"],
                           "solution": ["", "", "", "", ""]})
    bench = pl.DataFrame({"query_id": ["q1"] * 3 + ["q2"] * 3, "query_domains": [["Algebra"]] * 6,
                          "cand_id": ["a", "b", "c"] * 2, "position": [0, 1, 2] * 2})
    ratings = bench.select("query_id", "cand_id", "position").with_columns(
        pl.Series("rating", [5.0, 0.0, 1.0, 0.0, 5.0, 2.0]))
    return BenchmarkInputs("built", bench, ratings, corpus, None, "test", {}, {}, 2)


# ----------------------------------------------------------------------------- latency
def test_timing_keeps_the_scores_and_records_one_row_per_query_and_setting():
    inp = _inputs()
    rec = evaluate_analyses.LatencyRecorder()
    for name in ("bm25", "jaccard"):
        r = get_retriever(name)
        for setting in ("statement-full", "full-full"):
            plain = score_benchmark(r, inp.benchmark, inp.corpus, setting)
            timed = score_benchmark(rec.wrap(r, setting), inp.benchmark, inp.corpus, setting)
            assert timed.equals(plain)
    enc = RecordingEncoder()
    dense = _dense(enc)
    timed = score_benchmark(rec.wrap(dense, "statement-full"), inp.benchmark, inp.corpus, "statement-full")
    assert timed.equals(score_benchmark(dense, inp.benchmark, inp.corpus, "statement-full"))
    # the timed pass embeds each query once more, alone: 1 (scoring) + 1 (timing) + 1 (the plain run)
    assert [t for k, t in enc.seen if k == "query"].count("sum of primes") == 3
    lat = rec.frame()
    assert lat.columns == ["retriever", "setting", "query_id", "seconds"]
    assert lat.group_by("retriever", "setting").len().sort("retriever", "setting").rows() == [
        ("bm25", "full-full", 2), ("bm25", "statement-full", 2), ("jaccard", "full-full", 2),
        ("jaccard", "statement-full", 2), ("minilm", "statement-full", 2)]
    assert (lat["seconds"] > 0).all() and rec.untimed == set()
    summ = evaluate_analyses.latency_summary(lat)
    assert set(summ.columns) == {"retriever", "setting", "n_queries", "median_s", "p95_s", "mean_s"}
    row = summ.filter((pl.col("retriever") == "bm25") & (pl.col("setting") == "full-full")).row(0, named=True)
    s = sorted(lat.filter((pl.col("retriever") == "bm25") & (pl.col("setting") == "full-full"))["seconds"])
    assert row["median_s"] == pytest.approx(np.median(s)) and row["p95_s"] == pytest.approx(np.percentile(s, 95))


def test_only_the_timed_settings_are_wrapped():
    rec = evaluate_analyses.LatencyRecorder(["statement-full"])
    r = get_retriever("jaccard")
    assert rec.wrap(r, "full-full") is r and rec.wrap(r, "statement-full") is not r
    inp = _inputs()
    for setting in ("statement-full", "full-full"):
        score_benchmark(rec.wrap(r, setting), inp.benchmark, inp.corpus, setting)
    assert set(rec.frame()["setting"]) == {"statement-full"} and rec.frame().height == 2


def test_a_run_file_is_scored_but_not_timed(tmp_path):
    inp = _inputs()
    run = tmp_path / "sys.trec"
    run.write_text("".join(f"{q} Q0 {c} 1 {s} t\n" for q, c, s in [("q1", "a", 3), ("q1", "b", 2), ("q1", "c", 1),
                                                                   ("q2", "a", 1), ("q2", "b", 3), ("q2", "c", 2)]))
    rec = evaluate_analyses.LatencyRecorder()
    r = get_retriever(f"run:{run}")
    out = score_benchmark(rec.wrap(r, "statement-full"), inp.benchmark, inp.corpus, "statement-full")
    assert out["score"].to_list() == [3, 2, 1, 1, 3, 2] and rec.rows == [] and rec.untimed == {"run:sys"}


def test_pareto_front_per_model_class_on_a_hand_case():
    # lexical: bm25 fastest (0.5), jaccard slower and better (0.6), tfidf slower than jaccard and worse
    # (dominated); approach0 ties jaccard exactly (both stay). minilm is slower and worse than every
    # lexical point but alone in its class: on its front. The run file is its own class too.
    pts = pl.DataFrame({"retriever": ["bm25", "jaccard", "tfidf", "approach0", "minilm", "run:x"],
                        "median_s": [0.001, 0.01, 0.02, 0.01, 0.1, 0.05], "mean": [0.5, 0.6, 0.55, 0.6, 0.4, 0.3]})
    out = evaluate_analyses.pareto_front(pts)
    got = {r: (c, f) for r, c, f in out.select("retriever", "model_class", "on_front").iter_rows()}
    assert got == {"bm25": ("lexical", True), "jaccard": ("lexical", True), "tfidf": ("lexical", False),
                   "approach0": ("lexical", True), "minilm": ("dense encoder", True), "run:x": ("run file", True)}
    assert names.retriever_class("e5-small") == "dense encoder" and names.is_lexical("bm25-a0")
    with pytest.raises(ValueError, match="unknown retriever 'nope'"):
        names.retriever_class("nope")


def test_latency_figure_draws_each_class_front_through_its_undominated_points():
    import matplotlib
    matplotlib.use("Agg")
    lat = pl.DataFrame({"retriever": ["bm25", "jaccard", "tfidf", "minilm"], "setting": ["statement-full"] * 4,
                        "median_s": [0.001, 0.01, 0.02, 0.1]})
    summ = pl.DataFrame({"retriever": ["bm25", "jaccard", "tfidf", "minilm"], "setting": ["statement-full"] * 4,
                         "group": ["Overall"] * 4, "mean": [0.5, 0.6, 0.55, 0.4], "lo": [0.4, 0.5, 0.45, 0.3],
                         "hi": [0.6, 0.7, 0.65, 0.5]})
    pts = evaluate_analyses.latency_points(lat, summ)
    assert pts.filter(~pl.col("on_front"))["retriever"].to_list() == ["tfidf"]
    fig = evaluate_analyses.latency_quality_figure(lat, summ, 10, 0.95)
    steps = [ln for ln in fig.axes[0].get_lines() if ln.get_drawstyle() == "steps-post"]
    assert [list(ln.get_xdata()) for ln in steps] == [[0.001, 0.01]]     # one front with two points: lexical
    assert fig.axes[0].get_legend() is not None


def test_a_timing_table_is_outside_the_output_hash(tmp_path):
    d = tmp_path / "evaluate"
    d.mkdir()
    pl.DataFrame({"a": [1]}).write_parquet(d / "ndcg.parquet")
    pl.DataFrame({"seconds": [0.1]}).write_parquet(d / "latency.parquet")
    h = data.hash_stage_outputs(d)
    pl.DataFrame({"seconds": [0.7, 0.2]}).write_parquet(d / "latency.parquet")
    assert data.hash_stage_outputs(d) == h
    recs = data.output_records(d)
    assert list(recs) == ["ndcg.parquet"] and data.output_hash_of(recs) == h
    assert data.changed_outputs(d, {"outputs": recs}, full=True) == []
    pl.DataFrame({"a": [2]}).write_parquet(d / "ndcg.parquet")
    assert data.hash_stage_outputs(d) != h


# ----------------------------------------------------------------------------- instruction arms
def test_the_arm_texts_reach_the_encoder_and_documents_stay_bare():
    enc = RecordingEncoder()
    arm = evaluate_analyses.InstructedRetriever(_dense(enc), "p2")
    arm.score_many(["sum of primes"], [["primes below ten", "dice"]])
    assert [t for k, t in enc.seen if k == "query"] == [f"Instruct: {ARMS['p2']}\nQuery: sum of primes"]
    assert sorted(t for k, t in enc.seen if k == "document") == ["dice", "primes below ten"]
    assert instructed("q", "p0") == "q" and TEMPLATE == "Instruct: {instruction}\nQuery: {query}"
    assert len({ARMS[a] for a in ("p1", "p2", "p3")}) == 3
    with pytest.raises(KeyError, match="unknown instruction arm 'p9'"):
        evaluate_analyses.InstructedRetriever(_dense(enc), "p9")


def test_arms_run_every_encoder_and_only_encoders(monkeypatch):
    inp = _inputs()
    enc = RecordingEncoder()
    monkeypatch.setattr(evaluate_analyses, "get_retriever", lambda name, **kw: _dense(enc, name))
    p0_scores = score_benchmark(_dense(enc), inp.benchmark, inp.corpus, "statement-full")
    ndcg = evaluate.ndcg_table(p0_scores, inp.ratings, k=2)
    enc.seen.clear()
    out = evaluate_analyses.instruction_arms(["bm25", "minilm", "run:x.trec"], ["p0", "p1", "p3"], inp,
                                             ["statement-full"], ndcg, k=2, tie_policy="position",
                                             n_permutations=100, seed=0, log=None)
    queries = [t for k, t in enc.seen if k == "query"]
    assert queries == [instructed(q, a) for a in ("p1", "p3") for q in ("sum of primes", "area of a circle")]
    assert out.columns == ["retriever", "arm", "setting", "ndcg", "delta_vs_p0", "p_value"]
    assert out.select("retriever", "arm").rows() == [("minilm", "p0"), ("minilm", "p1"), ("minilm", "p3")]
    assert out["delta_vs_p0"][0] == 0 and out["p_value"][0] is None
    assert out["ndcg"][0] == pytest.approx(ndcg["ndcg"].mean())
    tab = evaluate_analyses.arms_table(out)
    assert tab.columns == ["model", "role", "p0", "p1", "p3"] and tab["role"][0] == "control"


def test_arm_delta_and_exact_sign_flip_p_value_on_a_hand_case():
    q = ["a", "b", "c", "d"]
    p0 = pl.DataFrame({"retriever": ["m"] * 4, "setting": ["s"] * 4, "query_id": q, "ndcg": [0.5] * 4})
    arm = p0.with_columns(pl.Series("ndcg", [0.6, 0.7, 0.4, 0.9]))
    out = evaluate_analyses.arm_rows(p0, {"p1": arm}, n_permutations=10000, seed=3)
    row = out.filter(pl.col("arm") == "p1").row(0, named=True)
    # differences .1 .2 -.1 .4, sum .6: of the 16 sign patterns of (.4, .2, .1, .1), |sum| >= .6 needs .4 and .2
    # of one sign and at most one .1 against them: 2 x 3 = 6 patterns
    assert row["ndcg"] == pytest.approx(0.65) and row["delta_vs_p0"] == pytest.approx(0.15)
    assert row["p_value"] == pytest.approx(6 / 16)
    flat = evaluate_analyses.arm_rows(p0, {"p1": p0}, n_permutations=10000, seed=3)
    assert flat.filter(pl.col("arm") == "p1")["p_value"][0] == pytest.approx(1.0)


def test_envelopes_cover_the_registry_and_the_arms_match_the_profile_schema():
    assert set(embed.ENVELOPES) == set(embed.REGISTRY)
    assert embed.envelope("e5-small").query == "query: " and embed.envelope("e5-small").document == "passage: "
    assert all(e.query == e.document == "" for n, e in embed.ENVELOPES.items() if n != "e5-small")
    assert {e.arms for e in embed.ENVELOPES.values()} <= {"control", "instructable"}
    assert names.INSTRUCTION_ARMS == tuple(ARMS)
    assert evaluate_analyses.armed(["bm25", "tfidf", "jaccard", "approach0", "minilm", "e5-small", "run:x"]) == [
        "minilm", "e5-small"]
    with pytest.raises(KeyError, match="no envelope for encoder 'nope'"):
        embed.envelope("nope")
