"""Bradley-Terry solvers beyond the single fit, on the objective of :mod:`.bradley_terry`
(:func:`~.bradley_terry.comparison_terms`): many weightings of one query's comparisons at once
(:func:`fit_bt_batch`, the rating draws) and the joint fit with a first-shown advantage
(:func:`fit_order_effect`).

Batched: for every row ``d`` of a weight matrix ``W`` (draws x comparisons)::

    theta_d* = argmin  alpha * sum_i theta_i^2 + sum_k W[d, k] * log(1 + exp(-(theta_{win_k} - theta_{lose_k})))

Comparisons are merged per unordered pair ``{i, j}`` (weight of ``i`` over ``j`` and of ``j`` over
``i``); the Newton steps of all draws are stacked into one ``(D, n, n)`` batched solve per
iteration, each draw with its own Armijo line search, BLAS limited to one thread.

Order effect: a judgment shows ``a`` first; ``P(a preferred) = sigmoid(theta_a - theta_b + gamma)``
with ``gamma`` the first-shown log-odds advantage, unpenalized; a tie counts half a win each way.
Strengths of different queries only meet through ``gamma``, so the Hessian is sparse
(``scipy.sparse.linalg.spsolve``); ``gamma``'s standard error is ``sqrt([H^-1]_{gamma gamma})``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import spsolve

from .bradley_terry import comparison_terms, damped_newton, rescale, single_thread_blas


def _pair_terms(d, a, b):
    """Loss, pull and curvature of merged pairs: ``a`` wins of the first over the second at margin
    ``d``, ``b`` wins the other way (margin ``-d``), from the one per-comparison objective."""
    la, ca, sa = comparison_terms(d, a)
    lb, cb, sb = comparison_terms(-d, b)
    return a * la + b * lb, ca - cb, sa + sb


def _merge_pairs(n, win, lose, W):
    """Unordered pairs (lo < hi) and the weights of lo-over-hi and hi-over-lo per draw."""
    lo = np.minimum(win, lose)
    hi = np.maximum(win, lose)
    uniq, inv = np.unique(lo * n + hi, return_inverse=True)
    fwd = (win == lo).astype(float)  # comparison k is "lo beats hi"
    # sum the columns of W that belong to the same pair: a product with a sparse 0/1 matrix
    S = sparse.csr_matrix((np.ones(win.size), (np.arange(win.size), inv.ravel())), shape=(win.size, uniq.size))
    A = np.asarray((S.T @ (W * fwd).T).T)
    B = np.asarray((S.T @ (W * (1.0 - fwd)).T).T)
    return uniq // n, uniq % n, A, B


def fit_bt_batch(n: int, win, lose, W, alpha: float = 0.5, tol: float = 1e-9,
                 max_iter: int = 100, theta0=None) -> np.ndarray:
    """Penalized Bradley-Terry log-strengths for every row of ``W``.

    ``win[k]`` beat ``lose[k]`` with weight ``W[d, k]`` in draw ``d`` (``W`` of shape ``(D, K)``,
    or ``(K,)`` for one draw). ``alpha > 0`` (the penalty keeps every draw's optimum finite).
    Returns ``theta`` of shape ``(D, n)`` (``(n,)`` for a one-dimensional ``W``). ``theta0``
    (length ``n``): a common starting point (e.g. the point fit; fewer Newton steps). A candidate
    without comparisons in a draw gets 0, as in the single fit.
    """
    with single_thread_blas():
        return _fit(n, win, lose, W, alpha, tol, max_iter, theta0)


def _fit(n, win, lose, W, alpha, tol, max_iter, theta0=None):
    if alpha <= 0:
        raise ValueError("fit_bt_batch needs alpha > 0")
    win = np.asarray(win, dtype=np.int64).ravel()
    lose = np.asarray(lose, dtype=np.int64).ravel()
    W = np.asarray(W, dtype=float)
    one = W.ndim == 1
    if one:
        W = W[None, :]
    D, K = W.shape
    if K != win.size or win.size != lose.size:
        raise ValueError("weights, winners and losers differ in length")
    theta = np.zeros((D, n))
    if n == 0 or K == 0:
        return theta[0] if one else theta
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
        for _ls in range(40):  # backtracking (Armijo), per draw
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
    return theta[0] if one else theta


def rescale_rows(theta, top: float = 5.0) -> np.ndarray:
    """:func:`~.bradley_terry.rescale` of every row (a constant row becomes 0)."""
    return rescale(np.atleast_2d(np.asarray(theta, dtype=float)), top)


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
    ``y``: 1 when the first was preferred, 0 when the second, 0.5 for a tie."""
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
