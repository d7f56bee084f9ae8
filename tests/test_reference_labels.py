"""Reference labels from a file (``validation.reference``), judges named by a spec
(``judging.spec_judges``) and the query-level bootstrap of pooled agreement
(``evaluation.resample.bootstrap_ratios``): hand-computed cases and a brute-force enumeration."""
import itertools
import json

import numpy as np
import polars as pl
import pytest

from saber_lib.metrics.resample import bootstrap_ratios, percentile_interval
from saber_lib.judging.simulated import SimulatedJudge
from saber_lib.judging import spec_judges as js
from saber_lib.judging.registry import JudgeContext, JudgeSettings, JudgeSpecError, build_judge, parse_judge_spec
from saber_lib.validation import reference as ref


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(q, a, b, label, annotator="ann1", reason="why"):
    return {"query_id": q, "a": a, "b": b, "label": label, "annotator": annotator, "reason": reason}


def paper(x, y):
    """The paper's score of two labels, written out independently of the library."""
    return 1.0 if x == y else 0.5 if "tie" in (x, y) else 0.0


# ----------------------------------------------------------------------------- scoring
def test_triple_scores_by_hand():
    verdicts = ["a", "b", "tie", "a", None, "failure", "tie"]
    labels = [["a"], ["a"], ["a"], ["a", "tie"], ["a"], ["b"], ["tie", "tie"]]
    got = ref.triple_scores(verdicts, labels)
    np.testing.assert_array_equal(got[:4], [1.0, 0.0, 0.5, 0.75])
    assert np.isnan(got[4]) and np.isnan(got[5]) and got[6] == 1.0


def test_always_first_scores_its_planted_share():
    # 10 triples over 3 queries: 7 labelled a, 2 b, 1 tie -> "always a" scores (7 + 0 + 0.5) / 10 = 75%
    labels = ["a"] * 7 + ["b", "b", "tie"]
    trip = pl.DataFrame({"query_id": ["q1"] * 4 + ["q2"] * 3 + ["q3"] * 3, "a": [f"x{k}" for k in range(10)],
                         "b": [f"y{k}" for k in range(10)], "labels": [[x] for x in labels]})
    t = ref.reference_agreement_table({"first": ["a"] * 10}, trip, n_resamples=500, level=0.95, seed=0)
    assert t.row(0, named=True)["agreement"] == pytest.approx(75.0)
    assert t["n_pairs"][0] == 10 and t["ci_low"][0] <= 75.0 <= t["ci_high"][0]
    answers = js.judge_answers(build_judge("first"), [("q", "x", "y")] * 10)
    assert answers.labels == ["a"] * 10 and ref.verdict_stats(answers.labels)["first_share"] == 1.0


def test_simulated_judge_scores_exactly_what_was_planted():
    trips = [(f"q{k % 3}", f"c{k}", f"d{k}") for k in range(20)]
    sim = SimulatedJudge(0.78, seed=7)
    own = [sim(q, a, b) for q, a, b in trips]              # its own verdicts, asked independently
    # 12 labels agree with it, 5 contradict it, 3 are ties -> (12 + 0 + 1.5) / 20 = 67.5%
    planted = own[:12] + [{"a": "b", "b": "a"}[v] for v in own[12:17]] + ["tie"] * 3
    trip = pl.DataFrame({"query_id": [t[0] for t in trips], "a": [t[1] for t in trips], "b": [t[2] for t in trips],
                         "labels": [[x] for x in planted]})
    answers = js.judge_answers(build_judge("simulated", JudgeContext(JudgeSettings.paper(judge_sim_agreement=0.78, seed=7))),
                               trips)
    assert answers.labels == own
    t = ref.reference_agreement_table({"simulated": answers.labels}, trip, n_resamples=200, level=0.95, seed=0)
    assert t["agreement"][0] == pytest.approx(67.5)


def test_agreement_by_gap_and_inter_annotator_by_hand():
    trip = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2"], "a": ["a1", "a2", "a3", "a4"],
                         "b": ["b1", "b2", "b3", "b4"],
                         "labels": [["a", "a"], ["a", "tie"], ["a", "b"], ["b"]]})
    gaps = [1, 5, None, 9]
    t = ref.by_gap_table({"m": ["a", "a", "a", "a"]}, trip, gaps, [0, 5])
    # scores 1, 0.75, 0.5, 0; gap >= 0 among ranked: (1 + .75 + 0) / 3; gap >= 5: (.75 + 0) / 2
    assert t["agreement"].to_list() == pytest.approx([100 * 1.75 / 3, 37.5])
    assert t["n_pairs"].to_list() == [3, 2]
    inter = ref.inter_annotator_table(trip, n_resamples=200, level=0.95, seed=0).row(0, named=True)
    assert inter["n_pairs"] == 3 and inter["agreement"] == pytest.approx(50.0)      # (1 + .5 + 0) / 3
    assert inter["identical"] == pytest.approx(100 / 3)


# ----------------------------------------------------------------------------- the query bootstrap
def test_ratio_bootstrap_matches_brute_force_enumeration():
    sums = np.array([2.5, 0.0, 2.0, 1.5])      # per query: summed triple scores
    counts = np.array([3.0, 1.0, 2.0, 4.0])    # triples per query
    n = len(sums)
    values = np.array([sums[list(d)].sum() / counts[list(d)].sum() for d in itertools.product(range(n), repeat=n)])
    uniq, freq = np.unique(np.round(values, 12), return_counts=True)
    prob = freq / freq.sum()                   # every ordered draw has probability n ** -n
    cdf = np.cumsum(prob)

    def exact_quantile(q):
        k = int(np.searchsorted(cdf, q))
        assert min(abs(cdf[k] - q), abs(cdf[k - 1] - q) if k else 1.0) > 0.003   # no atom edge near q
        return uniq[k]

    boots = bootstrap_ratios(sums, counts, 200_000, np.random.default_rng(1))
    lo, hi = percentile_interval(boots, 0.95)
    assert lo == pytest.approx(exact_quantile(0.025)) and hi == pytest.approx(exact_quantile(0.975))
    assert boots.mean() == pytest.approx((values).mean(), abs=2e-3)
    got = np.array([np.mean(np.isclose(boots, u)) for u in uniq])
    assert np.abs(got - prob).max() < 4 * np.sqrt(prob.max() / 200_000) + 1e-4
    # query_interval: the same statistic from per-triple scores
    scores = [1.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.0]
    qids = ["q1"] * 3 + ["q2"] + ["q3"] * 2 + ["q4"] * 4
    m, lo2, hi2, k = ref.query_interval(scores, qids, 200_000, 0.95, np.random.default_rng(1))
    assert k == 10 and m == pytest.approx(sums.sum() / counts.sum())
    assert (lo2, hi2) == pytest.approx((exact_quantile(0.025), exact_quantile(0.975)))


def test_ratio_bootstrap_shares_draws_across_systems():
    rng = np.random.default_rng(0)
    S = rng.random((3, 6)) * 4
    C = rng.integers(1, 5, size=(3, 6)).astype(float)
    both = bootstrap_ratios(S, C, 300, np.random.default_rng(5))
    one = bootstrap_ratios(S[1], C[1], 300, np.random.default_rng(5))
    np.testing.assert_allclose(both[:, 1], one)


# ----------------------------------------------------------------------------- reading the file
def test_reading_orients_labels_and_splits_by_corpus(tmp_path):
    p = write_jsonl(tmp_path / "r.jsonl", [row("math:q", "math:1", "math:2", "a"),
                                           row("math:q", "math:2", "math:1", "a", "ann2"),  # seen the other way
                                           row("math:q", "math:3", "aime:9", "tie")])
    rows = ref.read_reference(p)
    assert rows["line"].to_list() == [1, 2, 3]
    kept, skipped = ref.split_by_corpus(rows, ["math:q", "math:1", "math:2", "math:3"], p,
                                        lambda src: {"aime:9"} if src == "aime" else set())
    assert kept.height == 2 and skipped.height == 1
    t = ref.triples(kept)
    assert t.height == 1 and t["labels"][0].to_list() == ["a", "b"] and t["annotators"][0].to_list() == ["ann1", "ann2"]
    csv = tmp_path / "r.csv"
    pl.read_ndjson(p).write_csv(csv)
    assert ref.read_reference(csv).drop("line").equals(rows.drop("line"))
    assert ref.read_reference(csv)["line"].to_list() == [2, 3, 4]     # after the header


@pytest.mark.parametrize("bad,what", [
    ('{"query_id": "q", "a": "x", "b": "y", "label": "c", "annotator": "n", "reason": ""}', "label 'c'"),
    ('{"query_id": "q", "a": "x", "b": "y", "label": "a", "reason": ""}', "missing field(s) annotator"),
    ('{"query_id": "q", "a": "x", "b": "x", "label": "a", "annotator": "n", "reason": ""}', "three different"),
    ('{"query_id": "q", "a": "x", "b": "y", "label": "a", "annotator": "n", "reason": ""', "not valid JSON"),
    ('{"query_id": "q", "a": "y", "b": "x", "label": "b", "annotator": "ann1", "reason": ""}', "labelled this triple"),
])
def test_a_bad_row_is_one_error_naming_file_and_line(tmp_path, bad, what):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(row("q", "x", "y", "a")) + "\n\n" + bad + "\n")
    with pytest.raises(ref.ReferenceFileError) as e:
        ref.read_reference(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}, line 3:") and what in msg and "\n" not in msg


def test_an_id_in_no_source_is_one_error_naming_file_and_line(tmp_path):
    p = write_jsonl(tmp_path / "r.jsonl", [row("math:q", "math:1", "math:2", "a"), row("math:q", "nope:1", "math:2", "b"),
                                           row("math:q", "math:404", "math:2", "b")])
    rows = ref.read_reference(p)
    with pytest.raises(ref.ReferenceFileError, match=r"r.jsonl, line 2: 'nope:1' is in no corpus source"):
        ref.split_by_corpus(rows, ["math:q", "math:1", "math:2"], p, lambda src: set())
    with pytest.raises(ref.ReferenceFileError, match=r"line 3: 'math:404' is in no corpus source \(math has no"):
        ref.split_by_corpus(rows.slice(2), ["math:q", "math:1", "math:2"], p, lambda src: {"math:5"})


def test_csv_with_a_short_row_names_its_line(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("query_id,a,b,label,annotator,reason\nq,x,y,a,n,fine\nq,x,z,a\n")
    with pytest.raises(ref.ReferenceFileError, match=r"r.csv, line 3: 4 fields, the header has 6"):
        ref.read_reference(p)


def test_reference_path_is_inside_the_data_dir_when_relative(tmp_path):
    assert ref.reference_path(None, tmp_path) is None and ref.reference_path("  ", tmp_path) is None
    assert ref.reference_path("x/r.jsonl", tmp_path) == tmp_path / "x" / "r.jsonl"
    assert ref.reference_path(str(tmp_path / "abs.jsonl"), "/elsewhere") == tmp_path / "abs.jsonl"


# ----------------------------------------------------------------------------- specs and blends
def test_specs_parse_and_bad_specs_are_named():
    b = parse_judge_spec("blend:proxy:minilm+signal:summary:0.3")
    assert b.kind == "blend" and b.arg == "proxy:minilm+signal:summary:0.3"
    sim = build_judge("blend:simulated+first:0.3", JudgeContext(JudgeSettings.paper(seed=1)))
    assert sim.weight == 0.3 and sim.first.name == "simulated(agreement=0.78)" and isinstance(sim.second, js.FirstJudge)
    assert build_judge("blend:first+simulated").weight == 0.5
    for bad in ("proxy:nope", "signal:words", "blend:first", "blend:first+first:2", "judge", "blend:blend:first+first",
                "majority:0", "simulated:0.2", "llm:sometimes", "first:x"):
        with pytest.raises(JudgeSpecError, match=repr(bad).replace("+", r"\+")):
            parse_judge_spec(bad)


def test_blend_averages_rms_scaled_margins():
    one = js.Answers(["a", "b", "a", "tie"], [2.0, -1.0, 1.0, 0.0], "m")
    two = js.Answers(["a", "a", "b", "tie"], None, "v")          # verdicts only: +1 / -1 / 0
    got = js.blend(one, two, 0.5)
    r1, r2 = np.sqrt((4 + 1 + 1) / 4), np.sqrt(3 / 4)
    want = [0.5 * (2 / r1 + 1 / r2), 0.5 * (-1 / r1 + 1 / r2), 0.5 * (1 / r1 - 1 / r2), 0.0]
    np.testing.assert_allclose(got.margins, want)
    assert got.labels == ["a", "a", "b", "tie"]
    failed = js.blend(js.Answers(["failure", "a"], None, "x"), js.Answers(["a", "b"], [0.5, -2.0], "y"), 0.25)
    assert failed.labels[0] == "failure" and failed.labels[1] == "b"      # 0.25 * 1 + 0.75 * (-2 / rms) < 0
