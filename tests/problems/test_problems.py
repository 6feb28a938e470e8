"""Problems: per-client gradients against plain loops and finite differences, x_star, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix.problems import LeastSquares, Problem, Quadratic
from tests import examples

# --------------------------------------------------------------------------- references


def quad_loop(centers, hessians, clients, points):
    """grad F_i(x) = H_i (x - z_i), one client at a time."""
    out = np.empty_like(points)
    for t, i in enumerate(clients):
        h = np.diag(hessians[i]) if hessians.ndim == 2 else hessians[i]
        out[t] = h @ (points[t] - centers[i])
    return out


def ls_loop(features, targets, reg, clients, points):
    """grad F_i(x) = A_i^T (A_i x - b_i) + reg x, one client at a time."""
    out = np.empty_like(points)
    for t, i in enumerate(clients):
        a, b = np.asarray(features[i]), np.asarray(targets[i])
        out[t] = a.T @ (a @ points[t] - b) + reg * points[t]
    return out


def ls_scale(features, points):
    """Size of the terms of A^T A x, for tolerances relative to the computation."""
    big = max(float(np.abs(np.asarray(a)).max()) for a in features)
    return big**2 * max(1.0, float(np.abs(points).max())) * max(len(a) for a in features)


def random_psd(rng, n, d, rank=None):
    rank = d if rank is None else rank
    g = rng.standard_normal((n, d, rank))
    return g @ g.swapaxes(1, 2) / rank


def ragged_data(rng, n, d, low, high):
    counts = rng.integers(low, high + 1, size=n)
    feats = [rng.standard_normal((k, d)) for k in counts]
    targs = [rng.standard_normal(k) for k in counts]
    return feats, targs


def finite_difference(problem: Problem, points: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of F_i at points[i], through client_objectives."""
    n, d = points.shape
    out = np.empty_like(points)
    for j in range(d):
        step = np.zeros_like(points)
        step[:, j] = h
        out[:, j] = (
            problem.client_objectives(points + step) - problem.client_objectives(points - step)
        ) / (2 * h)
    return out


# --------------------------------------------------------------------------- fixtures

QUADS = ["diagonal", "full", "full_low_rank"]


def make_quadratic(kind: str, seed: int = 0, n: int = 7, d: int = 4):
    rng = np.random.default_rng(seed)
    centers = 3 * rng.standard_normal((n, d))
    if kind == "diagonal":
        hessians = rng.uniform(0.0, 5.0, size=(n, d))
    elif kind == "full":
        hessians = random_psd(rng, n, d)
    else:  # every H_i singular, the average still definite
        hessians = random_psd(rng, n, d, rank=1)
    return Quadratic(centers, hessians), centers, hessians


LS_CASES = [
    ("equal", 0.0, "auto"),
    ("equal", 0.5, "auto"),
    ("ragged", 0.0, "auto"),
    ("ragged", 0.3, "padded"),
    ("ragged", 0.0, "gram"),
    ("equal", 0.2, "gram"),
    ("tall", 0.0, "auto"),  # n_max > d: auto picks the Gram form
]


def make_ls(shape: str, reg: float, form: str, seed: int = 0, n: int = 6, d: int = 4):
    rng = np.random.default_rng(seed)
    if shape == "equal":
        a = rng.standard_normal((n, 3, d))
        b = rng.standard_normal((n, 3))
        problem = LeastSquares(a, b, reg, form=form)
        return problem, list(a), list(b)
    if shape == "tall":
        feats, targs = ragged_data(rng, n, d, d + 1, 2 * d + 3)
    else:
        feats, targs = ragged_data(rng, n, d, 1, 6)
    return LeastSquares(feats, targs, reg, form=form), feats, targs


# --------------------------------------------------------------------------- quadratic


@pytest.mark.parametrize("kind", QUADS)
def test_quadratic_gradients_match_loop_and_finite_differences(kind):
    q, z, h = make_quadratic(kind)
    rng = np.random.default_rng(1)
    clients = rng.integers(0, q.n_clients, size=25)
    points = rng.standard_normal((25, q.dim))
    got = q.gradients(clients, points)
    np.testing.assert_allclose(got, quad_loop(z, h, clients, points), rtol=1e-10, atol=1e-10)

    everyone = rng.standard_normal((q.n_clients, q.dim))
    fd = finite_difference(q, everyone)
    np.testing.assert_allclose(
        q.gradients(np.arange(q.n_clients), everyone), fd, rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("kind", QUADS)
def test_quadratic_x_star_is_stationary_and_minimal(kind):
    q, z, h = make_quadratic(kind)
    full_h = np.stack([np.diag(r) for r in h]) if h.ndim == 2 else h
    expected = np.linalg.solve(full_h.sum(0), np.einsum("nij,nj->i", full_h, z))
    np.testing.assert_allclose(q.x_star, expected, rtol=1e-10, atol=1e-12)

    scale = np.linalg.norm(q.gradient(np.zeros(q.dim))) + 1.0
    assert np.linalg.norm(q.gradient(q.x_star)) <= 1e-10 * scale
    tiled = np.tile(q.x_star, (q.n_clients, 1))
    mean = q.gradients(np.arange(q.n_clients), tiled).mean(0)
    assert np.linalg.norm(mean) <= 1e-10 * scale

    rng = np.random.default_rng(2)
    for _ in range(20):
        assert q.objective(q.x_star) <= q.objective(q.x_star + 0.1 * rng.standard_normal(q.dim))
    assert q.f_star == pytest.approx(q.objective(q.x_star))


@pytest.mark.parametrize("kind", QUADS)
def test_quadratic_objective_gradient_and_constants(kind):
    q, z, h = make_quadratic(kind)
    full_h = np.stack([np.diag(r) for r in h]) if h.ndim == 2 else h
    x = np.random.default_rng(3).standard_normal(q.dim)
    per_client = np.array(
        [0.5 * (x - zi) @ hi @ (x - zi) for zi, hi in zip(z, full_h, strict=True)]
    )
    assert q.objective(x) == pytest.approx(per_client.mean(), rel=1e-12)
    tiled = np.tile(x, (q.n_clients, 1))
    np.testing.assert_allclose(q.client_objectives(tiled), per_client, rtol=1e-12)
    np.testing.assert_allclose(
        q.gradient(x), quad_loop(z, h, np.arange(q.n_clients), tiled).mean(0), rtol=1e-10
    )
    assert q.smoothness == pytest.approx(max(np.linalg.eigvalsh(full_h).max(), 0.0))
    assert q.strong_convexity == pytest.approx(np.linalg.eigvalsh(full_h.mean(0))[0])


def test_quadratic_random_instances():
    q = Quadratic.random(50, 3, condition=20.0, heterogeneity=2.0, seed=4)
    assert q.diagonal and q.hessians.shape == (50, 3)
    assert q.hessians.min() >= 1.0 and q.hessians.max() <= 20.0
    qf = Quadratic.random(20, 3, diagonal=False, condition=5.0, seed=4)
    assert not qf.diagonal and qf.hessians.shape == (20, 3, 3)
    eig = np.linalg.eigvalsh(qf.hessians)
    assert eig.min() >= 1.0 - 1e-10 and eig.max() <= 5.0 + 1e-10
    same = Quadratic.random(50, 3, condition=20.0, heterogeneity=2.0, seed=4)
    np.testing.assert_array_equal(same.centers, q.centers)
    flat = Quadratic.random(10, 3, heterogeneity=0.0, seed=1)
    np.testing.assert_allclose(flat.x_star, 0.0, atol=1e-15)


def test_quadratic_random_is_fast_for_a_million_clients():
    q = Quadratic.random(10**6, 10, seed=0)
    clients = np.random.default_rng(0).integers(0, 10**6, size=10**5)
    g = q.gradients(clients, np.zeros((10**5, 10)))
    np.testing.assert_allclose(g, -q.hessians[clients] * q.centers[clients], rtol=1e-15)


def test_quadratic_does_not_alias_inputs():
    rng = np.random.default_rng(0)
    z, h = rng.standard_normal((3, 2)), rng.uniform(1, 2, (3, 2))
    q = Quadratic(z, h)
    before = q.gradients(np.arange(3), np.zeros((3, 2)))
    z[:] = 100.0
    np.testing.assert_array_equal(q.gradients(np.arange(3), np.zeros((3, 2))), before)


# --------------------------------------------------------------------------- least squares


@pytest.mark.parametrize(("shape", "reg", "form"), LS_CASES)
def test_least_squares_gradients_match_loop_and_finite_differences(shape, reg, form):
    p, feats, targs = make_ls(shape, reg, form)
    if form != "auto":
        assert p.form == form
    if shape == "tall" and form == "auto":
        assert p.form == "gram"
    rng = np.random.default_rng(1)
    clients = rng.integers(0, p.n_clients, size=30)
    points = rng.standard_normal((30, p.dim))
    want = ls_loop(feats, targs, reg, clients, points)
    got = p.gradients(clients, points)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * ls_scale(feats, points))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)

    everyone = rng.standard_normal((p.n_clients, p.dim))
    np.testing.assert_allclose(
        p.gradients(np.arange(p.n_clients), everyone),
        finite_difference(p, everyone),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize(("shape", "reg", "form"), LS_CASES)
def test_least_squares_x_star_is_stationary_and_minimal(shape, reg, form):
    p, feats, targs = make_ls(shape, reg, form)
    a, b = np.concatenate(feats), np.concatenate(targs)
    n = p.n_clients
    expected = np.linalg.solve(a.T @ a + n * reg * np.eye(p.dim), a.T @ b)
    np.testing.assert_allclose(p.x_star, expected, rtol=1e-10, atol=1e-12)

    scale = np.linalg.norm(a.T @ b) / n + 1.0
    assert np.linalg.norm(p.gradient(p.x_star)) <= 1e-10 * scale
    tiled = np.tile(p.x_star, (n, 1))
    assert np.linalg.norm(p.gradients(np.arange(n), tiled).mean(0)) <= 1e-10 * scale
    assert np.linalg.norm(ls_loop(feats, targs, reg, range(n), tiled).mean(0)) <= 1e-10 * scale

    rng = np.random.default_rng(2)
    for _ in range(20):
        assert p.objective(p.x_star) <= p.objective(p.x_star + 0.1 * rng.standard_normal(p.dim))


@pytest.mark.parametrize(("shape", "reg", "form"), LS_CASES)
def test_least_squares_objective_and_constants(shape, reg, form):
    p, feats, targs = make_ls(shape, reg, form)
    x = np.random.default_rng(3).standard_normal(p.dim)
    per_client = np.array(
        [
            0.5 * np.sum((a @ x - b) ** 2) + 0.5 * reg * x @ x
            for a, b in zip(feats, targs, strict=True)
        ]
    )
    assert p.objective(x) == pytest.approx(per_client.mean(), rel=1e-12)
    np.testing.assert_allclose(
        p.client_objectives(np.tile(x, (p.n_clients, 1))), per_client, rtol=1e-12
    )
    tiled = np.tile(x, (p.n_clients, 1))
    want = ls_loop(feats, targs, reg, range(p.n_clients), tiled).mean(0)
    np.testing.assert_allclose(p.gradient(x), want, rtol=1e-10, atol=1e-12)
    top = max(np.linalg.norm(a, 2) ** 2 for a in feats) + reg
    a = np.concatenate(feats)
    assert p.smoothness == pytest.approx(top, rel=1e-10)
    assert p.strong_convexity == pytest.approx(
        np.linalg.eigvalsh(a.T @ a / p.n_clients)[0] + reg, rel=1e-8
    )
    assert p.f_star == pytest.approx(p.objective(p.x_star))
    np.testing.assert_array_equal(p.rows_per_client, [len(f) for f in feats])


def test_least_squares_forms_agree():
    rng = np.random.default_rng(5)
    feats, targs = ragged_data(rng, 8, 3, 1, 9)
    padded = LeastSquares(feats, targs, 0.1, form="padded")
    gram = LeastSquares(feats, targs, 0.1, form="gram")
    clients = rng.integers(0, 8, size=40)
    points = 10 * rng.standard_normal((40, 3))
    np.testing.assert_allclose(
        padded.gradients(clients, points), gram.gradients(clients, points), rtol=1e-12, atol=1e-11
    )


def test_least_squares_random_and_from_stacked():
    p = LeastSquares.random(30, 4, (1, 5), reg=0.0, heterogeneity=2.0, noise=0.0, seed=7)
    counts = p.rows_per_client
    assert counts.min() >= 1 and counts.max() <= 5 and len(counts) == 30
    q = LeastSquares.random(30, 4, (1, 5), reg=0.0, heterogeneity=2.0, noise=0.0, seed=7)
    np.testing.assert_array_equal(q.x_star, p.x_star)
    e = LeastSquares.random(10, 4, 3, reg=0.1, seed=1)
    np.testing.assert_array_equal(e.rows_per_client, np.full(10, 3))
    assert e.reg == 0.1

    rng = np.random.default_rng(0)
    rows, rhs = rng.standard_normal((9, 2)), rng.standard_normal(9)
    counts = np.array([2, 3, 4])
    s = LeastSquares.from_stacked(rows, rhs, counts)
    feats, targs = np.split(rows, [2, 5]), np.split(rhs, [2, 5])
    clients, points = np.array([2, 0, 1, 2]), rng.standard_normal((4, 2))
    np.testing.assert_allclose(
        s.gradients(clients, points), ls_loop(feats, targs, 0.0, clients, points), rtol=1e-12
    )


def test_least_squares_homogeneous_noiseless_recovers_truth():
    # heterogeneity 0 and no noise: every client shares one ground truth, which is x_star.
    p = LeastSquares.random(5, 3, 4, heterogeneity=0.0, noise=0.0, seed=3)
    assert p.objective(p.x_star) == pytest.approx(0.0, abs=1e-20)


def test_least_squares_does_not_alias_inputs():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3))
    p = LeastSquares(a, b)
    before = p.gradients(np.arange(2), np.ones((2, 2)))
    a[:] = 0.0
    np.testing.assert_array_equal(p.gradients(np.arange(2), np.ones((2, 2))), before)


# --------------------------------------------------------------------------- shared behaviour

PROBLEMS = {
    "quad_diag": lambda: make_quadratic("diagonal")[0],
    "quad_full": lambda: make_quadratic("full")[0],
    "ls_padded": lambda: make_ls("ragged", 0.1, "padded")[0],
    "ls_gram": lambda: make_ls("ragged", 0.0, "gram")[0],
}


@pytest.mark.parametrize("name", PROBLEMS)
def test_float32_is_preserved(name):
    p = PROBLEMS[name]()
    rng = np.random.default_rng(0)
    clients = rng.integers(0, p.n_clients, size=10)
    points = rng.standard_normal((10, p.dim))
    g32 = p.gradients(clients, points.astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, p.gradients(clients, points), rtol=1e-4, atol=1e-4)
    assert p.gradient(points[0].astype(np.float32)).dtype == np.float32
    assert p.gradients(clients, points).dtype == np.float64
    assert isinstance(p.objective(points[0].astype(np.float32)), float)


@pytest.mark.parametrize("name", PROBLEMS)
def test_empty_and_repeated_clients(name):
    p = PROBLEMS[name]()
    empty = p.gradients(np.array([], dtype=np.int64), np.empty((0, p.dim)))
    assert empty.shape == (0, p.dim) and empty.dtype == np.float64
    point = np.random.default_rng(0).standard_normal(p.dim)
    same = p.gradients(np.array([2, 2, 2]), np.tile(point, (3, 1)))
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_array_equal(same[0], same[2])
    pts = np.random.default_rng(1).standard_normal((3, p.dim))
    mixed = p.gradients(np.array([2, 0, 2]), pts)
    np.testing.assert_allclose(mixed[0], p.gradients(np.array([2]), pts[:1])[0], rtol=1e-14)
    np.testing.assert_allclose(mixed[2], p.gradients(np.array([2]), pts[2:])[0], rtol=1e-14)


@pytest.mark.parametrize("name", PROBLEMS)
def test_gradients_reject_bad_requests(name):
    p = PROBLEMS[name]()
    d = p.dim
    with pytest.raises(ValueError, match="clients must lie"):
        p.gradients(np.array([0, p.n_clients]), np.zeros((2, d)))
    with pytest.raises(ValueError, match="clients must lie"):
        p.gradients(np.array([-1]), np.zeros((1, d)))
    with pytest.raises(TypeError, match="parameter 'points'|points must"):
        p.gradients(np.array([0, 1]), np.zeros((3, d)))
    with pytest.raises((TypeError, ValueError), match="parameter 'points'|points must"):
        p.gradients(np.array([0, 1]), np.zeros((2, d + 1)))
    with pytest.raises((TypeError, ValueError), match="parameter 'x'|x must"):
        p.objective(np.zeros(d + 1))
    with pytest.raises((TypeError, ValueError), match="parameter 'points'|points must"):
        p.client_objectives(np.zeros((p.n_clients + 1, d)))


def test_problem_is_abstract():
    with pytest.raises(TypeError):
        Problem(3, 2)


# --------------------------------------------------------------------------- bad inputs


def test_quadratic_rejects_bad_inputs():
    z = np.zeros((3, 2))
    with pytest.raises((TypeError, ValueError), match="parameter 'hessians'|hessians must"):
        Quadratic(z, np.ones((3, 3)))
    with pytest.raises((TypeError, ValueError), match="parameter 'hessians'|hessians must"):
        Quadratic(z, np.ones((4, 2)))
    with pytest.raises((TypeError, ValueError), match="parameter 'centers'|centers must"):
        Quadratic(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="hessians must be positive semidefinite; client 1"):
        Quadratic(z, np.array([[1.0, 1.0], [1.0, -0.5], [1.0, 1.0]]))
    not_psd = np.tile(np.eye(2), (3, 1, 1))
    not_psd[2] = [[1.0, 2.0], [2.0, 1.0]]  # eigenvalues 3 and -1
    with pytest.raises(ValueError, match="hessians must be positive semidefinite; client 2"):
        Quadratic(z, not_psd)
    asym = np.tile(np.eye(2), (3, 1, 1))
    asym[1, 0, 1] = 0.5
    with pytest.raises(ValueError, match="hessians must be symmetric; client 1"):
        Quadratic(z, asym)
    with pytest.raises(ValueError, match="hessians: the average Hessian"):
        Quadratic(z, np.array([[1.0, 0.0]] * 3))
    with pytest.raises(ValueError, match="hessians: the average Hessian"):
        Quadratic(z, np.zeros((3, 2, 2)))
    with pytest.raises(ValueError, match="centers must be finite"):
        Quadratic(np.array([[0.0, np.nan]] * 3), np.ones((3, 2)))
    with pytest.raises(ValueError, match="hessians must be finite"):
        Quadratic(z, np.array([[1.0, np.inf]] * 3))


def test_quadratic_random_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_clients"):
        Quadratic.random(0, 2)
    with pytest.raises(TypeError, match="dim"):
        Quadratic.random(3, 2.5)
    with pytest.raises(ValueError, match="condition"):
        Quadratic.random(3, 2, condition=0.5)
    with pytest.raises(ValueError, match="heterogeneity"):
        Quadratic.random(3, 2, heterogeneity=-1.0)
    with pytest.raises(TypeError, match="seed"):
        Quadratic.random(3, 2, seed="abc")


def test_least_squares_rejects_bad_inputs():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="reg must be >= 0"):
        LeastSquares(a, b, reg=-0.1)
    with pytest.raises((TypeError, ValueError), match="parameter 'targets'|targets must"):
        LeastSquares(a, rng.standard_normal((3, 5)))
    with pytest.raises(TypeError, match="targets must be an array"):
        LeastSquares(a, list(b))
    with pytest.raises(ValueError, match="targets must have one entry per client"):
        LeastSquares(list(a), list(b)[:2])
    with pytest.raises(ValueError, match=r"targets\[1\] must have shape \(4,\)"):
        LeastSquares(list(a), [b[0], b[1][:3], b[2]])
    with pytest.raises(ValueError, match=r"features\[2\] must have 2 columns"):
        LeastSquares([a[0], a[1], np.ones((4, 3))], list(b))
    with pytest.raises(ValueError, match=r"features\[1\] must have shape \(rows, dim\)"):
        LeastSquares([a[0], np.ones((0, 2)), a[2]], [b[0], np.ones(0), b[2]])
    with pytest.raises(ValueError, match="features must hold at least one client"):
        LeastSquares([], [])
    with pytest.raises((TypeError, ValueError), match="parameter 'features'|features must"):
        LeastSquares(np.ones((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match="features must be finite"):
        LeastSquares([np.array([[np.nan, 1.0]] * 3)], [np.ones(3)])
    with pytest.raises(ValueError, match="form must be one of"):
        LeastSquares(a, b, form="dense")
    # singular with reg = 0: fewer rows in all than the dimension, or a repeated column
    with pytest.raises(ValueError, match="features: the least-squares problem is singular"):
        LeastSquares([np.ones((1, 3)), np.ones((1, 3))], [np.ones(1), np.ones(1)])
    dup = np.concatenate([a, a[:, :, :1]], axis=2)
    with pytest.raises(ValueError, match="features: the least-squares problem is singular"):
        LeastSquares(dup, b)
    # ... and the same data is fine with a ridge term.
    fine = LeastSquares(dup, b, reg=0.1)
    assert np.linalg.norm(fine.gradient(fine.x_star)) < 1e-10
    with pytest.raises(ValueError, match="counts must sum"):
        LeastSquares.from_stacked(np.ones((4, 2)), np.ones(4), np.array([1, 2]))
    with pytest.raises(ValueError, match="counts must be >= 1"):
        LeastSquares.from_stacked(np.ones((4, 2)), np.ones(4), np.array([4, 0]))
    with pytest.raises(ValueError, match="rows_per_client must be >= 1"):
        LeastSquares.random(3, 2, 0)
    with pytest.raises(ValueError, match=r"rows_per_client\[1\] must be >= 2"):
        LeastSquares.random(3, 2, (2, 1))
    with pytest.raises(ValueError, match="noise"):
        LeastSquares.random(3, 2, noise=-1.0)


# --------------------------------------------------------------------------- property test


@settings(max_examples=examples(40), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    d=st.integers(1, 5),
    m=st.integers(0, 12),
    kind=st.sampled_from(["diag", "full", "ls_equal", "ls_ragged"]),
    reg=st.sampled_from([0.0, 0.3]),
)
def test_property_gradients_equal_the_loop(seed, n, d, m, kind, reg):
    rng = np.random.default_rng(seed)
    clients = rng.integers(0, n, size=m)
    points = rng.standard_normal((m, d))
    if kind in ("diag", "full"):
        z = rng.standard_normal((n, d))
        h = rng.uniform(0.5, 3.0, (n, d)) if kind == "diag" else random_psd(rng, n, d)
        h = h if kind == "diag" else h + 0.1 * np.eye(d)
        got = Quadratic(z, h).gradients(clients, points)
        want = quad_loop(z, h, clients, points)
    else:
        low = max(1, -(-(d + 1) // n))  # enough rows in all for reg = 0
        if kind == "ls_equal":
            feats = list(rng.standard_normal((n, low, d)))
            targs = list(rng.standard_normal((n, low)))
            problem = LeastSquares(np.stack(feats), np.stack(targs), reg)
        else:
            feats, targs = ragged_data(rng, n, d, low, low + 4)
            problem = LeastSquares(feats, targs, reg)
        got = problem.gradients(clients, points)
        want = ls_loop(feats, targs, reg, clients, points)
    assert got.shape == (m, d)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", [*PROBLEMS, "logistic"])
def test_a_slice_of_consecutive_clients_gives_the_gathered_bits(name, monkeypatch):
    """gradients_unchecked takes a slice of consecutive clients (client_slices): their data
    is read in place, chunk by chunk, with the same bits as gathering it by index."""
    from stochmix.problems import Logistic, base

    p = Logistic.random(9, 3, seed=2) if name == "logistic" else PROBLEMS[name]()
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 2 * p.chunk_cost())  # several chunks
    monkeypatch.setattr(base, "SLICE_ELEMENTS", 2 * p.chunk_cost())  # slices in chunks too
    p.hessian_budget = 0  # the padded rows themselves (the Hessians: the test below)
    rng = np.random.default_rng(1)
    lo, hi = 1, p.n_clients - 1
    points = rng.standard_normal((hi - lo, p.dim))
    assert p.client_slices
    for x in (points, points.astype(np.float32)):
        by_index = p.gradients_unchecked(np.arange(lo, hi), x)
        np.testing.assert_array_equal(p.gradients_unchecked(slice(lo, hi), x), by_index)


def test_whole_blocks_of_least_squares_clients_use_their_hessians():
    """Consecutive clients (a decentralized block) of a padded least-squares problem with d
    <= 2 n_max get their gradients from the Hessians A_i^T A_i (one einsum, computed once
    and kept out of the fingerprint): the gradients of the padded rows to rounding, the bits
    of the gram form. Not where the Hessians cost more flops, exceed ``hessian_budget``,
    or a subclass has its own formula."""
    rng = np.random.default_rng(3)
    feats, targs = ragged_data(rng, 40, 6, 3, 5)
    p = LeastSquares(feats, targs, 0.2, form="padded")
    gram = LeastSquares(feats, targs, 0.2, form="gram")
    before = p.fingerprint()
    points = rng.standard_normal((30, 6))
    for x in (points, points.astype(np.float32)):
        got = p.gradients_unchecked(slice(5, 35), x)
        assert got.dtype == x.dtype
        want = p.gradients(np.arange(5, 35), x)
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= (1e-13 if x.dtype == np.float64 else 1e-5) * scale
        np.testing.assert_array_equal(got, gram.gradients_unchecked(slice(5, 35), x))
    assert "_hessians" in vars(p) and p.fingerprint() == before

    wide = LeastSquares(feats, targs, 0.2, form="padded")  # d > 2 n_max: the padded rows
    wide_x = rng.standard_normal((40, 6))
    wide.hessian_budget = 40 * 6 * 6 * 8 - 1  # one byte short
    np.testing.assert_array_equal(
        wide.gradients_unchecked(slice(0, 40), wide_x), wide.gradients(np.arange(40), wide_x)
    )
    assert "_hessians" not in vars(wide)
    tall = LeastSquares.random(20, 12, 5, seed=1)  # 12 > 2 * 5
    tall_x = rng.standard_normal((20, 12))
    np.testing.assert_array_equal(
        tall.gradients_unchecked(slice(0, 20), tall_x), tall.gradients(np.arange(20), tall_x)
    )

    class Doubled(LeastSquares):
        def gradient_formula(self, xp, data, idx, x):
            return 2 * super().gradient_formula(xp, data, idx, x)

    own = Doubled(feats, targs, 0.2, form="padded")
    np.testing.assert_array_equal(
        own.gradients_unchecked(slice(5, 35), points), own.gradients(np.arange(5, 35), points)
    )


@pytest.mark.parametrize("after", [True, False])
@pytest.mark.parametrize("gathered", [True, False])
def test_hessian_products_compiled_equals_einsum(after, gathered):
    """The compiled pass over per-client Hessians (least squares' gram form, a full
    quadratic) gives einsum's numbers to rounding, on chosen clients and on rows already
    gathered; NumPy arrays of another dtype take einsum itself."""
    from stochmix.problems._common import _hessian_kernel, hessian_products

    pytest.importorskip("numba")
    assert _hessian_kernel() is not None
    rng = np.random.default_rng(3)
    n, d = 40, 7
    hess = rng.standard_normal((n, d, d))
    vec = rng.standard_normal((n, d))
    idx = None if gathered else rng.integers(0, n, 25)
    x = rng.standard_normal((n if gathered else 25, d))
    h, v = (hess, vec) if gathered else (hess[idx], vec[idx])
    expected = np.einsum("mij,mj->mi", h, x) - v if after else np.einsum("mij,mj->mi", h, x - v)
    got = hessian_products(np, hess, vec, idx, x, after)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
    single = hessian_products(np, hess.astype(np.float32), vec.astype(np.float32), idx,
                              x.astype(np.float32), after)  # fmt: skip
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, expected, rtol=1e-4, atol=1e-4)
