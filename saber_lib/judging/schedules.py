"""Tournament schedules (paper App. B.4, Algorithm 1): pure functions from the state of
one query's tournament (:class:`Standing`) to the next round's pairs of candidate indices
(``0 .. n-1``):

* :func:`first_round` - a uniformly random matching (round 1 of every schedule but exhaustive);
* :func:`swiss_round` - Algorithm 1 of the paper's appendix (greedy pairing by win count);
* :func:`random_round` - a random matching among not-yet-met candidates (same size as a round);
* :func:`round_robin_round` - the exhaustive schedule, all ``n(n-1)/2`` pairs in ``n-1`` rounds;
* :func:`adaptive_round` - this workbench's own schedule (not the paper's): the least certain
  candidates first, each paired with its closest neighbour in the current Bradley-Terry estimate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from .bradley_terry import bt_posterior_var, fit_bradley_terry
from .outcomes import codes_of_labels, weighted_comparisons

SCHEDULES = ("swiss", "exhaustive", "random", "adaptive")

Pair = tuple[int, int]


def first_round(n: int, rng: np.random.Generator) -> list[Pair]:
    """Round 1: a uniformly random matching of ``n`` candidates (one sits out when ``n`` is odd)."""
    perm = rng.permutation(n)
    return [(int(perm[k]), int(perm[k + 1])) for k in range(0, n - 1, 2)]


def _met_matrix(n: int, played: Iterable) -> np.ndarray:
    met = np.zeros((n, n), dtype=bool)
    for p in played:
        i, j = tuple(p)
        met[i, j] = met[j, i] = True
    return met


def _swiss_pairs(wins: np.ndarray, met: np.ndarray, rng: np.random.Generator) -> list[Pair]:
    """Algorithm 1 (rounds >= 2) on a boolean ``met[i, j]`` matrix; see :func:`swiss_round`."""
    wins = np.asarray(wins, dtype=float)
    n = len(wins)
    order = rng.permutation(n)
    order = order[np.argsort(wins[order], kind="stable")]  # shuffle ties, then sort by wins

    def closest(i, legal):   # the legal opponent nearest in wins, ties broken uniformly at random
        gap = np.abs(wins[legal] - wins[i])
        best = legal[gap == gap.min()]
        return best[rng.integers(len(best))] if len(best) > 1 else best[0]

    return _greedy_matching(order, met, closest)


def swiss_round(wins, played, rng: np.random.Generator) -> list[Pair]:
    """One Swiss round after the first (paper App. B.4, Algorithm 1).

    Shuffle the candidates, stable-sort them by win count ascending, then repeatedly take the
    lowest-scoring unpaired candidate ``i`` and pair it with the unpaired candidate ``j`` it has not
    met that minimizes ``|w_i - w_j|`` (ties broken uniformly at random); a candidate with no legal
    opponent sits the round out.

    ``wins``: win counts (length n; half wins for ties are accepted); ``played``: a set of
    ``frozenset({i, j})`` already judged; ``rng``: a ``numpy.random.Generator``.
    Returns the round's pairs ``(i, j)`` in the order they were formed.
    """
    wins = np.asarray(wins, dtype=float)
    return _swiss_pairs(wins, _met_matrix(len(wins), played), rng)


def random_round(n: int, met: np.ndarray, rng: np.random.Generator) -> list[Pair]:
    """A random matching among candidates that have not met: shuffle, then pair each unpaired
    candidate with a uniformly random unpaired legal opponent (none left: it sits out).

    Same number of judgments per round as a Swiss round (``floor(n/2)`` unless forced sit-outs).
    """
    return _greedy_matching(rng.permutation(n), met, lambda i, legal: legal[rng.integers(len(legal))])


def _greedy_matching(order: np.ndarray, met: np.ndarray, pick) -> list[Pair]:
    """Visit candidates in ``order``; each unpaired one takes ``pick(i, legal)`` among the unpaired
    candidates it has not met (none: it sits out)."""
    unpaired = order
    pairs: list[Pair] = []
    while len(unpaired) >= 2:
        i, rest = unpaired[0], unpaired[1:]
        legal = rest[~met[i, rest]]
        if len(legal) == 0:
            unpaired = rest
            continue
        j = pick(i, legal)
        pairs.append((int(i), int(j)))
        unpaired = rest[rest != j]
    return pairs


def round_robin_round(n: int, r: int) -> list[Pair]:
    """Round ``r`` (1-based, ``1 .. n-1`` for even n, ``1 .. n`` for odd n) of the circle-method
    round robin: over all its rounds every unordered pair meets exactly once (exhaustive schedule)."""
    m = n if n % 2 == 0 else n + 1  # odd n: a dummy "bye" slot m-1
    if not 1 <= r <= m - 1:
        raise ValueError(f"round {r} is outside 1..{m - 1} of a round robin on {n} candidates")
    k = r - 1
    ring = [0] + [1 + (x + k) % (m - 1) for x in range(m - 1)]
    pairs = []
    for x in range(m // 2):
        i, j = ring[x], ring[m - 1 - x]
        if i < n and j < n:
            pairs.append((min(i, j), max(i, j)))
    return pairs


def exhaustive_rounds(n: int) -> int:
    """Number of rounds of the exhaustive (round-robin) schedule."""
    return n - 1 if n % 2 == 0 else n


def adaptive_round(n: int, met: np.ndarray, theta: np.ndarray, var: np.ndarray,
                   rng: np.random.Generator) -> list[Pair]:
    """This workbench's adaptive schedule (an option, not the paper's method; see the inversion study).

    Like a Swiss round, but driven by the current Bradley-Terry fit instead of win counts:
    candidates are visited in decreasing posterior variance ``var`` (random tie-break), and each
    takes, among the unpaired candidates it has not met, the one with the closest estimate,

        j* = argmin_j |theta_i - theta_j|   (= argmax_j p_ij (1 - p_ij), p_ij = sigmoid(theta_i - theta_j)),

    i.e. the comparison with the largest Fisher information for the least certain candidate.
    A candidate with no legal opponent sits out. ``var`` is the diagonal of the inverse Hessian of
    the penalized likelihood (:func:`bt_posterior_var`). Compared with win counts, the BT estimate
    accounts for the strength of the opponents already met.
    """
    theta = np.asarray(theta, dtype=float)
    var = np.asarray(var, dtype=float)
    key = rng.permutation(n)
    order = key[np.argsort(-var[key], kind="stable")]
    return _greedy_matching(order, met, lambda i, legal: legal[int(np.argmin(np.abs(theta[legal] - theta[i])))])


@dataclass
class Standing:
    """The state of one query's tournament: what every schedule reads to form the next round.

    ``wins[i]``: times ``i`` was preferred (ties count half); ``met[i, j]``: the pair was judged
    (failures included, so a failed pair is not asked again); the comparisons as weighted
    (winner, loser) lists for Bradley-Terry.
    """

    n: int
    wins: np.ndarray = None
    met: np.ndarray = None
    winners: list = field(default_factory=list)
    losers: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    rounds_done: int = 0
    n_judgments: int = 0

    def __post_init__(self):
        if self.wins is None:
            self.wins = np.zeros(self.n)
        if self.met is None:
            self.met = np.zeros((self.n, self.n), dtype=bool)

    def record(self, i: int, j: int, outcome: str) -> None:
        """Record one judgment of the pair (i, j): ``outcome`` is ``a`` (i preferred), ``b`` (j),
        ``tie`` or ``failure``."""
        self.met[i, j] = self.met[j, i] = True
        self.n_judgments += 1
        win, lose, weight, _ = weighted_comparisons([i], [j], codes_of_labels([outcome]))
        for w, lo, wt in zip(win.tolist(), lose.tolist(), weight.tolist()):
            self.wins[w] += wt
            self.winners.append(w)
            self.losers.append(lo)
            self.weights.append(wt)

    def fit(self, alpha: float = 0.5) -> np.ndarray:
        return fit_bradley_terry(self.n, self.winners, self.losers, alpha=alpha, weights=self.weights)


def next_pairs(schedule: str, standing: Standing, rng: np.random.Generator, alpha: float = 0.5) -> list[Pair]:
    """The pairs of round ``standing.rounds_done + 1`` under ``schedule`` (one of SCHEDULES)."""
    r = standing.rounds_done + 1
    n = standing.n
    if schedule == "exhaustive":
        return round_robin_round(n, r) if r <= exhaustive_rounds(n) else []
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (expected one of {SCHEDULES})")
    if r == 1:
        return first_round(n, rng)
    if schedule == "swiss":
        return _swiss_pairs(standing.wins, standing.met, rng)
    if schedule == "random":
        return random_round(n, standing.met, rng)
    theta = standing.fit(alpha)
    var = bt_posterior_var(n, standing.winners, standing.losers, theta, alpha, standing.weights)
    return adaptive_round(n, standing.met, theta, var, rng)
