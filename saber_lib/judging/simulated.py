"""The simulated judge: latent strengths per (query, candidate), answers drawn from a seeded
uniform so that the same question always gets the same answer (the robustness simulations, the
inversion study and the tests use it)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .judge_base import Judge, _id
from ..core.seeds import stable_int


def calibrate_scale(agreement: float) -> float:
    """Scale ``c`` such that a judge with ``P(i beats j) = sigmoid(c (s_i - s_j))`` agrees with the
    latent order on a uniformly random pair at rate ``agreement``, for latent strengths
    ``s ~ N(0, 1)`` i.i.d.:

        E_{d ~ N(0, 2)} [ sigmoid(c |d|) ] = agreement    (solved by quadrature + Brent).
    """
    from scipy import integrate, optimize  # only the calibration needs it

    if not 0.5 <= agreement < 1.0:
        raise ValueError(f"agreement must be in [0.5, 1), got {agreement}")
    if agreement == 0.5:
        return 0.0

    def dens(d):  # density of |d| for d ~ N(0, 2)
        return np.exp(-d * d / 4.0) / np.sqrt(np.pi)

    def rate(c):
        return integrate.quad(lambda d: dens(d) / (1.0 + np.exp(-c * d)), 0, np.inf)[0]

    return float(optimize.brentq(lambda c: rate(c) - agreement, 1e-9, 1e4, xtol=1e-12))


def latent_strength(seed: int, query_id: str, cand_id: str) -> float:
    """A seeded N(0, 1) latent strength of one (query, candidate)."""
    return float(np.random.default_rng(stable_int(seed, query_id, cand_id)).standard_normal())


class SimulatedJudge(Judge):
    """The simulated judge (the only one): latent strengths ``s`` (by default seeded N(0,1) per query
    and candidate),

        P(first wins) = sigmoid(scale * (s_a - s_b) + bias),  scale = calibrate_scale(agreement),

    so it agrees with the latent order on a random pair at rate ``agreement`` (default 0.78, the
    paper's pairwise-judge agreement with humans); ``bias`` is a first-shown advantage (log-odds);
    ``agreement=1`` is the noiseless judge (always the stronger candidate, a coin on equal ones).
    Each answer comes from a uniform hashed from (seed, vote, query, a, b): the same question gets
    the same answer, a swapped order or another ``vote`` an independent one; ``judge(q, a, b)``
    answers with a judgments-table label."""

    def __init__(self, agreement: float = 0.78, seed: int = 0, strengths: Callable | dict | None = None,
                 vote: int = 0, bias: float = 0.0):
        super().__init__()
        self.agreement = agreement
        self.noiseless = agreement >= 1.0
        self.scale = None if self.noiseless else calibrate_scale(agreement)
        self.seed = seed
        self.vote = vote
        self.bias = bias
        self._strengths = strengths
        self.calls, self.name = 0, f"simulated(agreement={agreement:g}" + (f", bias={bias:g})" if bias else ")")

    def strength(self, query_id, cand_id) -> float:
        s = self._strengths
        if s is None:
            return latent_strength(self.seed, query_id, cand_id)
        return float(s[(query_id, cand_id)] if isinstance(s, dict) else s(query_id, cand_id))

    def variant(self, k):
        return SimulatedJudge(self.agreement, self.seed, self._strengths, vote=k, bias=self.bias)

    def p_first(self, query_id, a_id, b_id) -> float:
        """The chance that the candidate shown first wins."""
        d = self.strength(query_id, a_id) - self.strength(query_id, b_id)
        if self.noiseless:
            return 1.0 if d > 0 else 0.0 if d < 0 else 0.5
        return 1.0 / (1.0 + np.exp(-(self.scale * d + self.bias)))

    def _answer(self, q, a, b) -> int:
        u = (stable_int(self.seed, self.vote, q, a, b) % (1 << 53)) / float(1 << 53)
        return 1 if u < self.p_first(q, a, b) else 2

    def judge_pairs(self, items):
        return self._count([self._answer(_id(q), _id(a), _id(b)) for q, a, b in items])

    def __call__(self, query_id, a_id, b_id) -> str:
        self.calls += 1
        return ("a", "b")[self._answer(query_id, a_id, b_id) - 1]
