"""Batched Bradley-Terry fits: many weightings of the same comparisons solved at once.

The objective is the one of :func:`saber_lib.tournament.fit_bradley_terry`, for every row ``d`` of
a weight matrix ``W`` (draws x comparisons)::

    theta_d* = argmin  alpha * sum_i theta_i^2 + sum_k W[d, k] * log(1 + exp(-(theta_{win_k} - theta_{lose_k})))

Comparisons are first merged per unordered pair ``{i, j}`` (weight of ``i`` over ``j`` and of ``j``
over ``i``), then solved by damped Newton steps on the exact Hessians, stacked into one
``(D, n, n)`` array and solved with one batched ``numpy.linalg.solve`` per iteration, with BLAS
limited to one thread (small dense solves are much slower multi-threaded on a busy machine).
A candidate without comparisons in a draw gets 0, as in the single fit.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.special import expit
from threadpoolctl import threadpool_limits


def _merge_pairs(n, win, lose, W):
    """Unordered pairs (lo < hi) and the weights of lo-over-hi and hi-over-lo per draw."""
    lo = np.minimum(win, lose)
    hi = np.maximum(win, lose)
    key = lo * n + hi
    uniq, inv = np.unique(key, return_inverse=True)
    P = uniq.size
    fwd = (win == lo).astype(float)  # comparison k is "lo beats hi"
    # sum the columns of W that belong to the same pair: a product with a sparse 0/1 matrix
    S = csr_matrix((np.ones(win.size), (np.arange(win.size), inv.ravel())), shape=(win.size, P))
    A = np.asarray((S.T @ (W * fwd).T).T)
    B = np.asarray((S.T @ (W * (1.0 - fwd)).T).T)
    return uniq // n, uniq % n, A, B


def fit_bt_batch(n: int, win, lose, W, alpha: float = 0.5, tol: float = 1e-9,
                 max_iter: int = 100, theta0=None) -> np.ndarray:
    """Penalized Bradley-Terry log-strengths for every row of ``W``.

    ``win[k]`` beat ``lose[k]`` with weight ``W[d, k]`` in draw ``d`` (``W`` of shape ``(D, K)``,
    or ``(K,)`` for one draw). ``alpha > 0`` (the penalty keeps every draw's optimum finite).
    Returns ``theta`` of shape ``(D, n)`` (``(n,)`` for a one-dimensional ``W``). ``theta0``
    (length ``n``): a common starting point (e.g. the point fit; fewer Newton steps).
    """
    with threadpool_limits(1):
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
    tot = A + B

    def objective(th, a, b):
        # a * softplus(-d) + b * softplus(d) = (a + b) * softplus(-d) + b * d
        d = th @ Minc.T  # theta_I - theta_J
        f = alpha * np.einsum("di,di->d", th, th) + np.einsum("dp,dp->d", a + b, np.logaddexp(0.0, -d)) \
            + np.einsum("dp,dp->d", b, d)
        return f, d

    f, d = objective(theta, A, B)
    active = np.ones(D, dtype=bool)
    for _ in range(max_iter):
        e = expit(-d)
        c = A * e - B * (1.0 - e)  # -d(loss)/d(d)
        g = 2 * alpha * theta - c @ Minc
        active &= np.abs(g).max(axis=1) >= tol
        if not active.any():
            break
        idx = np.flatnonzero(active)
        m = idx.size
        s = tot[idx] * e[idx] * (1.0 - e[idx])
        offs = (np.arange(m) * n * n)[:, None]
        h = np.bincount((offs + flat_ij[None, :]).ravel(), weights=-s.ravel(), minlength=m * n * n)
        h += np.bincount((offs + flat_ji[None, :]).ravel(), weights=-s.ravel(), minlength=m * n * n)
        h = h.reshape(m, n, n)
        h[:, diag, diag] = 2 * alpha + s @ Mabs
        gi = g[idx]
        step = np.linalg.solve(h, gi[..., None])[..., 0]
        dec = np.einsum("di,di->d", gi, step)
        th0, f0, Ai, Bi = theta[idx], f[idx], A[idx], B[idx]
        t = np.ones(m)
        th_new = th0 - step
        f_new, d_new = objective(th_new, Ai, Bi)
        noise = 1e-13 * np.maximum(1.0, np.abs(f0))
        for _ls in range(40):  # backtracking (Armijo), per draw
            bad = f_new > f0 - 1e-4 * t * dec + noise
            if not bad.any():
                break
            t[bad] *= 0.5
            th_new[bad] = th0[bad] - t[bad, None] * step[bad]
            f_new[bad], d_new[bad] = objective(th_new[bad], Ai[bad], Bi[bad])
        improved = f_new <= f0 + noise
        upd = idx[improved]
        theta[upd] = th_new[improved]
        f[upd] = f_new[improved]
        d[upd] = d_new[improved]
        active[idx[~improved | (dec < 1e-24)]] = False
    return theta[0] if one else theta


def rescale_rows(theta, top: float = 5.0) -> np.ndarray:
    """Min-max rescaling of every row to ``[0, top]`` (a constant row becomes 0), as
    :func:`saber_lib.tournament.rescale` does for one vector."""
    theta = np.atleast_2d(np.asarray(theta, dtype=float))
    lo = theta.min(axis=1, keepdims=True)
    span = theta.max(axis=1, keepdims=True) - lo
    flat = span <= 1e-12 * np.maximum(1.0, np.abs(lo))
    return np.where(flat, 0.0, top * (theta - lo) / np.where(flat, 1.0, span))
