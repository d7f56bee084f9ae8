"""A real LLM's tree walk beside the stand-in scorer on the first problems of the corpus (the
``topic_llm_sample`` and ``topic_llm_max_depth`` keys, used by ``params/llm-cpu.yaml``): the walk,
its domains next to the main scorer's, their overlap and what the failure budget needs."""
from __future__ import annotations

import polars as pl

from ..core.text import clip_words
from .assign import assign_topics, domain_overlap, topics_table
from .scorers import LLMTopicScorer, make_scorer


def llm_walk(onto, sample: pl.DataFrame, scorer: LLMTopicScorer, *, clip: int, tau: float, score_root: bool,
             max_depth: int):
    """The LLM's tree walk of the problems of ``sample`` (``doc_id``, ``problem``, ``solution``), each
    text clipped to ``clip`` words (0: whole). Returns (topics table, the walk's result). The stage
    (:func:`llm_topic_sample`) and the replay of a recorded run
    (:func:`saber_lib.studies.llm_stages.run_llm_stages`) both walk through here."""
    items = [(clip_words(p, clip), clip_words(s, clip)) for p, s in zip(sample["problem"], sample["solution"])]
    result = assign_topics(onto, items, scorer, tau, score_root=score_root, max_depth=max_depth)
    return topics_table(onto, sample["doc_id"].to_list(), result), result


def llm_topic_sample(onto, corpus, topics, main_name: str, llm: dict, *, n: int, max_depth: int, tau: float,
                     score_root: bool, retries: int, cache_path) -> dict:
    """Walk the tree with the profile's LLM for the first ``n`` problems of ``corpus`` (texts clipped
    to ``llm.text_max_words`` words; the walk stops after ``max_depth`` levels, 0 = whole tree).

    Returns ``topics`` (the LLM's topics table), ``table`` (its domains beside the main scorer's
    ``topics``), ``caption``, ``record`` (for the manifest), ``backend`` (the backend's
    ``describe()``) and ``budget`` (``n_calls``, ``n_failed``, ``first_reasons`` for
    :func:`saber_lib.llm.check_failure_budget`)."""
    sample = corpus.head(n)
    clip = llm.get("text_max_words", 0)
    scorer = make_scorer("llm", llm=llm, topic_retries=retries, llm_cache_path=cache_path)
    llm_topics, result = llm_walk(onto, sample, scorer, clip=clip, tau=tau, score_root=score_root, max_depth=max_depth)
    info = scorer.describe()
    name = f"llm:{info['topic_model']} via {info['llm_backend']}"
    overlap = domain_overlap(llm_topics, topics)
    n_failed = int(llm_topics["failed"].sum())
    table = (llm_topics.select("doc_id", pl.col("domains").list.join(", ").alias(f"domains ({name})"), "failed")
             .join(topics.select("doc_id", pl.col("domains").list.join(", ").alias(f"domains ({main_name})")),
                   on="doc_id"))
    clipped = f"; texts clipped to {clip} words per problem and solution" if clip else ""
    depth = f", walk cut at depth {max_depth}" if max_depth else ""
    caption = (f"Domains of the first {sample.height} problems from {name}{depth} beside {main_name}; same "
               f"domains {overlap['same']:.2f}, at least one shared {overlap['shared']:.2f}, mean Jaccard "
               f"{overlap['jaccard']:.2f}{clipped}.")
    record = dict(problems=sample.height, scorer=name, failed_problems=n_failed, failed_visits=len(result.failures),
                  visits_per_depth=result.visits_per_depth, domain_overlap=overlap)
    return {"topics": llm_topics, "table": table, "caption": caption, "record": record,
            "backend": scorer.backend.describe(),
            "budget": dict(n_calls=sample.height, n_failed=n_failed,
                           first_reasons=[r for _, _, r in result.failures[:3]])}
