"""The exact operators and rates of stochmix.analysis on the newer linear methods (issue 15):
FedAvgM, FedDyn, Scaffnew, FedProx (gradient steps), the decentralized EXTRA, NIDS, Exact
Diffusion, D2 and K-GT, and the CTA/ATC/AB forms of DGD, gradient tracking and push-pull. Each
round's exact affine map, applied to the engine's state before the round, gives the
engine's state after it (to 1e-12), on random quadratics and random masks, empty and
one-participant rounds included. Push-DIGing divides by a weight block (as push-sum does)
and is refused with a clear error."""

import functools
import warnings

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import (
    D2,
    DGD,
    EXTRA,
    FOCUS,
    KGT,
    NIDS,
    ExactDiffusion,
    FedAvgM,
    FedDyn,
    FedProx,
    GradientTracking,
    PushDIGing,
    PushPull,
    Scaffnew,
)
from stochmix.analysis import (
    NoCommonFixedPointWarning,
    fixed_point_under_pattern,
    lyapunov_rate,
    periodic_rate,
    phase_operator,
    round_operator,
    run_context,
)
from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import LeastSquares, Quadratic

N, D, ROUNDS = 7, 3, 10


def make_problem(kind, seed):
    if kind == "diagonal":
        return Quadratic.random(N, D, seed=seed)
    if kind == "full":
        return Quadratic.random(N, D, diagonal=False, seed=seed)
    return LeastSquares.random(N, D, rows_per_client=(2, 6), reg=0.1, seed=seed)


def make_method(name, problem):
    lr = 0.3 / problem.smoothness
    return {
        "FedAvgM": lambda: FedAvgM(lr, 3, beta=0.7, server_lr=0.8),
        "FedAvgM-keep-empty": lambda: FedAvgM(lr, 2, beta=0.5, skip_empty_rounds=False),
        "FedDyn": lambda: FedDyn(lr, 3, alpha=0.2),
        "Scaffnew": lambda: Scaffnew(lr, p=0.3, seed=4),
        "FedProx": lambda: FedProx(lr, mu=0.5, local_steps=3),  # K gradient steps: linear
        "DGD-cta": lambda: DGD(lr, OnePeerExponential(N), rule="natural", form="cta"),
        "GT-atc": lambda: GradientTracking(lr, OnePeerExponential(N), rule="natural", form="atc"),
        "PushPull-ab": lambda: PushPull(lr, OnePeerExponential(N), form="ab"),
    }[name]()


#: methods that take every client (or node) in every round
EVERYONE = ("Scaffnew", "DGD-cta", "GT-atc", "PushPull-ab")


def random_masks(rng, full: bool) -> np.ndarray:
    if full:
        return np.ones((ROUNDS, N), dtype=bool)
    masks = rng.random((ROUNDS, N)) < 0.5
    masks[2] = False  # nobody
    masks[4] = np.eye(N, dtype=bool)[3]  # one participant
    masks[6] = True  # everyone
    return masks


NAMES = [
    "FedAvgM", "FedAvgM-keep-empty", "FedDyn", "Scaffnew", "FedProx",
    "DGD-cta", "GT-atc", "PushPull-ab",
]  # fmt: skip
KINDS = ["diagonal", "full", "least_squares"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_round_operator_is_one_engine_round(name, kind):
    rng = np.random.default_rng([NAMES.index(name), KINDS.index(kind)])
    problem = make_problem(kind, int(rng.integers(2**31)))
    method = make_method(name, problem)
    full = name in EVERYONE
    masks = random_masks(rng, full)
    x0 = rng.standard_normal(D)
    states = []
    sm.run(
        method,
        problem,
        Full(N) if full else Trace(masks),
        ROUNDS,
        x0=x0,
        metrics=(),
        callback=lambda r, z, ctx: states.append(np.array(z, copy=True)),
    )
    ctx = run_context(method, problem)
    for r in range(ROUNDS):
        before = ctx.layout.initial(x0) if r == 0 else states[r - 1]
        cycle = round_operator(method, problem, masks[r], r, ctx)
        after = cycle(before)
        scale = 1.0 + np.abs(states[r]).max()
        np.testing.assert_allclose(after, states[r], rtol=0, atol=1e-12 * scale, err_msg=str(r))


@pytest.mark.parametrize("name", ["FedAvgM", "FedDyn"])
def test_phase_operators_match_the_engine_phase_by_phase(name):
    problem = make_problem("full", 5)
    method = make_method(name, problem)
    ctx = run_context(method, problem)
    z = np.random.default_rng(1).standard_normal((ctx.layout.size, D))
    for phase in method.round_phases(0, np.array([0, 2, 5]), ctx):
        want = z.copy()
        new = phase.mix @ z
        if phase.inject is not None:
            new += phase.inject @ problem.gradients(
                phase.clients, method.points(z, ctx, phase.clients)
            )
        want[phase.rows] = new
        np.testing.assert_allclose(
            phase_operator(phase, ctx.layout, method, problem)(z), want, atol=1e-12
        )
        z = want


PATTERN = np.zeros((3, N), dtype=bool)
PATTERN[0, [0, 1, 2]] = True
PATTERN[1, [3, 4]] = True
PATTERN[2, [5, 6, 0]] = True


def test_periodic_fixed_points_and_rates_of_the_new_methods(unchecked):
    problem = make_problem("full", 8)
    lr = 0.3 / problem.smoothness
    # FedDyn's and FedAvgM's fixed points under a pattern are where their runs go, once the
    # exact rate says the start is forgotten (to 1e-14).
    for method in (FedDyn(lr, 2, alpha=0.5), FedAvgM(lr, 2, beta=0.5)):
        end = fixed_point_under_pattern(method, problem, PATTERN)
        rate = periodic_rate(method, problem, PATTERN)
        assert rate.per_round < 1
        rounds = 3 * int(np.ceil(np.log(1e-14) / np.log(rate.per_period)))
        res = sm.run(method, problem, Trace(PATTERN, repeat=True), rounds, metrics=())
        np.testing.assert_allclose(res.server[-1], end.model, atol=1e-12)
    # FedDyn with full participation is exact (its dynamic regulariser removes the drift of
    # K local steps): x_star is its fixed point, for K = 1 and 3.
    everyone = np.ones((1, N), dtype=bool)
    for steps in (1, 3):
        end = fixed_point_under_pattern(FedDyn(lr, steps, alpha=0.5), problem, everyone).model
        np.testing.assert_allclose(end, problem.x_star, atol=1e-13 * (1 + np.abs(end).max()))


def test_lyapunov_rate_of_the_new_methods():
    problem = make_problem("least_squares", 9)
    lr = 0.3 / problem.smoothness
    participation = Bernoulli.heterogeneous(N, 0.3, 0.9, seed=2)
    # FedAvgM under random participation: no common fixed point, as FedAvg.
    with pytest.warns(NoCommonFixedPointWarning):
        ly = lyapunov_rate(FedAvgM(lr, 2, beta=0.5), problem, participation, 600, burn_in=100)
    assert ly.rate < 1 and ly.describes == "differences"
    # Scaffnew (full participation) converges to x_star: a common fixed point.
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCommonFixedPointWarning)
        ly = lyapunov_rate(Scaffnew(lr, p=0.3), problem, Full(N), 600, burn_in=100)
        focus = lyapunov_rate(FOCUS(lr / N, 2), problem, participation, 600, burn_in=100)
    assert ly.rate < 1 and ly.common_fixed_point is True
    assert focus.common_fixed_point is True


DECENTRALIZED = {
    "EXTRA": EXTRA,
    "NIDS": NIDS,
    "ExactDiffusion": ExactDiffusion,
    "D2": D2,
    "KGT": functools.partial(KGT, local_steps=2),  # local steps between communications
}


@pytest.mark.parametrize("name", list(DECENTRALIZED))
def test_decentralized_zoo_operators_rates_and_fixed_points(name):
    problem = make_problem("full", 11)
    lr = 0.2 / problem.smoothness
    # time-varying graph: each round's operator is one engine round
    method = DECENTRALIZED[name](lr, OnePeerExponential(N), rule="natural")  # weights 1/2
    x0 = np.ones(D)
    states = []
    sm.run(
        method,
        problem,
        Full(N),
        8,
        x0=x0,
        metrics=(),
        callback=lambda r, z, ctx: states.append(np.array(z, copy=True)),
    )
    ctx = run_context(method, problem)
    everyone = np.ones(N, dtype=bool)
    for r in range(8):
        before = ctx.layout.initial(x0) if r == 0 else states[r - 1]
        after = round_operator(method, problem, everyone, r, ctx)(before)
        scale = 1.0 + np.abs(states[r]).max()
        np.testing.assert_allclose(after, states[r], rtol=0, atol=1e-12 * scale)
    # static ring: exact methods, so the fixed point is x_star and the rate below 1
    method = DECENTRALIZED[name](lr, StaticSequence(nx.cycle_graph(N)))
    pattern = everyone[None, :]
    end = fixed_point_under_pattern(method, problem, pattern).model
    np.testing.assert_allclose(end, problem.x_star, atol=1e-13 * (1 + np.abs(end).max()))
    assert periodic_rate(method, problem, pattern).per_round < 1


def test_push_diging_has_no_affine_operator():
    problem = make_problem("diagonal", 1)
    method = PushDIGing(0.01, OnePeerExponential(N))
    with pytest.raises(NotImplementedError, match="points"):
        round_operator(method, problem, np.ones(N, dtype=bool))
