"""The topic walk of the paper-scale rehearsal (``bench_paper_scale.py --stages topics``).

``stage_topics(scale, work, opts)`` walks the real MathWorld tree of the profile
(``ontology.ontology_file`` in the data directory) for ``283,000 x scale`` real problems (each made
distinct by a case number, as the deduplicated corpus's problems are) with the topics stage's own
code: :class:`saber_lib.topics.scorers.LLMTopicScorer` (prompt ``topic_scoring``, its parser, the
best-at-1.0 check, ``topics.topic_retries`` retries) over the ``openai`` backend with its SQLite
cache, :func:`saber_lib.topics.stage.assign_corpus` (level-synchronous walk, ``topics.tau``), the
topics and failures tables written as Parquet, and the failure budgets (over problems, as the
stage checks it, and over the backend's calls).

The model is the project's mock server in a process of its own (``paper_scale_server.start_server``),
answering with :func:`topic_answer`: it reads the candidate labels back from the prompt, names one
best label at 1.0 and, with probability ``SECOND_RATE``, a second label between tau and 1 (so the walk
branches), the rest low; with probability ``STOP_RATE`` the best is the first label, which is the
visited node itself below the root (the walk ends there unless a second child passes tau). Every
draw comes from a hash of the prompt (same prompt, same answer); a share ``fail_rate`` of prompts
get an answer without JSON (its retries are the same prompt, so that visit fails). With the real tree
(11 areas, about 19 children per area, 37 per subarea, 4% of depth-3 nodes inner) these rates give
about 3.5 visits (LLM calls) per problem, as the paper's run (about a million calls for 283,000).
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from saber_lib import llm as L
from saber_lib.llm.budget import check_backend_budget, check_failure_budget
from saber_lib.prompts import template
from saber_lib.topics.scorers import LLMTopicScorer
from saber_lib.topics.stage import assign_corpus

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the rehearsal's sibling modules

from paper_scale_server import start_server, stop_server  # noqa: E402
from paper_scale_sizes import n_problems, profile_ontology  # noqa: E402

#: chance that a second label scores above tau (the walk branches there)
SECOND_RATE = 0.11
#: chance that the first label (below the root: the visited node itself) is the best one
STOP_RATE = 0.05


def _label_marks() -> tuple[str, str]:
    """The prompt text right before the label lines and everything after them (from the template)."""
    user = dict(template("topic_scoring"))["user"]
    head, tail = user.split("{{labels}}")
    return head.rsplit("}}", 1)[1], tail


def prompt_labels(user: str) -> list[str]:
    """The candidate labels of a rendered ``topic_scoring`` user message, one per line, in order."""
    head, tail = _label_marks()
    if not user.endswith(tail) or head not in user:
        raise ValueError("not a topic_scoring prompt: its label list was not found")
    body = user[:len(user) - len(tail)]
    return body[body.rfind(head) + len(head):].split("\n")


def topic_answer(fail_rate: float, second_rate: float = SECOND_RATE, stop_rate: float = STOP_RATE,
                 tau: float = 0.85):
    """The mock model's answer to a ``topic_scoring`` prompt (module doc): JSON ``{"best_label",
    "scores"}`` over the prompt's labels, or (a share ``fail_rate``) a reply without JSON."""
    def answer(user: str) -> str:
        labels = list(dict.fromkeys(prompt_labels(user)))   # copies of one topic share a label (and a score)
        rng = random.Random(int.from_bytes(hashlib.blake2b(user.encode(), digest_size=8).digest(), "big"))
        if rng.random() < fail_rate:
            return "These labels all seem to fit the problem to some degree."   # no JSON: never parses
        n = len(labels)
        best = 0 if (n == 1 or rng.random() < stop_rate) else rng.randrange(1, n)
        scores = [round(rng.uniform(0.0, 0.6), 2) for _ in labels]
        scores[best] = 1.0
        if n > 1 and rng.random() < second_rate:
            other = rng.randrange(n - 1)
            scores[other + (other >= best)] = round(rng.uniform(tau + 0.01, 0.99), 2)
        return json.dumps({"best_label": labels[best], "scores": dict(zip(labels, scores))})
    return answer


def walk_problems(temps: list[dict], n: int, seed: int) -> pl.DataFrame:
    """``n`` real problems drawn from the templates, each made distinct by a case number."""
    pick = np.random.default_rng(seed).integers(len(temps), size=n)
    return pl.DataFrame({"doc_id": [f"t{i}" for i in range(n)],
                         "problem": [f"{temps[k]['problem']} (case {i})" for i, k in enumerate(pick)],
                         "solution": [temps[k].get("solution") or "" for k in pick]})


def stage_topics(scale: float, work: Path, o: dict) -> dict:
    prof, onto = profile_ontology(o)
    tp = prof.section("topics")
    n = n_problems(scale)
    corpus = walk_problems(o["templates"], n, o["seed"])
    max_rate = prof.section("llm")["max_failure_rate"]
    proc, parent, cfg = start_server(o, "topics", topic_answer)
    t0, c0 = time.perf_counter(), time.process_time()
    backend = L.make_backend(cfg, work / "llm_cache.sqlite", progress=False)
    scorer = LLMTopicScorer(backend, retries=tp["topic_retries"])
    topics, failures, record = assign_corpus(onto, corpus, scorer, tp["tau"], score_root=tp["topic_score_root"])
    topics.write_parquet(work / "topics.parquet")
    failures.write_parquet(work / "failures.parquet")
    check_failure_budget(n_calls=record["problems"], n_failed=record["failed_problems"], first_reasons=[],
                         stage="topics", max_rate=max_rate)
    check_backend_budget(backend, max_rate, "topics")
    u = backend.usage()
    backend.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server_cpu = stop_server(proc, parent)
    calls = int(u["calls"]) + int(u["failed"])
    visits = record["visits_per_depth"]
    return {"units": n, "unit": "problems", "wall_s": wall, "cpu_s": cpu, "llm_calls": calls,
            "cached": int(u["cached"]), "failed": int(u["failed"]), "server_cpu_s": server_cpu,
            "cpu_ms_per_call": 1000 * cpu / max(calls, 1), "visits_per_depth": visits,
            "visits": sum(visits), "visits_per_problem": sum(visits) / n,
            "calls_per_problem": calls / n, "failed_visits": record["failed_visits"],
            "failed_problems": record["failed_problems"], "no_topic": record["no_topic"],
            "topics_per_problem_mean": record["topics_per_problem_mean"]}
