"""Relevance ratings (paper 3.5, App. B.4; SPEC 7): tournament schedules, Bradley-Terry, the driver.

Schedules are pure functions from the tournament state to the next round's pairs of candidate
indices (``0 .. n-1``):

* :func:`first_round` - a uniformly random matching (round 1 of every schedule but exhaustive);
* :func:`swiss_round` - Algorithm 1 of the paper's appendix (greedy pairing by win count);
* :func:`random_round` - a random matching among not-yet-met candidates (same size as a round);
* :func:`round_robin_round` - the exhaustive schedule, all ``n(n-1)/2`` pairs in ``n-1`` rounds;
* :func:`adaptive_round` - this workbench's own schedule (not the paper's): the least certain
  candidates first, each paired with its closest neighbour in the current Bradley-Terry estimate.

Bradley-Terry (:func:`fit_bradley_terry`): ``P(i beats j) = sigmoid(theta_i - theta_j)`` with
``theta = log pi``, fitted by penalized maximum likelihood

    theta* = argmin_theta  alpha * sum_i theta_i^2 + sum_k w_k * log(1 + exp(-(theta_{w_k} - theta_{l_k})))

(``alpha = 0.5`` is the authors' logistic regression without intercept at ``C = 1``). Ties count
as half a win each way (weights 0.5). Ratings are :func:`rescale`-d to ``[0, top]`` per query.

The driver (:func:`run_tournament`) plays all queries of a benchmark round by round, judging the
pairs of every query in one batch per round, and appends each finished round to a store so that a
killed run resumes at the last finished round; :func:`ratings_from_judgments` refits the ratings
from stored judgments without any new judge call.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

SCHEDULES = ("swiss", "exhaustive", "random", "adaptive")
OUTCOMES = ("a", "b", "tie", "failure")

Pair = tuple[int, int]


def single_thread_blas():
    """Context limiting BLAS to one thread: Bradley-Terry fits are small (n ~ 150) dense solves,
    for which multi-threaded BLAS is far slower than one thread, above all on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


# ============================================================================ schedules
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
    unpaired = order
    pairs: list[Pair] = []
    while len(unpaired) >= 2:
        i, rest = unpaired[0], unpaired[1:]
        legal = rest[~met[i, rest]]
        if len(legal) == 0:  # no legal opponent: i sits this round out
            unpaired = rest
            continue
        gap = np.abs(wins[legal] - wins[i])
        best = legal[gap == gap.min()]
        j = best[rng.integers(len(best))] if len(best) > 1 else best[0]
        pairs.append((int(i), int(j)))
        unpaired = rest[rest != j]
    return pairs


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
        if outcome == "a":
            self.wins[i] += 1
            self._add(i, j, 1.0)
        elif outcome == "b":
            self.wins[j] += 1
            self._add(j, i, 1.0)
        elif outcome == "tie":
            self.wins[i] += 0.5
            self.wins[j] += 0.5
            self._add(i, j, 0.5)
            self._add(j, i, 0.5)
        elif outcome != "failure":
            raise ValueError(f"unknown outcome {outcome!r} (expected one of {OUTCOMES})")

    def _add(self, w, l, wt):
        self.winners.append(w)
        self.losers.append(l)
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


# ============================================================================ Bradley-Terry
def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=float)))


def _check_comparisons(n, winners, losers, weights):
    w = np.asarray(winners, dtype=np.int64).ravel()
    lo = np.asarray(losers, dtype=np.int64).ravel()
    if w.shape != lo.shape:
        raise ValueError(f"winners ({w.size}) and losers ({lo.size}) differ in length")
    if w.size and (min(w.min(), lo.min()) < 0 or max(w.max(), lo.max()) >= n):
        raise ValueError(f"a candidate index is outside 0..{n - 1}")
    if np.any(w == lo):
        raise ValueError("a comparison has the same candidate as winner and loser")
    wt = np.ones(w.size) if weights is None else np.asarray(weights, dtype=float).ravel()
    if wt.shape != w.shape:
        raise ValueError(f"weights ({wt.size}) and comparisons ({w.size}) differ in length")
    if np.any(wt < 0) or not np.all(np.isfinite(wt)):
        raise ValueError("weights must be finite and non-negative")
    return w, lo, wt


def bt_objective(theta, winners, losers, alpha=0.5, weights=None):
    """``(f, grad)`` of ``alpha*sum(theta^2) + sum_k w_k log(1 + exp(-(theta_w - theta_l)))``."""
    theta = np.asarray(theta, dtype=float)
    w, lo, wt = _check_comparisons(len(theta), winners, losers, weights)
    d = theta[w] - theta[lo]
    f = alpha * theta @ theta + wt @ np.logaddexp(0.0, -d)
    c = wt * _sigmoid(-d)  # -d/d(d) of the log-loss
    g = 2 * alpha * theta - np.bincount(w, c, len(theta)) + np.bincount(lo, c, len(theta))
    return f, g


def _bt_hessian(n, w, lo, wt, theta, alpha):
    d = theta[w] - theta[lo]
    s = wt * _sigmoid(d) * _sigmoid(-d)
    h = np.zeros((n, n))
    h[np.diag_indices(n)] = 2 * alpha + np.bincount(w, s, n) + np.bincount(lo, s, n)
    np.add.at(h, (w, lo), -s)
    np.add.at(h, (lo, w), -s)
    return h


def fit_bradley_terry(n: int, winners, losers, alpha: float = 0.5, weights=None,
                      tol: float = 1e-10, max_iter: int = 200) -> np.ndarray:
    """Bradley-Terry log-strengths by penalized maximum likelihood.

        theta* = argmin  alpha * sum_i theta_i^2 + sum_k w_k * log(1 + exp(-(theta_{winners[k]} - theta_{losers[k]})))

    ``winners[k]`` beat ``losers[k]``; optional ``weights`` (default 1; a tie is two comparisons of
    weight 0.5, one each way: see :func:`comparisons_from_outcomes`). Damped Newton on the exact
    Hessian (strictly convex for ``alpha > 0``, so the optimum is unique and finite even for
    undefeated candidates or a disconnected comparison graph; a candidate never compared gets 0).
    ``alpha = 0`` (plain MLE) is allowed only when the MLE exists (the comparison graph is strongly
    connected); its result is centred to mean 0.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    w, lo, wt = _check_comparisons(n, winners, losers, weights)
    theta = np.zeros(n)
    if n == 0 or w.size == 0:
        return theta
    gauge = None
    if alpha == 0:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        keep = wt > 0
        g = coo_matrix((np.ones(keep.sum()), (lo[keep], w[keep])), shape=(n, n))
        if connected_components(g, directed=True, connection="strong")[0] != 1:
            raise ValueError("the unpenalized Bradley-Terry MLE does not exist: the comparison graph is "
                             "not strongly connected (e.g. an undefeated candidate); use alpha > 0")
        gauge = np.full((n, n), 1.0 / n)  # fixes the free shift: H + 11^T/n is positive definite
    f, g = bt_objective(theta, w, lo, alpha, wt)
    for _ in range(max_iter):
        if np.max(np.abs(g)) < tol:
            break
        h = _bt_hessian(n, w, lo, wt, theta, alpha)
        if gauge is not None:
            h = h + gauge
        step = np.linalg.solve(h, g)
        dec = float(g @ step)  # squared Newton decrement
        if dec < 1e-24:
            break
        t, noise = 1.0, 1e-13 * max(1.0, abs(f))
        while True:  # backtracking (Armijo) line search; `noise` absorbs rounding near the optimum
            cand = theta - t * step
            fc, gc = bt_objective(cand, w, lo, alpha, wt)
            if fc <= f - 1e-4 * t * dec + noise:
                break
            t *= 0.5
            if t < 1e-12:
                break
        if fc > f + noise:  # no progress possible at float precision
            break
        theta, f, g = cand, fc, gc
    if alpha == 0:
        theta = theta - theta.mean()
    return theta


def bt_posterior_var(n, winners, losers, theta, alpha=0.5, weights=None) -> np.ndarray:
    """Diagonal of the inverse Hessian of the penalized objective at ``theta`` (a Laplace
    approximation of each log-strength's variance, up to the factor 2 of the penalty's scale)."""
    w, lo, wt = _check_comparisons(n, winners, losers, weights)
    h = _bt_hessian(n, w, lo, wt, np.asarray(theta, dtype=float), max(alpha, 1e-6))
    return np.diag(np.linalg.inv(h)).copy()


def rescale(theta, top: float = 5.0) -> np.ndarray:
    """Min-max rescaling to ``[0, top]``: ``top * (theta - min) / (max - min)``; all equal -> all 0."""
    theta = np.asarray(theta, dtype=float)
    if theta.size == 0:
        return theta.copy()
    lo, span = theta.min(), np.ptp(theta)
    if span <= 1e-12 * max(1.0, abs(lo)):
        return np.zeros_like(theta)
    return top * (theta - lo) / span


def comparisons_from_outcomes(a, b, outcome):
    """Weighted (winners, losers, weights) from judgments of pairs (a[k], b[k]).

    ``a`` preferred -> (a, b, 1); ``b`` -> (b, a, 1); ``tie`` -> (a, b, .5) and (b, a, .5);
    ``failure`` -> nothing.
    """
    winners, losers, weights = [], [], []
    for x, y, o in zip(a, b, outcome):
        if o == "a":
            winners.append(x); losers.append(y); weights.append(1.0)
        elif o == "b":
            winners.append(y); losers.append(x); weights.append(1.0)
        elif o == "tie":
            winners += [x, y]; losers += [y, x]; weights += [0.5, 0.5]
        elif o != "failure":
            raise ValueError(f"unknown outcome {o!r} (expected one of {OUTCOMES})")
    return winners, losers, weights


# ============================================================================ the driver
@dataclass(frozen=True)
class Doc:
    """A problem the judge sees (query or candidate), with its id (the simulated judge only uses
    the id; the proxy judge the full :attr:`text`)."""

    id: str
    problem: str
    solution: str = ""

    @property
    def text(self) -> str:
        """The document text judged and retrieved: ``"Problem: {p}\\n\\nSolution: {s}"``."""
        return doc_text(self.problem, self.solution)


def doc_text(problem: str, solution: str | None) -> str:
    """SPEC 8's document text (:func:`saber_lib.retrievers.document_text`)."""
    from .retrievers import document_text

    return document_text(problem, solution)


def corpus_docs(corpus, ids=None) -> dict[str, Doc]:
    """doc_id -> :class:`Doc` for the rows of ``corpus/corpus.parquet`` (a polars DataFrame),
    optionally only ``ids``."""
    import polars as pl

    df = corpus.select("doc_id", "problem", "solution")
    if ids is not None:
        df = df.filter(pl.col("doc_id").is_in(list(set(ids))))
    return {d: Doc(d, p or "", s or "") for d, p, s in df.iter_rows()}


def stable_int(*parts) -> int:
    """A 63-bit integer from the sha256 of the parts (stable across processes, unlike hash())."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def round_rng(seed: int, query_id: str, r: int, stream: int = 0) -> np.random.Generator:
    """The generator of one query's round: the same pairs whether or not the run was resumed."""
    return np.random.default_rng([seed, stable_int(query_id), r, stream])


@dataclass
class QueryPlan:
    query_id: str
    cand_ids: list[str]
    positions: list[int]
    groups: list[str]


def plan_queries(benchmark, max_queries: int = 0) -> list[QueryPlan]:
    """Queries of a ``select/benchmark.parquet`` table in order of first appearance, candidates by
    ``position``; ``max_queries > 0`` keeps the first ones."""
    import polars as pl

    need = {"query_id", "cand_id", "position"}
    missing = need - set(benchmark.columns)
    if missing:
        raise ValueError(f"benchmark table lacks columns {sorted(missing)}")
    b = benchmark.with_row_index("_row")
    if "group" not in b.columns:
        b = b.with_columns(pl.lit(None, dtype=pl.String).alias("group"))
    order = b.group_by("query_id").agg(pl.col("_row").min()).sort("_row")["query_id"].to_list()
    if max_queries:
        order = order[:max_queries]
    plans = []
    for q in order:
        sub = b.filter(pl.col("query_id") == q).sort("position")
        cands = sub["cand_id"].cast(pl.String).to_list()
        if len(set(cands)) != len(cands):
            raise ValueError(f"benchmark: query {q!r} lists a candidate twice")
        plans.append(QueryPlan(str(q), cands, sub["position"].to_list(), sub["group"].to_list()))
    return plans


JUDGMENT_SCHEMA = {"query_id": "String", "round": "Int32", "a": "String", "b": "String",
                   "outcome": "String", "judge": "String", "reason": "String",
                   "position_consistent": "Boolean"}


def _empty_judgments():
    import polars as pl

    return pl.DataFrame(schema={k: getattr(pl, v) for k, v in JUDGMENT_SCHEMA.items()})


class JudgmentStore:
    """Per-round Parquet files ``<dir>/round_NNNN.parquet`` plus a ``fingerprint.json`` naming the
    schedule, judge, seed and query set they belong to. A round file is written atomically once
    the whole round is judged, so a killed run resumes at the last finished round."""

    def __init__(self, directory, fingerprint: dict):
        self.dir = Path(directory)
        self.fingerprint = fingerprint
        fp = self.dir / "fingerprint.json"
        if fp.exists() and json.loads(fp.read_text()) != fingerprint:
            old = json.loads(fp.read_text())
            raise ValueError(
                f"{self.dir}: stored judgments belong to another setting ({old}); remove the folder "
                f"to start over with {fingerprint}")
        self.dir.mkdir(parents=True, exist_ok=True)
        if not fp.exists():
            fp.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")

    def rounds(self) -> list[int]:
        return sorted(int(p.stem.split("_")[1]) for p in self.dir.glob("round_*.parquet"))

    def load(self):
        import polars as pl

        done = self.rounds()
        if not done:
            return _empty_judgments()
        return pl.concat([pl.read_parquet(self.dir / f"round_{r:04d}.parquet") for r in done])

    def append(self, r: int, df) -> None:
        path = self.dir / f"round_{r:04d}.parquet"
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        df.write_parquet(tmp)
        os.replace(tmp, path)


@dataclass
class TournamentResult:
    judgments: object  # polars DataFrame (JUDGMENT_SCHEMA)
    ratings: object    # polars DataFrame
    rounds_played: int
    judge_calls: int   # judgments requested in this call (0 when everything was stored)


def run_tournament(benchmark, docs: dict[str, Doc], judge, *, schedule: str = "swiss", rounds: int = 20,
                   seed: int = 0, store_dir, alpha: float = 0.5, top: float = 5.0, max_queries: int = 0,
                   stop_after: int | None = None, progress: Callable[[int, int], None] | None = None
                   ) -> TournamentResult:
    """Play the tournament of every benchmark query and fit its ratings.

    Round ``r`` of every query is scheduled from that query's stored judgments (``next_pairs``),
    the order in which each pair is shown is a seeded coin flip, all queries' pairs are judged in
    one ``judge.judge_pairs`` batch, and the round is appended to the store. Rounds already in the
    store are not judged again. ``schedule='exhaustive'`` plays all pairs (``rounds`` ignored).
    ``stop_after`` stops after that many new rounds (used to test resumption).
    """
    with single_thread_blas():
        return _run_tournament(benchmark, docs, judge, schedule=schedule, rounds=rounds, seed=seed,
                               store_dir=store_dir, alpha=alpha, top=top, max_queries=max_queries,
                               stop_after=stop_after, progress=progress)


def _run_tournament(benchmark, docs, judge, *, schedule, rounds, seed, store_dir, alpha, top, max_queries,
                    stop_after, progress):
    import polars as pl

    if schedule not in SCHEDULES:
        raise ValueError(f"tournament.schedule: unknown schedule {schedule!r} (expected one of {SCHEDULES})")
    plans = plan_queries(benchmark, max_queries)
    missing = sorted({q.query_id for q in plans} - set(docs)
                     | {c for q in plans for c in q.cand_ids} - set(docs))
    if missing:
        raise ValueError(f"no corpus text for {len(missing)} benchmark ids, e.g. {missing[:3]} (not in the corpus)")
    fingerprint = {"schedule": schedule, "judge": judge.name, "seed": int(seed), "alpha": float(alpha),
                   "queries": hashlib.sha256(json.dumps(
                       [[q.query_id, q.cand_ids] for q in plans]).encode()).hexdigest()}
    store = JudgmentStore(store_dir, fingerprint)
    done = store.rounds()
    if done != list(range(1, len(done) + 1)):
        raise ValueError(f"{store.dir}: round files {done} have a gap; remove the folder to start over")
    stored = store.load()
    standings = {q.query_id: Standing(len(q.cand_ids)) for q in plans}
    index = {q.query_id: {c: k for k, c in enumerate(q.cand_ids)} for q in plans}
    _replay(stored, standings, index)
    n_max = max((len(q.cand_ids) for q in plans), default=0)
    total = exhaustive_rounds(n_max) if schedule == "exhaustive" else rounds
    calls = 0
    new_rounds = 0
    for r in range(len(done) + 1, total + 1):
        if stop_after is not None and new_rounds >= stop_after:
            break
        rows, items = [], []
        for q in plans:
            st = standings[q.query_id]
            st.rounds_done = r - 1
            pairs = next_pairs(schedule, st, round_rng(seed, q.query_id, r), alpha)
            flip = round_rng(seed, q.query_id, r, stream=1).random(len(pairs)) < 0.5
            qdoc = docs[q.query_id]
            for (i, j), f in zip(pairs, flip):
                a, b = (j, i) if f else (i, j)
                ca, cb = q.cand_ids[a], q.cand_ids[b]
                rows.append((q.query_id, r, ca, cb))
                items.append((qdoc, docs[ca], docs[cb]))
        verdicts = judge.judge_pairs(items) if items else []
        calls += len(items)
        from .judges import outcome_label

        cons = getattr(judge, "last_consistency", None) if items else None
        recs = []
        for k, ((qid, rr, ca, cb), v) in enumerate(zip(rows, verdicts)):
            label, reason = outcome_label(v)
            recs.append({"query_id": qid, "round": rr, "a": ca, "b": cb, "outcome": label, "judge": judge.name,
                         "reason": reason, "position_consistent": cons[k] if cons else None})
        df = pl.DataFrame(recs, schema={k: getattr(pl, t) for k, t in JUDGMENT_SCHEMA.items()}) if recs \
            else _empty_judgments()
        store.append(r, df)
        _replay(df, standings, index)
        new_rounds += 1
        if progress:
            progress(r, total)
    judgments = store.load()
    ratings = ratings_from_judgments(judgments, benchmark, alpha=alpha, top=top, max_queries=max_queries)
    return TournamentResult(judgments, ratings, len(store.rounds()), calls)


def _replay(df, standings, index):
    for qid, a, b, o in df.select("query_id", "a", "b", "outcome").iter_rows():
        idx = index[qid]
        standings[qid].record(idx[a], idx[b], o)


def ratings_from_judgments(judgments, benchmark, alpha: float = 0.5, top: float = 5.0, max_queries: int = 0):
    """Per-query Bradley-Terry fit of stored judgments -> ratings table (CONTRIBUTING contract):
    ``query_id, cand_id, position, group, theta, rating (0..top), wins, n_judged``.

    ``wins`` counts preferences (a tie is half a win); ``n_judged`` counts non-failed judgments.
    """
    import polars as pl

    with single_thread_blas():
        return _ratings(judgments, benchmark, alpha, top, max_queries)


def _ratings(judgments, benchmark, alpha, top, max_queries):
    import polars as pl

    out = []
    by_q = {k[0]: g for k, g in judgments.group_by("query_id")} if judgments.height else {}
    for q in plan_queries(benchmark, max_queries):
        idx = {c: k for k, c in enumerate(q.cand_ids)}
        n = len(q.cand_ids)
        st = Standing(n)
        judged = np.zeros(n, dtype=np.int64)
        g = by_q.get(q.query_id)
        if g is not None:
            for a, b, o in g.select("a", "b", "outcome").iter_rows():
                st.record(idx[a], idx[b], o)
                if o != "failure":
                    judged[idx[a]] += 1
                    judged[idx[b]] += 1
        theta = st.fit(alpha)
        rating = rescale(theta, top)
        out.append(pl.DataFrame({
            "query_id": [q.query_id] * n, "cand_id": q.cand_ids, "position": q.positions, "group": q.groups,
            "theta": theta, "rating": rating, "wins": st.wins, "n_judged": judged,
        }, schema={"query_id": pl.String, "cand_id": pl.String, "position": pl.Int64, "group": pl.String,
                   "theta": pl.Float64, "rating": pl.Float64, "wins": pl.Float64, "n_judged": pl.Int64}))
    if not out:
        return pl.DataFrame(schema={"query_id": pl.String, "cand_id": pl.String, "position": pl.Int64,
                                    "group": pl.String, "theta": pl.Float64, "rating": pl.Float64,
                                    "wins": pl.Float64, "n_judged": pl.Int64})
    return pl.concat(out)


def judgment_summary(judgments):
    """Per-query counts: judgments, failures, ties, first-shown wins, position-inconsistent pairs."""
    import polars as pl

    return (judgments.group_by("query_id", maintain_order=True).agg(
        pl.len().alias("judgments"),
        (pl.col("outcome") == "failure").sum().alias("failures"),
        (pl.col("outcome") == "tie").sum().alias("ties"),
        (pl.col("outcome") == "a").sum().alias("first_shown_wins"),
        (pl.col("position_consistent") == False).sum().alias("position_inconsistent"),  # noqa: E712
        pl.col("round").max().alias("rounds"),
    ))


def position_stats(judgments) -> dict:
    """Judge health over stored judgments: ``failure_rate``, ``tie_rate``, ``first_shown_win_rate``
    (share of decided judgments won by the candidate shown first; the order is a coin flip, so a
    position-blind judge sits near 0.5) and ``position_inconsistency_rate`` (position-swapped
    judging only: pairs whose two orders disagreed / pairs answered in both orders, else None)."""
    import polars as pl

    n = judgments.height
    o = judgments["outcome"]
    decided = int(((o == "a") | (o == "b")).sum())
    both = judgments.filter(pl.col("position_consistent").is_not_null())
    return {
        "judgments": n,
        "failure_rate": float((o == "failure").sum() / n) if n else float("nan"),
        "tie_rate": float((o == "tie").sum() / n) if n else float("nan"),
        "first_shown_win_rate": float((o == "a").sum() / decided) if decided else float("nan"),
        "position_inconsistency_rate": (float((~both["position_consistent"]).sum() / both.height)
                                        if both.height else None),
    }
