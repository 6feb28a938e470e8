"""stochmix.analysis: exact affine operators, fixed points and rates, participation bias."""

import itertools
import warnings

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import stochmix as sm
from stochmix.algorithms import (
    FOCUS,
    SCAFFOLD,
    AmplifiedFedAvg,
    FedAvg,
    FedStale,
    GradientTracking,
    PushSum,
)
from stochmix.analysis import (
    AffineMap,
    NoCommonFixedPointWarning,
    SingularMapError,
    affine_gradients,
    all_pull_round_matrix,
    bernoulli_expected_weights,
    compare_with_fedstale_eq4,
    conserved_quantities,
    expected_all_pull_matrix,
    expected_weights,
    fixed_point_under_pattern,
    lyapunov_rate,
    pattern_operator,
    periodic_rate,
    perron_vector,
    phase_operator,
    round_operator,
    run_context,
    weighted_minimizer,
)
from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.participation import Bernoulli, Full, Trace, UniformSample
from stochmix.problems import LeastSquares, Quadratic

KINDS = ["diagonal", "full", "least_squares"]
N, D = 6, 3


def make_problem(kind, seed=0, n=N, d=D):
    if kind == "diagonal":
        return Quadratic.random(n, d, seed=seed)
    if kind == "full":
        return Quadratic.random(n, d, diagonal=False, seed=seed)
    return LeastSquares.random(n, d, rows_per_client=(2, 6), reg=0.1, seed=seed)


def make_method(name, problem):
    n, lr = problem.n_clients, 0.3 / problem.smoothness
    return {
        "FedAvg": lambda: FedAvg(lr, 3),
        "FOCUS": lambda: FOCUS(lr / n, 2),
        "FedStale": lambda: FedStale(lr, 2, beta=0.5, probabilities=np.linspace(0.3, 0.9, n)),
        "SCAFFOLD": lambda: SCAFFOLD(lr, 2),
        "AmplifiedFedAvg": lambda: AmplifiedFedAvg(lr, 2, amplification=2.0, period=3),
        "GradientTracking": lambda: GradientTracking(lr / 2, OnePeerExponential(n), rule="natural"),
    }[name]()


# The pattern of the periodic tests: every client joins at least once per period.
PATTERN = np.zeros((3, N), dtype=bool)
PATTERN[0, [0, 1, 2]] = True
PATTERN[1, [2, 3]] = True
PATTERN[2, [4, 5, 0]] = True


# ------------------------------------------------------------------ exact operators
METHODS = ["FedAvg", "FOCUS", "FedStale", "SCAFFOLD", "AmplifiedFedAvg", "GradientTracking"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", METHODS)
def test_round_operator_reproduces_run(kind, name):
    rng = np.random.default_rng([KINDS.index(kind), METHODS.index(name)])
    problem = make_problem(kind, seed=int(rng.integers(2**31)))
    method = make_method(name, problem)
    rounds = 8
    decentralized = name == "GradientTracking"
    masks = rng.random((rounds, N)) < 0.5
    masks[2] = False  # a round nobody joins
    masks[5] = True  # everyone
    participation = Full(N) if decentralized else Trace(masks)
    x0 = rng.standard_normal(D)
    states = []
    sm.run(
        method,
        problem,
        participation,
        rounds,
        x0=x0,
        metrics=(),
        callback=lambda r, z, ctx: states.append(z.copy()),
    )
    ctx = run_context(method, problem)
    z = ctx.layout.initial(x0)
    for r in range(rounds):
        who = np.ones(N, dtype=bool) if decentralized else masks[r]
        T, t = round_operator(method, problem, who, r, ctx)
        assert sp.issparse(T)
        z = (T @ z.reshape(-1) + t).reshape(z.shape)
        np.testing.assert_allclose(z, states[r], rtol=0, atol=1e-10 * (1 + np.abs(states[r]).max()))


def test_phase_operator_matches_the_engine_on_one_phase():
    problem = make_problem("full", seed=4)
    method = FOCUS(0.01, 2)
    ctx = run_context(method, problem)
    participants = np.array([1, 3, 4])
    z = np.random.default_rng(0).standard_normal((ctx.layout.size, D))
    for phase in method.round_phases(0, participants, ctx):
        T, t = phase_operator(phase, ctx.layout, method, problem)
        want = z.copy()
        new = phase.mix @ z
        if phase.inject is not None:
            pts = method.points(z, ctx, phase.clients)
            new += phase.inject @ problem.gradients(phase.clients, pts)
        want[phase.rows] = new
        np.testing.assert_allclose((T @ z.reshape(-1) + t).reshape(z.shape), want, atol=1e-12)


def test_push_sum_has_no_affine_operator():
    problem = make_problem("diagonal")
    method = PushSum(0.01, OnePeerExponential(N))
    with pytest.raises(NotImplementedError, match="points"):
        round_operator(method, problem, np.arange(N))


def test_least_squares_affine_terms():
    problem = make_problem("least_squares", seed=2)
    h, c = problem.hessians_and_linear_terms()
    x = np.random.default_rng(1).standard_normal((N, D))
    np.testing.assert_allclose(
        np.einsum("nij,nj->ni", h, x) - c, problem.gradients(np.arange(N), x), atol=1e-12
    )
    padded = LeastSquares.random(N, 8, rows_per_client=3, reg=0.2, seed=1)  # padded form
    gram = LeastSquares.random(N, 2, rows_per_client=9, reg=0.2, seed=1)  # gram form
    for p in (padded, gram):
        h, c = p.hessians_and_linear_terms()
        x = np.random.default_rng(2).standard_normal((N, p.dim))
        np.testing.assert_allclose(
            np.einsum("nij,nj->ni", h, x) - c, p.gradients(np.arange(N), x), atol=1e-12
        )
    with pytest.raises(TypeError, match="affine"):
        affine_gradients(object())


@pytest.mark.parametrize("diagonal", [True, False], ids=["diagonal", "full"])
def test_quadratic_affine_terms_match_its_gradients(diagonal):
    """Quadratic.hessians_and_linear_terms has LeastSquares' contract: full (N, d, d)
    Hessians and (N, d) linear terms with grad F_i(x) = H_i x - c_i, fresh float64 arrays."""
    problem = Quadratic.random(N, D, diagonal=diagonal, condition=20.0, seed=3)
    h, c = problem.hessians_and_linear_terms()
    assert h.shape == (N, D, D) and c.shape == (N, D)
    assert h.dtype == c.dtype == np.float64
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal((N, D))
        np.testing.assert_allclose(
            np.einsum("nij,nj->ni", h, x) - c,
            problem.gradients(np.arange(N), x),
            rtol=1e-12,
            atol=1e-12,
        )
    np.testing.assert_allclose(h.mean(axis=0) @ problem.x_star, c.mean(axis=0), atol=1e-12)
    affine = affine_gradients(problem)  # the analysis reads the same terms
    np.testing.assert_allclose(affine.linear, c, atol=1e-12)
    h[:], c[:] = 0.0, 0.0  # fresh arrays: the problem is untouched
    h, c = problem.hessians_and_linear_terms()
    assert np.all(np.diagonal(h, axis1=1, axis2=2) > 0)
    np.testing.assert_allclose(-c, problem.gradients(np.arange(N), np.zeros((N, D))), atol=1e-12)


def test_affine_map_algebra():
    rng = np.random.default_rng(0)
    a = AffineMap(0.5 * np.eye(4) + 0.1 * rng.standard_normal((4, 4)), rng.standard_normal(4))
    b = AffineMap(0.3 * np.eye(4), rng.standard_normal(4), (2, 2))
    v = rng.standard_normal(4)
    np.testing.assert_allclose(a.compose(b)(v), a(b(v)))
    np.testing.assert_allclose((a @ b)(v), a(b(v)))
    np.testing.assert_allclose(a.power(3)(v), a(a(a(v))))
    T, t = a
    fp = a.fixed_point()
    np.testing.assert_allclose(T @ fp + t, fp, atol=1e-12)
    assert a.spectral_radius() == pytest.approx(np.abs(np.linalg.eigvals(T.toarray())).max())
    assert b(v.reshape(2, 2)).shape == (2, 2)


# -------------------------------------------------------------- periodic fixed points
@pytest.mark.parametrize("kind", KINDS)
def test_focus_fixed_point_is_x_star_and_fedavg_is_not(kind):
    problem = make_problem(kind, seed=11)
    lr = 0.3 / problem.smoothness
    x_star = problem.x_star
    focus = FOCUS(lr / N, 3)
    state, model = fixed_point_under_pattern(focus, problem, PATTERN, x0=np.ones(D))
    np.testing.assert_allclose(model, x_star, rtol=0, atol=1e-10 * (1 + np.abs(x_star).max()))
    # The whole state: every model at x_star, trackers at 0, memories at grad F_i(x_star).
    lay = run_context(focus, problem).layout
    grads = problem.gradients(np.arange(N), np.tile(x_star, (N, 1)))
    np.testing.assert_allclose(lay.view(state, "x"), np.tile(x_star, (N + 1, 1)), atol=1e-10)
    np.testing.assert_allclose(lay.view(state, "y"), 0.0, atol=1e-10)
    np.testing.assert_allclose(lay.view(state, "g")[1:], grads, atol=1e-10)

    # FOCUS's period map conserves sum(y) - sum(g): I - T is singular without a start.
    cycle = pattern_operator(focus, problem, PATTERN, 3)
    with pytest.raises(SingularMapError, match="start="):
        cycle.fixed_point()
    assert cycle.unit_multiplicity() >= D

    fedavg = FedAvg(lr, 3)
    end = fixed_point_under_pattern(fedavg, problem, PATTERN).model
    assert np.linalg.norm(end - x_star) > 1e-3 * (1 + np.linalg.norm(x_star))
    # ... and it is where FedAvg goes.
    res = sm.run(fedavg, problem, Trace(PATTERN, repeat=True), 201, metrics=())  # 67 periods
    np.testing.assert_allclose(res.server[-1], end, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_fedavg_one_step_full_participation_is_gradient_descent(kind):
    # K = 1, everyone, q_i = 1/N: x_0+ = mean_i (x_0 - lr grad F_i(x_0)) = x_0 - lr grad f(x_0).
    # So the server's fixed point is x_star and client i rests at x_star - lr grad F_i(x_star).
    problem = make_problem(kind, seed=5)
    lr = 0.3 / problem.smoothness
    everyone = np.ones((1, N), dtype=bool)
    state, model = fixed_point_under_pattern(FedAvg(lr, 1), problem, everyone)
    x_star = problem.x_star
    np.testing.assert_allclose(model, x_star, atol=1e-10 * (1 + np.abs(x_star).max()))
    grads = problem.gradients(np.arange(N), np.tile(x_star, (N, 1)))
    np.testing.assert_allclose(state[1:], x_star - lr * grads, atol=1e-10)
    # K = 2 drifts even with everyone.
    drift = fixed_point_under_pattern(FedAvg(lr, 2), problem, everyone).model
    assert np.linalg.norm(drift - x_star) > 1e-4
    # K = 1 under a partial cyclic pattern: the fixed point is O(lr) away from the minimiser of
    # the period-averaged weights (participation bias), not from x_star.
    q = (PATTERN / PATTERN.sum(axis=1, keepdims=True)).mean(axis=0)
    biased = weighted_minimizer(problem, q)
    gaps = [
        np.linalg.norm(fixed_point_under_pattern(FedAvg(s, 1), problem, PATTERN).model - biased)
        for s in (lr / 4, lr / 8)
    ]
    assert 0.4 < gaps[1] / gaps[0] < 0.6  # first order in the step
    assert np.linalg.norm(biased - x_star) > 10 * gaps[1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d", [(6, 5), (20, 5)])
def test_focus_fixed_point_without_some_clients_is_their_exact_minimiser(kind, n, d):
    # Issue 15: clients 0 .. n/3 - 1 never take part. FOCUS then ends at the minimiser of
    # the sum over the clients that do, (sum_A H_i)^-1 sum_A c_i, to rounding; it was off by
    # up to 3e-10 (the composed map's rounding, amplified by cond(I - T) ~ 1e4 and by a
    # slice taken from its numerical null space), and the rate here is slow (0.9997 per
    # period at n = 6), so a run does not get there either.
    rng = np.random.default_rng(n * d)
    pattern = rng.random((4, n)) < 0.4
    pattern[:, : n // 3] = False
    pattern[0, n // 3] = True
    problem = make_problem(
        kind, seed={"diagonal": 1, "full": 2, "least_squares": 3}[kind], n=n, d=d
    )
    taking_part = pattern.any(axis=0).astype(float)
    h, c = affine_gradients(problem).weighted(taking_part)
    target = np.linalg.solve(h, c)
    for step in (0.3, 0.05):
        focus = FOCUS(step / (n * problem.smoothness), 2)
        model = fixed_point_under_pattern(focus, problem, pattern, x0=np.ones(d)).model
        assert np.linalg.norm(model - target) <= 2e-14 * np.linalg.norm(target)
        assert np.linalg.norm(model - problem.x_star) > 1e-3 * np.linalg.norm(target)


# --------------------------------------------------------------------- periodic rates
@pytest.mark.parametrize("kind", KINDS)
def test_periodic_rate_predicts_focus(kind, unchecked):
    problem = make_problem(kind, seed=21)
    focus = FOCUS(0.5 / (N * problem.smoothness), 3)
    predicted = periodic_rate(focus, problem, PATTERN)
    assert predicted.per_round == pytest.approx(predicted.per_period ** (1 / 3))
    # Without excluding the conserved tracking sum the radius is exactly 1.
    assert periodic_rate(focus, problem, PATTERN, exclude_unit=False).per_period == (
        pytest.approx(1.0, abs=1e-9)
    )
    res = sm.run(focus, problem, Trace(PATTERN, repeat=True), 320, x0=np.ones(D))
    assert res.relative_error[-1] < 1e-11
    assert abs(res.rate() - predicted.per_round) < 0.05 * predicted.per_round


@pytest.mark.parametrize("kind", KINDS)
def test_periodic_rate_predicts_gradient_tracking(kind, unchecked):
    problem = make_problem(kind, seed=22)
    gt = GradientTracking(0.3 / problem.smoothness, StaticSequence(nx.cycle_graph(N)))
    predicted = periodic_rate(gt, problem, np.ones((1, N), dtype=bool))
    res = sm.run(gt, problem, Full(N), 600, x0=np.ones(D))
    assert res.relative_error[-1] < 1e-11
    assert abs(res.rate() - predicted.per_round) < 0.05 * predicted.per_round


# ----------------------------------------------------------------- random participation
def test_conserved_quantities_of_focus():
    problem = make_problem("diagonal")
    focus = FOCUS(0.01, 2)
    basis = conserved_quantities(focus, problem, PATTERN)
    lay = run_context(focus, problem).layout
    # sum(y) - sum(g) (over the clients; the server's g row is never touched) is conserved
    v = np.zeros(lay.size)
    v[lay.slice("y")] = 1.0
    v[lay.rows("g", np.arange(1, N + 1))] = -1.0
    assert np.linalg.norm(v - basis @ (basis.T @ v)) < 1e-8 * np.linalg.norm(v)
    assert conserved_quantities(FedAvg(0.01, 2), problem, PATTERN).shape[1] == 0
    # FedStale keeps hsum = sum(h): hsum - sum(h) is conserved.
    stale = FedStale(0.01, 2, beta=0.5, probabilities=np.full(N, 0.5))
    basis = conserved_quantities(stale, problem, PATTERN)
    lay = run_context(stale, problem).layout
    v = np.zeros(lay.size)
    v[lay.slice("hsum")], v[lay.slice("h")] = 1.0, -1.0
    assert basis.shape[1] == 1 and abs(abs(basis[:, 0] @ v) - np.linalg.norm(v)) < 1e-8


def test_sparse_paths_agree_with_dense(monkeypatch):
    import stochmix.analysis.linear as linear

    problem = make_problem("least_squares", seed=3)
    focus, fedavg = FOCUS(0.3 / (N * problem.smoothness), 2), FedAvg(0.3 / problem.smoothness, 2)
    dense = [
        fixed_point_under_pattern(focus, problem, PATTERN, x0=np.ones(D)).state,
        fixed_point_under_pattern(fedavg, problem, PATTERN).state,
        periodic_rate(focus, problem, PATTERN).per_period,
    ]
    monkeypatch.setattr(linear, "DENSE_LIMIT", 10)  # LU / GMRES / ARPACK on the same maps
    sparse = [
        fixed_point_under_pattern(focus, problem, PATTERN, x0=np.ones(D)).state,
        fixed_point_under_pattern(fedavg, problem, PATTERN).state,
        periodic_rate(focus, problem, PATTERN).per_period,
    ]
    np.testing.assert_allclose(sparse[0], dense[0], atol=1e-9)
    np.testing.assert_allclose(sparse[1], dense[1], atol=1e-9)
    assert sparse[2] == pytest.approx(dense[2], rel=1e-8)


def test_lyapunov_rate_contains_the_rate_of_runs(unchecked):
    n, d = 8, 3
    problem = LeastSquares.random(n, d, rows_per_client=(3, 6), reg=0.1, seed=5)
    participation = Bernoulli.heterogeneous(n, 0.2, 0.9, seed=1)
    focus = FOCUS(0.5 / (n * problem.smoothness), 2)
    ly = lyapunov_rate(focus, problem, participation, rounds=4000, seed=7, burn_in=200)
    assert ly.low < ly.rate < ly.high < 1
    assert ly.conserved >= 1

    # Measured: Result.rate() (slope of log error from 0.1 down to ~1e-13) of independent runs.
    rates = []
    for seed in range(30):
        res = sm.run(
            focus,
            problem,
            participation,
            200,
            seed=100 + seed,
            x0=np.ones(d),
            metrics=("distance",),
        )
        assert res.relative_error[-1] < 1e-11
        rates.append(res.rate())
    measured, stderr = np.mean(rates), np.std(rates, ddof=1) / np.sqrt(len(rates))
    # The interval, widened by the runs' own standard error (two independent estimates of one
    # number), contains the measured rate; both are a few parts in a thousand wide.
    assert ly.low - 2 * stderr <= measured <= ly.high + 2 * stderr, (ly, measured, stderr)
    assert ly.high - ly.low < 0.01 and stderr < 0.003


def test_lyapunov_needs_the_conserved_quantities_projected():
    n, d = 6, 2
    problem = Quadratic.random(n, d, seed=3)
    participation = Bernoulli.heterogeneous(n, 0.3, 0.9, seed=1)
    focus = FOCUS(1.0 / (n * problem.smoothness), 1)
    fast = lyapunov_rate(focus, problem, participation, rounds=300, burn_in=100, batches=6)
    raw = lyapunov_rate(
        focus, problem, participation, rounds=300, burn_in=100, batches=6, conserved=None
    )
    assert fast.rate < 0.9
    assert raw.rate == pytest.approx(1.0, abs=1e-3)  # rounding excites the conserved sum
    state = lyapunov_rate(
        focus,
        problem,
        participation,
        rounds=300,
        burn_in=100,
        batches=6,
        start="random",
        measure="state",
    )
    assert state.rate == pytest.approx(fast.rate, rel=0.02)


def test_lyapunov_rate_warns_when_rounds_share_no_fixed_point():
    # Issue 15: FedAvg under random participation never converges to a point (each
    # participation set has its own fixed point); its rate is that of differences of runs.
    n, d = 20, 3
    problem = LeastSquares.random(n, d, rows_per_client=(3, 6), reg=0.1, seed=5)
    participation = Bernoulli.heterogeneous(n, 0.2, 0.9, seed=1)
    fedavg = FedAvg(0.3 / problem.smoothness, 2)
    with pytest.warns(NoCommonFixedPointWarning, match="differences"):
        ly = lyapunov_rate(fedavg, problem, participation, rounds=2000, seed=7, burn_in=200)
    assert ly.rate < 1 and ly.common_fixed_point is False and ly.describes == "differences"
    # ... and indeed a run keeps moving: its end point stays far from where it was 100
    # rounds earlier, while the rate would have it settled to 1e-5 by then.
    res = sm.run(fedavg, problem, participation, 2000, seed=7, metrics=())
    assert np.linalg.norm(res.server[-1] - res.server[-101]) > 1e-3 * np.linalg.norm(res.final)
    assert ly.rate**100 < 1e-5

    focus = FOCUS(0.5 / (n * problem.smoothness), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCommonFixedPointWarning)
        ly = lyapunov_rate(focus, problem, participation, rounds=2000, seed=7, burn_in=200)
    assert ly.common_fixed_point is True and ly.describes == "convergence"
    # FedAvg with one local step and everyone every round is gradient descent: x_star is
    # the fixed point of every round, and nothing is said.
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCommonFixedPointWarning)
        ly = lyapunov_rate(FedAvg(0.3 / problem.smoothness, 1), problem, Full(n), rounds=400)
    assert ly.common_fixed_point is True and ly.rate < 1


def test_lyapunov_rate_values_of_the_former_implementation():
    # The values the implementation before issue 15 (one full build of every round, twice,
    # and a sparse scan per phase: 8 s each) gave for these calls; today's takes 0.45 s.
    n, d = 20, 3
    problem = LeastSquares.random(n, d, rows_per_client=(3, 6), reg=0.1, seed=5)
    participation = Bernoulli.heterogeneous(n, 0.2, 0.9, seed=1)
    focus = FOCUS(0.5 / (n * problem.smoothness), 2)
    ly = lyapunov_rate(focus, problem, participation, rounds=2000, seed=7, burn_in=200)
    assert ly.rate == pytest.approx(0.8665389536329177, rel=1e-10) and ly.conserved == 2
    with pytest.warns(NoCommonFixedPointWarning):
        ly = lyapunov_rate(
            FedAvg(0.3 / problem.smoothness, 2), problem, participation, 2000, 7, 200
        )
    assert ly.rate == pytest.approx(0.8859323438105803, rel=1e-10) and ly.conserved == 0


def test_lyapunov_rate_rebuilds_rounds_too_large_to_keep(monkeypatch):
    # Rounds are kept between the scan and the iteration up to KEEP_ENTRIES numbers; past
    # it they are built again in the second pass, with the same result.
    import stochmix.analysis.linear.lyapunov as lyapunov_module

    problem = make_problem("least_squares", seed=4)
    participation = Bernoulli.heterogeneous(N, 0.3, 0.9, seed=2)
    focus = make_method("FOCUS", problem)
    kept = lyapunov_rate(focus, problem, participation, rounds=200, burn_in=20, batches=4)
    monkeypatch.setattr(lyapunov_module, "KEEP_ENTRIES", 10)
    rebuilt = lyapunov_rate(focus, problem, participation, rounds=200, burn_in=20, batches=4)
    assert rebuilt.rate == pytest.approx(kept.rate, rel=1e-13)
    assert rebuilt.conserved == kept.conserved


@pytest.mark.parametrize("name", ["FedAvg", "FOCUS", "FedStale", "SCAFFOLD", "AmplifiedFedAvg"])
def test_lyapunov_rounds_substituted_equal_rounds_built(name):
    # Rounds with the same template key and size are substituted, not built: each equals
    # the full build, entry by entry.
    from stochmix.analysis.linear._rounds import Rounds, _same

    problem = make_problem("full", seed=2)
    method = make_method(name, problem)
    participation = Bernoulli.heterogeneous(N, 0.3, 0.9, seed=4)
    rounds = Rounds(method, problem, participation, 5)
    built = Rounds(method, problem, participation, 5)
    built.method = _NoTemplates(method)
    for r in range(60):
        a, b = rounds.steps(r)[0], built.steps(r)[0]
        assert len(a) == len(b) and all(map(_same, a, b)), r
    if name in ("FedAvg", "FOCUS", "SCAFFOLD"):
        assert rounds.substituted > 5


class _NoTemplates:
    def __init__(self, method):
        self._method = method

    def __getattr__(self, name):
        return getattr(self._method, name)

    def template_key(self, r, participants):
        return None


# ------------------------------------------------------------------- participation bias
def test_bernoulli_expected_weights_by_enumeration():
    p = np.array([0.15, 0.4, 0.9, 1.0, 0.6, 0.05])
    want = np.zeros(p.size)
    for bits in itertools.product([0, 1], repeat=p.size):
        mask = np.array(bits, dtype=bool)
        prob = np.prod(np.where(mask, p, 1 - p))
        if mask.any():
            want += prob * mask / mask.sum()
    np.testing.assert_allclose(bernoulli_expected_weights(p), want, rtol=1e-13)
    est = expected_weights(Bernoulli(p))
    assert est.exact and est.empty == 0.0
    assert expected_weights(0.3, 5).empty == pytest.approx(0.7**5)
    np.testing.assert_allclose(expected_weights(UniformSample(7, 3)).weights, 1 / 7)
    np.testing.assert_allclose(expected_weights(Full(4)).weights, 0.25)


def test_perron_vector_of_the_all_pull_round_is_the_expected_weight():
    p = Bernoulli.heterogeneous(10, 0.1, 0.9, seed=4).probabilities
    rounds, seed = 600, 3
    w_s = all_pull_round_matrix(np.array([1, 0, 1, 0, 0, 0, 0, 1, 0, 0], dtype=bool)).toarray()
    assert np.allclose(w_s, w_s[0]) and np.allclose(w_s.sum(axis=1), 1)  # identical rows
    expected_matrix = expected_all_pull_matrix(p, rounds=rounds, seed=seed)
    pi = perron_vector(expected_matrix)
    np.testing.assert_allclose(pi @ expected_matrix, pi, atol=1e-14)
    monte_carlo = expected_weights(p, monte_carlo=True, rounds=rounds, seed=seed, batches=20)
    # The same masks: the Perron vector is the empirical mean of q_i, to rounding.
    np.testing.assert_allclose(pi[1:], monte_carlo.weights, atol=1e-13)
    assert pi[0] == pytest.approx(monte_carlo.empty, abs=1e-13)
    # ... and both estimate the closed form.
    exact = expected_weights(p).weights
    assert np.all(np.abs(monte_carlo.weights - exact) < 4.5 * monte_carlo.stderr + 1e-12)


def test_weighted_minimizer():
    problem = make_problem("least_squares", seed=8)
    np.testing.assert_allclose(weighted_minimizer(problem, np.ones(N)), problem.x_star, atol=1e-12)
    np.testing.assert_allclose(
        weighted_minimizer(problem, np.ones(N)), weighted_minimizer(problem, 5 * np.ones(N))
    )
    one = np.eye(N)[2]
    z = make_problem("full", seed=8)
    np.testing.assert_allclose(weighted_minimizer(z, one), z.centers[2], atol=1e-10)


@pytest.mark.parametrize("kind", ["diagonal", "least_squares"])
def test_fedavg_one_step_mean_is_the_weighted_minimizer_exactly(kind):
    # With K = 1 the masks are independent of the iterates, so E[Z] follows the expected round
    # map, whose server fixed point is argmin sum_i E[q_i] F_i for every step size.
    n = 4
    problem = make_problem(kind, seed=6, n=n)
    p = np.array([0.2, 0.5, 0.9, 0.35])
    lr = 0.5 / problem.smoothness
    for steps, exact in ((1, True), (3, False)):
        method = FedAvg(lr, steps)
        ctx = run_context(method, problem)
        mean_map = None
        for bits in itertools.product([False, True], repeat=n):
            mask = np.array(bits)
            prob = np.prod(np.where(mask, p, 1 - p))
            T, t = round_operator(method, problem, mask, 0, ctx)
            mean_map = (
                (prob * T, prob * t)
                if mean_map is None
                else (mean_map[0] + prob * T, mean_map[1] + prob * t)
            )
        server = AffineMap(*mean_map).fixed_point()[:D]
        target = weighted_minimizer(problem, expected_weights(p).weights)
        gap = np.linalg.norm(server - target)
        assert (gap < 1e-10) if exact else (gap > 1e-4)


def test_fedavg_one_step_end_point_is_near_the_weighted_minimizer(unchecked):
    n = 30
    problem = Quadratic.random(n, D, seed=3, heterogeneity=2.0)
    participation = Bernoulli.heterogeneous(n, 0.1, 0.9, seed=2)
    weights = expected_weights(participation)
    target = weighted_minimizer(problem, weights.weights)
    lr = 0.01 / problem.smoothness
    aff = affine_gradients(problem)
    hw, _ = aff.weighted(weights.normalized)
    mu = np.linalg.eigvalsh(hw)[0]
    # Stationary spread of x+ = x - lr sum_S q_i grad F_i(x) around target: the noise
    # xi = sum_S q_i grad F_i(target) has mean 0, and E||x - target||^2 ~ lr E||xi||^2 / (2 mu).
    masks = participation.sample(5000, seed=9)
    q = masks / np.maximum(masks.sum(axis=1), 1)[:, None]
    xi = q @ (aff.hessians * target - aff.linear)
    spread = np.sqrt(lr * (xi**2).sum(axis=1).mean() / (2 * mu))
    rounds = int(15 / (lr * mu))  # e^-15 of the start is left
    res = sm.run(FedAvg(lr, 1), problem, participation, rounds, seed=1, metrics=())
    assert np.linalg.norm(res.final - target) < 4 * spread
    assert np.linalg.norm(target - problem.x_star) > 5 * spread  # the bias is real


def test_compare_with_fedstale_eq4():
    same = compare_with_fedstale_eq4(np.full(20, 0.4))
    assert same.max_relative_deviation < 1e-12
    deviations = []
    for n in (20, 100, 1000):
        p = np.random.default_rng(0).uniform(0.1, 0.9, n)
        cmp = compare_with_fedstale_eq4(p)
        np.testing.assert_allclose(cmp.normalized.sum(), 1.0)
        deviations.append(cmp.max_relative_deviation)
        order = np.argsort(p)  # FedAvg overweights frequent clients beyond eq. (4)
        assert np.all(np.diff((cmp.normalized / cmp.eq4)[order]) > 0)
    assert 0.02 < deviations[0] < 0.1
    assert deviations[2] < deviations[1] < deviations[0]


def test_lyapunov_rate_draws_random_local_steps_from_its_seed():
    """A method's own draws (``RandomSteps``) derive from the call's seed, as a run's do:
    the same call gives the same rate (it drew fresh counts on every call: 0.87478, then
    0.86523); the analysis context carries the seed, as a run's context does."""
    from stochmix.algorithms import FedAvg, RandomSteps
    from stochmix.analysis.linear import lyapunov_rate
    from stochmix.analysis.linear.operators import run_context
    from stochmix.participation import UniformSample

    problem = LeastSquares.random(12, 3, rows_per_client=3, seed=2)

    def rate(seed):
        method = FedAvg(0.3 / problem.smoothness, RandomSteps.uniform(1, 4))
        found = lyapunov_rate(method, problem, UniformSample(12, 4), rounds=80, burn_in=10,
                              batches=4, seed=seed)  # fmt: skip
        return found.rate

    assert rate(3) == rate(3)
    method = FedAvg(0.1, RandomSteps.uniform(1, 4))
    assert run_context(method, problem, seed=7).seed == 7
