"""NonconvexLogistic: logistic regression with the nonconvex regularizer
lambda sum_j x_j^2 / (1 + x_j^2), checked against textbook formulas written here client by
client and sample by sample (labels as s = 2y - 1 in {-1, +1}, the papers' form), finite
differences, the finite-sum contract of ``sampled_gradients`` and a run's record."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import GradientTracking
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import Logistic
from stochmix.problems.nonconvex import NonconvexLogistic

N, DIM = 6, 4


def _problem(**options):
    options = {"reg": 0.3, "seed": 2} | options
    return NonconvexLogistic.random(N, DIM, (3, 9), **options)


def _clients(problem):
    """Each client's (features with the intercept column, labels), from stacked()."""
    data = problem.stacked()
    off = np.concatenate([[0], np.cumsum(data["counts"])])
    out = []
    for i in range(len(data["counts"])):
        a = data["features"][off[i] : off[i + 1]]
        if data["intercept"]:
            a = np.hstack([a, np.ones((a.shape[0], 1))])
        out.append((a, data["labels"][off[i] : off[i + 1]]))
    return out


def _textbook_client(a, y, reg, x):
    """F_i(x) and grad F_i(x), binary model, sample by sample with s = 2y - 1:
    loss = log(1 + exp(-s a.x)), grad = -s a / (1 + exp(s a.x))."""
    value, grad = 0.0, np.zeros_like(x)
    for row, label in zip(a, y, strict=True):
        s = 2.0 * label - 1.0
        z = s * (row @ x)
        value += np.log1p(np.exp(-z))
        grad += -s * row / (1.0 + np.exp(z))
    value, grad = value / len(y), grad / len(y)
    value += reg * sum(t * t / (1.0 + t * t) for t in x)
    grad += np.array([reg * 2.0 * t / (1.0 + t * t) ** 2 for t in x])
    return value, grad


@pytest.mark.parametrize("intercept", [False, True])
def test_objective_and_gradients_match_the_textbook_formulas(intercept):
    problem = _problem(intercept=intercept)
    assert np.unique(problem.rows_per_client).size > 1  # clients of different sizes
    points = np.random.default_rng(0).standard_normal((N, problem.dim)) * 1.5
    want = [_textbook_client(a, y, problem.reg, points[i]) for i, (a, y) in
            enumerate(_clients(problem))]  # fmt: skip
    values, grads = np.array([w[0] for w in want]), np.array([w[1] for w in want])
    np.testing.assert_allclose(problem.client_objectives(points), values, rtol=1e-12)
    np.testing.assert_allclose(problem.gradients(np.arange(N), points), grads, atol=1e-13)
    # the engine's fast paths: a slice of consecutive clients, bound clients, any order
    np.testing.assert_allclose(problem.gradients_unchecked(slice(0, N), points), grads, atol=1e-13)
    order = np.array([4, 0, 4, 2])
    np.testing.assert_allclose(problem.bind_clients(order, points)(points[order]),
                               grads[order], atol=1e-13)  # fmt: skip
    # f = (1/N) sum_i F_i at one point
    x = points[0]
    each = [_textbook_client(a, y, problem.reg, x) for a, y in _clients(problem)]
    assert problem.objective(x) == pytest.approx(np.mean([e[0] for e in each]), rel=1e-12)
    np.testing.assert_allclose(problem.gradient(x), np.mean([e[1] for e in each], axis=0),
                               atol=1e-13)  # fmt: skip


@pytest.mark.parametrize("options", [{}, {"n_classes": 3}, {"intercept": True}])
def test_gradients_match_finite_differences(options):
    problem = _problem(**options)
    rng = np.random.default_rng(1)
    points = 1.5 * rng.standard_normal((N, problem.dim))
    grads = problem.gradients(np.arange(N), points)
    h = 1e-5
    for j in range(problem.dim):
        e = np.zeros(problem.dim)
        e[j] = h
        up = problem.client_objectives(points + e)
        down = problem.client_objectives(points - e)
        np.testing.assert_allclose(grads[:, j], (up - down) / (2 * h), atol=1e-6)
    x = points[1]
    fd = [(problem.objective(x + h * e) - problem.objective(x - h * e)) / (2 * h)
          for e in np.eye(problem.dim)]  # fmt: skip
    np.testing.assert_allclose(problem.gradient(x), fd, atol=1e-6)


def test_sampled_gradients_average_to_the_full_gradients():
    """The finite-sum contract: component r of client c (one pick, scale n_c) is
    grad loss_r + grad R; the components' mean is grad F_c; b picks with scale n_c / b
    are the mean of those b components."""
    problem = _problem()
    counts = problem.rows_per_client
    rng = np.random.default_rng(3)
    points = rng.standard_normal((N, DIM))
    owners = np.repeat(np.arange(N), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    components = problem.sampled_gradients(owners, points[owners], within[:, None],
                                           counts[owners].astype(float))  # fmt: skip
    means = np.array([components[owners == i].mean(axis=0) for i in range(N)])
    np.testing.assert_allclose(means, problem.gradients(np.arange(N), points), atol=1e-13)
    # each component by the textbook formula: F of a one-sample client
    for k in rng.choice(owners.size, 5, replace=False):
        a, y = _clients(problem)[owners[k]]
        row = within[k]
        _, want = _textbook_client(
            a[row : row + 1], y[row : row + 1], problem.reg, points[owners[k]]
        )
        np.testing.assert_allclose(components[k], want, atol=1e-13)
    b = 3
    picks = (rng.random((N, b)) * counts[:, None]).astype(np.int64)
    batch = problem.sampled_gradients(np.arange(N), points, picks, counts / b)
    offsets = np.cumsum(counts) - counts
    want = components[offsets[:, None] + picks].mean(axis=1)
    np.testing.assert_allclose(batch, want, atol=1e-13)


def test_stacked_rebuilds_the_problem_and_hands_out_copies():
    problem = _problem(intercept=True)
    data = problem.stacked()
    assert set(data) == {"features", "labels", "counts", "reg", "n_classes", "intercept",
                         "softmax"}  # fmt: skip
    assert data["features"].shape == (problem.rows_per_client.sum(), DIM)  # no intercept
    rebuilt = NonconvexLogistic.from_stacked(**data)
    assert rebuilt.fingerprint() == problem.fingerprint()
    data["features"][:] = 0.0
    points = np.random.default_rng(0).standard_normal((N, problem.dim))
    np.testing.assert_array_equal(rebuilt.gradients(np.arange(N), points),
                                  problem.gradients(np.arange(N), points))  # fmt: skip
    other = NonconvexLogistic.from_stacked(**(problem.stacked() | {"reg": 0.5}))
    assert other.fingerprint() != problem.fingerprint()
    # the constructor takes the clients' arrays (ragged)
    made = NonconvexLogistic([a[:, :DIM] for a, _ in _clients(problem)],
                             [y for _, y in _clients(problem)], 0.3, intercept=True)  # fmt: skip
    assert made.fingerprint() == problem.fingerprint()


def test_the_regularizer_is_not_convex_and_the_constants_say_so():
    problem = _problem()
    assert problem.x_star is None and problem.f_star is None
    assert problem.strong_convexity is None
    # along a coordinate, f'' < 0 where the regularizer's concavity (t^2 > 1/3) dominates
    zero = NonconvexLogistic.from_stacked(**(problem.stacked() | {"reg": 50.0}))
    x, e, h = np.zeros(DIM), np.eye(DIM)[0], 1e-3
    x[0] = 1.2
    second = (zero.objective(x + h * e) - 2 * zero.objective(x) + zero.objective(x - h * e)) / h**2
    assert second < 0
    # smoothness = the data term's bound + 2 reg, and 2 reg is R'' at 0: with zero features
    # the gradient's Lipschitz ratio at 0 tends to it
    data = problem.stacked() | {"features": np.zeros_like(problem.stacked()["features"])}
    flat = NonconvexLogistic.from_stacked(**data)
    assert flat.smoothness == pytest.approx(2 * problem.reg, rel=1e-12)
    small = 1e-4 * np.eye(DIM)[2]
    ratio = np.linalg.norm(flat.gradient(small) - flat.gradient(np.zeros(DIM))) / 1e-4
    assert ratio == pytest.approx(flat.smoothness, rel=1e-6)
    loss = Logistic.from_stacked(**(problem.stacked() | {"reg": 0.0}), allow_no_minimiser=True)
    assert problem.smoothness == pytest.approx(loss.smoothness + 2 * problem.reg, rel=1e-12)
    # and it bounds every client's gradient difference
    rng = np.random.default_rng(5)
    p, q = 2 * rng.standard_normal((2, N, DIM))
    diff = problem.gradients(np.arange(N), p) - problem.gradients(np.arange(N), q)
    assert np.all(
        np.linalg.norm(diff, axis=1) <= problem.smoothness * np.linalg.norm(p - q, axis=1)
    )


def test_a_run_records_stationarity_not_an_error():
    """No x_star: the run records the gradient norm of the network average, the consensus
    error and the objective value by default; distance and relative error are undefined,
    and the summary says so."""
    problem = _problem()
    ring = StaticSequence(nx.cycle_graph(N))
    result = sm.run(GradientTracking(0.2, ring), problem, Full(N), 30, progress=False,
                    evaluate_every=1)  # fmt: skip
    assert result.distance is None and result.objective_gap is None
    # the gradient norm and objective at the average of the node models, recomputed here
    assert result.gradient_norm is not None and result.consensus is not None
    assert not np.isnan(result.gradient_norm).any()
    for r in (0, 7, 30):
        want = np.linalg.norm(problem.gradient(result.server[r]))
        assert result.gradient_norm[r] == pytest.approx(want, rel=1e-12)
        assert result.objective[r] == pytest.approx(problem.objective(result.server[r]), rel=1e-12)
    summary = result.summary()
    assert "undefined" in summary["relative_error"]
    assert "final_relative_error" not in summary
    assert summary["final_gradient_norm"] == result.gradient_norm[-1]
    assert summary["final_consensus"] == result.consensus[-1]
    with pytest.raises(ValueError, match="x_star"):
        result.relative_error  # noqa: B018
    assert str(sm.compare([result]))


def test_torch_points_give_the_numpy_gradients():
    torch = pytest.importorskip("torch")
    problem = _problem()
    points = np.random.default_rng(0).standard_normal((N, DIM))
    want = problem.gradients(np.arange(N), points)
    got = problem.gradients(np.arange(N), torch.from_numpy(points))
    np.testing.assert_allclose(got.numpy(), want, atol=1e-13)


@pytest.mark.parametrize(
    ("reg", "error", "match"),
    [(-0.1, ValueError, "reg"), (float("nan"), ValueError, "reg"), ("0.1", TypeError, "reg")],
)
def test_bad_reg_is_refused_naming_it(reg, error, match):
    data = _problem().stacked() | {"reg": reg}
    with pytest.raises(error, match=match):
        NonconvexLogistic.from_stacked(**data)
    with pytest.raises(error, match=match):
        NonconvexLogistic.random(N, DIM, reg=reg)
