"""Judge validation (paper App. C.1): agreement between pairwise relevance labels.

A label says which of two shown candidates is closer to the query: ``"a"`` (candidate 1, shown
first), ``"b"`` (candidate 2) or ``"tie"``; ``None`` / ``"failure"`` = no label (the pair is left out
of that comparison). Agreement of two labels x, y::

    agree(x, y) = 1    if x = y
                  0.5  if exactly one of x, y is "tie"
                  0    otherwise (opposite preferences)

reported as a mean over the pairs both sides labelled, overall and for pairs whose rank gap in
the final (Swiss) ranking is at least Delta:  A(Delta) = mean{agree(x_p, y_p) : |rank_a - rank_b| >= Delta}.

Judges compared (labels per pair, :func:`judge_labels`): pairwise (one call), majority of k
pairwise votes (``saber_lib.judging.judges.MajorityJudge``: tie when the vote margin is at most 1),
ordinal (``OrdinalJudge``: 0-100 score per candidate, the higher wins), and rankings
(:func:`labels_from_ratings`: the candidate with the higher rating; equal ratings = tie) of the
Swiss, exhaustive and random schedules (:func:`schedule_ratings`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import polars as pl

from ..judging.judges import MajorityJudge
from ..judging.registry import JudgeContext, build_judge
from ..judging.outcomes import outcome_label
from ..judging.tournament import corpus_docs, run_tournament
from ..studies.ablation import final_ranks

LABELS = ("a", "b", "tie")


def _valid(x) -> bool:
    return x in LABELS


def agreement_scores(x: Sequence, y: Sequence) -> np.ndarray:
    """Per-pair agreement (1 / 0.5 / 0) of two label sequences; NaN where either side has no label."""
    if len(x) != len(y):
        raise ValueError(f"label sequences differ in length ({len(x)} vs {len(y)})")
    out = np.full(len(x), np.nan)
    for k, (u, v) in enumerate(zip(x, y)):
        for lab in (u, v):
            if lab is not None and lab != "failure" and lab not in LABELS:
                raise ValueError(f"unknown label {lab!r} (expected one of {LABELS}, 'failure' or None)")
        if not (_valid(u) and _valid(v)):
            continue
        out[k] = 1.0 if u == v else 0.5 if (u == "tie") != (v == "tie") else 0.0
    return out


def agreement(x: Sequence, y: Sequence) -> float:
    """Mean agreement over pairs both sides labelled (NaN when there is none)."""
    s = agreement_scores(x, y)
    return float(np.nanmean(s)) if np.isfinite(s).any() else float("nan")


def agreement_by_delta(x: Sequence, y: Sequence, gaps: Sequence[int], deltas: Iterable[int]) -> dict[int, tuple[float, int]]:
    """{Delta: (mean agreement over pairs with rank gap >= Delta, number of such labelled pairs)}."""
    s = agreement_scores(x, y)
    g = np.asarray(gaps)
    out = {}
    for d in deltas:
        m = (g >= d) & np.isfinite(s)
        out[int(d)] = (float(s[m].mean()) if m.any() else float("nan"), int(m.sum()))
    return out


def label_from_scores(score_a, score_b) -> str | None:
    """Label implied by two scores (ordinal judge scores or ratings): higher wins, equal = tie."""
    if score_a is None or score_b is None or not np.isfinite(score_a) or not np.isfinite(score_b):
        return None
    return "a" if score_a > score_b else "b" if score_b > score_a else "tie"


def labels_from_ratings(pairs: pl.DataFrame, ratings: pl.DataFrame) -> list[str | None]:
    """For each (query_id, a, b) pair the label a ranking implies (rating of a vs of b)."""
    r = {(q, c): v for q, c, v in ratings.select("query_id", "cand_id", "rating").iter_rows()}
    return [label_from_scores(r.get((q, a)), r.get((q, b))) for q, a, b in pairs.select("query_id", "a", "b").iter_rows()]


def _pair_id(query_id: str, x: str, y: str) -> str:
    lo, hi = sorted((x, y))
    return hashlib.sha256(f"{query_id}\x00{lo}\x00{hi}".encode()).hexdigest()[:16]


def sample_ranked_pairs(ranked: pl.DataFrame, n_pairs: int, rng: np.random.Generator, how: str = "uniform_pair") -> pl.DataFrame:
    """Sample ``n_pairs`` distinct (query, candidate pair) tasks for annotation.

    ``ranked``: a ratings table with ``rank`` per query (see ``ablation.final_ranks``).
    ``how="uniform_pair"``: a query uniformly, then a pair of its candidates uniformly (the rank gap
    then follows the triangular law of random pairs); ``"uniform_gap"``: a query uniformly, a gap
    g uniformly in 1..n-1, then a pair at gap g uniformly (more large-gap pairs). The display order
    is a fair coin flip, so candidate 1 is not the better-ranked one by construction.

    Columns: ``task_id`` (0..n-1), ``pair_id``, ``query_id``, ``a``, ``b`` (display order),
    ``rank_a``, ``rank_b``, ``rank_gap``, ``rating_a``, ``rating_b``.
    """
    if how not in ("uniform_pair", "uniform_gap"):
        raise ValueError(f"judge_validation.jv_sampling: unknown {how!r} (uniform_pair | uniform_gap)")
    by_q = {}
    for (q,), g in ranked.sort("query_id", "rank").group_by("query_id", maintain_order=True):
        if g.height >= 2:
            by_q[q] = (g["cand_id"].to_list(), g["rating"].to_list())
    qids = sorted(by_q)
    capacity = sum(len(c) * (len(c) - 1) // 2 for c, _ in by_q.values())
    if n_pairs > capacity:
        raise ValueError(f"judge_validation.jv_pairs = {n_pairs} but the benchmark has only {capacity} candidate pairs")
    seen, rows = set(), []
    tries = 0
    while len(rows) < n_pairs:
        tries += 1
        if tries > 1000 * n_pairs + 10000:
            raise RuntimeError("pair sampling does not find new pairs; lower judge_validation.jv_pairs")
        q = qids[int(rng.integers(len(qids)))]
        cands, ratings = by_q[q]
        n = len(cands)
        if how == "uniform_pair":
            i, j = sorted(int(x) for x in rng.choice(n, size=2, replace=False))
        else:
            gap = int(rng.integers(1, n))
            i = int(rng.integers(0, n - gap))
            j = i + gap
        pid = _pair_id(q, cands[i], cands[j])
        if pid in seen:
            continue
        seen.add(pid)
        if rng.random() < 0.5:
            i, j = j, i
        rows.append({"task_id": len(rows), "pair_id": pid, "query_id": q, "a": cands[i], "b": cands[j],
                     "rank_a": i + 1, "rank_b": j + 1, "rank_gap": abs(i - j),
                     "rating_a": float(ratings[i]), "rating_b": float(ratings[j])})
    return pl.DataFrame(rows, schema={"task_id": pl.Int64, "pair_id": pl.String, "query_id": pl.String,
                                      "a": pl.String, "b": pl.String, "rank_a": pl.Int64, "rank_b": pl.Int64,
                                      "rank_gap": pl.Int64, "rating_a": pl.Float64, "rating_b": pl.Float64})


def rank_gap_agreement_table(reference: Sequence, methods: dict[str, Sequence], gaps: Sequence[int], deltas: Sequence[int]) -> pl.DataFrame:
    """Rows = methods, columns ``Delta>=d`` (agreement in %) and ``n@d`` (labelled pairs used)."""
    rows = []
    for name, labels in methods.items():
        res = agreement_by_delta(labels, reference, gaps, deltas)
        row = {"method": name}
        for d in deltas:
            row[f"Delta>={d}"] = 100.0 * res[d][0] if res[d][1] else None
        for d in deltas:
            row[f"n@{d}"] = res[d][1]
        rows.append(row)
    return pl.DataFrame(rows)


def inter_annotator(labels_by_annotator: dict[str, dict[str, str]]) -> list[dict]:
    """Agreement of every two annotators on the tasks both labelled: [{x, y, n, agreement}]."""
    names = sorted(labels_by_annotator)
    out = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            common = sorted(set(labels_by_annotator[x]) & set(labels_by_annotator[y]))
            if common:
                out.append({"x": x, "y": y, "n": len(common),
                            "agreement": agreement([labels_by_annotator[x][t] for t in common],
                                                   [labels_by_annotator[y][t] for t in common])})
    return out


def judge_labels(judge, pairs: pl.DataFrame, docs: dict) -> list[str]:
    """Labels (``a`` | ``b`` | ``tie`` | ``failure``) of a ``saber_lib.judging.judges`` judge on the pairs,
    each shown in the task's display order (``a`` first). ``docs``: id -> ``tournament.Doc``."""
    items = [(docs[q], docs[a], docs[b]) for q, a, b in pairs.select("query_id", "a", "b").iter_rows()]
    return [outcome_label(o)[0] for o in judge.judge_pairs(items)] if items else []


def schedule_ratings(benchmark: pl.DataFrame, query_ids, docs: dict, judge, *, schedule: str,
                     rounds: int, seed: int, store_dir, alpha: float, top: float) -> pl.DataFrame:
    """Ratings of the given queries from a tournament with another schedule (``exhaustive`` or
    ``random``), played with ``judge`` through ``saber_lib.judging.tournament.run_tournament`` (resumable
    in ``store_dir``)."""
    sub = benchmark.filter(pl.col("query_id").is_in(list(query_ids)))
    res = run_tournament(sub, docs, judge, schedule=schedule, rounds=rounds, seed=seed,
                         store_dir=store_dir, alpha=alpha, top=top)
    return res.ratings


# ----------------------------------------------------------------------------- the study
def reference_labels(pairs: pl.DataFrame, stores: dict) -> pl.DataFrame:
    """One row per (annotator, labelled task): ``row`` (index into ``pairs``), ``annotator``, ``label``."""
    rows = []
    for name, st in sorted(stores.items()):
        for k, lab in enumerate(st.labels_for(pairs)):
            if lab is not None:
                rows.append({"row": k, "annotator": name, "label": lab})
    return pl.DataFrame(rows, schema={"row": pl.Int64, "annotator": pl.String, "label": pl.String})


def reference_or_second_judge(pairs: pl.DataFrame, stores: dict, docs: dict, second_judge: str,
                              pair_judge_name: str, judge_ctx: JudgeContext) -> tuple[pl.DataFrame, str, bool]:
    """The labels the judges are validated against: human annotations when any exist, else the
    labels of a second judge (``second_judge``, a judge spec built in ``judge_ctx``), said as such.

    Returns ``(reference table (row, annotator, label), description, human)``.
    """
    ref = reference_labels(pairs, stores)
    if ref.height > 0:
        return ref, f"human annotations ({ref.height} labels by {ref['annotator'].n_unique()} annotator(s))", True
    second = build_judge(second_judge, judge_ctx)
    ref = pl.DataFrame({"row": list(range(pairs.height)), "annotator": f"second judge: {second.name}",
                        "label": judge_labels(second, pairs, docs)})
    text = f"a SECOND JUDGE ({second.name}) standing in for human annotations (none in <run>/annotations)"
    if second.name == pair_judge_name:
        text += " (the same judge as the pairwise judge: agreement is trivially high)"
    return ref, text, False


def method_labels(pairs: pl.DataFrame, docs: dict, bench: pl.DataFrame, ratings: pl.DataFrame, *, pair_judge,
                  base_judge, majority_votes: int, ordinal_judge=None, schedule: str, schedules: Sequence[str],
                  rounds: int, seed: int, store_dir, alpha: float, top: float) -> tuple[dict[str, list], list[str]]:
    """Labels of every compared method on the sampled pairs (paper App. C.1): the pairwise judge,
    a ``majority_votes``-vote majority of the base judge, the ordinal judge (when given), the
    benchmark's ranking, and the rankings of the other ``schedules`` played with the pairwise judge.
    Returns ``(method name -> labels, notes on methods that could not run)``."""
    notes, methods = [], {}
    methods[f"pairwise judge ({pair_judge.name})"] = judge_labels(pair_judge, pairs, docs)
    try:
        maj = MajorityJudge(base_judge, votes=majority_votes)
        methods[f"majority of {majority_votes} ({base_judge.name})"] = judge_labels(maj, pairs, docs)
    except NotImplementedError:
        notes.append(f"majority judge: {base_judge.name} is deterministic (no independent votes), not run")
    if ordinal_judge is not None:
        methods[f"ordinal judge ({ordinal_judge.name})"] = judge_labels(ordinal_judge, pairs, docs)
    else:
        notes.append("ordinal judge: needs an LLM backend (llm.backend is none), not run")
    methods[f"{schedule} ranking (the benchmark's)"] = labels_from_ratings(pairs, ratings)
    for sched in schedules:
        if sched == schedule:
            continue
        r = schedule_ratings(bench, pairs["query_id"].unique().to_list(), docs, pair_judge, schedule=sched,
                             rounds=rounds, seed=seed, store_dir=Path(store_dir) / f"tournament_{sched}",
                             alpha=alpha, top=top)
        methods[f"{sched} ranking"] = labels_from_ratings(pairs, r)
    return methods, notes


def agreement_with_reference(pairs: pl.DataFrame, ref: pl.DataFrame, methods: dict[str, list], deltas) -> pl.DataFrame:
    """:func:`rank_gap_agreement_table` of every method's per-pair labels against the reference rows
    (several annotators of one pair each count once)."""
    idx = ref["row"].to_list()
    gaps = pairs["rank_gap"].to_numpy()[idx] if idx else np.zeros(0, dtype=np.int64)
    return rank_gap_agreement_table(ref["label"].to_list(), {m: [lab[i] for i in idx] for m, lab in methods.items()},
                           gaps, deltas)


def plot_agreement(table: pl.DataFrame, deltas, ax=None, reference: str = "annotations"):
    """Agreement (%) against the reference as a function of the rank-gap threshold Delta."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.4))
    for row in table.iter_rows(named=True):
        ys = [row.get(f"Delta>={d}") for d in deltas]
        ys = [np.nan if y is None else y for y in ys]
        ax.plot(list(deltas), ys, marker="o", label=row["method"])
    ax.set_xlabel("rank gap at least Delta")
    ax.set_ylabel(f"agreement with {reference} (%)")
    ax.set_xticks(list(deltas))
    ax.legend(fontsize=7, loc="best")
    return ax


# ----------------------------------------------------------------------------- the stage's recipes
def stage_pairs(ratings: pl.DataFrame, n_pairs: int, seed: int, how: str) -> pl.DataFrame:
    """The stage's pairs: :func:`sample_ranked_pairs` over the tournament's final ranks, from ``seed``."""
    return sample_ranked_pairs(final_ranks(ratings), n_pairs, np.random.default_rng(seed), how)


def pair_docs(corpus: pl.DataFrame, bench: pl.DataFrame, pairs: pl.DataFrame, llm: dict) -> dict:
    """Docs the judges read: the pairs' queries and every benchmark candidate of those queries, each
    text clipped to ``llm.text_max_words`` words when an LLM answers (full texts otherwise)."""
    max_words = llm.get("text_max_words", 0) if llm["backend"] != "none" else 0
    query_ids = pairs["query_id"].unique().to_list()
    ids = set(pairs["query_id"]) | set(bench.filter(pl.col("query_id").is_in(query_ids))["cand_id"])
    return corpus_docs(corpus, max_words=max_words, ids=ids)


def pairs_summary(pairs: pl.DataFrame) -> str:
    """One line: the number of pairs and queries and the rank gaps' median and range."""
    gap = pairs["rank_gap"]
    return (f"{pairs.height} pairs from {pairs['query_id'].n_unique()} queries; rank gap median {gap.median():.0f} "
            f"(min {gap.min()}, max {gap.max()})")


def annotator_agreement(pairs: pl.DataFrame, stores: dict) -> list[dict]:
    """:func:`inter_annotator` over the annotation stores (name -> store with ``labels_for``), each
    store's labelled pairs only."""
    return inter_annotator({name: {p: x for p, x in zip(pairs["pair_id"], st.labels_for(pairs)) if x is not None}
                            for name, st in stores.items()})


def judge_note(judge_name: str, llm: dict, with_llm: bool) -> str:
    """The stage's own backend line: the pairwise judge, and the texts' clipping when an LLM judged."""
    clip = llm.get("text_max_words") if with_llm else 0
    return f"pairwise judge: {judge_name}" + (f"; texts clipped to {clip} words" if clip else "")


def stage_record(pair_judge, base_judge, backend, backends: str, reference: str, human: bool, pairs: pl.DataFrame,
                 ref: pl.DataFrame, notes: list[str], inter: list[dict]) -> dict:
    """The stage's facts for the manifest: judges' names, reference, counts, and the LLM ``backend``'s
    accounting (``llm``) when one judged (``backend`` not None)."""
    out = {"backend": pair_judge.name, "backends": backends, "reference": reference, "human_reference": human,
           "n_pairs": pairs.height, "n_reference_labels": ref.height, "notes": notes, "inter_annotator": inter,
           "judges": {"pairwise": pair_judge.name, "base": base_judge.name}}
    return out | ({"llm": backend.describe()} if backend is not None else {})


def captions(reference: str, backends: str) -> dict[str, str]:
    """Captions of the agreement figure (``figure``) and table (``table``)."""
    return {"figure": f"Agreement with {reference} by rank-gap threshold.",
            "table": f"Agreement (%) with {reference}, by rank gap at least Delta; {backends}"}
