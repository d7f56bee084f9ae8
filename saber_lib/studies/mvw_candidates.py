"""Math vs words: the candidates' LaTeX normalized as the queries' is (the authors' protocol).

With an LLM backend the queries' delimiters are rewritten by the formatting prompt
(:func:`saber_lib.studies.math_words.llm_normalize`); the authors pass the candidate documents
through the same normalization, so that a query's ``$..$`` segments meet candidates marked the same
way. :func:`normalized_corpus` does that for every candidate of the benchmark (problem and solution
apart, each as one text, like a query's problem); without a backend nothing changes (the queries'
deterministic lexer does not touch the candidates).
"""
from __future__ import annotations

import polars as pl

from .math_words import llm_normalize


def normalized_corpus(corpus: pl.DataFrame, benchmark: pl.DataFrame, backend, retries: int = 1) -> tuple[pl.DataFrame, dict]:
    """(``corpus`` with the benchmark candidates' ``problem`` and ``solution`` normalized, facts).

    ``backend`` None: the corpus unchanged and ``{}``. Otherwise the facts hold ``candidate_texts``
    (texts sent) and ``candidate_format_failures`` (answers rejected: that text keeps the
    deterministic normalization, as a query's does)."""
    if backend is None:
        return corpus, {}
    ids = sorted(set(benchmark["cand_id"].to_list()))
    sub = corpus.filter(pl.col("doc_id").is_in(ids)).sort("doc_id")
    problems, solutions = sub["problem"].fill_null("").to_list(), sub["solution"].to_list()
    has_sol = [i for i, s in enumerate(solutions) if s and str(s).strip()]
    texts = problems + [solutions[i] for i in has_sol]
    out, fails = llm_normalize(texts, backend, retries=retries)
    new_sol = list(solutions)
    for k, i in enumerate(has_sol):
        new_sol[i] = out[len(problems) + k]
    new = pl.DataFrame({"doc_id": sub["doc_id"], "_p": out[:len(problems)], "_s": new_sol},
                       schema={"doc_id": pl.String, "_p": pl.String, "_s": pl.String})
    merged = (corpus.join(new, on="doc_id", how="left")
              .with_columns(pl.coalesce("_p", "problem").alias("problem"),
                            pl.when(pl.col("doc_id").is_in(ids)).then(pl.col("_s")).otherwise(pl.col("solution"))
                            .alias("solution"))
              .drop("_p", "_s"))
    return merged.select(corpus.columns), {"candidate_texts": len(texts),
                                           "candidate_format_failures": sum(f is not None for f in fails)}
