"""DAPG (Ye, Zhou, Luo & Zhang 2020, stochmix.algorithms.accelerated_proximal.DAPG): the
engine equals the per-node reference (tests/reference/dapg.py) to 1e-10 on random
composite and smooth problems over a ring, a random graph and a time-varying sequence; on
one network of identical nodes it is the centralized accelerated proximal gradient method;
its traffic is 2K rounds of W's messages per iteration; its arguments and participation
are checked at the entry; and the paper's claims hold as it states them: linear
convergence to the certified composite minimiser, with iterations to 1e-8 growing like
sqrt(L/mu) over L/mu in {10, 100, 1000} (against L/mu for the same method without
momentum)."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms.accelerated_proximal import DAPG
from stochmix.algorithms.mudag import Mudag
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full, RandomEdge
from stochmix.problems import (
    L1,
    Box,
    Composite,
    ElasticNet,
    GroupLasso,
    LeastSquares,
    Quadratic,
)
from tests import examples
from tests.algorithms.test_acc_dngd import iterations_to, random_graph
from tests.reference.dapg import dapg, fastmix_eta

TOL = 1e-10
REGULARIZERS = [None, L1(0.3), ElasticNet(0.2, 0.3), Box(-0.2, 0.3), GroupLasso(0.2, 1)]


def close(got, want, tol=TOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= tol * (1.0 + np.abs(want).max())


def node_rows(method, problem, x0, rounds):
    """Every node's x after each round (the engine's own rows, not their average)."""
    rows = []
    run(
        method, problem, Full(problem.n_clients), rounds, x0=x0, progress=False,
        callback=lambda r, z, ctx: rows.append(np.array(z[ctx.layout.slice("x")])),
    )  # fmt: skip
    return rows


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(2, 7),
    kind=st.sampled_from(["least_squares", "quadratic"]),
    which=st.integers(0, len(REGULARIZERS) - 1),
    rounds=st.integers(1, 3),
    by_mu=st.booleans(),
    given_eta=st.booleans(),
)
def test_engine_equals_reference(seed, n, kind, which, rounds, by_mu, given_eta):
    rng = np.random.default_rng(seed)
    d = 3
    if kind == "least_squares":
        smooth = LeastSquares.random(n, d, rows_per_client=(2, 6), reg=0.1, seed=seed)
    else:
        smooth = Quadratic.random(n, d, diagonal=bool(seed % 2), seed=seed)
    reg = REGULARIZERS[which]
    problem = smooth if reg is None else Composite(smooth, reg)
    lr = float(rng.uniform(0.2, 1.0)) / smooth.smoothness
    if by_mu:  # the paper's beta = (1 - a) / (1 + a), a = sqrt(mu eta)
        mu = smooth.strong_convexity
        a = float(np.sqrt(mu * lr))
        beta, kwargs = (1 - a) / (1 + a), {"mu": mu}
    else:
        beta = float(rng.uniform(0.0, 0.95))
        kwargs = {"momentum": beta}
    eta = float(rng.uniform(0.0, 0.5)) if given_eta else None
    x0 = rng.normal(size=(n, d))
    iters = 10

    def grad(i, x):
        return smooth.gradients(np.array([i]), x[None])[0]

    prox = None if reg is None else (lambda v, t: reg.prox(v[None], t)[0])
    graphs = [
        StaticSequence(nx.cycle_graph(n)),
        StaticSequence(random_graph(rng, n)),
        RandomSequence(n, "erdos_renyi", connected=True, seed=int(rng.integers(2**31))),
    ]
    for sequence in graphs:
        method = DAPG(lr, sequence, rounds, mix_momentum=eta, **kwargs)
        assert method.momentum == pytest.approx(beta, rel=1e-14)
        want = dapg(grad, prox, sequence, x0, lr, beta, rounds, iters, eta=eta)
        got = node_rows(method, problem, x0, iters)
        assert len(got) == iters
        for mine, ref in zip(got, want[1:], strict=True):
            close(mine, ref)


def test_reference_fastmix_momentum_is_the_papers():
    """The reference's FastMix momentum on a ring of 6: W = metropolis (weights 1/3), whose
    eigenvalues are (1 + 2 cos(2 pi k / 6)) / 3, so lambda_2 = 2/3 and lambda_min = -1/3."""
    w = StaticSequence(nx.cycle_graph(6)).matrix(0, "metropolis").toarray()
    lam = 2.0 / 3.0
    want = (1 - np.sqrt(1 - lam**2)) / (1 + np.sqrt(1 - lam**2))
    assert fastmix_eta(w) == pytest.approx(want, rel=1e-12)


def test_one_network_of_identical_nodes_is_accelerated_proximal_gradient():
    """Identical clients from one start stay in consensus whatever W (FastMix keeps a
    consensus), s = grad f(y), and the recursion is the centralized accelerated proximal
    gradient method with constant momentum, written independently:
    x_{t+1} = prox_{eta r}(y_t - eta grad f(y_t)), y_{t+1} = x_{t+1} + b (x_{t+1} - x_t)."""
    rng = np.random.default_rng(1)
    n, d = 5, 4
    centers = np.tile(rng.normal(size=d), (n, 1))
    hessians = np.tile(np.geomspace(1.0, 50.0, d), (n, 1))
    smooth = Quadratic(centers, hessians)
    lam = 0.4
    problem = Composite(smooth, L1(lam))
    eta = 1.0 / smooth.smoothness
    method = DAPG(eta, StaticSequence(nx.cycle_graph(n)), 2, mu=smooth.strong_convexity)
    x0 = rng.normal(size=d)
    result = run(method, problem, Full(n), 40, x0=x0, progress=False)
    b, h, z = method.momentum, hessians[0], centers[0]
    x, y, want = x0.copy(), x0.copy(), [x0.copy()]
    for _ in range(40):
        u = y - eta * h * (y - z)
        new = np.sign(u) * np.maximum(np.abs(u) - eta * lam, 0.0)  # soft thresholding
        y, x = new + b * (new - x), new
        want.append(x)
    close(result.server, np.array(want))
    assert result.consensus.max() < 1e-20


def test_on_a_smooth_problem_it_is_mudag():
    """Without r the prox is left out and DAPG is Mudag (the same authors' smooth method,
    stochmix.algorithms.mudag, written separately): the same node models to 1e-10 and
    the same traffic."""
    rng = np.random.default_rng(4)
    n, d = 7, 3
    problem = LeastSquares.random(n, d, rows_per_client=(2, 6), reg=0.1, seed=4)
    graphs = StaticSequence(random_graph(rng, n))
    lr, x0 = 0.8 / problem.smoothness, rng.normal(size=(n, d))
    mine = run(DAPG(lr, graphs, 2, momentum=0.7), problem, Full(n), 12, x0=x0, progress=False)
    theirs = run(Mudag(lr, graphs, 2, momentum=0.7), problem, Full(n), 12, x0=x0, progress=False)
    close(mine.server, theirs.server)
    close(mine.node_models, theirs.node_models)
    np.testing.assert_array_equal(mine.messages, theirs.messages)
    np.testing.assert_array_equal(mine.floats, theirs.floats)


def test_traffic_is_one_fastmix_gossip_of_k_rounds_carrying_two_vectors():
    """Per iteration: K rounds over W's edges, one message per directed edge each round,
    carrying v and s (2 d floats); round 0's initial gradients send nothing more."""
    n, k, d = 7, 3, 2
    graph = nx.cycle_graph(n)
    graph.add_edge(0, 3)
    problem = Composite(Quadratic.random(n, d, seed=0), L1(0.1))
    method = DAPG(0.1 / problem.smoothness, StaticSequence(graph), k, momentum=0.5)
    result = run(method, problem, Full(n), 4, progress=False)
    directed = 2 * graph.number_of_edges()
    np.testing.assert_array_equal(result.messages, [0] + [k * directed] * 4)
    np.testing.assert_array_equal(result.floats, [0] + [2 * d * k * directed] * 4)


def test_reports_x_and_takes_gradients_at_y():
    """node_models are the x rows (what the reference keeps), not the y rows."""
    rng = np.random.default_rng(2)
    n, d = 6, 3
    smooth = Quadratic.random(n, d, seed=2)
    problem = Composite(smooth, L1(0.2))
    ring = StaticSequence(nx.cycle_graph(n))
    lr = 0.5 / smooth.smoothness
    x0 = rng.normal(size=(n, d))
    result = run(DAPG(lr, ring, 3, momentum=0.6), problem, Full(n), 5, x0=x0, progress=False)

    def grad(i, x):
        return smooth.gradients(np.array([i]), x[None])[0]

    want = dapg(grad, lambda v, t: L1(0.2).prox(v[None], t)[0], ring, x0, lr, 0.6, 3, 5)
    close(result.node_models, want[-1])
    close(result.final, want[-1].mean(axis=0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of mu"),
        ({"mu": 1.0, "momentum": 0.5}, "mu=1.0 and momentum=0.5"),
        ({"momentum": 1.0}, "momentum must be < 1, got 1.0"),
        ({"momentum": -0.1}, "momentum must be >= 0, got -0.1"),
        ({"mu": 0.0}, "mu must be > 0, got 0.0"),
        ({"mu": 30.0}, "mu=30.0 and lr=0.1"),
        ({"momentum": 0.5, "mix_rounds": 0}, "mix_rounds must be >= 1, got 0"),
        ({"momentum": 0.5, "mix_momentum": 1.0}, "mix_momentum must be < 1, got 1.0"),
        ({"momentum": 0.5, "mix_momentum": -0.2}, "mix_momentum must be >= 0, got -0.2"),
        ({"momentum": 0.5, "rule": "nope"}, "rule"),
    ],
)
def test_arguments_refused_at_the_entry(kwargs, message):
    ring = StaticSequence(nx.cycle_graph(4))
    kwargs = {"mix_rounds": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        DAPG(0.1, ring, **kwargs)


def test_only_full_participation_runs():
    n = 5
    problem = Composite(Quadratic.random(n, 2, seed=0), L1(0.1))
    method = DAPG(0.1 / problem.smoothness, StaticSequence(nx.cycle_graph(n)), 2, momentum=0.5)
    for process in (Bernoulli(0.5, n_clients=n), RandomEdge(nx.cycle_graph(n))):
        with pytest.raises(ValueError, match=r"participation must be Full\(n\) for DAPG"):
            run(method, problem, process, 3, progress=False)
    assert np.isfinite(run(method, problem, Full(n), 3, progress=False).final).all()


def test_needs_doubly_stochastic_mixing():
    n = 5
    problem = Quadratic.random(n, 2, seed=0)
    directed = RandomSequence(n, "random_directed", seed=3)
    method = DAPG(0.1 / problem.smoothness, directed, 2, momentum=0.5, rule="row", mix_momentum=0.1)
    with pytest.raises(ValueError, match="doubly stochastic"):
        run(method, problem, Full(n), 3, progress=False)


# ------------------------------------------------------------------ the paper's claims


def test_converges_linearly_to_the_certified_composite_minimiser(unchecked):
    """Ye et al.'s theorem: with eta = 1/L and alpha = sqrt(mu/L) the average of x^t
    converges linearly to the composite minimiser (a lasso here, whose x_star the problem
    certifies); the nodes reach consensus and the minimiser's support."""
    smooth = LeastSquares.random(
        10, 12, rows_per_client=12, support=3, heterogeneity=0.5, reg=0.05, seed=0
    )
    problem = Composite(smooth, L1(2.0))
    star = problem.x_star
    assert 0 < np.count_nonzero(star) < star.size  # the prox matters
    big_l, mu = smooth.smoothness, smooth.strong_convexity
    method = DAPG(1.0 / big_l, StaticSequence(nx.cycle_graph(10)), 4, mu=mu)
    res = run(method, problem, Full(10), 400, progress=False)
    error = res.distance / np.linalg.norm(star)
    assert error[-1] < 1e-10, error[-1]
    assert res.consensus[-1] < 1e-20
    start, stop = int(np.argmax(error < 1e-2)), int(np.argmax(error < 1e-10))
    assert 0 <= start < stop
    m = max(1, (stop - start) // 5)  # every fifth of the stretch halves the envelope at least
    window = np.maximum.accumulate(error[start : stop + 1][::-1])[::-1]
    assert np.all(window[m:] < 0.5 * window[:-m])
    assert np.array_equal(np.abs(res.node_models).max(axis=0) > 1e-8, star != 0)


KAPPAS = (10.0, 100.0, 1000.0)
LAMBDA = 0.5  # the L1 weight of the claim's problems


def claim_problem(kappa, n=8, d=6, seed=0):
    """An L1-regularized diagonal quadratic f_i(x) = sum_j h_ij (x_j - z_ij)^2 / 2: the
    average Hessian's eigenvalues are geomspace(1, kappa, 6) (mu = 1), each client's a
    multiple in [0.5, 1.5] of it, so L / mu = kappa max_i c_i; random centers, shifted so
    that the composite minimiser, x*_j = S(b_j, lambda) / H_j with b_j = mean_i h_ij z_ij
    and S the soft threshold, is active on the direction of mu (b_0 = 2: x*_0 = 1.5) and
    zero on the next one (b_1 = lambda / 5: the prox zeroes it): the active directions span
    the whole condition number."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 1.5, n)
    scale /= scale.mean()
    h = scale[:, None] * np.geomspace(1.0, kappa, d)
    z = rng.normal(size=(n, d))
    big_h, b = h.mean(axis=0), (h * z).mean(axis=0)
    z[:, 0] += (2.0 - b[0]) / big_h[0]
    z[:, 1] += (0.2 * LAMBDA - b[1]) / big_h[1]
    smooth = Quadratic(z, h)
    return smooth, Composite(smooth, L1(LAMBDA))


def slope(counts):
    return float(np.polyfit(np.log(KAPPAS), np.log(np.asarray(counts, dtype=float)), 1)[0])


def matrix_form(problem, w, eta, b, rounds, iterations):
    """The relative errors ||mean_i x_i^t - x*|| / ||x*|| of DAPG from x0 = 0, computed
    independently of the library and the reference: the (n, d) matrix recursion with
    FastMix as the dense matrix polynomial P = p_K(W), p_0 = 1, p_1 = (1 + e) w - e,
    p_{k+1} = (1 + e) w p_k - e p_{k-1}, and the quadratic's gradients H * (X - Z)."""
    h, z = np.asarray(problem.smooth.data["hessians"]), np.asarray(problem.smooth.data["centers"])
    e = fastmix_eta(w)
    before, p = np.eye(len(w)), (1 + e) * w - e * np.eye(len(w))
    for _ in range(rounds - 1):
        before, p = p, (1 + e) * w @ p - e * before
    star = problem.x_star
    x = np.zeros_like(z)
    y, s = x.copy(), h * (x - z)
    errors = [1.0]
    for _ in range(iterations):
        u = y - eta * s
        new = p @ (np.sign(u) * np.maximum(np.abs(u) - eta * LAMBDA, 0.0))
        y_new = new + b * (new - x)
        s = p @ s + h * (y_new - y)  # grad F(y^{t+1}) - grad F(y^t)
        x, y = new, y_new
        errors.append(np.linalg.norm(x.mean(axis=0) - star) / np.linalg.norm(star))
    return np.array(errors)


RING = StaticSequence(nx.cycle_graph(8))


def test_matrix_form_is_the_engine(unchecked):
    """The matrix recursion used for the counts below is DAPG's, checked on the engine
    (with the paper's momentum and without)."""
    smooth, problem = claim_problem(100.0)
    w = RING.matrix(0, "metropolis").toarray()
    a = np.sqrt(smooth.strong_convexity / smooth.smoothness)
    for b in ((1 - a) / (1 + a), 0.0):
        method = DAPG(1.0 / smooth.smoothness, RING, 3, momentum=b)
        res = run(
            method, problem, Full(8), 60, x0=np.zeros(6), metrics=("distance",), progress=False
        )
        want = matrix_form(problem, w, 1.0 / smooth.smoothness, b, 3, 60)
        np.testing.assert_allclose(res.relative_error, want, rtol=1e-8, atol=1e-14)


def paper_momentum(big_l, mu):
    """beta = (1 - a) / (1 + a), a = sqrt(mu / L): the paper's, for eta = 1/L."""
    a = np.sqrt(mu / big_l)
    return (1 - a) / (1 + a)


def counts(momentum_of, lengths):
    """Iterations to relative error 1e-8 at each L/mu of KAPPAS, from the matrix form
    (eta = 1/L, K = 3, a ring of 8), run for ``lengths[i]`` iterations; momentum_of(L,
    mu) is beta."""
    w = RING.matrix(0, "metropolis").toarray()
    found = []
    for kappa, length in zip(KAPPAS, lengths, strict=True):
        smooth, problem = claim_problem(kappa)
        star = problem.x_star
        assert star[0] == pytest.approx(1.5, rel=1e-9) and star[1] == 0.0  # as designed
        big_l, mu = smooth.smoothness, smooth.strong_convexity
        errors = matrix_form(problem, w, 1.0 / big_l, momentum_of(big_l, mu), 3, length)
        found.append(iterations_to(errors))
    return found


def test_iterations_grow_like_the_square_root_of_the_condition_number(unchecked):
    """The paper's complexity: eta = 1/L, alpha = sqrt(mu/L) and K FastMix rounds give
    O(sqrt(L/mu) log(1/eps)) iterations. Over L/mu in {10, 100, 1000} (L1-regularized
    quadratics, a ring of 8, K = 3) the log-log slope of the iterations to relative error
    1e-8 is below 0.7 (measured 0.53: 69, 243, 793 iterations), while the same method
    without momentum (beta = 0: proximal gradient tracking with multi-consensus) has slope
    about 1 (measured 1.01: 249, 2568, 25780), and needs more iterations at every L/mu.
    Counted on the matrix form, which the test above checks against the engine (the
    engine's own counts: the slow test below)."""
    accelerated = counts(paper_momentum, (300, 900, 2700))
    plain = counts(lambda big_l, mu: 0.0, (1000, 10000, 40000))
    assert None not in accelerated and None not in plain, (accelerated, plain)
    rate, contrast = slope(accelerated), slope(plain)
    assert rate < 0.7, (accelerated, rate)
    assert 0.85 < contrast < 1.15, (plain, contrast)
    assert all(3 * a < p for a, p in zip(accelerated, plain, strict=True))


@pytest.mark.slow
def test_engine_iterations_grow_like_the_square_root_of_the_condition_number(unchecked):
    """The same claim on the engine's runs of DAPG (eta = 1/L, mu given): the counts are
    the matrix form's, and the slope is below 0.7."""
    engine = []
    for kappa, length in zip(KAPPAS, (150, 450, 1400), strict=True):
        smooth, problem = claim_problem(kappa)
        method = DAPG(1.0 / smooth.smoothness, RING, 3, mu=smooth.strong_convexity)
        res = run(
            method, problem, Full(8), length, x0=np.zeros(6), metrics=("distance",),
            progress=False,
        )  # fmt: skip
        engine.append(iterations_to(res.relative_error))
    assert engine == counts(paper_momentum, (150, 450, 1400))
    assert slope(engine) < 0.7, engine
