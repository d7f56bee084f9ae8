"""The stages of the paper-scale rehearsal (``bench_paper_scale.py``), each a function
``stage(scale, work_dir, opts) -> dict`` that builds its input (not timed), runs the library's own
code on it (timed: ``wall_s``, ``cpu_s`` of this process, all threads) and returns its figures.

Sizes: the counts scale with ``scale`` (problems, queries and so judgments); the per-item shapes are
the paper's at every scale (150 candidates per query, 20 Swiss rounds, 3 settings, 10,000
resamples, 50 systems), so a stage's cost at scale 1 is a projection along one count, ``units``.

What is synthetic (every generator is seeded):

* dedup: a corpus of ``283,000 x scale`` problems made from the real sources (the templates): each
  fresh problem is a real one with a quarter of its words replaced by words drawn from the corpus
  and its numbers renumbered (a distinct problem under the dedup rules); on top, planted copies at
  known rates: ``exact`` (verbatim, same source), ``near`` (another, lower-priority source,
  re-typeset (``$..$`` -> ``\\(..\\)``) and one word reworded) and ``renumbered`` (another source,
  other numbers in the same words: *not* a duplicate by the number check, so it must be kept);
* summaries: ``283,000 x scale`` real problems (each made distinct by a case number) summarized by
  the real ``summaries.summarize_llm`` (prompt, parser, validator, one retry) through the same
  backend, cache and budget as the judge; the mock answers a summary JSON that parses (a share
  ``fail_rate`` do not);
* topics: ``283,000 x scale`` real problems walked down the real MathWorld tree by the topics
  stage's own LLM scorer and walk (``paper_scale_topics.py``), the mock naming the labels it reads
  from each prompt;
* tournament, evaluate: the benchmark table (queries x 150 candidates) draws its texts from the real
  problems; the judge is the real LLM judge through the real ``openai`` backend, cache and failure
  budget, answered by the project's mock server (``saber_lib.llm.mock_server``) in a separate
  process with a verdict ``\\boxed{1|2}`` from a hash of the prompt (a share ``fail_rate`` of
  prompts never parse, so retries and the failure budget run); evaluate's ratings are random 0..5;
* leaderboard: 50 systems' per-query scores in the three tasks (``bench_leaderboard.synthetic``),
  written as the authors' evaluation files and read back by ``saber leaderboard --task all``.
"""
from __future__ import annotations

import multiprocessing as mp
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from saber_lib import llm as L  # noqa: E402
from saber_lib.core.config import DOMAINS, load_profile  # noqa: E402
from saber_lib.corpus import dedup, load_source  # noqa: E402
from saber_lib.evaluate import tables  # noqa: E402
from saber_lib.evaluate.retrievers import get_retriever, score_benchmark  # noqa: E402
from saber_lib.judging.registry import JudgeSettings  # noqa: E402
from saber_lib.judging.spec_judges import judge_from_profile  # noqa: E402
from saber_lib.judging.tournament import Doc, run_tournament  # noqa: E402
from saber_lib.leaderboard import report  # noqa: E402
from saber_lib.llm.budget import check_backend_budget  # noqa: E402
from saber_lib.llm.mock_server import MockChatServer  # noqa: E402
from saber_lib.summaries.summarize import summaries_frame, summarize_llm  # noqa: E402
from paper_scale_topics import stage_topics, topic_answer  # noqa: E402 (the topic walk: its own module)
from paper_scale_select import stage_select, stage_signals  # noqa: E402 (signals and selection: their own module)
from paper_scale_sizes import PAPER, n_problems, n_queries  # noqa: E402

#: lexical retrievers of the paper profile (approach0 needs its own binary; encoders are timed elsewhere)
LEXICAL = ["bm25", "tfidf", "jaccard", "bm25-a0", "tfidf-a0", "jaccard-a0", "bm25-ws", "tfidf-ws", "jaccard-ws"]
SETTINGS = ["statement-full", "full-full", "statement-statement"]
RATES = {"exact": 0.01, "near": 0.05, "renumbered": 0.02}
_NUM = re.compile(r"\d+")


def templates(profile: str, data_dir, per_source: int = 0) -> list[dict]:
    """The real problems of the profile's sources (the templates of every synthetic text);
    ``per_source`` > 0 keeps the first that many of each source (a quick run)."""
    p = load_profile(profile).section("corpus")
    recs = [r for s in p["sources"] for r in load_source(s, data_dir, per_source).records]
    return [r for r in recs if r["problem"] and len(r["problem"].split()) >= 8]


# ------------------------------------------------------------------------------------------- dedup
def _renumber(text: str, rng) -> str:
    return _NUM.sub(lambda m: str(int(rng.integers(2, 10_000))), text)


def _fresh(t: dict, vocab: list[str], rng) -> str:
    words = t["problem"].split()
    swap = rng.random(len(words)) < 0.25
    words = [vocab[rng.integers(len(vocab))] if s else w for w, s in zip(words, swap)]
    return _renumber(" ".join(words), rng) + f" (case {int(rng.integers(10_000, 10**9))})"


def _retypeset_reword(text: str, vocab: list[str], rng) -> str:
    text = re.sub(r"\$([^$]+)\$", r"\\(\1\\)", text)
    words = text.split()
    k = int(rng.integers(len(words)))
    words[k] = vocab[rng.integers(len(vocab))] if not _NUM.search(words[k]) else words[k]
    return " ".join(words)


def synthetic_corpus(temps: list[dict], sources: list[str], n: int, seed: int = 0):
    """``n`` records over ``sources`` (module doc) and the planted copies per kind."""
    rng = np.random.default_rng(seed)
    vocab = [w for t in temps[:2000] for w in t["problem"].split() if w.isalpha()]
    n_copy = {k: int(round(n * r)) for k, r in RATES.items()}
    n_fresh = n - sum(n_copy.values())
    recs = []
    for i in range(n_fresh):
        t = temps[rng.integers(len(temps))]
        src = sources[i % len(sources)]
        recs.append({"doc_id": f"{src}:f{i}", "source": src, "source_id": f"f{i}", "problem": _fresh(t, vocab, rng),
                     "solution": t.get("solution")})
    for kind, m in n_copy.items():
        for i in range(m):
            base = recs[rng.integers(n_fresh)]
            rank = sources.index(base["source"])
            if kind == "exact":
                src, text = base["source"], base["problem"]
            else:
                while rank == len(sources) - 1:   # a copy goes to a source of lower priority than its base's
                    base = recs[rng.integers(n_fresh)]
                    rank = sources.index(base["source"])
                src = sources[int(rng.integers(rank + 1, len(sources)))]
                text = (_retypeset_reword(base["problem"], vocab, rng) if kind == "near"
                        else _renumber(base["problem"].rsplit(" (case", 1)[0], rng) + " (case 7)")
            rid = f"{kind[0]}{i}"
            recs.append({"doc_id": f"{src}:{rid}", "source": src, "source_id": rid, "problem": text,
                         "solution": base.get("solution")})
    order = rng.permutation(len(recs))
    return [recs[i] for i in order], n_copy


def stage_dedup(scale: float, work: Path, o: dict) -> dict:
    p = load_profile(o["profile"]).section("corpus")
    n = n_problems(scale)
    recs, planted = synthetic_corpus(o["templates"], p["sources"], n, o["seed"])
    t0, c0 = time.perf_counter(), time.process_time()
    ex = dedup.exact_within_source(recs)
    kept = [r for r, k in zip(recs, ex.keep) if k]
    near = dedup.near_cross_source(kept, p["sources"], p["shingle_size"], p["minhash_bands"], p["minhash_rows"],
                                   p["minhash_seed"], p["near_dup_threshold"], p["near_dup_number_check"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    kinds = [e["removed_id"].split(":")[1][0] for e in near.log]
    return {"units": n, "unit": "problems", "wall_s": wall, "cpu_s": cpu, "llm_calls": 0,
            "planted": planted, "removed_exact": len(ex.log), "removed_near": len(near.log),
            "removed_near_planted": kinds.count("n"), "removed_renumbered": kinds.count("r"),
            "removed_fresh": kinds.count("f"), "lsh_candidate_pairs": near.candidate_pairs}


# ------------------------------------------------------------------------------- the benchmark table
def synthetic_benchmark(temps: list[dict], q: int, seed: int = 0):
    """``q`` queries x 150 candidates with real texts: (benchmark frame, docs, corpus frame)."""
    rng = np.random.default_rng(seed)
    c = PAPER["candidates"]
    ids = [f"d{i}" for i in range(q * (c + 1))]
    pick = rng.integers(len(temps), size=len(ids))
    docs = {d: Doc(d, temps[k]["problem"], temps[k].get("solution") or "") for d, k in zip(ids, pick)}
    qids, cands = ids[:q], np.array(ids[q:]).reshape(q, c)
    groups = ["both", "topic", "summary"]
    bench = pl.DataFrame({"query_id": np.repeat(qids, c), "cand_id": cands.ravel(),
                          "position": np.tile(np.arange(c), q), "group": [groups[k // 50] for k in np.tile(np.arange(c), q)]})
    corpus = pl.DataFrame({"doc_id": ids, "problem": [docs[d].problem for d in ids],
                           "solution": [docs[d].solution for d in ids]})
    return bench, docs, corpus


# ----------------------------------------------------------------------------------------- the judge
def _verdict(fail_rate: float):
    def answer(user: str) -> str:
        h = zlib.crc32(user.encode())
        if (h % 100_000) / 100_000 < fail_rate:
            return "Notes: the two candidates look alike; no decision."
        return f"Notes: candidate {1 + (h >> 20) % 2} shares the main technique.\n\\boxed{{{1 + (h >> 20) % 2}}}"
    return answer


def _summary(fail_rate: float):
    def answer(user: str) -> str:
        h = zlib.crc32(user.encode())
        if (h % 100_000) / 100_000 < fail_rate:
            return "The solution rests on a careful case analysis."    # no JSON: does not parse
        idea = ["an invariant", "a bijection", "the pigeonhole principle", "a substitution"][(h >> 20) % 4]
        return ('{"noCoreIdea": false, "coreIdea": "The key is ' + idea + ' that reduces the problem to a '
                'simpler one.", "supportingIdeas": ["check small cases", "look for symmetry"], '
                '"keywords": ["' + idea + '", "reduction"], "confidence": 0.8}')
    return answer


ANSWERS = {"judge": _verdict, "summary": _summary, "topics": topic_answer}


def _serve(limit: int, latency: float, fail_rate: float, conn, kind: str = "judge") -> None:
    srv = MockChatServer(latency_s=latency, limit=limit, answer_fn=ANSWERS[kind](fail_rate), count_prompts=False)
    conn.send(srv.url)
    c0 = time.process_time()
    conn.recv()
    conn.send(time.process_time() - c0)
    srv.stop()


def _start_server(o: dict, kind: str):
    """The mock server in a process of its own (its CPU is not the workbench's): (process, pipe, config)."""
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_serve, args=(o["concurrency"], o["latency"], o["fail_rate"], child,
                                                                kind), daemon=True)
    proc.start()
    url = parent.recv()
    cfg = {"backend": "openai", "model": f"bench/mock-{kind}", "base_urls": [url], "api_key_env": "SABER_NO_KEY",
           "max_concurrency": o["concurrency"], "server_concurrency": o["concurrency"], "server_retry_s": 30.0,
           "timeout_s": 600.0, "max_retries": 2, "retry_backoff_s": 0.1, "temperature": 1.0, "max_tokens": 16384,
           "reasoning_effort": "high", "cache_flush_every": 64}
    return proc, parent, cfg


def _stop_server(proc, parent) -> float:
    parent.send("stop")
    cpu = parent.recv()
    proc.join(5)
    return cpu


def stage_summaries(scale: float, work: Path, o: dict) -> dict:
    n = n_problems(scale)
    rng = np.random.default_rng(o["seed"])
    temps = o["templates"]
    pick = rng.integers(len(temps), size=n)
    ids = [f"s{i}" for i in range(n)]
    # each problem made distinct (a case number), as the deduplicated corpus's problems are
    problems = [f"{temps[k]['problem']} (case {i})" for i, k in enumerate(pick)]
    solutions = [temps[k].get("solution") or "" for k in pick]
    proc, parent, cfg = _start_server(o, "summary")
    t0, c0 = time.perf_counter(), time.process_time()
    backend = L.make_backend(cfg, work / "llm_cache.sqlite", progress=False)
    rows, counts = summarize_llm(backend, ids, problems, solutions, max_words=30, retries=1)
    check_backend_budget(backend, 0.02, "summaries")
    summaries_frame(rows).write_parquet(work / "summaries.parquet")
    u = backend.usage()
    backend.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server_cpu = _stop_server(proc, parent)
    calls = int(u["calls"]) + int(u["failed"])
    return {"units": n, "unit": "problems", "wall_s": wall, "cpu_s": cpu, "llm_calls": calls,
            "cached": int(u["cached"]), "failed": int(u["failed"]), "failures": sum(r["failed"] for r in rows),
            "server_cpu_s": server_cpu, "cpu_ms_per_call": 1000 * cpu / max(calls, 1)}


def _tournament(scale: float, work: Path, o: dict, swap: bool) -> dict:
    q = n_queries(scale)
    bench, docs, _ = synthetic_benchmark(o["templates"], q, o["seed"])
    tp = load_profile(o["profile"]).section("tournament")
    proc, parent, cfg = _start_server(o, "judge")
    rounds: list[tuple[int, float, float]] = []
    t0, c0 = time.perf_counter(), time.process_time()
    backend = L.make_backend(cfg, work / "llm_cache.sqlite", progress=False)
    settings = JudgeSettings.paper(judge="llm", judge_retries=tp["judge_retries"], swap_disagreement=tp["swap_disagreement"])
    judge = judge_from_profile(settings, backend, position_swap=swap)
    res = run_tournament(bench, docs, judge, schedule="swiss", rounds=PAPER["rounds"], seed=o["seed"],
                         store_dir=work / "judgments", progress=lambda r, _t: rounds.append(
                             (r, time.perf_counter(), time.process_time())))
    check_backend_budget(backend, 0.02, "tournament")
    u = backend.usage()
    backend.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server_cpu = _stop_server(proc, parent)
    pairs = res.judgments.height
    calls = int(u["calls"]) + int(u["failed"])
    per_round = []
    prev = (t0, c0)
    for r, w, c in rounds:
        per_round.append({"round": r, "wall_s": w - prev[0], "cpu_s": c - prev[1]})
        prev = (w, c)
    out = {"units": pairs * (2 if swap else 1), "unit": "judgments", "wall_s": wall, "cpu_s": cpu, "llm_calls": calls,
           "cached": int(u["cached"]), "failed": int(u["failed"]),
           "failures": int((res.judgments["outcome"] == "failure").sum()), "server_cpu_s": server_cpu,
           "queries": q, "pairs": pairs, "position_swap": swap, "cpu_ms_per_call": 1000 * cpu / max(calls, 1),
           "per_round": per_round}
    if swap:   # each pair asked in both orders: a judgment is one order's answer
        out.update(position_bias_rate=judge.position_bias_rate, first_position_rate=judge.first_position_rate)
    return out


def stage_tournament(scale: float, work: Path, o: dict) -> dict:
    """The 20 Swiss rounds, each pair asked once (the paper profile: ``position_swap: false``)."""
    return _tournament(scale, work, o, swap=False)


def stage_tournament_swap(scale: float, work: Path, o: dict) -> dict:
    """The same rounds with every pair asked in both orders (``position_swap: true``); units are the
    single-order judgments (twice the pairs), as ``saber plan`` counts them for such a profile."""
    return _tournament(scale, work, o, swap=True)


# -------------------------------------------------------------------------------------- evaluate
def stage_evaluate(scale: float, work: Path, o: dict) -> dict:
    q = n_queries(scale)
    bench, _, corpus = synthetic_benchmark(o["templates"], q, o["seed"])
    rng = np.random.default_rng(o["seed"])
    ratings = bench.select("query_id", "cand_id", "position").with_columns(
        pl.Series("rating", rng.uniform(0, 5, bench.height)))
    qd = {qid: [DOMAINS[i % len(DOMAINS)]] for i, qid in enumerate(bench["query_id"].unique(maintain_order=True))}
    t0, c0 = time.perf_counter(), time.process_time()
    parts = []
    for name in LEXICAL:
        r = get_retriever(name)
        for s in SETTINGS:
            parts.append(score_benchmark(r, bench, corpus, s))
    t_score = time.perf_counter() - t0
    scores = pl.concat(parts)
    nd = tables.ndcg_table(scores, ratings, k=10)
    t_ndcg = time.perf_counter() - t0 - t_score
    summ = tables.summarize(nd, qd, DOMAINS, n_bootstrap=PAPER["resamples"], seed=o["seed"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    summ.write_parquet(work / "summary.parquet")
    return {"units": q, "unit": "queries", "wall_s": wall, "cpu_s": cpu, "llm_calls": 0,
            "score_s": t_score, "ndcg_s": t_ndcg, "bootstrap_s": wall - t_score - t_ndcg,
            "scored_pairs": scores.height}


# ----------------------------------------------------------------------------------- leaderboard
def stage_leaderboard(scale: float, work: Path, o: dict) -> dict:
    """``saber leaderboard --task all`` (its ``run``: read and check the published files, intervals,
    pairwise tests, tables and figures) on 50 synthetic systems written as the authors' files."""
    import bench_leaderboard  # the benchmark's own generator (benchmarks/ on the path)
    from saber_lib.leaderboard import cli as lb_cli
    from saber_lib.leaderboard import published as pub
    q = max(5, n_queries(scale))
    systems = bench_leaderboard.synthetic(PAPER["systems"], q, o["seed"], tasks=pub.TASKS)
    for s in systems:                       # the input, not timed: one evaluation file per system
        pub.write_evaluation_file(work / "published" / "evaluation" / f"{s.name}__p0.json", s)
    args = lb_cli.build_parser().parse_args(["--published", str(work / "published"), "--task", "all",
                                             "--n-resamples", str(PAPER["resamples"]), "--seed", str(o["seed"]),
                                             "--out", str(work / "leaderboard")])
    t0, c0 = time.perf_counter(), time.process_time()
    files = lb_cli.run(args)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    pw = pl.read_parquet(work / "leaderboard" / "pairwise.parquet")
    return {"units": q, "unit": "queries", "wall_s": wall, "cpu_s": cpu, "llm_calls": 0,
            "systems": PAPER["systems"], "tasks": len(pub.TASKS), "files_written": len(files),
            "significant_pairs": report.n_significant(pw)}


STAGES = {"dedup": stage_dedup, "topics": stage_topics, "summaries": stage_summaries, "tournament": stage_tournament,
          "signals": stage_signals, "select": stage_select, "evaluate": stage_evaluate, "leaderboard": stage_leaderboard,
          "tournament_swap": stage_tournament_swap}
