"""The one round driver: every tournament of the workbench (the tournament stage, the inversions
study, judging that stops, the simulations) plays its rounds through :func:`play_rounds`.

Round ``r`` of query ``q``: the schedule picks the pairs from the query's :class:`Standing`
(``next_pairs(schedule, standing, round_rng(seed, q, r))``), a seeded coin flip
(``round_rng(seed, q, r, stream=1)``) decides which candidate of each pair is shown first, the
pairs of all active queries are judged in one batch, and every verdict is recorded in its standing.
So a query is played the same whether it is resumed, judged alone or beside others, and whatever
rule stops the others.

Hooks: ``judge_round(r, shown)`` judges the round (``shown``: ``(query, a, b)`` candidate indices,
``a`` shown first) and returns one outcome label per pair (``a | b | tie | failure``); the
caller's hook also stores whatever else it keeps (reasons, rows). ``stop(r, active)`` (optional),
called after each round with the queries still playing, returns ``{query: reason}`` for those
that stop now (the stopping rule's hook). A query whose schedule has no pair left stops with the
reason ``"no pairs left"`` when ``stop_without_pairs``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .schedules import Standing, next_pairs
from .seeds import round_rng

NO_PAIRS = "no pairs left"


@dataclass
class RoundsPlayed:
    """Per query: its :class:`Standing`, the last round it played (0: none) and why it stopped
    (None while it could go on); ``judged`` counts the judgments of this call."""

    standings: dict
    rounds: dict = field(default_factory=dict)
    stopped_by: dict = field(default_factory=dict)
    judged: int = 0
    last_round: int = 0


def play_rounds(query_ids: Sequence[str], standings: Mapping[str, Standing],
                judge_round: Callable[[int, list], Sequence[str]], *, last_round: int, first_round: int = 1,
                schedule: str = "swiss", seed: int = 0, alpha: float = 0.5, flip_order: bool = True,
                stop: Callable[[int, list], Mapping[str, str]] | None = None, stop_without_pairs: bool = False,
                after_round: Callable[[int], bool] | None = None) -> RoundsPlayed:
    """Play rounds ``first_round .. last_round`` of every query (module docstring).

    ``standings``: one :class:`Standing` per query (fresh, or replayed from stored judgments);
    ``flip_order=False`` shows every pair in the schedule's order; ``after_round(r)`` (optional)
    is called after each round is recorded, and returning True ends the play there."""
    out = RoundsPlayed(dict(standings), {q: standings[q].rounds_done for q in query_ids},
                       {q: None for q in query_ids})
    active = list(query_ids)
    for r in range(first_round, last_round + 1):
        if not active:
            break
        shown = []
        for q in list(active):
            st = standings[q]
            st.rounds_done = r - 1
            pairs = next_pairs(schedule, st, round_rng(seed, q, r), alpha)
            if not pairs and stop_without_pairs:
                out.stopped_by[q] = NO_PAIRS
                active.remove(q)
                continue
            flips = round_rng(seed, q, r, stream=1).random(len(pairs)) < 0.5 if flip_order else [False] * len(pairs)
            shown += [(q, j, i) if f else (q, i, j) for (i, j), f in zip(pairs, flips)]
            out.rounds[q] = r
        labels = list(judge_round(r, shown)) if shown or not stop_without_pairs else []
        if len(labels) != len(shown):
            raise ValueError(f"round {r}: the judge returned {len(labels)} verdicts for {len(shown)} pairs")
        for (q, a, b), o in zip(shown, labels):
            standings[q].record(a, b, o)
        out.judged += len(shown)
        out.last_round = r
        if after_round is not None and after_round(r):
            break
        if stop is not None and active:
            for q, why in stop(r, list(active)).items():
                if q in active:
                    out.stopped_by[q] = why
                    active.remove(q)
    return out
