"""Math vs words by instruction arm: does an instruction move a retriever towards the notation or
towards the prose?

The comparison of :mod:`saber_lib.studies.math_words` is run once per arm of
``evaluate.instruction_arms`` (texts in :mod:`saber_lib.embed.instructions`): the math-only and the
words-only part of each query are both put in the arm's template (``p0``: unchanged) before they are
scored against the query's top-rated candidates; the candidates never carry an instruction. Every
retriever takes every arm: an encoder with an instruction slot is ``instructable``; an encoder without
one and every lexical retriever is a ``control`` (the instruction's words are added all the same, so
a control's movement across arms is what the added text alone does, the yardstick for the others).
The lexical retrievers are the controls the authors name. Ties (math and words score the same)
are counted per arm: an instruction shared by both parts can create or break them.

:func:`arm_preferences` gives, per (retriever, arm, domain), the share of queries where math wins
(``math_vs_words.ties`` decides whether ties count in the denominator) and the number of ties;
:func:`arm_wide` the table per retriever (All queries) with one share and one tie count per arm.
"""
from __future__ import annotations

from typing import Callable, Sequence

import polars as pl

from .. import embed
from ..core.names import is_lexical, retriever_class
from ..embed.instructions import instructed
from ..evaluate.analyses import InstructedRetriever
from .math_words import compare_variants, preference_table


def role(name: str) -> str:
    """``instructable`` (an encoder with a free-text instruction slot) or ``control`` (a lexical
    retriever, or an encoder without one: ``embed.ENVELOPES``)."""
    if is_lexical(name):
        return "control"
    return embed.envelope(name).arms


class _Armed:
    """A math-vs-words scorer whose query texts carry an instruction arm (candidates bare): a
    retriever's ``score_many`` through :class:`InstructedRetriever`, or a plain
    ``score(query, candidates)`` function with the instruction put before the query."""

    def __init__(self, inner, arm: str):
        instructed("", arm)   # an unknown arm fails here, naming the known ones
        self.inner, self.arm = inner, arm
        if hasattr(inner, "score_many"):
            self.score_many = InstructedRetriever(inner, arm).score_many

    def __call__(self, query, candidates):
        return self.inner(instructed(query, self.arm), candidates)


def compare_by_arm(kept: pl.DataFrame, candidates: dict, top_idx: dict, scorers: dict, arms: Sequence[str],
                   p0: pl.DataFrame | None = None, progress: Callable[[str], None] | None = None) -> pl.DataFrame:
    """:func:`~saber_lib.studies.math_words.compare_variants` once per arm, with an ``arm`` column
    first. ``p0``: the arm-free comparison already computed (reused as the ``p0`` rows)."""
    parts = []
    for arm in dict.fromkeys(arms):
        if arm == "p0" and p0 is not None:
            parts.append(p0.select(pl.lit("p0").alias("arm"), pl.all()))
            continue
        armed = {n: (s if arm == "p0" else _Armed(s, arm)) for n, s in scorers.items()}
        per = compare_variants(kept, candidates, top_idx, armed,
                               progress=(lambda n, a=arm: progress(f"{n} {a}")) if progress else None)
        parts.append(per.select(pl.lit(arm).alias("arm"), pl.all()))
    return pl.concat(parts)


def arm_preferences(per_query_arms: pl.DataFrame, kept: pl.DataFrame, ties: str = "exclude") -> pl.DataFrame:
    """Per (retriever, arm, domain): :func:`~saber_lib.studies.math_words.preference_table`'s columns
    with ``arm``, ``model_class`` and ``role`` (:func:`role`); arms in their first-seen order."""
    arms = per_query_arms["arm"].unique(maintain_order=True).to_list()
    parts = [preference_table(per_query_arms.filter(pl.col("arm") == a).drop("arm"), kept, ties)
             .with_columns(pl.lit(a).alias("arm")) for a in arms]
    out = pl.concat(parts)
    names = out["retriever"].unique().to_list()
    cls = {n: retriever_class(n) for n in names}
    rol = {n: role(n) for n in names}
    order = {a: i for i, a in enumerate(arms)}
    return (out.with_columns(pl.col("retriever").replace_strict(cls).alias("model_class"),
                             pl.col("retriever").replace_strict(rol).alias("role"),
                             pl.col("arm").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
            .sort("role", "retriever", "_o", "domain").drop("_o")
            .select("retriever", "model_class", "role", "arm", "domain", "n_queries", "math_wins_pct",
                    "words_wins_pct", "ties"))


def arm_wide(pref: pl.DataFrame, domain: str = "All") -> pl.DataFrame:
    """One row per retriever (``role``, ``model_class``, the scope's kept queries ``n``), then per arm
    the share of queries where math wins and, beside it, ``<arm> ties``; instructable models first,
    then the controls."""
    sub = pref.filter(pl.col("domain") == domain)
    arms = sub["arm"].unique(maintain_order=True).to_list()
    rows = []
    for (r,), g in sub.group_by("retriever", maintain_order=True):
        row = {"retriever": r, "role": g["role"][0], "model_class": g["model_class"][0], "n": int(g["n_queries"].max())}
        by = {a: (p, t) for a, p, t in g.select("arm", "math_wins_pct", "ties").iter_rows()}
        for a in arms:
            p, t = by.get(a, (None, None))
            row[a], row[f"{a} ties"] = p, t
        rows.append(row)
    schema = {"retriever": pl.String, "role": pl.String, "model_class": pl.String, "n": pl.Int64}
    for a in arms:
        schema[a], schema[f"{a} ties"] = pl.Float64, pl.Int64
    out = pl.DataFrame(rows, schema=schema)
    return out.sort(pl.col("role") != "instructable", "retriever")


def plot_arms(pref: pl.DataFrame, domain: str = "All"):
    """Share of queries where math wins per arm, one line per retriever; controls dashed."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend
    import seaborn as sns  # optional plotting package

    sub = pref.filter(pl.col("domain") == domain)
    arms = sub["arm"].unique(maintain_order=True).to_list()
    names = sub["retriever"].unique(maintain_order=True).to_list()
    colors = dict(zip(names, sns.color_palette("colorblind", len(names))))
    fig, ax = plt.subplots(figsize=(1.1 * len(arms) + 3.6, 3.4))
    width = min(0.3, 0.06 * len(names))          # retrievers side by side within an arm: equal lines stay visible
    for k, r in enumerate(names):
        g = sub.filter(pl.col("retriever") == r)
        by = dict(g.select("arm", "math_wins_pct").iter_rows())
        y = [by.get(a) for a in arms]
        y = [float("nan") if v is None else v for v in y]
        ctrl = g["role"][0] == "control"
        x = [i - width / 2 + width * k / max(1, len(names) - 1) for i in range(len(arms))]
        ax.plot(x, y, marker="o", ls="--" if ctrl else "-", color=colors[r],
                label=f"{r} ({g['model_class'][0]}{', control' if ctrl else ''})")
    ax.set_xticks(range(len(arms)), arms)
    ax.axhline(50, color="#333333", lw=0.6, ls=":")
    ax.set_ylim(0, 100)
    ax.set_xlabel("instruction arm (p0: none)")
    ax.set_ylabel("% of queries where math wins")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def arms_caption(pref: pl.DataFrame, top_n: int, ties: str) -> str:
    """Caption text: what the shares are, how ties count, the ties per arm over all retrievers."""
    t = pref.filter(pl.col("domain") == "All").group_by("arm", maintain_order=True).agg(pl.col("ties").sum())
    per = ", ".join(f"{a} {n}" for a, n in t.iter_rows())
    how = "left out of the denominator" if ties == "exclude" else "counted as neither side"
    return (f"Math vs words per instruction arm: % of queries whose math-only part scores higher than the words-only "
            f"part against the top-{top_n} candidates, both parts put in the arm's template (p0: none); controls "
            f"(lexical retrievers, encoders without an instruction slot) get the instruction text all the same. "
            f"Ties {how}; ties per arm over all retrievers: {per}.")


def write_arm_report(ctx, kept: pl.DataFrame, candidates: dict, top_idx: dict, scorers: dict, arms: Sequence[str],
           p0: pl.DataFrame, *, ties: str, top_n: int, backends: str) -> pl.DataFrame:
    """What ``11_math_vs_words`` writes per arm: ``per_query_arms.parquet`` (:func:`compare_by_arm`,
    the arm-free ``p0`` rows reused), ``preferences_by_arm.parquet`` (:func:`arm_preferences`), the
    table ``math_vs_words_by_arm`` (:func:`arm_wide`) and the figure ``maths_vs_words_by_arm``.
    Returns the table."""
    per = compare_by_arm(kept, candidates, top_idx, scorers, arms, p0=p0, progress=lambda n: print("scoring", n))
    per.write_parquet(ctx.path("per_query_arms.parquet"))
    pref = arm_preferences(per, kept, ties)
    pref.write_parquet(ctx.path("preferences_by_arm.parquet"))
    tab = arm_wide(pref)
    caption = arms_caption(pref, top_n, ties) + " " + backends
    ctx.save_table(tab, "math_vs_words_by_arm", caption=caption, float_fmt="{:.1f}")
    ctx.save_figure(plot_arms(pref), "maths_vs_words_by_arm", caption=caption, backends=backends)
    return tab
