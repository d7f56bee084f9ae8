"""Bradley-Terry ratings (paper 3.5, App. B.4).

``P(i beats j) = sigmoid(theta_i - theta_j)`` with ``theta = log pi``, fitted by penalized maximum
likelihood (:func:`fit_bradley_terry`)::

    theta* = argmin_theta  alpha * sum_i theta_i^2 + sum_k w_k * log(1 + exp(-(theta_{w_k} - theta_{l_k})))

(``alpha = 0.5`` is the authors' logistic regression without intercept at ``C = 1``). Ties count
as half a win each way (weights 0.5, :func:`saber_lib.judging.outcomes.comparisons`). Ratings are
:func:`rescale`-d to ``[0, top]`` per query.

One objective: every solver builds the margins ``d_k`` of its comparisons (``theta_w - theta_l``,
plus a first-shown term in the order-effect fit) and takes the loss, gradient and curvature of each
comparison from :func:`comparison_terms`; one damped Newton iteration (:func:`damped_newton`) with
an Armijo line search drives the single fit here and the order-effect fit; the batched fit
(:mod:`.bt_solvers`) runs the same step on many weightings at once.
"""
from __future__ import annotations

import numpy as np


def single_thread_blas():
    """Context limiting BLAS to one thread: Bradley-Terry fits are small (n ~ 150) dense solves,
    for which multi-threaded BLAS is far slower than one thread, above all on a busy machine."""
    from threadpoolctl import threadpool_limits  # only the fits need it

    return threadpool_limits(1)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=float)))


def comparison_terms(d, weights):
    """Per comparison of margin ``d`` (winner minus loser) and weight ``w``: the unweighted loss
    ``log(1 + exp(-d))``, the weighted pull ``w * sigmoid(-d)`` (minus the derivative of the
    weighted loss in ``d``) and the weighted curvature ``w * sigmoid(d) * sigmoid(-d)``."""
    d = np.asarray(d, dtype=float)
    return np.logaddexp(0.0, -d), weights * _sigmoid(-d), weights * _sigmoid(d) * _sigmoid(-d)


def damped_newton(x, fun, solve, tol: float, max_iter: int, noise_scale: float = 1e-13,
                  min_step: float = 1e-12, min_decrement: float = 1e-24):
    """Minimize by Newton steps with a backtracking (Armijo) line search.

    ``fun(x) -> (f, g)``; ``solve(x, g) -> step`` (the Newton direction ``H^-1 g``). Stops when the
    largest gradient entry is below ``tol`` (converged), the squared Newton decrement is below
    ``min_decrement`` (converged), or no step improves ``f`` beyond float noise
    (``noise_scale * max(1, |f|)``). Returns ``(x, f, g, converged)``."""
    f, g = fun(x)
    converged = False
    for _ in range(max_iter):
        if np.max(np.abs(g)) < tol:
            converged = True
            break
        step = solve(x, g)
        dec = float(g @ step)  # squared Newton decrement
        if dec < min_decrement:
            converged = True
            break
        t, noise = 1.0, noise_scale * max(1.0, abs(f))
        while True:  # `noise` absorbs rounding near the optimum
            cand = x - t * step
            fc, gc = fun(cand)
            if fc <= f - 1e-4 * t * dec + noise:
                break
            t *= 0.5
            if t < min_step:
                break
        if fc > f + noise:  # no progress possible at float precision
            break
        x, f, g = cand, fc, gc
    return x, f, g, converged


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
    loss, c, _ = comparison_terms(theta[w] - theta[lo], wt)
    f = alpha * theta @ theta + wt @ loss
    g = 2 * alpha * theta - np.bincount(w, c, len(theta)) + np.bincount(lo, c, len(theta))
    return f, g


def _bt_hessian(n, w, lo, wt, theta, alpha):
    s = comparison_terms(theta[w] - theta[lo], wt)[2]
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
        # scipy's graph routines: only the unpenalized fit (alpha = 0) checks connectivity
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        keep = wt > 0
        g = coo_matrix((np.ones(keep.sum()), (lo[keep], w[keep])), shape=(n, n))
        if connected_components(g, directed=True, connection="strong")[0] != 1:
            raise ValueError("the unpenalized Bradley-Terry MLE does not exist: the comparison graph is "
                             "not strongly connected (e.g. an undefeated candidate); use alpha > 0")
        gauge = np.full((n, n), 1.0 / n)  # fixes the free shift: H + 11^T/n is positive definite

    def solve(x, g):
        h = _bt_hessian(n, w, lo, wt, x, alpha)
        return np.linalg.solve(h if gauge is None else h + gauge, g)

    theta = damped_newton(theta, lambda x: bt_objective(x, w, lo, alpha, wt), solve, tol, max_iter)[0]
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
    """Min-max rescaling to ``[0, top]``: ``top * (theta - min) / (max - min)``; all equal -> all 0.
    ``theta`` is one vector, or a matrix whose every row is rescaled on its own."""
    theta = np.asarray(theta, dtype=float)
    if theta.size == 0:
        return theta.copy()
    rows = np.atleast_2d(theta)
    lo = rows.min(axis=1, keepdims=True)
    span = rows.max(axis=1, keepdims=True) - lo
    flat = span <= 1e-12 * np.maximum(1.0, np.abs(lo))
    out = np.where(flat, 0.0, top * (rows - lo) / np.where(flat, 1.0, span))
    return out[0] if theta.ndim == 1 else out
