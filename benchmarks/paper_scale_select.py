"""The signals and select stages of the paper-scale rehearsal (``bench_paper_scale.py``), with the
contract of ``paper_scale_stages.py``: ``stage(scale, work_dir, opts) -> dict``, the input built
untimed, the library's own code timed.

Synthetic input (seeded; the topics and summaries stages are not run): ``n`` problems over
``FAMILIES`` families, ten per domain. A family has a topic cluster (the children, at most six, of
an ontology node of its domain at depth 2 or 3; the clusters' subtrees do not overlap) and an idea
pool (six summary tokens of its own). Each problem draws a topic family and an idea family: with
probability ``RHO`` the same one, otherwise two independent uniform draws. Its topics are
``min(cluster size, 1 + Poisson(2.45))`` distinct nodes of its topic family's cluster (3.45 a
problem on average, less the cap), its summary five of the six pool tokens of its idea family and
two background tokens drawn from a Zipf vocabulary (seven tokens, the demo corpus's median). So for
a query whose two families agree, about ``1/FAMILIES`` of the corpus falls in each of the three
groups at the pair floors (same cluster: BMA of Lin above 0.5; same pool: Jaccard at least 4/10),
and about ``3 / (2 FAMILIES)`` of all pairs is stored (the demo corpus: 2.2%); shares of the corpus,
as for a real one, so the stored pairs grow as ``n^2``.

* ``signals``: :func:`saber_lib.signals.stage.compute_signals_stage` (IC, Lin matrix, tokens, all
  pairs, histograms and the pair store written to disk) on the profile's local executor with the
  profile's ``signals`` parameters. ``cpu_s`` counts this process and its pool workers.
* ``select``: the pair store built untimed (the same code, in a forked process, so the peak RSS is
  the selection's), then timed: :func:`thresholds.sweep` and :func:`thresholds.find_thresholds`
  (the profile's ``thresholds`` section) and :func:`selection.benchmark.select_benchmark` of
  ``round(1000 x scale)`` queries x 3 K candidates over the profile's domains. ``Q_min`` scales
  with the queries (150 of 1,000), K does not. Below ``SELECT_MIN_PROBLEMS`` problems a query
  cannot reach K = 50 candidates in every group, so the select stage runs on at least that many
  (its ``units`` say so). Its unit is problems, not queries: the sweep reads every query's
  histogram (linear in the problems, most of the stage's time) and the eligibility count every
  stored pair (the problems squared times the stored share); only the sampling of candidates
  grows with the selected queries.
"""
from __future__ import annotations

import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # a spawned process imports this module by name

from saber_lib.core.config import load_profile  # noqa: E402
from saber_lib.core.parallel import make_executor  # noqa: E402
from saber_lib.selection.benchmark import select_benchmark  # noqa: E402
from saber_lib.signals.stage import compute_signals_stage  # noqa: E402
from saber_lib.signals.store import SignalStore  # noqa: E402
from saber_lib.signals.thresholds import find_thresholds, sweep  # noqa: E402
from saber_lib.topics.assign import problem_domains  # noqa: E402
from paper_scale_sizes import PAPER, n_problems, n_queries, profile_ontology  # noqa: E402

FAMILIES = 50          # ten a domain
RHO = 0.5              # share of problems whose topic family and idea family agree
POOL, FROM_POOL, BACKGROUND, VOCAB = 6, 5, 2, 5000
SELECT_MIN_PROBLEMS = 6000


def _word(prefix: str, k: int) -> str:
    """A token of letters only (``summary_tokens`` keeps it as is): ``prefix`` + ``k`` in base 26."""
    s = ""
    while True:
        k, r = divmod(k, 26)
        s = chr(97 + r) + s
        if k == 0:
            return prefix + s


def topic_clusters(ontology, domains, per_domain: int, seed: int = 0) -> list[list[int]]:
    """``per_domain`` clusters a domain (domain order): the first six children of an ontology node at
    depth 2 or 3 with four children or more, drawn without overlapping subtrees (seeded)."""
    rng = np.random.default_rng(seed)
    nc = ontology.n_children()
    out = []
    for d in domains:
        cand = [v for v in range(ontology.n_nodes) if ontology.depth[v] in (2, 3) and nc[v] >= 4
                and ontology.domain[v] == d]
        taken: list[int] = []
        for v in rng.permutation(cand).tolist():
            lo, hi = v, v + int(ontology.size[v])
            if all(hi <= t or lo >= t + int(ontology.size[t]) for t in taken):
                taken.append(v)
            if len(taken) == per_domain:
                break
        if len(taken) < per_domain:
            raise ValueError(f"domain {d!r}: only {len(taken)} disjoint clusters in the ontology")
        out += [ontology.children(v)[:POOL].tolist() for v in taken]
    return out


def synthetic_inputs(ontology, domains, n: int, seed: int = 0):
    """``(corpus, topics, summaries, fam)`` frames of ``n`` synthetic problems (module doc); ``fam``
    is the ``(n, 2)`` array of each problem's topic family and idea family."""
    rng = np.random.default_rng(seed)
    clusters = topic_clusters(ontology, domains, FAMILIES // len(domains), seed)
    f = len(clusters)
    same = rng.random(n) < RHO
    ft = rng.integers(f, size=n)
    fs = np.where(same, ft, rng.integers(f, size=n))
    k = 1 + rng.poisson(2.45, size=n)
    zipf = 1.0 / (np.arange(VOCAB) + 10.0)
    bg = rng.choice(VOCAB, size=(n, BACKGROUND), p=zipf / zipf.sum())
    ids, nodes, doms, texts = [], [], [], []
    for i in range(n):
        c = clusters[ft[i]]
        ns = sorted(rng.choice(c, size=min(len(c), k[i]), replace=False).tolist())
        pool = rng.choice(POOL, size=FROM_POOL, replace=False)
        words = [_word(f"idea{_word('', int(fs[i]))}x", int(p)) for p in pool] + [_word("zz", int(b)) for b in bg[i]]
        ids.append(f"p{i}")
        nodes.append(ns)
        doms.append(problem_domains(ontology, ns))
        texts.append(" ".join(words))
    corpus = pl.DataFrame({"doc_id": ids})
    topics = pl.DataFrame({"doc_id": ids, "node_ids": nodes, "domains": doms, "failed": [False] * n},
                          schema={"doc_id": pl.String, "node_ids": pl.List(pl.Int64), "domains": pl.List(pl.String),
                                  "failed": pl.Boolean})
    summaries = pl.DataFrame({"doc_id": ids, "summary_text": texts})
    return corpus, topics, summaries, np.stack([ft, fs], axis=1)


def _signals(prof, onto, n: int, out_dir: Path, seed: int) -> tuple[dict, pl.DataFrame]:
    """The input (untimed) and the signals stage on it (timed): (stats and wall, topics frame)."""
    corpus, topics, summaries, _ = synthetic_inputs(onto, prof.section("select")["domains"], n, seed)
    p = prof.section("signals")
    kids0 = _children_cpu()
    t0, c0 = time.perf_counter(), time.process_time()
    with make_executor("local", p["workers"]) as pool:
        st = compute_signals_stage(corpus, topics, summaries, onto, out_dir, hist_bins=p["hist_bins"],
                                   pair_floor_topic=p["pair_floor_topic"], pair_floor_summ=p["pair_floor_summ"],
                                   jaccard_empty=p["jaccard_empty"], memory_budget_mb=p["memory_budget_mb"],
                                   workers=p["workers"], executor=pool)
    st["stage_wall_s"] = time.perf_counter() - t0
    st["driver_cpu_s"] = time.process_time() - c0
    st["stage_cpu_s"] = st["driver_cpu_s"] + _children_cpu() - kids0   # the pool's workers, reaped
    return st, topics


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def stage_signals(scale: float, work: Path, o: dict) -> dict:
    prof, onto = profile_ontology(o)
    n = n_problems(scale)
    st, _ = _signals(prof, onto, n, work / "signals", o["seed"])
    return {"units": n, "unit": "problems", "wall_s": st["stage_wall_s"], "cpu_s": st["stage_cpu_s"], "llm_calls": 0,
            "pairs_wall_s": st["wall_s"], "pairs_cpu_s": st["cpu_s"],
            "driver_cpu_s": st["driver_cpu_s"], "workers": st["workers"], "pairs": st["n_pairs"],
            "stored": st["n_stored"], "stored_share": st["n_stored"] / st["n_pairs"],
            "topic_pair_evals": st["topic_pair_evals"], "used_topics": st["n_used_topics"],
            "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "block": st["block"], "col_tile": st["col_tile"]}


def _build_store(profile: str, data_dir, n: int, out: str, seed: int, conn) -> None:
    prof, onto = profile_ontology({"profile": profile, "data_dir": data_dir})
    st, topics = _signals(prof, onto, n, Path(out), seed)
    topics.select("doc_id", "domains").write_parquet(Path(out) / "domains.parquet")
    conn.send({"wall_s": st["stage_wall_s"], "cpu_s": st["stage_cpu_s"], "stored": st["n_stored"]})


def stage_select(scale: float, work: Path, o: dict) -> dict:
    prof = load_profile(o["profile"])
    n = max(SELECT_MIN_PROBLEMS, n_problems(scale))
    nq = n_queries(scale)
    th, sel = prof.section("thresholds"), prof.section("select")
    q_min = max(1, round(th["Q_min"] * nq / PAPER["queries"]))
    store_dir = Path(tempfile.mkdtemp(prefix="paper_scale_store_"))
    try:   # the store, untimed, in a process of its own (its peak RSS is not the selection's); spawned,
        # not forked: a fork after polars has started its threads can hang
        parent, child = mp.Pipe()
        proc = mp.get_context("spawn").Process(target=_build_store,
                                               args=(o["profile"], o.get("data_dir"), n, str(store_dir), o["seed"], child))
        proc.start()
        proc.join()
        if proc.exitcode:
            raise RuntimeError(f"building the signal store of {n} problems failed (exit code {proc.exitcode})")
        built = parent.recv()
        qd = pl.read_parquet(store_dir / "domains.parquet")["domains"].to_list()
        doms = list(sel["domains"])
        t0, c0 = time.perf_counter(), time.process_time()
        store = SignalStore.open(store_dir)
        sw = sweep(store, qd, doms, k_values=[th["K"]])
        t_sweep = time.perf_counter() - t0
        res = find_thresholds(sw, K=th["K"], Q_min=q_min, rule=th["threshold_rule"],
                              quantile=th["threshold_quantile"], tau_topic=th["tau_topic"], tau_summ=th["tau_summ"],
                              floor_topic=store.meta["pair_floor_topic"], floor_summ=store.meta["pair_floor_summ"],
                              order=th["threshold_search"])
        t_find = time.perf_counter() - t0 - t_sweep
        bench, rep = select_benchmark(store, qd, tau_topic=res["tau_topic"], tau_summ=res["tau_summ"], K=th["K"],
                                      n_queries=nq, domains=doms, seed=o["seed"],
                                      fill_shortfall=sel["fill_shortfall"])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        store_mb = store.bytes_on_disk() / 2**20
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    bench.write_parquet(work / "benchmark.parquet")
    per_group = bench.group_by("query_id", "group").len()["len"]
    return {"units": n, "unit": "problems", "wall_s": wall, "cpu_s": cpu, "llm_calls": 0,
            "sweep_s": t_sweep, "find_s": t_find, "select_s": wall - t_sweep - t_find,
            "queries": nq, "K": th["K"], "Q_min": q_min, "tau_topic": res["tau_topic"], "tau_summ": res["tau_summ"],
            "feasible": res["feasible"], "eligible_per_domain": rep["eligible_queries"],
            "selected_per_domain": rep["selected"], "n_selected": rep["n_selected"],
            "filled_from_other_domains": rep["filled_from_other_domains"], "rows": bench.height,
            "rows_per_group_min": int(per_group.min()), "rows_per_group_max": int(per_group.max()),
            "store_stored_pairs": built["stored"], "store_mb": store_mb, "store_build_wall_s": built["wall_s"],
            "store_build_cpu_s": built["cpu_s"]}
