"""The federated methods of the zoo (FedAvgM, FedDyn, Scaffnew) on the one engine: each
equals its per-client reference written from its paper (1e-10, float64) on random
quadratics and least squares with random masks (rounds nobody joins and one-participant
rounds included), runs from a configuration, and shows its paper's headline claim.
Also: ``skip_empty_rounds`` of FOCUS, FedStale, FedVARP, MIFA and FedAvgM, and FedAU's two
timings, against their references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import FOCUS, MIFA, FedAvg, FedAvgM, FedDyn, FedStale, FedVARP, Scaffnew
from stochmix.config import ConfigError, parse
from stochmix.participation import Bernoulli, FedAUEstimator, Full, Trace, UniformSample
from stochmix.problems import LeastSquares, Quadratic
from tests import examples
from tests.reference.fedau import fedavg_fedau
from tests.reference.fedavgm import fedavgm
from tests.reference.feddyn import feddyn
from tests.reference.fedstale import fedstale, fedvarp
from tests.reference.focus import focus
from tests.reference.mifa import mifa
from tests.reference.scaffnew import scaffnew

ROUNDS = 12
KINDS = ["diagonal", "full", "least_squares"]


def make_problem(rng, n, d, kind):
    seed = int(rng.integers(2**31))
    if kind == "diagonal":
        return Quadratic.random(n, d, seed=seed)
    if kind == "full":
        return Quadratic.random(n, d, diagonal=False, seed=seed)
    return LeastSquares.random(n, d, rows_per_client=(2, 8), reg=0.1, seed=seed)


def make_masks(rng, rounds, n):
    masks = rng.random((rounds, n)) < rng.uniform(0.1, 0.9)
    empty, single, full = rng.choice(rounds, 3, replace=False)
    masks[empty] = False  # a round nobody joins
    masks[single] = False
    masks[single, rng.integers(n)] = True  # a round with one participant
    masks[full] = True
    return masks


def assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * (1 + np.abs(want).max()))


def setup(seed, kind, n):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    return rng, problem, make_masks(rng, ROUNDS, n), rng.normal(size=d), problem.smoothness


case = given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 8),
    local_steps=st.integers(1, 3),
)


# ------------------------------------------------------------------ engine = reference
@settings(max_examples=examples(20), deadline=None)
@case
def test_fedavgm_matches_reference(seed, kind, n, local_steps):
    rng, problem, masks, x0, smooth = setup(seed, kind, n)
    lr, beta = 0.4 / smooth, float(rng.uniform(0, 0.95))
    eta = float(rng.choice([1.0, 0.5, 1.3]))
    weights = str(rng.choice(["uniform", "unbiased"]))
    p = rng.uniform(0.2, 1.0, n)
    for skip in (True, False):
        method = FedAvgM(lr, local_steps, beta, eta, weights, p, skip_empty_rounds=skip)
        got = run(method, problem, Trace(masks), ROUNDS, x0=x0).server
        want = fedavgm(problem, masks, x0, lr, local_steps, beta, eta, weights, p, skip)
        assert_close(got, want)


@settings(max_examples=examples(20), deadline=None)
@case
def test_feddyn_matches_reference(seed, kind, n, local_steps):
    rng, problem, masks, x0, smooth = setup(seed, kind, n)
    alpha = float(rng.uniform(0.05, 2.0)) * smooth
    lr = 0.5 / (smooth + alpha)
    got = run(FedDyn(lr, local_steps, alpha), problem, Trace(masks), ROUNDS, x0=x0).server
    assert_close(got, feddyn(problem, masks, x0, lr, local_steps, alpha))


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(KINDS), n=st.integers(1, 8))
def test_scaffnew_matches_reference(seed, kind, n):
    rng, problem, _, x0, smooth = setup(seed, kind, n)
    lr, p = float(rng.uniform(0.2, 1.0)) / smooth, float(rng.choice([1.0, 0.5, 0.2]))
    method = Scaffnew(lr, p, seed=int(rng.integers(1000)))
    got = run(method, problem, Full(n), ROUNDS, x0=x0).server
    # the paper's iterations with the coins the rounds stand for: L_r - 1 tails, then heads
    coins = [
        k == method.local_steps(r) - 1 for r in range(ROUNDS) for k in range(method.local_steps(r))
    ]
    assert_close(got, scaffnew(problem, coins, x0, lr, p))


def test_scaffnew_draws_are_geometric_and_seeded():
    method = Scaffnew(0.1, p=0.25, seed=3)
    draws = np.array([method.local_steps(r) for r in range(4000)])
    assert draws.min() == 1
    assert draws.mean() == pytest.approx(4.0, rel=0.06)  # E L = 1/p
    assert np.mean(draws == 1) == pytest.approx(0.25, abs=0.03)  # P(L = 1) = p
    again = [Scaffnew(0.1, p=0.25, seed=3).local_steps(r) for r in range(50)]
    assert again == list(draws[:50])
    other = [Scaffnew(0.1, p=0.25, seed=4).local_steps(r) for r in range(50)]
    assert other != again
    assert {Scaffnew(0.1, p=1.0).local_steps(r) for r in range(20)} == {1}


def test_scaffnew_refuses_partial_participation():
    problem = Quadratic.random(4, 2, seed=0)
    with pytest.raises(ValueError, match=r"Full\(n\)"):
        run(Scaffnew(0.1), problem, Bernoulli(np.full(4, 0.5)), 5, seed=1)


def test_empty_round_changes_nothing_or_moves_the_momentum():
    problem = Quadratic.random(4, 2, seed=0)
    masks = np.zeros((4, 4), dtype=bool)
    masks[0, [1, 3]] = True
    masks[2, 0] = True
    skip = run(FedAvgM(0.1, 2, 0.9), problem, Trace(masks), 4, x0=np.ones(2)).server
    np.testing.assert_array_equal(skip[2], skip[1])
    carry = run(FedAvgM(0.1, 2, 0.9, skip_empty_rounds=False), problem, Trace(masks), 4).server
    assert not np.array_equal(carry[2], carry[1])  # v <- beta v, x_0 <- x_0 - eta v
    dyn = run(FedDyn(0.1, 2, 0.5), problem, Trace(masks), 4, x0=np.ones(2)).server
    np.testing.assert_array_equal(dyn[2], dyn[1])


def test_arguments_are_checked_by_name():
    for call, name in [
        (lambda: FedAvgM(0.1, beta=1.0), "beta"),
        (lambda: FedAvgM(0.1, beta=-0.1), "beta"),
        (lambda: FedAvgM(0.1, skip_empty_rounds=1), "skip_empty_rounds"),
        (lambda: FedDyn(0.1, alpha=0.0), "alpha"),
        (lambda: FedDyn(0.1, local_steps=0), "local_steps"),
        (lambda: Scaffnew(0.1, p=0.0), "p"),
        (lambda: Scaffnew(0.1, p=1.5), "p"),
        (lambda: Scaffnew(0.1, seed=-1), "seed"),
        (lambda: Scaffnew(-0.1), "lr"),
    ]:
        with pytest.raises((ValueError, TypeError), match=name):
            call()


# ----------------------------------------------------------------------------- configs
@pytest.mark.parametrize(
    ("kind", "options", "cls"),
    [
        ("fedavgm", {"beta": 0.8, "local_steps": 2}, FedAvgM),
        ("feddyn", {"alpha": 0.5, "local_steps": 2}, FedDyn),
        ("scaffnew", {"p": 0.3, "seed": 2}, Scaffnew),
    ],
)
def test_runs_from_a_config(kind, options, cls):
    raw = {
        "problem": {"kind": "quadratic", "n_clients": 5, "dim": 3},
        "methods": [{"kind": kind, "lr": 0.05, **options}],
    }
    if kind != "scaffnew":
        raw["participation"] = {"kind": "bernoulli", "low": 0.3, "high": 0.9}
    exp = parse(raw)
    method = exp.methods[0].build(0.05)
    assert isinstance(method, cls)
    assert all(getattr(method, k) == v for k, v in options.items())
    res = run(method, exp.problem, exp.participation, 6, progress=False)
    assert res.rounds == 6 and np.isfinite(res.server).all()
    resolved = exp.resolved()["methods"][0]
    assert resolved["kind"] == kind and "lr" in resolved


def test_scaffnew_config_refuses_partial_participation():
    raw = {
        "problem": {"kind": "quadratic", "n_clients": 5, "dim": 3},
        "participation": {"kind": "bernoulli", "p": 0.5},
        "methods": [{"kind": "scaffnew", "lr": 0.05}],
    }
    with pytest.raises(ConfigError, match="scaffnew runs every client"):
        parse(raw)


# ---------------------------------------------------------------------- paper claims
def test_fedavgm_server_momentum_speeds_up_fedavg(unchecked):
    """Hsu et al. (2019): server momentum improves FedAvg on non-identical data, and the
    effective server step is eta / (1 - beta). Heterogeneous quadratics (condition 1000),
    K = 5 small local steps: with the paper's eta = 1, beta = 0.9 the objective gap after
    100 rounds is far below FedAvg's, with full and with 15-of-20 participation; momentum
    (0.9, eta = 0.1) tracks FedAvg at eta = 1, and (0.9, 1) ends where FedAvg at eta = 10
    does."""
    n = 20
    problem = Quadratic.random(n, 10, condition=1000.0, heterogeneity=1.0, seed=2)
    lr = 0.02 / problem.smoothness

    def gap(part, beta, eta, seeds=(0,)):
        runs = [
            run(FedAvgM(lr, 5, beta, eta), problem, part, 300, seed=s, metrics=("objective",))
            for s in seeds
        ]
        return np.mean([r.objective_gap for r in runs], axis=0)

    plain, momentum = gap(Full(n), 0.0, 1.0), gap(Full(n), 0.9, 1.0)
    # measured: 14.4 against 2.8e-3 after 100 rounds
    assert momentum[100] < 1e-3 * plain[100]
    assert gap(Full(n), 0.9, 0.1)[100] == pytest.approx(plain[100], rel=0.05)  # 14.5 vs 14.4
    assert momentum[-1] == pytest.approx(gap(Full(n), 0.0, 10.0)[-1], rel=1e-4)
    sampled = UniformSample(n, 15)
    seeds = range(4)
    # measured: 14.0 against 2.9 after 100 rounds (mean over 4 seeds)
    assert gap(sampled, 0.9, 1.0, seeds)[100] < 0.35 * gap(sampled, 0.0, 1.0, seeds)[100]


def test_feddyn_exact_under_partial_participation_where_fedavg_stalls(unchecked):
    """Acar et al. (2021): with the dynamic regulariser the fixed point of every client
    is the global minimiser, under partial participation and heterogeneous data, even
    though each local problem is solved inexactly (K = 5 gradient steps here)."""
    n = 20
    problem = LeastSquares.random(n, 10, rows_per_client=20, heterogeneity=2.0, seed=4)
    smooth, part = problem.smoothness, UniformSample(n, 5)
    alpha = smooth
    dyn = run(FedDyn(0.5 / (smooth + alpha), 5, alpha), problem, part, 600, seed=1)
    avg = run(FedAvg(0.5 / smooth, 5), problem, part, 600, seed=1)
    # measured: 2.1e-15 at a per-round rate 0.867; FedAvg's error never goes below 0.14
    assert dyn.relative_error[-1] < 1e-12
    assert dyn.rate() < 0.95
    assert avg.relative_error[-200:].min() > 1e-2


def test_scaffnew_linear_exact_and_communication_acceleration(unchecked):
    """Mishchenko et al. (2022): Scaffnew converges linearly to the exact minimiser on a
    strongly convex heterogeneous problem, and with p = 1/sqrt(kappa) it needs about
    sqrt(kappa) times fewer communications than p = 1 (gradient descent) for the same
    accuracy; FedAvg with as many local steps stalls."""
    n, d = 10, 10
    rng = np.random.default_rng(0)
    hessians = np.logspace(0, 2, d) * rng.uniform(0.5, 1.5, (n, d))
    problem = Quadratic(2.0 * rng.standard_normal((n, d)), hessians)
    kappa = problem.smoothness / problem.strong_convexity  # 127.6
    lr, p = 1.0 / problem.smoothness, 1.0 / np.sqrt(kappa)
    skip = run(Scaffnew(lr, p), problem, Full(n), 600)
    every = run(Scaffnew(lr, 1.0), problem, Full(n), 3000)
    assert skip.relative_error[-1] < 1e-13 and skip.rate() < 0.95
    to_reach = [int(np.argmax(r.relative_error < 1e-10)) for r in (skip, every)]
    # measured: 258 communications against 2892 (11.2 times fewer; sqrt(kappa) = 11.3)
    assert 0 < to_reach[0] < to_reach[1] / 6
    local = int(round(1 / p))
    fedavg = run(FedAvg(lr, local), problem, Full(n), 600)
    assert fedavg.relative_error[-200:].min() > 1e-2  # measured 0.082


# ------------------------------------------------------------------- skip_empty_rounds
def states(method, problem, masks):
    """The whole stacked state after each round."""
    out = []
    run(method, problem, Trace(masks), len(masks), callback=lambda r, z, ctx: out.append(z.copy()))
    return out


SKIPPERS = {
    "FOCUS": lambda skip: FOCUS(0.05, 2, skip_empty_rounds=skip),
    "FedStale": lambda skip: FedStale(
        0.1, 2, 0.5, probabilities=np.full(4, 0.5), skip_empty_rounds=skip
    ),
    "FedVARP": lambda skip: FedVARP(0.1, 2, probabilities=np.full(4, 0.5), skip_empty_rounds=skip),
    "MIFA": lambda skip: MIFA(0.1, 2, skip_empty_rounds=skip),
    "FedAvgM": lambda skip: FedAvgM(0.1, 2, 0.9, skip_empty_rounds=skip),
}


@pytest.mark.parametrize("name", sorted(SKIPPERS))
def test_an_empty_round_is_skipped_or_moves_the_server(name):
    problem = Quadratic.random(4, 2, seed=0)
    masks = np.zeros((4, 4), dtype=bool)
    masks[0, [0, 2]] = True
    masks[1, [1, 3]] = True  # round 2 is empty
    masks[3, 1] = True
    skipped = states(SKIPPERS[name](True), problem, masks)
    np.testing.assert_array_equal(skipped[2], skipped[1])  # the whole state
    moved = states(SKIPPERS[name](False), problem, masks)
    np.testing.assert_array_equal(moved[1], skipped[1])
    assert not np.array_equal(moved[2][0], moved[1][0])  # the server row moves


def test_skip_defaults_follow_the_papers():
    # FOCUS's and FedStale's authors skip a round nobody joins; Gu et al.'s MIFA updates
    # every round; FedVARP is run in FedStale's unbiased form, with FedStale's default
    assert FOCUS(0.1).skip_empty_rounds and FedStale(0.1).skip_empty_rounds
    assert FedVARP(0.1).skip_empty_rounds and not MIFA(0.1).skip_empty_rounds
    assert FedAvgM(0.1).skip_empty_rounds
    with pytest.raises(TypeError, match="skip_empty_rounds"):
        FOCUS(0.1, skip_empty_rounds="no")


@settings(max_examples=examples(15), deadline=None)
@case
def test_skipping_methods_match_their_references(seed, kind, n, local_steps):
    rng, problem, masks, x0, smooth = setup(seed, kind, n)
    lr, part, p = 0.4 / smooth, Trace(masks), rng.uniform(0.2, 1.0, n)
    beta, eta = float(rng.uniform(0, 1)), float(rng.choice([1.0, 0.7]))
    for skip in (True, False):
        focus_lr = 0.3 / (n * smooth)
        got = run(FOCUS(focus_lr, local_steps, skip), problem, part, ROUNDS, x0=x0).server
        assert_close(got, focus(problem, masks, x0, focus_lr, local_steps, skip))
        stale = FedStale(lr, local_steps, beta, eta, p, skip_empty_rounds=skip)
        got = run(stale, problem, part, ROUNDS, x0=x0).server
        want = fedstale(problem, masks, x0, lr, local_steps, beta, eta, p, skip_empty_rounds=skip)
        assert_close(got, want)
        varp = FedVARP(lr, local_steps, eta, p, skip_empty_rounds=skip)
        got = run(varp, problem, part, ROUNDS, x0=x0).server
        assert_close(
            got, fedvarp(problem, masks, x0, lr, local_steps, eta, p, skip_empty_rounds=skip)
        )
        got = run(MIFA(lr, local_steps, eta, skip), problem, part, ROUNDS, x0=x0).server
        assert_close(got, mifa(problem, masks, x0, lr, local_steps, eta, skip))


# ------------------------------------------------------------------------ FedAU timing
@settings(max_examples=examples(15), deadline=None)
@case
def test_fedau_timings_match_their_references(seed, kind, n, local_steps):
    rng, problem, masks, x0, smooth = setup(seed, kind, n)
    lr, part = 0.4 / smooth, Trace(masks)
    cutoff = int(rng.choice([1, 2, 3, 5, 100_000]))
    beta = float(rng.uniform(0, 1))
    for timing in ("authors", "inclusive"):
        fedau = FedAvg(lr, local_steps, weights="fedau", cutoff=cutoff, timing=timing)
        got = run(fedau, problem, part, ROUNDS, x0=x0).server
        assert_close(got, fedavg_fedau(problem, masks, x0, lr, local_steps, cutoff, 1.0, timing))
        stale = FedStale(lr, local_steps, beta, probabilities="fedau", cutoff=cutoff, timing=timing)
        got = run(stale, problem, part, ROUNDS, x0=x0).server
        want = fedstale(problem, masks, x0, lr, local_steps, beta, 1.0, "fedau", cutoff, timing)
        assert_close(got, want)


def test_fedau_estimator_timings_by_hand():
    # cutoff 2. Client 0 takes part in rounds 0, 2 and 5: intervals 1, 2, then 2 cut off
    # in round 4 and 1 closed in round 5. Client 1 first takes part in round 5: intervals
    # 2 and 2 cut off in rounds 1 and 3, then 2 closed in round 5.
    rounds = {0: [0], 2: [0], 5: [0, 1]}
    want = {
        "authors": {0: [1.0], 2: [1.0], 5: [5 / 3, 2.0]},  # before the round; 1 if none
        "inclusive": {0: [1.0], 2: [1.5], 5: [1.5, 2.0]},  # with the closing interval
    }
    for timing, expected in want.items():
        est = FedAUEstimator(2, cutoff=2, timing=timing)
        for r, who in rounds.items():
            np.testing.assert_array_equal(est.update(r, np.array(who)), expected[r])
        np.testing.assert_array_equal(est.omega, [1.5, 2.0])  # the same intervals either way
    assert FedAUEstimator(3).cutoff == 100_000 and FedAUEstimator(3).timing == "authors"
    with pytest.raises(ValueError, match="timing"):
        FedAUEstimator(3, timing="before")
    with pytest.raises(ValueError, match="timing"):
        FedAvg(0.1, weights="fedau", timing="late")


def test_fedau_authors_timing_is_unbiased_over_time():
    """Under Bernoulli(p) participation both timings estimate 1/p; the authors' weight of
    a participation does not depend on the interval it closes."""
    rng = np.random.default_rng(0)
    p = np.array([0.05, 0.2, 0.5])
    est = FedAUEstimator(3, timing="authors")
    weights = [[], [], []]
    for r in range(20_000):
        who = np.flatnonzero(rng.random(3) < p)
        for i, w in zip(who, est.update(r, who), strict=True):
            weights[i].append(w)
    late = [np.mean(w[len(w) // 2 :]) for w in weights]
    np.testing.assert_allclose(late, 1 / p, rtol=0.08)
    np.testing.assert_allclose(est.omega, 1 / p, rtol=0.08)
