"""The topic walk of the paper-scale rehearsal (benchmarks/paper_scale_topics.py): the mock model's
answers read by the real parser, a small walk through the real backend checked against a walk
recomputed by hand from the same answers, and the planner's row for the topics stage."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from saber_lib import llm as L
from saber_lib import prompts
from saber_lib.llm.mock_server import MockChatServer
from saber_lib.llm.parsers import ParseError, parse_json_object, parse_topic_scores
from saber_lib.ontology.tree import build_ontology
from saber_lib.pipeline import plan
from saber_lib.topics.assign import assign_topics
from saber_lib.topics.scorers import LLMTopicScorer, candidate_labels

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("paper_scale_topics", ROOT / "benchmarks" / "paper_scale_topics.py")
T = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(T)

TAU = 0.85


def _user(problem: str, labels: list[str], solution: str = "By induction.") -> str:
    return prompts.render("topic_scoring", problem=problem, solution=solution, labels=labels)[-1]["content"]


# ------------------------------------------------------------------------------ the mock's answer
LABELS = ['Number Theory', 'Groups [Algebra]', 'Ramsey "Theory"', 'Fourier\\Analysis', 'Gödel Numbering',
          'Graph Theory 2']


def test_labels_read_back_exactly_even_when_the_problem_quotes_the_prompt():
    tricky = "Candidate labels, one per line:\nFake Label\n\nFirst name the label that fits"
    for problem in ("Find all primes p with p + 2 prime.", tricky):
        assert T.prompt_labels(_user(problem, LABELS)) == LABELS
    with pytest.raises(ValueError, match="not a topic_scoring prompt"):
        T.prompt_labels("Which of 1 and 2 is larger?")


def test_answers_parse_best_at_one_fail_at_the_rate_and_repeat():
    fail_rate, n = 0.05, 4000
    ans = T.topic_answer(fail_rate)
    failed = branched = stopped = 0
    for i in range(n):
        asked = LABELS[: 2 + i % 5] + LABELS[:i % 3 // 2]   # a third of the prompts list a topic twice
        labels = list(dict.fromkeys(asked))
        text = ans(_user(f"Problem number {i}: show that {i}^2 + {i} is even.", asked))
        try:
            scores = parse_topic_scores(text, asked)
        except ParseError:
            failed += 1
            continue
        obj = json.loads(text)
        assert list(scores) == labels and list(obj["scores"]) == labels     # every label, spelled as given
        assert [lab for lab, s in scores.items() if s == 1.0] == [obj["best_label"]]
        high = [lab for lab, s in scores.items() if TAU < s < 1.0]
        assert len(high) <= 1 and all(s <= 0.6 for lab, s in scores.items() if lab != obj["best_label"]
                                      and lab not in high)
        branched += bool(high)
        stopped += obj["best_label"] == labels[0]
    # binomial bounds, about 5 standard deviations
    assert abs(failed - fail_rate * n) < 5 * (fail_rate * n) ** 0.5
    ok = n - failed
    assert abs(branched - T.SECOND_RATE * ok) < 5 * (T.SECOND_RATE * ok) ** 0.5
    assert abs(stopped - T.STOP_RATE * ok) < 5 * (T.STOP_RATE * ok) ** 0.5
    user = _user("Show that 7 divides 2^{3n} - 1.", LABELS)
    assert T.topic_answer(fail_rate)(user) == ans(user) == ans(user)    # a hash of the prompt, not a state
    assert T.topic_answer(0.0)(user) != T.topic_answer(0.0)(user.replace("7 divides", "9 divides"))


def test_json_scan_keeps_quotes_backslashes_and_braces_inside_strings():
    """The answer scan (it visits only braces, quotes and backslashes) reads labels holding them."""
    d = {"best_label": 'a "b" {c}', "scores": {'a "b" {c}': 1.0, "x\\": 0.5, "\\\"}": 0.0, "{": 0.25, "\\u": 0.1}}
    for text in (json.dumps(d), "Sure: " + json.dumps(d) + " } and a stray quote \"", json.dumps(d, indent=2)):
        assert parse_json_object(text) == d
    assert parse_topic_scores(json.dumps(d), list(d["scores"])) == d["scores"]
    with pytest.raises(ParseError, match="not closed"):
        parse_json_object(json.dumps(d)[:-1])


# ------------------------------------------------------------------------------ a small real walk
def _tree():
    """Root -> 3 areas -> 4 subareas each -> 3 leaves each (one subarea of each area has none)."""
    titles, children = {"Root": "Root"}, {"Root": []}
    for a in ("Algebra", "Geometry", "Topology"):
        titles[a], children["Root"] = a, children["Root"] + [a]
        children[a] = []
        for s in range(4):
            sub = f"{a}Part{'ABCD'[s]}"
            titles[sub] = sub
            children[a].append(sub)
            children[sub] = [f"{sub}Leaf{k}" for k in range(3)] if s < 3 else []
            titles.update({leaf: leaf for leaf in children[sub]})
    return build_ontology("Root", titles, children)


def _hand_walk(onto, items, answer):
    """The walk recomputed from the mock's answers (json, no parser, no backend): visits per depth,
    failed visits and each problem's most specific kept nodes."""
    per_depth, failed, final = {}, 0, []
    for problem, solution in items:
        kept, frontier, depth = [], [0], 0
        while frontier:
            nxt = []
            for v in frontier:
                kids = onto.children(v).tolist()
                if not kids:
                    continue
                per_depth[depth] = per_depth.get(depth, 0) + 1
                cands = ([v] if v else []) + kids
                labels = candidate_labels(onto, cands)
                try:
                    obj = json.loads(answer(_user(problem, labels, solution)))
                except json.JSONDecodeError:
                    failed += 1
                    continue
                scores = [obj["scores"][lab] for lab in labels]
                for c, s in zip(cands, scores):
                    if c != v and s / max(scores) > TAU:
                        kept.append(c)
                        nxt.append(c)
            frontier, depth = nxt, depth + 1
        final.append(onto.remove_ancestors(kept))
    return [per_depth[d] for d in sorted(per_depth)], failed, final


@pytest.mark.parametrize("fail_rate", [0.0, 0.1])
def test_walk_through_the_mock_server_calls_once_per_visit(fail_rate, tmp_path):
    onto = _tree()
    items = [(f"Problem {i}: a statement about the group of order {i + 2}.", f"Solution {i}.") for i in range(40)]
    answer = T.topic_answer(fail_rate, second_rate=0.4, stop_rate=0.1)
    srv = MockChatServer(answer_fn=answer)
    try:
        cfg = {"backend": "openai", "model": "test/mock-topics", "base_urls": [srv.url], "api_key_env": "SABER_NO_KEY",
               "max_concurrency": 8, "timeout_s": 30.0, "max_retries": 0, "retry_backoff_s": 0.01,
               "temperature": 1.0, "max_tokens": 512, "reasoning_effort": None}
        backend = L.make_backend(cfg, tmp_path / "cache.sqlite", progress=False)
        res = assign_topics(onto, items, LLMTopicScorer(backend, retries=2), TAU)
        usage = backend.usage()
        backend.close()
    finally:
        srv.stop()
    per_depth, failed, final = _hand_walk(onto, items, answer)
    assert res.visits_per_depth == per_depth and per_depth[0] == len(items) and len(per_depth) == 3
    assert per_depth[1] > len(items)     # the walk branches (second labels above tau)
    assert len(res.failures) == failed and (failed > 0) == (fail_rate > 0)
    assert res.node_ids == final
    # one call per visit, and two more (the retries, the same prompt) per visit that never parsed
    calls = sum(srv.answered.values())
    assert calls == usage["calls"] == sum(per_depth) + 2 * failed and usage["cached"] == 0


# ------------------------------------------------------------------------------------ the planner
def test_plan_topics_row_llm_calls_to_judge_hours():
    """A topics row (unit problems, 3.5 calls a problem) is planned at the figures' 283,000 problems
    whatever the profile's queries, and no longer listed as not rehearsed."""
    figures = {"topics": {"unit": "problems", "units": 283_000, "cpu_s_coef": 0.003, "cpu_s_slope": 1.0,
                          "llm_calls": 990_500}}
    (r,) = plan.plan(figures, {"judgments": 36_000, "queries": 24, "evaluate_share": 1.0}, gpus=8, judge_rate=2.5)
    # 990,500 calls on 8 GPUs x 2.5 calls/s = 49,525 s = 13.757 h; workbench 283,000 x 3 ms = 849 s
    assert r.units == 283_000 and r.llm_calls == pytest.approx(990_500)
    assert r.judge_h == pytest.approx(49_525 / 3600) and r.workbench_h == pytest.approx(849 / 3600)
    assert r.bound == "judge (GPUs)"
    text = plan.table([r], 8, 2.5)
    assert "283,000 problems" in text.splitlines()[2] and "bounded by topics (judge (GPUs))" in text
    assert "summaries, signals, thresholds, select" in text.splitlines()[-1]
    assert "topics" not in text.splitlines()[-1]
