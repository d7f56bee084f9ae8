"""The summaries stage's recipes (what ``03_summaries`` computes around the summarizers): a real
LLM's summaries beside the stand-in on the first problems (``summary_llm_sample``), what the
failure budget needs, the length figure and the overview table."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..llm import make_backend
from .summarize import summaries_frame, summarize_llm, summary_report
from ..core.text import clip_words, summary_tokens


def failure_budget(df: pl.DataFrame) -> dict:
    """``n_calls``, ``n_failed`` and the first three failure reasons of a summaries table, for
    :func:`saber_lib.llm.check_failure_budget`."""
    return dict(n_calls=df.height, n_failed=int(df["failed"].sum()),
                first_reasons=df.filter(df["failed"])["failure_reason"].head(3).to_list())


def llm_summaries(backend, sample: pl.DataFrame, *, clip: int, max_words: int, retries: int,
                  guided: bool) -> tuple[pl.DataFrame, dict]:
    """Core-idea summaries of the problems of ``sample`` (``doc_id``, ``problem``, ``solution``) by
    ``backend``, each text clipped to ``clip`` words (0: whole). Returns (summaries table, the
    validator's violation counts). The stage (:func:`llm_summary_sample`) and the replay of a
    recorded run (:func:`saber_lib.studies.llm_stages.run_llm_stages`) both summarize through here."""
    rows, counts = summarize_llm(backend, sample["doc_id"].to_list(), [clip_words(p, clip) for p in sample["problem"]],
                                 [clip_words(s, clip) for s in sample["solution"]], max_words=max_words,
                                 retries=retries, guided=guided)
    return summaries_frame(rows), counts


def llm_summary_sample(corpus: pl.DataFrame, main: pl.DataFrame, main_name: str, llm: dict, *, n: int, max_words: int,
                       retries: int, cache_path) -> dict:
    """Summarize the first ``n`` problems of ``corpus`` with the profile's LLM (texts clipped to
    ``llm.text_max_words`` words) and set its core ideas beside those of ``main`` (named ``main_name``).

    Returns ``summaries`` (the LLM's summaries table), ``table``, ``caption``, ``record`` (for the
    manifest), ``backend`` (the backend's ``describe()``) and ``budget`` (:func:`failure_budget`)."""
    sample = corpus.head(n)
    clip = llm.get("text_max_words", 0)
    backend = make_backend(llm, cache_path)
    df, counts = llm_summaries(backend, sample, clip=clip, max_words=max_words, retries=retries,
                               guided=bool(llm.get("guided_json", False)))
    name = f"llm:{backend.model_id} via {backend.name}"
    report = summary_report(df)
    table = (df.select("doc_id", pl.col("core_idea").alias(f"core idea ({name})"), "no_core_idea", "failed")
             .join(main.select("doc_id", pl.col("core_idea").alias(f"core idea ({main_name})")), on="doc_id"))
    n_words = df.filter(pl.col("core_idea").is_not_null())["core_idea"].str.count_matches(r"\S+")
    clipped = f"; texts clipped to {clip} words per problem and solution" if clip else ""
    caption = (f"Core ideas of the first {sample.height} problems from {name} beside {main_name}; "
               f"{df.height - report['failed']} of {df.height} parsed, {report['no_core_idea']} without a core idea, "
               f"mean {float(n_words.mean() or 0.0):.1f} words{clipped}.")
    return {"summaries": df, "table": table, "caption": caption, "backend": backend.describe(),
            "record": dict(summarizer=name, violations=counts, **report), "budget": failure_budget(df)}


def summary_lengths_figure(df: pl.DataFrame, max_words: int, summarizer: str):
    """Histograms of core-idea words and summary token-set sizes; returns (figure, caption)."""
    ntok = np.array([len(summary_tokens(t)) for t in df["summary_text"].to_list()])
    nwords = np.array([len((c or "").split()) for c in df["core_idea"].to_list()])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
    axes[0].hist(nwords, bins=range(0, max_words + 2))
    axes[0].set_xlabel("words in core idea")
    axes[1].hist(ntok, bins=range(0, max(ntok.max(initial=0), 1) + 2))
    axes[1].set_xlabel("summary tokens (Jaccard set)")
    for ax in axes:
        ax.set_ylabel("problems")
    return fig, f"Core-idea length and summary token-set size over {df.height} problems; summarizer: {summarizer}."


def overview_table(report: dict) -> pl.DataFrame:
    """The :func:`summary_report` counts as a two-column table (counts stay integers)."""
    return pl.DataFrame({"statistic": ["problems", "failed", "no core idea", "empty token set", "mean tokens"],
                         "value": [str(report["n"]), str(report["failed"]), str(report["no_core_idea"]),
                                   str(report["empty_token_sets"]), f"{report['mean_tokens']:.2f}"]})
