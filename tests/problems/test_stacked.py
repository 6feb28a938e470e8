"""``problem.stacked()``: each family's documented data form, checked by recomputing every
client's gradient from it by the textbook formula (an independent NumPy loop over the
clients, never the problem's own vectorized code) and by rebuilding the problem."""

from __future__ import annotations

import numpy as np
import pytest

from stochmix.problems import L1, Composite, LeastSquares, Logistic, Quadratic

TOL = 1e-12


def _points(problem, seed=0):
    return np.random.default_rng(seed).standard_normal((problem.n_clients, problem.dim))


def _close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(np.asarray(got) - want).max() <= TOL * scale


def _every_gradient(problem, x):
    return problem.gradients(np.arange(problem.n_clients), x)


def _offsets(counts):
    return np.concatenate([[0], np.cumsum(counts)])


def _least_squares_gradients(data, x):
    """grad F_i(x_i) = A_i^T (A_i x_i - b_i) + reg x_i, client by client."""
    off = _offsets(data["counts"])
    out = []
    for i in range(len(data["counts"])):
        a, b = data["features"][off[i] : off[i + 1]], data["targets"][off[i] : off[i + 1]]
        out.append(a.T @ (a @ x[i] - b) + data["reg"] * x[i])
    return np.array(out)


@pytest.mark.parametrize("form", ["padded", "gram"])
@pytest.mark.parametrize("rows", [6, (3, 9)])  # equal rows, and ragged clients
def test_least_squares_stacked_gives_its_gradients(form, rows):
    p = LeastSquares.random(5, 4, rows, reg=0.3, seed=1, form=form)
    data = p.stacked()
    assert set(data) == {"features", "targets", "counts", "reg"}
    assert data["features"].shape == (int(p.rows_per_client.sum()), 4)
    assert data["targets"].shape == (data["features"].shape[0],)
    x = _points(p)
    _close(_every_gradient(p, x), _least_squares_gradients(data, x))
    rebuilt = LeastSquares.from_stacked(**data, form=form)
    _close(rebuilt.x_star, p.x_star)


def test_stacked_arrays_are_copies():
    p = LeastSquares.random(3, 2, 4, seed=0)
    data = p.stacked()
    data["features"][:] = 0.0
    assert np.abs(p.stacked()["features"]).max() > 0


def _logistic_gradients(data, x):
    """(1/n_i) sum_r a_r (s(a_r . x_i) - y_r) + reg x_i, binary or softmax, per client."""
    off = _offsets(data["counts"])
    out = []
    for i in range(len(data["counts"])):
        a = data["features"][off[i] : off[i + 1]]
        if data["intercept"]:
            a = np.hstack([a, np.ones((a.shape[0], 1))])
        y = data["labels"][off[i] : off[i + 1]]
        if data["softmax"]:
            c = data["n_classes"]
            w = x[i].reshape(a.shape[1], c)
            logits = a @ w
            q = np.exp(logits - logits.max(axis=1, keepdims=True))
            q /= q.sum(axis=1, keepdims=True)
            g = (a.T @ (q - np.eye(c)[y]) / a.shape[0]).ravel()
        else:
            g = a.T @ (1.0 / (1.0 + np.exp(-(a @ x[i]))) - y) / a.shape[0]
        out.append(g + data["reg"] * x[i])
    return np.array(out)


@pytest.mark.parametrize(
    ("classes", "intercept"), [(2, False), (2, True), (3, True)]
)  # fmt: skip
def test_logistic_stacked_gives_its_gradients(classes, intercept):
    p = Logistic.random(4, 3, (5, 8), reg=0.1, n_classes=classes, intercept=intercept, seed=2)
    data = p.stacked()
    assert data["features"].shape == (int(p.rows_per_client.sum()), 3)  # no intercept column
    assert data["labels"].dtype.kind == "i"
    assert data["intercept"] is intercept and data["softmax"] is (classes > 2)
    x = _points(p, 3)
    _close(_every_gradient(p, x), _logistic_gradients(data, x))
    rebuilt = Logistic.from_stacked(**data)
    _close(_every_gradient(rebuilt, x), _every_gradient(p, x))


@pytest.mark.parametrize("full", [False, True])
def test_quadratic_stacked_gives_its_gradients(full):
    rng = np.random.default_rng(4)
    centers = rng.standard_normal((4, 3))
    if full:
        m = rng.standard_normal((4, 3, 3))
        hessians = m @ m.transpose(0, 2, 1) + np.eye(3)
    else:
        hessians = rng.uniform(0.5, 2.0, (4, 3))
    p = Quadratic(centers, hessians)
    data = p.stacked()
    x = _points(p)
    h = data["hessians"] if full else np.array([np.diag(v) for v in data["hessians"]])
    want = np.array([h[i] @ (x[i] - data["centers"][i]) for i in range(4)])
    _close(_every_gradient(p, x), want)
    _close(Quadratic(**data).x_star, p.x_star)


def test_composite_and_wrappers_give_the_smooth_data_and_the_regularizer():
    smooth = LeastSquares.random(4, 5, 6, seed=5, support=2)
    lasso = Composite(smooth, L1(0.2))
    data = lasso.stacked()
    assert data["regularizer"] == L1(0.2)
    x = _points(lasso)
    _close(_every_gradient(lasso, x), _least_squares_gradients(data, x))
    for wrapped in (smooth.minibatch(2, seed=0), smooth.noisy(0.1, seed=0)):
        got = wrapped.stacked()
        assert set(got) == {"features", "targets", "counts", "reg"}
        assert np.array_equal(got["features"], data["features"])
    assert lasso.with_subgradients().stacked()["regularizer"] == L1(0.2)


def test_torch_model_stacked_gives_its_samples_in_client_order():
    torch = pytest.importorskip("torch")
    from stochmix.problems import TorchModel

    rng = np.random.default_rng(6)
    clients = [(rng.standard_normal((n, 3)), rng.integers(0, 2, n)) for n in (2, 5, 3)]
    model = torch.nn.Linear(3, 2).double()
    p = TorchModel(model, clients, reg=0.1)
    data = p.stacked()
    assert np.array_equal(data["counts"], [2, 5, 3]) and data["reg"] == 0.1
    assert np.array_equal(data["features"], np.vstack([u for u, _ in clients]))
    assert np.array_equal(data["targets"], np.concatenate([t for _, t in clients]))
