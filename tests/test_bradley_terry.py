"""Bradley-Terry fit and rescaling, checked against independent optimizers and known cases."""
import numpy as np
import pytest
from scipy import optimize

from saber_lib.judging.bradley_terry import bt_objective, fit_bradley_terry, rescale
from saber_lib.judging.outcomes import codes_of_labels, weighted_comparisons


def _random_comparisons(rng, n, m):
    w = rng.integers(0, n, m)
    lo = (w + rng.integers(1, n, m)) % n
    return w, lo


def _objective_reference(theta, w, lo, alpha, wt):
    """The penalized negative log-likelihood written out independently of the library."""
    d = theta[w] - theta[lo]
    return alpha * np.sum(theta ** 2) + np.sum(wt * np.log1p(np.exp(-d)))


@pytest.mark.parametrize("n,m,alpha", [(8, 30, 0.5), (25, 200, 0.5), (40, 120, 0.1), (15, 60, 2.0)])
def test_matches_scipy_minimization_of_the_same_objective(n, m, alpha):
    rng = np.random.default_rng(n * 1000 + m)
    w, lo = _random_comparisons(rng, n, m)
    wt = np.ones(m)
    ref = optimize.minimize(_objective_reference, np.zeros(n), args=(w, lo, alpha, wt), method="BFGS",
                            options={"gtol": 1e-10, "maxiter": 10000}).x
    got = fit_bradley_terry(n, w, lo, alpha=alpha)
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_matches_sklearn_logistic_regression_with_c_1():
    """The authors' fit: L2 logistic regression without intercept, C = 1 <=> alpha = 0.5."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    n, m = 20, 300
    w, lo = _random_comparisons(rng, n, m)
    X = np.zeros((m, n))
    X[np.arange(m), w] = 1
    X[np.arange(m), lo] = -1
    y = np.ones(m, dtype=int)
    flip = rng.random(m) < 0.5  # random orientation: both classes present, same likelihood
    X[flip] *= -1
    y[flip] = 0
    lr = LogisticRegression(C=1.0, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    np.testing.assert_allclose(fit_bradley_terry(n, w, lo, alpha=0.5), lr.coef_[0], atol=1e-5)


def test_gradient_is_the_derivative_of_the_objective():
    rng = np.random.default_rng(5)
    n, m = 12, 50
    w, lo = _random_comparisons(rng, n, m)
    wt = rng.random(m)
    f = lambda t: bt_objective(t, w, lo, 0.3, wt)[0]  # noqa: E731
    g = lambda t: bt_objective(t, w, lo, 0.3, wt)[1]  # noqa: E731
    theta = rng.normal(size=n)
    assert optimize.check_grad(f, g, theta) < 1e-5
    assert f(theta) == pytest.approx(_objective_reference(theta, w, lo, 0.3, wt))


def test_recovers_a_known_order_from_many_simulated_comparisons():
    rng = np.random.default_rng(11)
    n = 30
    true = np.linspace(-2, 2, n)
    w, lo = [], []
    for i in range(n):
        for j in range(i + 1, n):
            p = 1 / (1 + np.exp(-(true[i] - true[j])))
            wins = rng.binomial(60, p)
            w += [i] * wins + [j] * (60 - wins)
            lo += [j] * wins + [i] * (60 - wins)
    theta = fit_bradley_terry(n, w, lo, alpha=0.5)
    assert np.corrcoef(theta, true)[0, 1] > 0.995
    assert np.max(np.abs(theta - true)) < 0.25  # little shrinkage with 1,740 comparisons per item
    assert (np.diff(theta) > 0).mean() > 0.85


def test_undefeated_candidate_and_disconnected_graph_stay_finite():
    # 0 beats everyone; {3, 4} only play each other; 5 never plays
    w = [0, 0, 0, 1, 3, 3, 4]
    lo = [1, 2, 1, 2, 4, 4, 3]
    theta = fit_bradley_terry(6, w, lo, alpha=0.5)
    assert np.all(np.isfinite(theta))
    assert theta.argmax() == 0
    assert theta[3] > theta[4]
    assert theta[5] == 0.0
    # the unpenalized MLE does not exist here, so alpha = 0 is refused with a reason
    with pytest.raises(ValueError, match="strongly connected"):
        fit_bradley_terry(6, w, lo, alpha=0.0)


def test_unpenalized_fit_on_a_strongly_connected_graph():
    # a beats b twice, b beats a once: theta_a - theta_b = log 2 (two-player MLE), centred
    theta = fit_bradley_terry(2, [0, 0, 1], [1, 1, 0], alpha=0.0)
    assert theta[0] - theta[1] == pytest.approx(np.log(2), abs=1e-8)
    assert theta.sum() == pytest.approx(0, abs=1e-12)


def test_two_player_closed_form_with_penalty():
    # one comparison, a beats b: stationarity 2*alpha*t = sigmoid(-2t) with theta = (t, -t)
    alpha = 0.5
    theta = fit_bradley_terry(2, [0], [1], alpha=alpha)
    t = theta[0]
    assert theta[1] == pytest.approx(-t)
    assert 2 * alpha * t == pytest.approx(1 / (1 + np.exp(2 * t)), abs=1e-9)


def test_weights_equal_repeated_comparisons_and_ties_are_symmetric():
    w, lo = [0, 1, 2], [1, 2, 0]
    a = fit_bradley_terry(3, w + [0], lo + [1], alpha=0.5)
    b = fit_bradley_terry(3, w, lo, alpha=0.5, weights=[2, 1, 1])
    np.testing.assert_allclose(a, b, atol=1e-9)
    # two candidates that only tie each other get the same strength
    ww, ll, wt, row = weighted_comparisons([0, 2], [1, 1], codes_of_labels(["tie", "b"]))
    assert (ww.tolist(), ll.tolist(), wt.tolist(), row.tolist()) == ([0, 1, 1], [1, 0, 2], [0.5, 0.5, 1.0], [0, 0, 1])
    theta = fit_bradley_terry(3, *weighted_comparisons([0], [1], [0])[:2], weights=[0.5, 0.5])
    assert theta[0] == pytest.approx(theta[1], abs=1e-12)


def test_weighted_comparisons_in_both_orders():
    # judgments of (a, b): a wins, tie, failure, b wins, tie (codes seen from a: 1, 0, 2, -1, 0)
    a, b, codes = [0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [1, 0, 2, -1, 0]
    win, lose, wt, row = weighted_comparisons(a, b, codes)
    assert win.tolist() == [0, 1, 6, 8, 4, 9] and lose.tolist() == [5, 6, 1, 3, 9, 4]
    assert wt.tolist() == [1, .5, .5, 1, .5, .5] and row.tolist() == [0, 1, 1, 3, 4, 4]
    # grouped: decided judgments, then the ties' a-over-b halves, then their b-over-a halves
    win, lose, wt, row = weighted_comparisons(a, b, codes, grouped=True)
    assert win.tolist() == [0, 8, 1, 4, 6, 9] and lose.tolist() == [5, 3, 6, 9, 1, 4]
    assert wt.tolist() == [1, 1, .5, .5, .5, .5] and row.tolist() == [0, 3, 1, 4, 1, 4]
    # the same comparisons either way: the fit does not care beyond rounding
    th1 = fit_bradley_terry(10, *weighted_comparisons(a, b, codes)[:2], weights=weighted_comparisons(a, b, codes)[2])
    g = weighted_comparisons(a, b, codes, grouped=True)
    np.testing.assert_allclose(fit_bradley_terry(10, g[0], g[1], weights=g[2]), th1, atol=1e-12)


def test_failures_count_nothing_and_bad_input_is_refused():
    assert [x.tolist() for x in weighted_comparisons(["3"], ["4"], [2])] == [[], [], [], []]
    with pytest.raises(ValueError, match="unknown outcome"):
        codes_of_labels(["maybe"])
    with pytest.raises(ValueError, match="unknown verdict code 3"):
        weighted_comparisons([0], [1], [3])
    with pytest.raises(ValueError, match="differ in length"):
        weighted_comparisons([0, 1], [1], [1])
    with pytest.raises(ValueError, match="outside"):
        fit_bradley_terry(3, [0], [3])
    with pytest.raises(ValueError, match="same candidate"):
        fit_bradley_terry(3, [1], [1])
    assert np.all(fit_bradley_terry(4, [], []) == 0)


def test_rescale():
    np.testing.assert_allclose(rescale([1.0, 2.0, 3.0]), [0, 2.5, 5])
    np.testing.assert_allclose(rescale([-1.0, 0.0, 3.0], top=4.0), [0, 1, 4])
    assert np.all(rescale([0.7, 0.7, 0.7]) == 0)
    assert rescale([]).size == 0


def test_comparison_terms_are_the_derivatives_of_the_loss():
    """The one per-comparison objective: the pull and curvature are minus the first and the second
    derivative of w * log(1 + exp(-d)) (central finite differences)."""
    from saber_lib.judging.bradley_terry import comparison_terms

    d = np.array([-3.0, -0.2, 0.0, 0.7, 4.0])
    w = np.array([1.0, 0.5, 2.0, 1.0, 0.5])
    loss, pull, curv = comparison_terms(d, w)
    np.testing.assert_allclose(loss, np.log1p(np.exp(-d)), rtol=1e-14)
    h = 1e-5
    lw = lambda x: w * np.log1p(np.exp(-x))  # noqa: E731
    np.testing.assert_allclose(pull, -(lw(d + h) - lw(d - h)) / (2 * h), rtol=1e-8)
    np.testing.assert_allclose(curv, (lw(d + h) - 2 * lw(d) + lw(d - h)) / h ** 2, rtol=1e-4)


def test_rescale_of_a_matrix_rescales_each_row():
    from saber_lib.judging.bradley_terry import rescale

    m = rescale(np.array([[1.0, 3.0, 2.0], [4.0, 4.0, 4.0], [-1.0, 0.0, 1.0]]), top=5.0)
    np.testing.assert_allclose(m, [[0.0, 5.0, 2.5], [0.0, 0.0, 0.0], [0.0, 2.5, 5.0]])


def test_several_weightings_fit_row_by_row_as_the_single_fit():
    rng = np.random.default_rng(1)
    n, K = 7, 30
    w = rng.integers(0, n, K)
    lo = (w + rng.integers(1, n, K)) % n
    W = rng.poisson(1.0, (4, K)).astype(float)
    W[3, w == 2] = 0.0
    W[3, lo == 2] = 0.0                      # candidate 2 without comparisons in the last row
    th = fit_bradley_terry(n, w, lo, alpha=0.5, weights=W)
    assert th.shape == (4, n) and th[3, 2] == 0.0
    for d in range(4):
        np.testing.assert_allclose(th[d], fit_bradley_terry(n, w, lo, alpha=0.5, weights=W[d]), atol=1e-8)
    # a start at the optimum ends there; the single fit takes a start too
    ref = fit_bradley_terry(n, w, lo, alpha=0.5, weights=W[0])
    np.testing.assert_allclose(fit_bradley_terry(n, w, lo, alpha=0.5, weights=W[:1], theta0=ref)[0], ref, atol=1e-8)
    np.testing.assert_allclose(fit_bradley_terry(n, w, lo, alpha=0.5, weights=W[0], theta0=ref + 1.0), ref, atol=1e-8)
    with pytest.raises(ValueError, match="alpha > 0"):
        fit_bradley_terry(n, w, lo, alpha=0.0, weights=W)
    with pytest.raises(ValueError, match="non-negative"):
        fit_bradley_terry(n, w, lo, weights=-W)
    with pytest.raises(ValueError, match="differ in length"):
        fit_bradley_terry(n, w, lo, weights=W[:, :-1])
    assert fit_bradley_terry(n, [], [], weights=np.zeros((3, 0))).shape == (3, n)
