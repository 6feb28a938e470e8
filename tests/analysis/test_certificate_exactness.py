"""Certificates are sound by construction: exactness is part of every certificate (where the
run, started as ``stochmix.run`` starts it, ends must be the minimiser the certificate
names: weighted objectives, invariants broken by round 0, mixing matrices whose stationary
vector is not uniform), each case compared with an actual run; ``tune`` rebuilds the method
for every value; bad input is refused, naming it, before any solve."""

import importlib

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

import stochmix as sm  # noqa: E402
from stochmix.algorithms import (  # noqa: E402
    DLM,
    EXTRA,
    NIDS,
    SCAFFOLD,
    DecentralizedMethod,
    ExactDiffusion,
    FedAvg,
    GradientTracking,
)
from stochmix.analysis.certificates import (  # noqa: E402
    MAX_CLIENTS,
    certify,
    method_for_mixing,
    rebuild,
    tune,
    worst_quadratic,
)
from stochmix.engine import grad  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402

RING = sm.mixing.StaticSequence(nx.cycle_graph(6))


# --------------------------------------------------------------------------- weights
def test_scaffold_with_weights_it_does_not_use_is_inexact_and_its_run_says_where_it_ends(
    unchecked,
):
    """SCAFFOLD's server averages uniformly: with weights [0.7, 0.3] the certificate names
    the weighted minimiser, which the run never reaches (d = 1, f_1 = 0.3/2 (x - 1)^2,
    f_2 = 0.9/2 (x + 2)^2: weighted x* = -0.6875, the run ends at -1.25)."""
    found = certify(SCAFFOLD(0.3, 3), L=1, mu=0.1, n_clients=2, weights=[0.7, 0.3])
    assert found.status == "inexact" and found.rate == 1.0 and found.solves == 0
    assert "uniform average" in found.reason and "weights=[0.7, 0.3]" in found.reason
    problem = Quadratic(np.array([[1.0], [-2.0]]), np.array([[0.3], [0.9]]))
    end = sm.run(SCAFFOLD(0.3, 3), problem, sm.participation.Full(2), 400).server[-1, 0]
    weighted = (0.7 * 0.3 * 1.0 + 0.3 * 0.9 * -2.0) / (0.7 * 0.3 + 0.3 * 0.9)
    uniform = (0.3 * 1.0 + 0.9 * -2.0) / (0.3 + 0.9)
    assert weighted == pytest.approx(-0.6875) and uniform == pytest.approx(-1.25)
    assert end == pytest.approx(uniform, abs=1e-9)
    assert abs(end - weighted) > 0.5
    # the weights it does use are certified, given or not
    assert certify(SCAFFOLD(0.3, 3), L=1, mu=0.1, n_clients=2, weights=[2.0, 2.0]).certified
    assert certify(SCAFFOLD(0.3, 3), L=1, mu=0.1, n_clients=2).certified


# --------------------------------------------------------------------------- round 0
class MomentumTracking(DecentralizedMethod):
    """A user's gradient tracking of a heavy-ball momentum, written as the guide's
    MyGradientTracking: ``m <- beta m + grad F(x)``, ``y <- W y + m+ - m``, ``x <- W x -
    lr y``; the round conserves ``sum(y) - sum(m)``, 0 at the start (both blocks zero) and
    at the fixed point at x_star."""

    name, needs, rule = "GT + heavy ball", {"rule": "doubly"}, "metropolis"
    warm_memory = False

    def __init__(self, lr, graphs, beta=0.5, check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.beta = beta

    def blocks(self, n):
        return [sm.Block("x", n, "model"), sm.Block("y", n), sm.Block("m", n)]

    def round_phases(self, k, participants, ctx):
        eq = self.round_equations(participants, ctx)
        x, y, m = eq.blocks("x", "y", "m")
        w, first = self.mixing(k, self.rule), []
        if k == 0 and self.warm_memory:  # the memory at grad F(x^0) instead of 0
            m[:] = grad()
            first.append(eq.build("warm memory"))
        x[:] = w @ x - self.lr * y
        move = eq.build("mix and descend")
        m[:] = self.beta * m + grad()
        y[:] = w @ y + (self.beta - 1) * m + grad()
        return [*first, move, eq.build("momentum and track")]


class WarmMomentumTracking(MomentumTracking):
    """The same, with one extra equation in round 0: ``m^0 = grad F(x^0)``, which breaks
    the invariant (``sum(y) - sum(m)`` starts at ``-sum grad F(x^0)``)."""

    name = "GT + heavy ball, warm memory"
    warm_memory = True


def _heterogeneous(n, seed=0):
    rng = np.random.default_rng(seed)
    return Quadratic(rng.standard_normal((n, 1)), rng.uniform(0.1, 1.0, (n, 1)))


@pytest.mark.slow
@pytest.mark.parametrize("mixing", [None, 0.5], ids=["ring", "sigma 0.5"])
def test_an_invariant_broken_by_round_zero_is_inexact_and_the_run_ends_elsewhere(mixing, unchecked):
    options = {} if mixing is None else {"mixing": mixing}
    good = certify(MomentumTracking(0.1, RING), L=1.0, mu=0.1, **options)
    assert good.certified
    warm = certify(WarmMomentumTracking(0.1, RING), L=1.0, mu=0.1, **options)
    assert warm.status == "inexact" and warm.rate == 1.0 and warm.solves == 0
    assert "sum(y) - sum(m)" in warm.reason and "round 0" in warm.reason
    assert "x_star" in warm.reason
    problem = _heterogeneous(6)
    everyone = sm.participation.Full(6)
    ran = sm.run(WarmMomentumTracking(0.1, RING), problem, everyone, 800)
    assert ran.relative_error[-1] > 0.1
    assert sm.run(MomentumTracking(0.1, RING), problem, everyone, 800).relative_error[-1] < 1e-4


# --------------------------------------------------------------------------- stationary vector
def _row_stochastic(n=5, seed=0):
    rng = np.random.default_rng(seed)
    w = 0.4 * np.eye(n)
    for i in range(n):
        w[i, (i + 1) % n] = rng.uniform(0.1, 0.5)
        w[i, (i - 1) % n] = 0.6 - w[i, (i + 1) % n]
    return w


STATIONARY_CASES = [(GradientTracking, 0.05), (EXTRA, 0.2), (NIDS, 0.2), (ExactDiffusion, 0.2)]


def test_the_invariant_broken_by_round_zero_is_named():
    """The certificates alone (the runs are in the slow test below)."""
    assert certify(MomentumTracking(0.1, RING), L=1.0, mu=0.1).certified
    for options in ({}, {"mixing": 0.5}):
        warm = certify(WarmMomentumTracking(0.1, RING), L=1.0, mu=0.1, **options)
        assert warm.status == "inexact" and "sum(y) - sum(m)" in warm.reason


def test_a_matrix_that_is_not_column_stochastic_is_named():
    """The certificates alone (the runs are in the slow test below)."""
    w = _row_stochastic()
    for cls, lr in STATIONARY_CASES:
        method = cls(lr, sm.mixing.StaticSequence(nx.cycle_graph(5)), check_mixing=False)
        found = certify(method, L=1.0, mu=0.1, mixing=w)
        assert found.status == "inexact" and "stationary vector" in found.reason


@pytest.mark.slow
@pytest.mark.parametrize("cls,lr", STATIONARY_CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_matrix_that_is_not_column_stochastic_is_inexact_at_its_stationary_vector(
    cls, lr, unchecked
):
    """A row-stochastic W (pi W = pi, pi not uniform) with check_mixing=False: the run
    ends at the pi-weighted minimiser, pi computed here from W's left null space."""
    w = _row_stochastic()
    assert np.allclose(w.sum(axis=1), 1.0) and not np.allclose(w.sum(axis=0), 1.0)
    method = cls(lr, sm.mixing.StaticSequence(nx.cycle_graph(5)), check_mixing=False)
    found = certify(method, L=1.0, mu=0.1, mixing=w)
    assert found.status == "inexact" and found.solves == 0
    assert "stationary vector" in found.reason and "not column-stochastic" in found.reason
    _, _, vt = np.linalg.svd((w - np.eye(5)).T)
    pi = vt[-1] / vt[-1].sum()
    problem = _heterogeneous(5, seed=1)
    h, c = problem.hessians[:, 0], problem.centers[:, 0]
    weighted = (pi * h * c).sum() / (pi * h).sum()
    end = sm.run(method_for_mixing(method, w), problem, sm.participation.Full(5), 1000).server[-1]
    assert end[0] == pytest.approx(weighted, abs=1e-6)
    assert abs(end[0] - problem.x_star[0]) > 1e-2
    assert np.array2string(pi, precision=4, separator=", ") in found.reason


# --------------------------------------------------------------------------- tune rebuilds
def test_rebuild_derives_again_what_the_constructor_derives():
    nids = rebuild(NIDS(0.1, RING, c=2), lr=0.4)
    assert nids.lr == 0.4 and nids.theta == pytest.approx(0.8)  # theta = c lr
    dlm = rebuild(DLM(0.1, RING), lr=0.25)
    assert dlm.rho == pytest.approx(4.0)  # rho = 1 / lr
    with pytest.raises(ValueError, match="cutoff|differs"):
        rebuild(FedAvg(0.1, 1, weights="fedau", cutoff=5), lr=0.2)  # cutoff not stored
    with pytest.raises(ValueError, match="'nope'"):
        rebuild(FedAvg(0.1, 1), nope=1.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "make,options",
    [
        (lambda lr: NIDS(lr, RING, c=2), {"mixing": 0.5}),
        (lambda lr: EXTRA(lr, RING), {"mixing": 0.4}),
        (lambda lr: GradientTracking(lr, RING), {"mixing": 0.5}),
    ],
    ids=["NIDS c=2", "EXTRA", "GT"],
)
def test_the_tuned_rate_is_that_of_a_method_built_at_the_tuned_step(make, options, unchecked):
    tuned = tune(make(0.1), L=1.0, mu=0.1, tol=1e-2, **options)
    fresh = certify(make(tuned.value), L=1.0, mu=0.1, **options)
    assert tuned.certificate.certified and fresh.certified
    assert tuned.rate == fresh.rate


@pytest.mark.slow
def test_the_tuned_dlm_is_the_dlm_built_at_its_step():
    """DLM derives rho = 1 / lr at construction: the tuned step's rate is a fresh DLM's."""
    tuned = tune(DLM(0.1, RING), L=1.0, mu=0.1, grid=6, tol=1e-2)
    fresh = certify(DLM(tuned.value, RING), L=1.0, mu=0.1)
    assert tuned.rate == fresh.rate and fresh.certified


# --------------------------------------------------------------------------- bad input
@pytest.fixture
def no_solve(monkeypatch):
    """Any SDP set up fails the test: the errors come before."""
    module = importlib.import_module("stochmix.analysis.certificates.certify")

    def refuse(*args, **kwargs):
        raise AssertionError("an SDP was set up")

    monkeypatch.setattr(module, "make_feasibility", refuse)


@pytest.mark.parametrize(
    "method,options,match",
    [
        (FedAvg(0.5, 1), {"n_clients": 1, "tol": 1.0}, "tol must be in .0, 1.*tol=1.0"),
        (FedAvg(0.5, 1), {"n_clients": 1, "tol": 3}, "tol"),
        (FedAvg(0.5, 1), {"n_clients": 1, "solver": "NOPE"}, "solver.*'NOPE'"),
        (FedAvg(0.5, 1), {"n_clients": 1, "solver": "OSQP"}, "semidefinite.*'OSQP'"),
        (SCAFFOLD(0.1, np.array([1, 2, 3])), {"n_clients": 2}, "local_steps.*2.*3"),
        (SCAFFOLD(0.1, np.array([1, 2, 3])), {"n_clients": 4}, "local_steps.*4.*3"),
        (FedAvg(0.1, 1), {"n_clients": 100_000}, f"n_clients.*at most {MAX_CLIENTS}.*100000"),
        (FedAvg(0.1, 1), {"n_clients": 2, "weights": [1.0, np.nan]}, "weights"),
    ],
)
def test_bad_certify_arguments_are_refused_before_any_solve(no_solve, method, options, match):
    with pytest.raises(ValueError, match=match):
        certify(method, L=1.0, mu=0.1, **options)


def test_bad_tune_arguments_are_refused_before_any_solve(no_solve):
    with pytest.raises(ValueError, match="bounds.*3"):
        tune(FedAvg(0.1, 1), L=1.0, mu=0.1, n_clients=1, bounds=3)
    with pytest.raises(ValueError, match="bounds"):
        tune(FedAvg(0.1, 1), L=1.0, mu=0.1, n_clients=1, bounds=(0.5, 0.1))
    with pytest.raises(ValueError, match="parameter.*local_steps"):
        tune(FedAvg(0.1, 2), L=1.0, mu=0.1, n_clients=1, parameter="local_steps")
    with pytest.raises(ValueError, match="tol"):
        tune(FedAvg(0.1, 1), L=1.0, mu=0.1, n_clients=1, tol=1.0)


def test_bad_worst_quadratic_arguments_are_refused():
    with pytest.raises(ValueError, match="mixing.*1.5"):
        worst_quadratic(EXTRA(0.5, RING), L=1.0, mu=0.1, mixing=1.5)
    with pytest.raises(ValueError, match="mixing is for decentralized"):
        worst_quadratic(FedAvg(0.1, 1), L=1.0, mu=0.1, mixing=0.5)
    with pytest.raises(ValueError, match="mu"):
        worst_quadratic(FedAvg(0.1, 1), L=1.0, mu=2.0)


def test_apapc_has_its_fixed_point_to_rounding():
    """APAPC's dual average is conserved (its row 1 on the diagonal, zero elsewhere, up to
    composition residues of 1e-14): once the balancing no longer scales those residues up,
    its fixed point's equations hold to rounding, under the strict structural tolerance,
    and it is certified (it was "inexact" with 1e-9 and residues scaled to 1.5e-8, then
    "not certified" with the direction left in the state)."""
    from stochmix.algorithms import APAPC
    from stochmix.analysis.certificates.exactness import STRUCTURAL_RTOL

    method = APAPC(None, RING, L=1.0, mu=0.1)
    found = certify(method, L=1.0, mu=0.1)
    assert found.certified, found
    assert STRUCTURAL_RTOL <= 1e-6


@pytest.mark.parametrize("L", [1e-9, 1e-6, 1e3, 1e9, 1e15])
def test_the_units_of_l_do_not_change_the_answer(L):
    """EXTRA with step 0.5 / L on a ring: the same certificate at every scale of L (the
    class is [mu, L] in units of L). Where the run ends is a least-squares solve over
    rows in units apart by L (a step of 5e8 against gradients of 1e-9); with one pass of
    row and column scaling it lost ranks and said "inexact" for L <= 1e-9 (residual 2.5e-7
    at 1e-9, 0.33 at 1e-12); equilibrated and refined, it is exact to 1e-16 there."""
    ring = sm.mixing.StaticSequence(nx.cycle_graph(6))
    found = certify(EXTRA(0.5 / L, ring), L=L, mu=L / 10)
    assert found.certified, found.reason
    assert found.rate == pytest.approx(0.95, abs=1e-6)
