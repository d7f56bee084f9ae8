"""Math vs words (paper 4.2 and App. C.2): which part of a query does a retriever rely on?

For each query q (its problem statement):

1. normalize its LaTeX delimiters (deterministic lexer, :mod:`.latex_split`; or the LLM formatting
   prompt ``latex_format`` through ``saber_lib.llm``, followed by the lexer);
2. split it into ``math(q)`` (the ``$...$`` segments) and ``words(q)`` (everything else); queries
   where either part holds no letter or digit are dropped (and counted);
3. for a retriever with score function ``s(query, docs)``, fitted on the query's candidate list
   (every candidate's full text ``"Problem: ...\\n\\nSolution: ..."``), and T_q the query's
   ``top_n`` highest-rated candidates::

       S_math(q) = mean_{d in T_q} s(math(q), d)      S_words(q) = mean_{d in T_q} s(words(q), d)

   math wins on q when ``S_math(q) > S_words(q)`` (exact ties are counted apart);
4. report ``100 * #{q : math wins} / #{q}`` per retriever, overall and per domain (a query counts
   for each of its domains), next to the domain's math-token ratio
   ``sum_q |math tokens(q)| / sum_q (|math tokens(q)| + |word tokens(q)|)``, where math tokens are
   Approach Zero's tokens (``pya0.tokenize``) of the math segments and word tokens the
   ``[a-z0-9]+`` tokens of the lowercased words part.

Token-based retrievers see text through :func:`math_aware_tokens`: words as lowercase
alphanumeric tokens, each math segment as Approach Zero tokens (``$KIND:value``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Callable, Sequence

import numpy as np
import polars as pl

from ..report import plots
from .. import prompts
from ..llm import ParseError, parse_latex_rewrite, run_with_parser
from ..retrieval.base import checked_lists
from ..retrieval.registry import accepts, get_retriever
from ..core.text import document_text
from ..core.progress import track
from .latex_split import (is_empty_part, mask_figures, math_only, normalize_delimiters, plain_opening,
                          split_math, unmask_figures, words_only)

_WORD_RE = re.compile(r"[a-z0-9]+")


# ----------------------------------------------------------------------------- tokens
@lru_cache(maxsize=200_000)
def _lexed(latex: str) -> tuple[tuple[str, ...], str | None]:
    """(Approach Zero's tokens, None), or (alphanumeric runs, pya0's error) when its lexer raises."""
    import pya0  # optional, heavy: Approach Zero (native library)

    try:
        toks = pya0.tokenize(latex)
    except Exception as e:  # the native lexer's errors have no common type
        return tuple("$" + t for t in _WORD_RE.findall(latex.lower())), f"{type(e).__name__}: {e}"
    return tuple(f"${kind}:{val}" for _, kind, val in toks), None


def math_tokens(latex: str, fallbacks: dict[str, str] | None = None) -> tuple[str, ...]:
    """Approach Zero's tokens of one math expression, as ``$KIND:value`` strings.

    When pya0's lexer raises on ``latex`` (never seen so far): with a ``fallbacks`` dict, the
    expression's alphanumeric runs (``$`` + run) are used and ``fallbacks[latex]`` records pya0's
    error, for the artifact and the caption (:func:`fallback_table`); without one, a ``ValueError``
    naming the expression.
    """
    toks, error = _lexed(latex)
    if error is not None:
        if fallbacks is None:
            raise ValueError(f"Approach Zero's lexer failed on the math {latex[:80]!r} ({error}); pass a "
                             "fallbacks dict to tokenize it as alphanumeric runs and record it")
        fallbacks[latex] = error
    return toks


def fallback_table(fallbacks: dict[str, str]) -> pl.DataFrame:
    """The recorded tokenizer fallbacks: ``math`` (the expression), ``error`` (pya0's), sorted."""
    return pl.DataFrame(sorted(fallbacks.items()), schema={"math": pl.String, "error": pl.String}, orient="row")


def fallback_note(fallbacks: dict[str, str]) -> str:
    """Caption text for the fallbacks (a clause that ends with ``;``): empty when there were none."""
    if not fallbacks:
        return ""
    return (f" Approach Zero's lexer failed on {len(fallbacks)} math segment(s), tokenized as alphanumeric "
            "runs instead (tokenizer_fallbacks.parquet);")


def word_tokens(text: str) -> list[str]:
    """Lowercase ``[a-z0-9]+`` tokens of plain text."""
    return _WORD_RE.findall(text.lower())


def math_aware_tokens(text: str, stop_words: bool = True, fallbacks: dict[str, str] | None = None) -> list[str]:
    """Tokens of a mixed text for the lexical retrievers: words as :func:`word_tokens` (minus
    scikit-learn's English stop words, as the retrievers' default tokenizers drop stop words),
    math segments as :func:`math_tokens` (``fallbacks``: see there)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # heavy: only the word split needs it

    out: list[str] = []
    for seg in split_math(text):
        if seg.kind == "text":
            out.extend(t for t in word_tokens(seg.content) if not (stop_words and t in ENGLISH_STOP_WORDS))
        else:
            out.extend(math_tokens(seg.content, fallbacks))
    return out


def token_counts(text: str, fallbacks: dict[str, str] | None = None) -> tuple[int, int]:
    """(math tokens, word tokens) of a text, math via Approach Zero (``fallbacks``: see :func:`math_tokens`)."""
    m = w = 0
    for seg in split_math(text):
        if seg.kind == "math":
            m += len(math_tokens(seg.content, fallbacks))
        else:
            w += len(word_tokens(seg.content))
    return m, w


# ----------------------------------------------------------------------------- normalizers
def llm_normalize(texts: Sequence[str], backend, retries: int = 1, prompt_name: str = "latex_format",
                  min_similarity: float = 0.98) -> tuple[list[str], list[str | None]]:
    """Ask the LLM to put every mathematical element between dollar signs (prompt ``latex_format``).

    The answer (``<formatted>...</formatted>``) must keep the text's content: after removing math
    delimiters and whitespace, its similarity to the original must reach ``min_similarity``
    (``saber_lib.llm.parse_latex_rewrite``). Asymptote figures are not sent (:func:`mask_figures`):
    those before the first and after the last words are set aside, an inner one is replaced by a
    placeholder that the rewrite must keep; all are put back after it; the
    answer is prefilled with the text's opening plain words (:func:`plain_opening`). Returns
    ``(normalized, failures)``: the accepted rewrite passed through :func:`normalize_delimiters`, or
    - when the call failed, the answer did not parse, it changed the content or lost a figure - the
    deterministic normalization of the original, with ``failures[i]`` saying why (None on success).
    """
    masked = [mask_figures(t) for t in texts]
    reqs = [prompts.request(prompt_name, text=m[0], prefill=plain_opening(m[0])) for m in masked]

    def check_tags(answer: str) -> str:
        parse_latex_rewrite(answer)          # raises ParseError when the tags are missing or empty
        return answer

    answers = run_with_parser(backend, reqs, check_tags, retries=retries, desc="latex_format")
    out, fails = [], []
    for t, (m, figures, head, tail), a in zip(texts, masked, answers):
        why = None
        if not isinstance(a, str):
            why = getattr(a, "reason", "failed")
        else:
            try:
                rewrite = parse_latex_rewrite(a, original=m, min_similarity=min_similarity)
                out.append(normalize_delimiters(unmask_figures(rewrite, figures, head, tail)))
                fails.append(None)
                continue
            except (ParseError, ValueError) as e:
                why = str(e)
        out.append(normalize_delimiters(t))
        fails.append(why)
    return out, fails


def normalize_step(texts: Sequence[str], backend, retries: int, model: str) -> dict:
    """The stage's LaTeX normalization: with an LLM ``backend``, :func:`llm_normalize` (the lexer runs
    after it); with ``None``, the deterministic lexer alone (``normalized`` None). Returns
    ``normalized``, ``normalizer`` (its description for captions), ``record`` (facts for the
    manifest) and ``note`` (a line to show; empty without an LLM)."""
    if backend is None:
        return {"normalized": None, "normalizer": "deterministic delimiter lexer (no LLM formatting)",
                "record": {}, "note": ""}
    normalized, failures = llm_normalize(texts, backend, retries=retries)
    n_fail = sum(f is not None for f in failures)
    info = backend.describe()
    return {"normalized": normalized,
            "normalizer": f"LLM formatting prompt ({info.get('model', model)}), deterministic lexer after it",
            "record": {"llm": info, "format_failures": n_fail},
            "note": f"LLM formatting: {n_fail} of {len(failures)} answers rejected -> deterministic fallback"}


# ----------------------------------------------------------------------------- splitting queries
@dataclass
class SplitQueries:
    kept: pl.DataFrame        # query_id, query_domains, math_text, words_text, n_math_tokens, n_word_tokens
    dropped: pl.DataFrame     # query_id, reason
    n_queries: int


def split_queries(queries: pl.DataFrame, normalized: Sequence[str] | None = None,
                  fallbacks: dict[str, str] | None = None) -> SplitQueries:
    """Split each query (``query_id``, ``query_domains``, ``text``) into math-only / words-only.

    ``normalized``: texts already normalized (e.g. by the LLM), in the order of ``queries``;
    default: :func:`normalize_delimiters` of ``text``. Queries with an empty part go to
    ``dropped`` with the reason (``no math`` / ``no words`` / ``no math and no words``).
    ``fallbacks``: see :func:`math_tokens`.
    """
    texts = queries["text"].to_list()
    norm = list(normalized) if normalized is not None else [normalize_delimiters(t or "") for t in texts]
    if len(norm) != len(texts):
        raise ValueError(f"{len(norm)} normalized texts for {len(texts)} queries")
    kept, dropped = [], []
    for qid, doms, t in zip(queries["query_id"].to_list(), queries["query_domains"].to_list(), norm):
        m, w = math_only(t), words_only(t)
        em, ew = is_empty_part(m), is_empty_part(w)
        if em or ew:
            dropped.append({"query_id": qid, "reason": " and ".join(x for x, e in (("no math", em), ("no words", ew)) if e)})
            continue
        nm, nw = token_counts(t, fallbacks)
        kept.append({"query_id": qid, "query_domains": list(doms or []), "math_text": m, "words_text": w,
                     "n_math_tokens": nm, "n_word_tokens": nw})
    kept_df = pl.DataFrame(kept, schema={"query_id": pl.String, "query_domains": pl.List(pl.String),
                                         "math_text": pl.String, "words_text": pl.String,
                                         "n_math_tokens": pl.Int64, "n_word_tokens": pl.Int64})
    drop_df = pl.DataFrame(dropped, schema={"query_id": pl.String, "reason": pl.String})
    return SplitQueries(kept_df, drop_df, len(texts))


def keep_rated(split: SplitQueries, benchmark: pl.DataFrame, ratings: pl.DataFrame) -> pl.DataFrame:
    """Restrict the comparison to the queries the tournament rated (``tournament_max_queries`` may cap
    them; the normalization covers every benchmark query): filters ``split.kept`` in place and
    returns the benchmark rows of those queries."""
    rated_ids = ratings["query_id"].unique().to_list()
    split.kept = split.kept.filter(pl.col("query_id").is_in(rated_ids))
    return benchmark.filter(pl.col("query_id").is_in(rated_ids))


def dropped_reasons(split: SplitQueries) -> dict[str, int]:
    """reason -> number of dropped queries."""
    return dict(split.dropped.group_by("reason").len().iter_rows())


# ----------------------------------------------------------------------------- scoring
def compare_variants(kept: pl.DataFrame, candidates: dict[str, list[str]], top_idx: dict[str, list[int]],
                     scorers: dict, progress: Callable[[str], None] | None = None) -> pl.DataFrame:
    """One row per (retriever, query): ``s_math``, ``s_words``, ``outcome`` (math | words | tie).

    ``candidates[q]``: full texts of the query's candidates (the list the retriever is fitted on);
    ``top_idx[q]``: indices of its ``top_n`` highest-rated candidates in that list. ``scorers``:
    name -> a ``saber_lib.retrieval.Retriever`` (its ``score_many``: dense models embed every text
    once) or a plain function ``score(query, candidates) -> array``; counted (``core.progress``)."""
    qids = kept["query_id"].to_list()
    texts = {"math": kept["math_text"].to_list(), "words": kept["words_text"].to_list()}
    rows = []
    for name, score in track(scorers.items(), "retriever", len(scorers)):
        if progress:
            progress(name)
        lists = [list(candidates[q]) for q in qids]
        means = {}
        for variant, vt in texts.items():
            if hasattr(score, "score_many"):
                S = score.score_many(vt, lists)
            else:
                S = [score(t, c) for t, c in zip(vt, lists)]
            vals = []
            for q, s in zip(qids, checked_lists(S, lists, f"retriever {name!r}", qids)):
                vals.append(float(s[np.asarray(top_idx[q], dtype=np.int64)].mean()))
            means[variant] = vals
        for q, m, w in zip(qids, means["math"], means["words"]):
            outcome = "math" if m > w else "words" if w > m else "tie"
            rows.append({"retriever": name, "query_id": q, "s_math": m, "s_words": w, "outcome": outcome})
    return pl.DataFrame(rows, schema={"retriever": pl.String, "query_id": pl.String, "s_math": pl.Float64,
                                      "s_words": pl.Float64, "outcome": pl.String})


def make_scorers(names: Sequence[str], *, k1: float, b: float, store=None, cache_dir=None,
                 max_chunks: int | None = None, fallbacks: dict[str, str] | None = None) -> dict:
    """``saber_lib.retrieval`` by name; the lexical ones tokenize with :func:`math_aware_tokens`
    (Approach Zero tokens for math; ``fallbacks``: see :func:`math_tokens`). Returns name -> retriever."""
    out = {}
    for n in names:
        tok = partial(math_aware_tokens, fallbacks=fallbacks) if accepts(n, "tokenizer") else None
        out[n] = get_retriever(n, k1=k1, b=b, store=store, cache_dir=cache_dir, tokenizer=tok, max_chunks=max_chunks)
    return out


def preference_table(per_query: pl.DataFrame, kept: pl.DataFrame, ties: str = "exclude") -> pl.DataFrame:
    """% of queries where math wins, per retriever and domain (``All`` = every kept query).

    ``ties`` (``math_vs_words.ties``): ``exclude`` - the shares are over the queries with a winner
    (the authors' count; null when every query ties); ``include`` - over all kept queries, a tie
    counting for neither side. Columns: ``retriever``, ``domain``, ``n_queries`` (kept queries),
    ``math_wins_pct``, ``words_wins_pct``, ``ties``.
    """
    if ties not in ("exclude", "include"):
        raise ValueError(f"math_vs_words.ties: {ties!r} is not one of exclude, include")
    share = (lambda side: 100.0 * (pl.col("outcome") == side).sum() / pl.len()) if ties == "include" else \
        (lambda side: pl.when((pl.col("outcome") != "tie").sum() > 0).then(
            100.0 * (pl.col("outcome") == side).sum() / (pl.col("outcome") != "tie").sum()))
    d = per_query.join(kept.select("query_id", "query_domains"), on="query_id", how="left")
    allrows = d.with_columns(pl.lit("All").alias("domain"))
    bydom = d.explode("query_domains").rename({"query_domains": "domain"}).filter(pl.col("domain").is_not_null())
    both = pl.concat([allrows.drop("query_domains"), bydom.select(allrows.drop("query_domains").columns)])
    return (both.group_by("retriever", "domain").agg(
        pl.len().alias("n_queries"),
        share("math").cast(pl.Float64).alias("math_wins_pct"),
        share("words").cast(pl.Float64).alias("words_wins_pct"),
        (pl.col("outcome") == "tie").sum().alias("ties"),
    ).sort("retriever", "domain"))


def math_token_ratio(kept: pl.DataFrame) -> pl.DataFrame:
    """Per domain (and ``All``): math tokens / (math + word tokens), pooled over the domain's queries."""
    tot = kept.select(pl.lit("All").alias("domain"), "n_math_tokens", "n_word_tokens")
    dom = kept.explode("query_domains").rename({"query_domains": "domain"}).filter(pl.col("domain").is_not_null()) \
        .select("domain", "n_math_tokens", "n_word_tokens")
    return (pl.concat([tot, dom]).group_by("domain").agg(
        pl.len().alias("n_queries"), pl.col("n_math_tokens").sum(), pl.col("n_word_tokens").sum())
        .with_columns((pl.col("n_math_tokens") / (pl.col("n_math_tokens") + pl.col("n_word_tokens")))
                      .alias("math_token_ratio"))
        .sort("domain"))


def query_table(benchmark: pl.DataFrame, corpus: pl.DataFrame) -> pl.DataFrame:
    """``query_id``, ``query_domains``, ``text`` (the query's problem statement) per benchmark query."""
    q = benchmark.group_by("query_id", maintain_order=True).agg(pl.col("query_domains").first()).sort("query_id")
    prob = corpus.select(pl.col("doc_id").alias("query_id"), pl.col("problem").alias("text"))
    out = q.join(prob, on="query_id", how="left")
    missing = out.filter(pl.col("text").is_null())["query_id"].to_list()
    if missing:
        raise KeyError(f"{len(missing)} benchmark queries are not in the corpus, e.g. {missing[:3]}")
    return out


def candidate_lists(benchmark: pl.DataFrame, ratings: pl.DataFrame, corpus: pl.DataFrame, top_n: int):
    """Per query: the full texts of its candidates (``position`` order; ``"Problem: ...\n\nSolution:
    ..."``) and the indices of its ``top_n`` highest-rated ones (ties by position)."""
    texts = {d: document_text(p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    rating = {(q, c): r for q, c, r in ratings.select("query_id", "cand_id", "rating").iter_rows()}
    cands, top = {}, {}
    for (q,), g in benchmark.sort("query_id", "position").group_by("query_id", maintain_order=True):
        ids = g["cand_id"].to_list()
        missing = [c for c in ids if c not in texts or (q, c) not in rating]
        if missing:
            raise KeyError(f"query {q}: candidates without text or rating, e.g. {missing[:3]}")
        cands[q] = [texts[c] for c in ids]
        order = sorted(range(len(ids)), key=lambda k: (-rating[(q, ids[k])], k))
        top[q] = order[:top_n]
    return cands, top


def top_candidates(ratings: pl.DataFrame, top_n: int) -> dict[str, list[str]]:
    """query -> its candidates sorted by rating (desc), ties by ``position``; the first ``top_n``."""
    srt = ratings.sort(["query_id", "rating", "position"], descending=[False, True, False])
    return {q: g["cand_id"].head(top_n).to_list() for (q,), g in srt.group_by("query_id", maintain_order=True)}


def ties_note(pref: pl.DataFrame, ties: str) -> str:
    """Caption text: how many queries tie per retriever (over all kept queries) and how they count."""
    per = ", ".join(f"{r} {t}" for r, t in pref.filter(pl.col("domain") == "All").sort("retriever").select("retriever", "ties").iter_rows())
    how = "left out of the denominator (the authors' count)" if ties == "exclude" else "counted as neither side"
    return f" Ties (math and words score the same), {how}: {per}."


def figure_domains() -> list[str]:
    """The columns of the figures and of :func:`wide_table`: All, then ``plots.DOMAIN_ORDER``."""
    return ["All"] + list(plots.DOMAIN_ORDER)


def wide_table(pref: pl.DataFrame) -> pl.DataFrame:
    """``math_wins_pct`` of :func:`preference_table` with one row per retriever and one column per
    domain, All first then ``plots.DOMAIN_ORDER``, named with the domain's number of kept queries;
    a domain without kept queries is an empty column (``n=0``, nulls), not a 0 %."""
    n_by_dom = dict(pref.group_by("domain").agg(pl.col("n_queries").max()).iter_rows())
    cols = ["All"] + list(plots.DOMAIN_ORDER)
    wide = pref.pivot(on="domain", index="retriever", values="math_wins_pct")
    return (wide.with_columns([pl.lit(None, dtype=pl.Float64).alias(d) for d in cols if d not in wide.columns])
            .select("retriever", *[pl.col(d).alias(f"{d} (n={n_by_dom.get(d, 0)})") for d in cols]))


def stage_record(split: SplitQueries, normalizer: str, retrievers: dict[str, str], fallbacks: dict[str, str],
                 backends: str) -> dict:
    """The stage's facts for the manifest: backends, normalizer, retriever backends and query counts."""
    return {"backend": backends, "backends": backends, "normalizer": normalizer, "retrievers": retrievers,
            "n_queries": split.n_queries, "n_kept": split.kept.height, "n_dropped": split.dropped.height,
            "dropped_reasons": dropped_reasons(split), "tokenizer_fallbacks": len(fallbacks)}


def captions(top_n: int, n_kept: int, fallbacks: dict[str, str], backends: str) -> dict[str, str]:
    """Captions of the stage's figures (``selected``, ``all``) and of its table (``table``)."""
    return {"selected": f"% of queries whose math-only part scores higher than the words-only part against the top-{top_n} "
                        f"candidates, per domain; last bar: the domain's math-token ratio ({n_kept} queries).",
            "all": f"% of queries where the math-only part scores higher, per retriever ({n_kept} queries).",
            "table": f"% of queries where math wins, per retriever and domain (n: kept queries; - : none);"
                     f"{fallback_note(fallbacks)} {backends}"}


# ----------------------------------------------------------------------------- figures
def plot_selected(pref: pl.DataFrame, ratio: pl.DataFrame, retrievers: Sequence[str], domains: Sequence[str]):
    """One panel per domain: for each selected retriever a 100% bar split into math wins / words
    wins, and the domain's token mix (math tokens vs word tokens) as the last bar."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    MATH, WORDS = "#8172B3", "#CCB974"
    # every requested domain gets a panel; one without kept queries says n/a instead of vanishing
    doms = list(domains)
    fig, axes = plt.subplots(1, len(doms), figsize=(2.6 * len(doms) + 1, 0.45 * len(retrievers) + 1.8),
                             sharey=True, squeeze=False)
    labels = list(retrievers) + ["token mix"]
    for ax, dom in zip(axes[0], doms):
        p = pref.filter(pl.col("domain") == dom)
        n = int(p["n_queries"].max()) if p.height else 0
        ax.set_title(f"{dom} (n={n})", fontsize=9)
        ax.set_yticks(np.arange(len(labels))[::-1], labels)
        ax.grid(False)
        if not n:
            ax.set_xlim(0, 100)
            ax.text(50, (len(labels) - 1) / 2, "n/a\n(no kept queries)", ha="center", va="center", fontsize=8,
                    color="#666666")
            ax.set_xlabel("% of queries / of tokens", fontsize=8)
            continue
        vals = []
        for r in retrievers:
            row = p.filter(pl.col("retriever") == r)
            vals.append(row["math_wins_pct"][0] if row.height else np.nan)
        rr = ratio.filter(pl.col("domain") == dom)
        vals.append(100.0 * rr["math_token_ratio"][0] if rr.height else np.nan)
        y = np.arange(len(labels))[::-1]
        vals = np.asarray(vals, dtype=float)
        ax.barh(y, vals, color=MATH, label="math")
        ax.barh(y, 100 - vals, left=vals, color=WORDS, label="words")
        ax.axvline(50, color="#333333", lw=0.6, ls=":")
        for yy, v in zip(y, vals):
            if np.isfinite(v):
                ax.text(2, yy, f"{v:.0f}%", va="center", fontsize=7, color="white")
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of queries / of tokens", fontsize=8)
    from matplotlib.patches import Patch  # only this legend needs it

    axes[0][0].legend(handles=[Patch(color=MATH, label="math"), Patch(color=WORDS, label="words")],
                      loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=2, fontsize=7)
    fig.tight_layout()
    return fig


def plot_all_models(pref: pl.DataFrame):
    """Bar chart: % of queries where math wins, per retriever (all queries), sorted."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    p = pref.filter(pl.col("domain") == "All").sort("math_wins_pct")
    fig, ax = plt.subplots(figsize=(5.5, 0.35 * p.height + 1.2))
    ax.barh(p["retriever"].to_list(), p["math_wins_pct"].to_list(), color="#8172B3")
    ax.axvline(50, color="#333333", lw=0.6, ls=":")
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of queries where the math-only part scores higher")
    for i, v in enumerate(p["math_wins_pct"].to_list()):
        ax.text(v + 1, i, f"{v:.1f}%", va="center", fontsize=7)
    fig.tight_layout()
    return fig
