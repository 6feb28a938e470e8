"""Acc-DNGD-SC (Qu & Li 2020, stochmix.algorithms.accelerated_tracking.AccDNGD): the engine
equals the per-node reference (tests/reference/acc_dngd.py) to 1e-10 on random problems
over a ring, a random graph and a time-varying sequence; on one network it is Nesterov's
constant-momentum method; its arguments and participation are checked at the entry; and
the paper's claim holds as it states it: with its tuning eta = c (mu/L)^(3/7) / L,
alpha = sqrt(mu eta), the iterations to a fixed accuracy grow like (L/mu)^(5/7), slower
than gradient tracking's at the same step."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import GradientTracking
from stochmix.algorithms.accelerated_tracking import AccDNGD
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full, RandomEdge
from stochmix.problems import Quadratic
from tests import examples
from tests.algorithms.test_method_family import KINDS, assert_close, make_problem
from tests.reference.acc_dngd import acc_dngd


def random_graph(rng, n):
    """A connected random graph: a random spanning path plus each other pair with
    probability 1/2."""
    order = rng.permutation(n)
    graph = nx.Graph([(int(a), int(b)) for a, b in zip(order[:-1], order[1:], strict=True)])
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < 0.5:
                graph.add_edge(i, j)
    return graph


@settings(max_examples=examples(8), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(3, 8),
    per_node=st.booleans(),
    by_mu=st.booleans(),
)
def test_engine_equals_reference(seed, kind, n, per_node, by_mu):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    x0 = rng.normal(size=(n, d) if per_node else d)
    lr, iters = float(rng.uniform(0.05, 0.4)) / problem.smoothness, 12
    if by_mu:  # the paper's alpha = sqrt(mu eta)
        mu = problem.strong_convexity
        alpha, kwargs = float(np.sqrt(mu * lr)), {"mu": mu}
    else:
        alpha = float(rng.uniform(0.05, 1.0))
        kwargs = {"alpha": alpha}
    graphs = [
        StaticSequence(nx.cycle_graph(n)),
        StaticSequence(random_graph(rng, n)),
        RandomSequence(n, "erdos_renyi", seed=int(rng.integers(2**31))),  # time-varying
    ]
    for sequence in graphs:
        method = AccDNGD(lr, sequence, **kwargs)
        assert method.alpha == pytest.approx(alpha, rel=1e-15)
        result = run(method, problem, Full(n), iters, x0=x0, progress=False)
        want = acc_dngd(problem, sequence, iters, x0, lr, alpha)
        assert_close(result.server, want)


def test_one_network_of_identical_nodes_is_nesterov():
    """Identical clients from one start stay in consensus whatever W, s = grad f(y), and the
    recursion is Nesterov's constant-momentum scheme, written independently:
    x_{k+1} = y_k - eta grad f(y_k), y_{k+1} = x_{k+1} + (1 - a)/(1 + a) (x_{k+1} - x_k)."""
    rng = np.random.default_rng(1)
    n, d = 5, 4
    centers = np.tile(rng.normal(size=d), (n, 1))
    hessians = np.tile(np.geomspace(1.0, 50.0, d), (n, 1))
    problem = Quadratic(centers, hessians)
    eta = 0.5 / problem.smoothness
    method = AccDNGD(eta, StaticSequence(nx.cycle_graph(n)), mu=problem.strong_convexity)
    x0 = rng.normal(size=d)
    result = run(method, problem, Full(n), 40, x0=x0, progress=False)
    a, h, z = method.alpha, hessians[0], centers[0]
    beta = (1.0 - a) / (1.0 + a)
    x, y, want = x0.copy(), x0.copy(), [x0.copy()]
    for _ in range(40):
        new = y - eta * h * (y - z)
        y, x = new + beta * (new - x), new
        want.append(x)
    assert_close(result.server, np.array(want))
    # in exact arithmetic the rows stay equal; at this step (above the paper's bound) the
    # disagreement modes grow, so the rows' rounding differences (W's rows sum their
    # entries in different orders) grow from 1e-33 to about 1e-14 in 40 iterations
    assert result.consensus.max() < 1e-10


def test_reports_x_and_takes_gradients_at_y():
    """node_models are the x rows (what the reference averages), not the y rows."""
    rng = np.random.default_rng(2)
    n, d = 6, 3
    problem = Quadratic.random(n, d, seed=2)
    ring = StaticSequence(nx.cycle_graph(n))
    lr = 0.2 / problem.smoothness
    x0 = rng.normal(size=(n, d))
    result = run(AccDNGD(lr, ring, alpha=0.3), problem, Full(n), 5, x0=x0, progress=False)
    assert_close(result.node_models.mean(axis=0), acc_dngd(problem, ring, 5, x0, lr, 0.3)[-1])
    assert_close(result.final, result.node_models.mean(axis=0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of mu"),
        ({"mu": 1.0, "alpha": 0.5}, "mu=1.0 and alpha=0.5"),
        ({"alpha": 1.5}, "alpha must be <= 1.0, got 1.5"),
        ({"alpha": -0.1}, "alpha must be > 0, got -0.1"),
        ({"mu": 0.0}, "mu must be > 0, got 0.0"),
        ({"mu": 30.0}, "mu=30.0 and lr=0.1"),
        ({"alpha": 0.5, "rule": "nope"}, "rule"),
    ],
)
def test_arguments_refused_at_the_entry(kwargs, message):
    ring = StaticSequence(nx.cycle_graph(4))
    with pytest.raises(ValueError, match=message):
        AccDNGD(0.1, ring, **kwargs)


def test_only_full_participation_runs():
    n = 5
    problem = Quadratic.random(n, 2, seed=0)
    method = AccDNGD(0.1 / problem.smoothness, StaticSequence(nx.cycle_graph(n)), alpha=0.2)
    for process in (Bernoulli(0.5, n_clients=n), RandomEdge(nx.cycle_graph(n))):
        with pytest.raises(ValueError, match=r"participation must be Full\(n\) for AccDNGD"):
            run(method, problem, process, 3, progress=False)
    assert np.isfinite(run(method, problem, Full(n), 3, progress=False).final).all()


def test_needs_doubly_stochastic_mixing():
    n = 5
    problem = Quadratic.random(n, 2, seed=0)
    directed = RandomSequence(n, "random_directed", seed=3)
    method = AccDNGD(0.1 / problem.smoothness, directed, alpha=0.2, rule="row")
    with pytest.raises(ValueError, match="doubly stochastic"):
        run(method, problem, Full(n), 3, progress=False)


# ------------------------------------------------------------------ the paper's claim

KAPPAS = (10.0, 100.0, 1000.0)
TOL = 1e-8


def conditioned(kappa, n=8, d=6, seed=0):
    """Diagonal quadratics whose average Hessian has eigenvalues geomspace(1, kappa, d)
    (mu = 1 exactly), each client's a multiple c_i in [0.5, 1.5] of it (mean c_i = 1), so
    L/mu = kappa max_i c_i; random centers."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 1.5, n)
    scale /= scale.mean()
    return Quadratic(rng.normal(size=(n, d)), scale[:, None] * np.geomspace(1.0, kappa, d))


def iterations_to(relative_error, tol=TOL):
    """The first k after which the relative error stays <= tol (None if it does not)."""
    above = np.flatnonzero(relative_error > tol)
    if above.size and above[-1] == relative_error.size - 1:
        return None
    return int(above[-1] + 1) if above.size else 0


def _data(problem):
    return np.asarray(problem.data["hessians"]), np.asarray(problem.data["centers"])


def gradient_tracking_iterations(problem, w, eta, tol=TOL):
    """Iterations of DIGing (GradientTracking's default "cta" form, y^0 = grad F(x^0),
    x0 = 0) to relative error tol on a diagonal quadratic, from the exact linear recursion
    of its errors: per coordinate, e = (x - x* 1, y) evolves as e <- M e with
    M = [[W, -eta I], [H (W - I), W - eta H]] (y's update adds H (x^{k+1} - x^k)), so
    e_k = M^k e_0 is a matrix power; bisection between a k above tol and one below (its
    errors fall monotonically here). Returns the count and the error function of k."""
    h, z = _data(problem)
    n, d = z.shape
    x_star = problem.x_star
    eye = np.eye(n)
    blocks = [
        np.block([[w, -eta * eye], [np.diag(h[:, j]) @ (w - eye), w - eta * np.diag(h[:, j])]])
        for j in range(d)
    ]
    starts = [np.concatenate([-x_star[j] * np.ones(n), -h[:, j] * z[:, j]]) for j in range(d)]

    def error(k):
        pairs = zip(blocks, starts, strict=True)
        powers = [np.linalg.matrix_power(m, k)[:n] @ e0 for m, e0 in pairs]
        return np.sqrt(sum(float(np.mean(v)) ** 2 for v in powers)) / np.linalg.norm(x_star)

    high = 1
    while error(high) > tol:
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if error(mid) > tol else (low, mid)
    return high, error


def acc_dngd_errors(problem, w, eta, alpha, iterations):
    """AccDNGD's relative errors ||x-bar_k - x*|| / ||x*|| (x0 = 0), k = 0..iterations, on
    a diagonal quadratic, from the exact linear recursion of its errors: per coordinate,
    e = (x - x* 1, v - x* 1, y - x* 1, s) evolves as e <- M e, where y's row is
    ((1 + a^2) W y + a (1 - a) W v - 2 eta s) / (1 + a) (x's and v's rows substituted) and
    s's adds H (y^{k+1} - y^k); every coordinate at once, one batched product a step."""
    h, z = _data(problem)
    n, d = z.shape
    x_star = problem.x_star
    eye, zero, a = np.eye(n), np.zeros((n, n)), alpha
    blocks = []
    for j in range(d):
        hj = np.diag(h[:, j])
        y_row = [
            zero,
            a * (1 - a) / (1 + a) * w,
            (1 + a**2) / (1 + a) * w,
            -2 * eta / (1 + a) * eye,
        ]
        blocks.append(
            np.block([
                [zero, zero, w, -eta * eye],
                [zero, (1 - a) * w, a * w, -(eta / a) * eye],
                y_row,
                [zero, hj @ y_row[1], hj @ (y_row[2] - eye), w + hj @ y_row[3]],
            ])
        )  # fmt: skip
    m = np.array(blocks)  # (d, 4n, 4n)
    e = np.array(
        [np.concatenate([-x_star[j] * np.ones(3 * n), -h[:, j] * z[:, j]]) for j in range(d)]
    )
    errors = np.empty(iterations + 1)
    for k in range(iterations + 1):
        errors[k] = np.linalg.norm(e[:, :n].mean(axis=1))
        e = np.einsum("jab,jb->ja", m, e)
    return errors / np.linalg.norm(x_star)


def slope(counts):
    return float(np.polyfit(np.log(KAPPAS), np.log(np.asarray(counts, dtype=float)), 1)[0])


def ring_of_8():
    ring = StaticSequence(nx.cycle_graph(8))
    return ring, ring.matrix(0, "metropolis").toarray()


def test_closed_forms_are_the_engine(unchecked):
    """The exact errors used below are gradient tracking's and AccDNGD's on the engine."""
    problem = conditioned(100.0)
    ring, w = ring_of_8()
    eta, mu = 0.1 / problem.smoothness, problem.strong_convexity
    x0 = np.zeros(6)
    result = run(GradientTracking(eta, ring), problem, Full(8), 60, x0=x0, progress=False)
    _, error = gradient_tracking_iterations(problem, w, eta, tol=0.5)
    closed = np.array([error(k) for k in range(61)])
    np.testing.assert_allclose(result.relative_error, closed, rtol=1e-9, atol=1e-14)
    result = run(AccDNGD(eta, ring, mu=mu), problem, Full(8), 60, x0=x0, progress=False)
    closed = acc_dngd_errors(problem, w, eta, np.sqrt(mu * eta), 60)
    np.testing.assert_allclose(result.relative_error, closed, rtol=1e-9, atol=1e-14)


def paper_step(big_l, mu):
    """The paper's strongly convex tuning, eta = c (mu/L)^(3/7) / L, with c = 0.3."""
    return 0.3 * (mu / big_l) ** (3 / 7) / big_l


def short_step(big_l, mu):
    """eta = 0.1 / L: of order 1/L, beyond what the theorem covers."""
    return 0.1 / big_l


PAPER_ROUNDS, SHORT_ROUNDS = (400, 1800, 8000), (400, 1200, 3200)


def exact(step, rounds):
    """Iterations to relative error 1e-8 from the exact errors, AccDNGD's (alpha =
    sqrt(mu eta), followed for ``rounds[i]`` iterations at kappa i) and gradient
    tracking's at the same eta."""
    _, w = ring_of_8()
    accelerated, tracking = [], []
    for kappa, length in zip(KAPPAS, rounds, strict=True):
        problem = conditioned(kappa)
        big_l, mu = problem.smoothness, problem.strong_convexity
        eta = step(big_l, mu)
        errors = acc_dngd_errors(problem, w, eta, np.sqrt(mu * eta), length)
        accelerated.append(iterations_to(errors))
        tracking.append(gradient_tracking_iterations(problem, w, eta)[0])
    return accelerated, tracking


def test_paper_tuning_iterations_grow_like_kappa_to_the_five_sevenths():
    """Qu & Li's strongly convex theorem: eta = c (mu/L)^(3/7) / L, alpha = sqrt(mu eta)
    give the rate 1 - C (mu/L)^(5/7), so iterations to 1e-8 grow like kappa^(5/7): the
    log-log slope over kappa in {10, 100, 1000} is below 1 (0.73 here, c = 0.3), and
    below gradient tracking's at the same eta (about 1 + 3/7: its rate is mu eta). From
    the exact errors (checked against the engine above; the slow test below measures the
    same counts on the engine)."""
    accelerated, tracking = exact(paper_step, PAPER_ROUNDS)
    assert None not in accelerated, accelerated
    rate, contrast = slope(accelerated), slope(tracking)
    assert 0.6 < rate < 0.85, (accelerated, rate)  # 5/7 = 0.714: the proven exponent
    assert rate < 1.0 < contrast, (rate, contrast, tracking)
    assert all(a < t for a, t in zip(accelerated, tracking, strict=True))


def test_steps_of_order_one_over_l_give_the_square_root_beyond_the_proof():
    """Outside the theorem (eta = 0.1 / L, alpha = sqrt(mu eta)) the slope is about 1/2,
    Nesterov's sqrt(kappa), against gradient tracking's 1 at the same eta."""
    accelerated, tracking = exact(short_step, SHORT_ROUNDS)
    assert None not in accelerated, accelerated
    rate, contrast = slope(accelerated), slope(tracking)
    assert rate < 0.6, (accelerated, rate)
    assert 0.9 < contrast < 1.1, (tracking, contrast)


def measured(step, rounds):
    """Iterations to relative error 1e-8 measured on the engine (AccDNGD with alpha =
    sqrt(mu eta), run for ``rounds[i]`` iterations at kappa i)."""
    ring, _ = ring_of_8()
    counts = []
    for kappa, length in zip(KAPPAS, rounds, strict=True):
        problem = conditioned(kappa)
        big_l, mu = problem.smoothness, problem.strong_convexity
        method = AccDNGD(step(big_l, mu), ring, mu=mu)
        result = run(
            method, problem, Full(8), length, x0=np.zeros(6), metrics=("distance",),
            progress=False,
        )  # fmt: skip
        counts.append(iterations_to(result.relative_error))
    return counts


@pytest.mark.slow  # about 15,000 engine iterations: minutes under the test-time checks
@pytest.mark.parametrize(
    ("step", "rounds"), [(paper_step, PAPER_ROUNDS), (short_step, SHORT_ROUNDS)]
)
def test_engine_measures_the_same_counts(unchecked, step, rounds):
    """The iterations to 1e-8 measured on the engine are the exact errors' counts (to one
    iteration: rounding near the threshold), so the slopes above are the engine's."""
    engine = measured(step, rounds)
    closed, _ = exact(step, rounds)
    assert None not in engine, engine
    assert np.abs(np.subtract(engine, closed)).max() <= 1, (engine, closed)
