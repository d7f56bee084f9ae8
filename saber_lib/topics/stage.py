"""The topics stage's recipes (what ``02_topics`` computes around :func:`assign_topics`): the scorer the
profile names, the timed walk over the corpus with its manifest record, the topics-per-problem figure,
the domain pie, the domain confusion table with its caption and the problems left without a topic."""
from __future__ import annotations

import time
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..embed import set_threads
from ..llm import llm_cache_path
from ..report.plots import plot_pie
from .assign import (TopicAssignment, assign_topics, domain_agreement, domain_confusion, domain_shares,
                     failures_table, topics_table)
from .scorers import TopicScorer, make_scorer


def stage_scorer(topic_scorer: str, *, llm: dict, topic_retries: int, run_dir, cache_dir, threads: int,
                 embed_params: dict) -> TopicScorer:
    """The scorer the profile names (``threads``: the encoders' threads when non-zero; the LLM scorer's
    response cache where ``llm.cache`` puts it; ``embed_params``: the ``topic_embed_*`` keys)."""
    if threads:
        set_threads(threads)
    llm_cache = llm_cache_path(llm, run_dir, cache_dir) if topic_scorer == "llm" else None
    return make_scorer(topic_scorer, llm=llm, topic_retries=topic_retries, cache_dir=cache_dir, llm_cache_path=llm_cache,
                       **embed_params)


def assign_corpus(ontology, corpus: pl.DataFrame, scorer: TopicScorer, tau: float, *, score_root: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Walk the tree for every problem of ``corpus`` (``doc_id``, ``problem``, ``solution``).

    Returns the topics table, the failures table and the manifest record: ``backend`` (the scorer
    named ``scorer:model``), ``tau``, ``wall_s``, the scorer's ``describe()`` and
    :func:`assignment_summary`."""
    t0 = time.perf_counter()
    result = assign_topics(ontology, list(zip(corpus["problem"].to_list(), corpus["solution"].to_list())), scorer,
                           tau, score_root=score_root, progress=progress)
    wall = time.perf_counter() - t0
    doc_ids = corpus["doc_id"].to_list()
    topics = topics_table(ontology, doc_ids, result)
    info = scorer.describe()
    record = dict(backend=f"{info['topic_scorer']}:{info['topic_model']}", tau=tau, wall_s=round(wall, 2), **info,
                  **assignment_summary(topics, result))
    return topics, failures_table(doc_ids, result, ontology), record


def assignment_summary(topics: pl.DataFrame, result: TopicAssignment) -> dict:
    """Counts for the manifest: problems, failed problems and visits, problems without a topic,
    mean/median/max topics per problem and the visits per tree depth."""
    n_topics = topics["node_ids"].list.len()
    return {"problems": topics.height, "failed_problems": int(topics["failed"].sum()),
            "failed_visits": len(result.failures), "no_topic": int((n_topics == 0).sum()),
            "topics_per_problem_mean": float(n_topics.mean()), "topics_per_problem_median": float(n_topics.median()),
            "topics_per_problem_max": int(n_topics.max()), "visits_per_depth": result.visits_per_depth}


def topics_per_problem_figure(topics: pl.DataFrame, scorer: str, tau: float):
    """Bar chart of how many problems got 0, 1, 2, ... most specific topics; returns (figure, caption)."""
    fig, ax = plt.subplots(figsize=(5, 3))
    counts = np.bincount(topics["node_ids"].list.len().to_numpy())
    ax.bar(np.arange(len(counts)), counts)
    ax.set_xlabel("topics per problem (most specific)")
    ax.set_ylabel("problems")
    return fig, f"Topics per problem over {topics.height} problems; scorer: {scorer}, tau = {tau}."


def domain_pie_rings(ontology, topics: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The inner (domain) and outer (subdomain) weights of the domain pie: problems without a domain
    get one outer wedge ``none`` of their own, so both rings stay aligned."""
    dom, sub = domain_shares(ontology, topics)
    none = dom.filter(pl.col("domain") == "none").select("domain", pl.lit("none").alias("subdomain"), "weight")
    return dom, pl.concat([sub.select("domain", "subdomain", "weight"), none])


def confusion_report(topics: pl.DataFrame, corpus: pl.DataFrame, scorer: str) -> tuple[dict, pl.DataFrame, str]:
    """The agreement of topic domains with the corpus's source labels, the source-label vs
    topic-domain table and its caption."""
    agreement = domain_agreement(topics, corpus)
    return agreement, domain_confusion(topics, corpus), (f"Source subject label (rows) vs topic domains (columns): share of the row's problems whose topic domains "
            f"include the column; agreement {agreement['agreement']:.3f} over {agreement['n_with_source_domain']} "
            f"problems; scorer: {scorer}.")


def no_topic_by_source(topics: pl.DataFrame, corpus: pl.DataFrame) -> tuple[int, list[dict]]:
    """How many problems got no topic, and their count per corpus source (sorted by source)."""
    none = topics.filter(pl.col("node_ids").list.len() == 0).join(corpus.select("doc_id", "source"), on="doc_id")
    return none.height, none.group_by("source").len().sort("source").to_dicts()


def domain_pie_figure(ontology, topics: pl.DataFrame):
    """The corpus's domains (inner ring) and subdomains (outer ring); returns the axes."""
    return plot_pie(*domain_pie_rings(ontology, topics), title="Domains (inner) and subdomains (outer) of the corpus")
