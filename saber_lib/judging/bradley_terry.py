"""Bradley-Terry ratings (paper 3.5, App. B.4).

``P(i beats j) = sigmoid(theta_i - theta_j)`` with ``theta = log pi``, fitted by penalized maximum
likelihood (:func:`fit_bradley_terry`)::

    theta* = argmin_theta  alpha * sum_i theta_i^2 + sum_k w_k * log(1 + exp(-(theta_{w_k} - theta_{l_k})))

(``alpha = 0.5`` is the authors' logistic regression without intercept at ``C = 1``). Ties count
as half a win each way (weights 0.5, :func:`saber_lib.judging.outcomes.weighted_comparisons`). Ratings are
:func:`rescale`-d to ``[0, top]`` per query.

One fit, :func:`fit_bradley_terry`, in one input encoding (``winners, losers, weights``, from
:func:`saber_lib.judging.outcomes.weighted_comparisons`). Its ``weights`` are one vector, or a
matrix whose every row is one weighting of the same comparisons (the rating draws): the rows are
then fitted together, comparisons merged per unordered pair and the Newton steps of all rows stacked
into one batched solve, each row with its own Armijo line search.

One model variant: :func:`fit_order_effect` adds a first-shown advantage ``gamma`` (unpenalized)::

    P(first preferred) = sigmoid(theta_first - theta_second + gamma)

Strengths of different queries only meet through ``gamma``, so its Hessian is sparse
(``scipy.sparse.linalg.spsolve``); ``gamma``'s standard error is ``sqrt([H^-1]_{gamma gamma})``.

One objective: every path builds the margins ``d_k`` of its comparisons (``theta_w - theta_l``,
plus ``gamma`` in the order-effect fit) and takes the loss, gradient and curvature of each
comparison from :func:`comparison_terms`; the single fit and the order-effect fit run one damped
Newton iteration (:func:`damped_newton`), the batched fit the same step on many weightings at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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
                      tol: float = 1e-10, max_iter: int = 200, theta0=None) -> np.ndarray:
    """Bradley-Terry log-strengths by penalized maximum likelihood.

        theta* = argmin  alpha * sum_i theta_i^2 + sum_k w_k * log(1 + exp(-(theta_{winners[k]} - theta_{losers[k]})))

    ``winners[k]`` beat ``losers[k]``; optional ``weights`` (default 1; a tie is two comparisons of
    weight 0.5, one each way: see :func:`saber_lib.judging.outcomes.weighted_comparisons`). Damped
    Newton on the exact Hessian (strictly convex for ``alpha > 0``, so the optimum is unique and
    finite even for undefeated candidates or a disconnected comparison graph; a candidate never
    compared gets 0). ``alpha = 0`` (plain MLE) is allowed only when the MLE exists (the comparison
    graph is strongly connected); its result is centred to mean 0. ``theta0``: the starting point
    (default 0).

    ``weights`` of shape ``(D, K)`` (``D`` weightings of the ``K`` comparisons, e.g. rating draws):
    every row is fitted (``alpha > 0``), returning ``theta`` of shape ``(D, n)``; a candidate without
    comparisons in a row gets 0; ``theta0`` is the common start of every row (module docstring).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if weights is not None and np.ndim(weights) == 2:
        with single_thread_blas():
            return _fit_rows(n, winners, losers, weights, alpha, tol, max_iter, theta0)
    w, lo, wt = _check_comparisons(n, winners, losers, weights)
    theta = np.zeros(n)
    if n == 0 or w.size == 0:
        return theta
    gauge = None
    if alpha == 0:
        keep = wt > 0   # only the unpenalized fit checks connectivity
        from scipy import sparse  # scipy loads with the first fit, not with the judge registry (profile checks)
        from scipy.sparse.csgraph import connected_components  # likewise
        g = sparse.coo_matrix((np.ones(keep.sum()), (lo[keep], w[keep])), shape=(n, n))
        if connected_components(g, directed=True, connection="strong")[0] != 1:
            raise ValueError("the unpenalized Bradley-Terry MLE does not exist: the comparison graph is "
                             "not strongly connected (e.g. an undefeated candidate); use alpha > 0")
        gauge = np.full((n, n), 1.0 / n)  # fixes the free shift: H + 11^T/n is positive definite

    def solve(x, g):
        h = _bt_hessian(n, w, lo, wt, x, alpha)
        return np.linalg.solve(h if gauge is None else h + gauge, g)

    if theta0 is not None:
        theta = np.array(theta0, dtype=float)
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


# ============================================================================ several weightings
def _pair_terms(d, a, b):
    """Loss, pull and curvature of merged pairs: ``a`` wins of the first over the second at margin
    ``d``, ``b`` wins the other way (margin ``-d``), from the one per-comparison objective."""
    la, ca, sa = comparison_terms(d, a)
    lb, cb, sb = comparison_terms(-d, b)
    return a * la + b * lb, ca - cb, sa + sb


def _merge_pairs(n, win, lose, W):
    """Unordered pairs (lo < hi) and the weights of lo-over-hi and hi-over-lo per row of ``W``."""
    lo = np.minimum(win, lose)
    hi = np.maximum(win, lose)
    uniq, inv = np.unique(lo * n + hi, return_inverse=True)
    fwd = (win == lo).astype(float)  # comparison k is "lo beats hi"
    # sum the columns of W that belong to the same pair: a product with a sparse 0/1 matrix
    from scipy import sparse  # scipy loads with the first fit, not with the judge registry (profile checks)
    S = sparse.csr_matrix((np.ones(win.size), (np.arange(win.size), inv.ravel())), shape=(win.size, uniq.size))
    A = np.asarray((S.T @ (W * fwd).T).T)
    B = np.asarray((S.T @ (W * (1.0 - fwd)).T).T)
    return uniq // n, uniq % n, A, B


def _fit_rows(n, win, lose, W, alpha, tol, max_iter, theta0=None):
    """Every row of the weight matrix ``W`` fitted at once (:func:`fit_bradley_terry`)."""
    if alpha <= 0:
        raise ValueError("a fit of several weightings needs alpha > 0")
    win = np.asarray(win, dtype=np.int64).ravel()
    lose = np.asarray(lose, dtype=np.int64).ravel()
    W = np.asarray(W, dtype=float)
    D, K = W.shape
    if K != win.size or win.size != lose.size:
        raise ValueError("weights, winners and losers differ in length")
    if np.any(W < 0) or not np.all(np.isfinite(W)):
        raise ValueError("weights must be finite and non-negative")
    theta = np.zeros((D, n))
    if n == 0 or K == 0:
        return theta
    if theta0 is not None:
        theta[:] = np.asarray(theta0, dtype=float)[None, :]
    if np.any(win == lose) or min(win.min(), lose.min()) < 0 or max(win.max(), lose.max()) >= n:
        raise ValueError("bad comparison indices")
    I, J, A, B = _merge_pairs(n, win, lose, W)
    P = I.size
    Minc = np.zeros((P, n))
    Minc[np.arange(P), I] = 1.0
    Minc[np.arange(P), J] = -1.0
    Mabs = np.abs(Minc)
    diag = np.arange(n)
    flat_ij = I * n + J
    flat_ji = J * n + I

    def objective(th, a, b):
        d = th @ Minc.T  # theta_I - theta_J
        loss, c, s = _pair_terms(d, a, b)
        return alpha * np.einsum("di,di->d", th, th) + loss.sum(axis=1), c, s

    f, c, s = objective(theta, A, B)
    active = np.ones(D, dtype=bool)
    for _ in range(max_iter):
        g = 2 * alpha * theta - c @ Minc
        active &= np.abs(g).max(axis=1) >= tol
        if not active.any():
            break
        idx = np.flatnonzero(active)
        m = idx.size
        si = s[idx]
        offs = (np.arange(m) * n * n)[:, None]
        h = np.bincount((offs + flat_ij[None, :]).ravel(), weights=-si.ravel(), minlength=m * n * n)
        h += np.bincount((offs + flat_ji[None, :]).ravel(), weights=-si.ravel(), minlength=m * n * n)
        h = h.reshape(m, n, n)
        h[:, diag, diag] = 2 * alpha + si @ Mabs
        gi = g[idx]
        step = np.linalg.solve(h, gi[..., None])[..., 0]
        dec = np.einsum("di,di->d", gi, step)
        th0, f0, Ai, Bi = theta[idx], f[idx], A[idx], B[idx]
        t = np.ones(m)
        th_new = th0 - step
        f_new, c_new, s_new = objective(th_new, Ai, Bi)
        noise = 1e-13 * np.maximum(1.0, np.abs(f0))
        for _ls in range(40):  # backtracking (Armijo), per row
            bad = f_new > f0 - 1e-4 * t * dec + noise
            if not bad.any():
                break
            t[bad] *= 0.5
            th_new[bad] = th0[bad] - t[bad, None] * step[bad]
            f_new[bad], c_new[bad], s_new[bad] = objective(th_new[bad], Ai[bad], Bi[bad])
        improved = f_new <= f0 + noise
        upd = idx[improved]
        theta[upd], f[upd], c[upd], s[upd] = th_new[improved], f_new[improved], c_new[improved], s_new[improved]
        active[idx[~improved | (dec < 1e-24)]] = False
    return theta


# ============================================================================ order effect
@dataclass
class OrderEffectFit:
    theta: np.ndarray      # strength per (query, candidate) index
    gamma: float           # first-shown log-odds advantage
    gamma_se: float        # Laplace standard error
    n_judgments: int
    converged: bool


def fit_order_effect(n: int, first, second, y, alpha: float = 0.5, tol: float = 1e-9,
                     max_iter: int = 100) -> OrderEffectFit:
    """Fit ``P(first preferred) = sigmoid(theta_first - theta_second + gamma)`` (module docstring)
    by penalized maximum likelihood, ``alpha * sum theta^2`` on the strengths only::

        min  alpha * sum theta^2 + sum_k [ y_k softplus(-d_k) + (1 - y_k) softplus(d_k) ],
             d_k = theta_{first_k} - theta_{second_k} + gamma

    ``first``/``second``: candidate indices ``0 .. n-1`` (make them unique across queries);
    ``y``: 1 when the first was preferred, 0 when the second, 0.5 for a tie (module docstring)."""
    if alpha <= 0:
        raise ValueError("alpha must be > 0 (strengths of undefeated candidates diverge otherwise)")
    f = np.asarray(first, dtype=np.int64).ravel()
    s = np.asarray(second, dtype=np.int64).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if not (f.size == s.size == y.size):
        raise ValueError("first, second and y differ in length")
    if f.size == 0:
        return OrderEffectFit(np.zeros(n), 0.0, math.inf, 0, True)
    if np.any(f == s) or min(f.min(), s.min()) < 0 or max(f.max(), s.max()) >= n:
        raise ValueError("bad candidate indices")
    K = f.size
    rows = np.arange(K)
    # design: d = X @ [theta, gamma]
    from scipy import sparse  # scipy loads with the first fit, not with the judge registry (profile checks)
    from scipy.sparse.linalg import spsolve  # likewise
    X = sparse.csr_matrix((np.concatenate([np.ones(K), -np.ones(K), np.ones(K)]),
                           (np.concatenate([rows, rows, rows]), np.concatenate([f, s, np.full(K, n)]))),
                          shape=(K, n + 1))
    pen = np.full(n + 1, 2 * alpha)
    pen[n] = 0.0

    def hessian(b):
        curv = _pair_terms(X @ b, y, 1.0 - y)[2]
        return (X.T @ sparse.diags(curv) @ X + sparse.diags(pen)).tocsc()

    def fun(b):
        loss, pull, _ = _pair_terms(X @ b, y, 1.0 - y)
        return 0.5 * pen @ (b * b) + float(loss.sum()), pen * b - X.T @ pull

    beta, _, _, converged = damped_newton(np.zeros(n + 1), fun, lambda b, g: spsolve(hessian(b), g), tol, max_iter,
                                          noise_scale=1e-12, min_step=1e-10, min_decrement=1e-20)
    e = np.zeros(n + 1)
    e[n] = 1.0
    var = float(spsolve(hessian(beta), e)[n])
    return OrderEffectFit(beta[:n], float(beta[n]), math.sqrt(var) if var > 0 else math.inf, K, converged)
