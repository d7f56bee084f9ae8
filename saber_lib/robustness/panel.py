"""The robustness stage's recipes (notebook ``15_robustness``): a panel of judges by name, the
sample of judged pairs they see, their flip rates, order effects and agreement, and judging that
stops measured against the plain Swiss tournament, on a finished run and on the simulated judge.

Judges are judge specs of the judge registry (``saber_lib.judging.registry``), built in one
:class:`~saber_lib.judging.registry.JudgeContext`: e.g. ``proxy:use-m`` (the demo's tournament judge),
``proxy:nomic-embed`` (a second family that is none of the evaluated retrievers, through llama.cpp,
slow on a CPU), ``simulated`` (reads ids only, so every text rewrite leaves it unchanged: a
reference for the flip rates, not a judge of mathematics) and ``llm:logprob`` (the configured LLM
backend in log-probability mode, summed over both orders).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..embed import EncoderUnavailable
from ..judging.registry import JudgeContext, build_judge
from ..judging.tournament import Doc
from . import simulate
from .invariance import flip_table, flip_verdicts, shown_judgments
from .order_effect import judge_agreement_table, order_effect_table
from .rewriters import Rewriter
from .stopping import batch_judge, compare_to_plain, run_with_stopping


# retrievers of the simulated benchmark: noise sd on the latent strength (best to worst), as in
# benchmarks/bench_stopping.py
SIM_QUALITIES = {"sim-r1": 0.3, "sim-r2": 0.6, "sim-r3": 1.0, "sim-r4": 1.5, "sim-r5": 2.5, "sim-r6": 4.0}


def build_panel(fast: Sequence[str], slow: Sequence[str], pairs: Sequence[tuple[str, str, str]], n_fast: int,
                n_slow: int, judge_ctx: JudgeContext) -> tuple[dict, dict, list[str]]:
    """The judges of the panel, the pairs each one sees (the first ``n_fast`` of ``pairs`` for the
    fast judges, the first ``n_slow`` for the slow ones) and notes on judges that could not be
    built or were not run. The judges are specs built in ``judge_ctx``."""
    judges, pairs_by, notes = {}, {}, []
    for names, n in ((fast, n_fast), (slow, n_slow)):
        for name in names:
            if name in judges:
                continue
            if n <= 0:
                notes.append(f"judge {name}: not run (its sample size is 0)")
                continue
            try:
                judges[name] = build_judge(name, judge_ctx)
            except (ValueError, KeyError, EncoderUnavailable) as e:
                notes.append(f"judge {name}: not available ({e})")
                continue
            pairs_by[name] = list(pairs[:n])
    return judges, pairs_by, notes


def sample_judged_pairs(judgments, n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` distinct judged pairs ``(query_id, a, b)`` (a shown first in the tournament), drawn
    uniformly without replacement from the non-failed judgments (seeded; all when fewer), in the
    order drawn (so the first ``m`` are a uniform sample of ``m``)."""
    ok = judgments.filter(pl.col("outcome") != "failure").with_columns(
        pl.min_horizontal("a", "b").alias("lo"), pl.max_horizontal("a", "b").alias("hi"))
    uniq = ok.unique(["query_id", "lo", "hi"], keep="first", maintain_order=True).sort("query_id", "lo", "hi")
    if n <= 0 or uniq.height == 0:
        return []
    rng = np.random.default_rng(seed)
    pick = rng.permutation(uniq.height)[:n]
    return [tuple(r) for r in uniq[pick.tolist()].select("query_id", "a", "b").iter_rows()]


def triples_of(pairs: Sequence[tuple[str, str, str]], docs: Mapping[str, Doc]) -> list[tuple]:
    """The documents of each ``(query_id, a, b)``."""
    return [(docs[q], docs[a], docs[b]) for q, a, b in pairs]


def judge_panel(judges: Mapping[str, object], pairs_by_judge: Mapping[str, Sequence[tuple[str, str, str]]],
                docs: Mapping[str, Doc], rewriters: Mapping[str, Rewriter]) -> dict:
    """Every judge on its sample of pairs under every transformation.

    Returns ``flips`` (:func:`~saber_lib.robustness.invariance.flip_table` with a ``judge`` column
    first), ``verdicts`` (all verdicts, with ``judge``, ``query_id``, ``a``, ``b``), ``shown`` (per
    judge, its original and order-swapped verdicts as judgments in the order shown), ``order``
    (:func:`~saber_lib.robustness.order_effect.order_effect_table` per judge), ``kappa`` (Cohen's
    kappa per pair of judges, on the pairs both judged) and ``alpha`` (Krippendorff's alpha)."""
    flips, verdicts, shown = [], [], {}
    for name, judge in judges.items():
        pairs = list(pairs_by_judge[name])
        if not pairs:
            continue
        v = flip_verdicts(judge, triples_of(pairs, docs), rewriters)
        flips.append(flip_table(v).select(pl.lit(name).alias("judge"), pl.all()))
        ids = pl.DataFrame(pairs, schema=["query_id", "a", "b"], orient="row").with_row_index("item")
        verdicts.append(v.join(ids.with_columns(pl.col("item").cast(pl.Int64)), on="item", how="left")
                        .select(pl.lit(name).alias("judge"), pl.all()))
        shown[name] = shown_judgments(v, pairs, name)
    flips_df = pl.concat(flips) if flips else pl.DataFrame()
    verdicts_df = pl.concat(verdicts) if verdicts else pl.DataFrame()
    order = pl.concat([order_effect_table(j) for j in shown.values()]) if shown else pl.DataFrame()
    # agreement on the original order only (the swapped verdicts are the same units again)
    originals = {k: j.head(j.height // 2) for k, j in shown.items()}
    kappa, alpha = judge_agreement_table(originals) if len(originals) >= 2 else (pl.DataFrame(), math.nan)
    return {"flips": flips_df, "verdicts": verdicts_df, "shown": shown, "order": order, "kappa": kappa,
            "alpha": alpha}


def stopping_on_run(benchmark, judgments, ratings, scores, judge, docs: Mapping[str, Doc], *, rounds: int,
                    seed: int = 0, alpha: float = 0.5, top: float = 5.0, k: int = 10, test_alpha: float = 0.05,
                    n_permutations: int = 10_000, **rule) -> dict:
    """Judging that stops, replayed on a finished tournament: the same Swiss pairs, order coin flips
    and judge as the tournament (``judgments``, ``ratings``: its tables, played for ``rounds``
    rounds), stopping each query by ``rule`` (keywords of
    :func:`~saber_lib.robustness.stopping.run_with_stopping`). Returns ``summary`` (one row) and
    ``systems`` (mean nDCG@k per system under both rating tables). Conclusions are compared by
    :func:`~saber_lib.robustness.stopping.compare_to_plain` (paired sign-flip tests with
    ``n_permutations`` draws, Holm-adjusted, at ``test_alpha``)."""
    qids = ratings["query_id"].unique(maintain_order=True).to_list()
    b = benchmark.filter(pl.col("query_id").is_in(qids)).sort("query_id", "position")
    cand_ids = {q: g["cand_id"].to_list() for (q,), g in b.group_by(["query_id"], maintain_order=True)}
    res = run_with_stopping(qids, cand_ids, batch_judge(judge, docs), scores, max_rounds=rounds, seed=seed,
                            alpha=alpha, top=top, k=k, batch=True, judge_name=judge.name, progress=False, **rule)
    plain_n = judgments.filter(pl.col("round") <= rounds).height
    return _summary("run", judge.name, res, plain_n, ratings, scores, k, test_alpha, n_permutations, seed)


def stopping_on_simulation(*, n_queries: int, n_cands: int, rounds: int, qualities: Mapping[str, float],
                           agreement: float = 0.78, seed: int = 0, alpha: float = 0.5, top: float = 5.0,
                           k: int = 10, test_alpha: float = 0.05, n_permutations: int = 10_000, **rule) -> dict:
    """The same comparison on a synthetic benchmark (:mod:`.simulate`) with a Bradley-Terry judge of
    the given agreement and retrievers of the given noise (name -> sd), against plain Swiss at
    ``rounds``."""
    bench = simulate.SyntheticBenchmark(n_queries, n_cands, seed=seed)
    judge = bench.judge(agreement=agreement, seed=seed)
    scores = bench.scores(qualities, seed=seed + 1)
    plain_j = simulate.swiss_judgments(bench, judge, rounds=rounds, seed=seed)
    plain = simulate.ratings_table(bench, plain_j, alpha=alpha, top=top)
    res = run_with_stopping(bench.query_ids, bench.cand_ids, judge, scores, max_rounds=rounds, seed=seed,
                            alpha=alpha, top=top, k=k, progress=False, **rule)
    return _summary("simulated", judge.name, res, plain_j.height, plain, scores, k, test_alpha, n_permutations, seed)


def _summary(where, judge_name, res, plain_n, plain_ratings, scores, k, test_alpha, n_permutations, seed) -> dict:
    cmp = compare_to_plain(res.ratings, plain_ratings, scores, k=k, alpha=test_alpha, n_permutations=n_permutations,
                           seed=seed)
    summary = pl.DataFrame([{
        "benchmark": where, "judge": judge_name, "queries": res.rounds.height,
        "judgments_swiss": plain_n, "judgments_stopping": res.n_judgments,
        "share": res.n_judgments / plain_n if plain_n else math.nan,
        "mean_rounds": float(res.rounds["rounds"].mean()), "kendall_tau": cmp["kendall_tau"],
        "same_order": cmp["same_order"], "max_abs_ndcg_change": cmp["max_abs_change"],
        "significant_pairs": cmp["significant_pairs"], "significant_kept": cmp["significant_kept"],
        "new_significant": cmp["new_significant"], "conclusions_kept": cmp["conclusions_kept"],
        "share_keeping_conclusions": res.n_judgments / plain_n if plain_n and cmp["conclusions_kept"] else math.nan}])
    systems = pl.DataFrame({"benchmark": [where] * len(cmp["systems"]),
                            "retriever": [s[0] for s in cmp["systems"]], "setting": [s[1] for s in cmp["systems"]],
                            "ndcg_swiss": cmp["mean_plain"], "ndcg_stopping": cmp["mean_stopped"]})
    return {"summary": summary, "systems": systems, "result": res}
