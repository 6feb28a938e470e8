"""The whole-network certificate reduced by a cyclic symmetry of the round (one LMI block per
Fourier component) and started at the exact rate of an instance: the same rates as the
dense formulation (the SDP of one full LMI, bisected from [0, 1]) to 1e-6 on a directed
ring, a one-peer exponential sequence, a ring under full participation and a periodic
participation pattern; a round without symmetry (a ring then a star) takes the floor
alone; the certificate is checked on the full LMI, and a symmetry the round does not have
is refused."""

import importlib

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

from stochmix.algorithms import EXTRA, SCAFFOLD, GradientTracking  # noqa: E402
from stochmix.analysis import periodic_rate  # noqa: E402
from stochmix.analysis.certificates import certify, round_system  # noqa: E402
from stochmix.analysis.certificates.lmi import Solution, bisect_rate  # noqa: E402
from stochmix.analysis.certificates.symmetry import (  # noqa: E402
    SymmetricFeasibility,
    Symmetry,
    instance_rate,
    isotypic_bases,
    network_symmetry,
)
from stochmix.mixing import (  # noqa: E402
    DirectedRingSequence,
    OnePeerExponential,
    PeriodicSequence,
    StaticSequence,
)
from stochmix.problems import Quadratic  # noqa: E402

CERTIFY = importlib.import_module("stochmix.analysis.certificates.certify")
SAME = 1e-6  # the issue's: the dense formulation's rate to 1e-6


def _alternating(n):
    return np.array([[i % 2 == 0 for i in range(n)], [i % 2 == 1 for i in range(n)]])


def _dense(monkeypatch, method, **options):
    """The certificate as before the reduction: one full LMI, bisected from [0, 1]."""
    with monkeypatch.context() as patch:
        patch.setattr(CERTIFY, "network_symmetry", lambda *args: None)
        patch.setattr(CERTIFY, "instance_rate", lambda *args: 0.0)
        return certify(method, L=1.0, mu=0.1, **options)


def _symmetry_found(monkeypatch, method, **options):
    found = []
    original = CERTIFY.network_symmetry

    def spy(*args):
        found.append(original(*args))
        return found[-1]

    with monkeypatch.context() as patch:
        patch.setattr(CERTIFY, "network_symmetry", spy)
        return certify(method, L=1.0, mu=0.1, **options), found


@pytest.mark.parametrize(
    "label,method,options,order",
    [
        (
            "GT directed ring, one round",
            GradientTracking(0.05, DirectedRingSequence(5), rule="natural"),
            {"across_rounds": False},
            5,
        ),
        (
            "GT directed ring, across rounds",
            GradientTracking(0.05, DirectedRingSequence(4), rule="natural"),
            {},
            4,
        ),
        (
            "EXTRA one-peer exponential",
            EXTRA(0.5, OnePeerExponential(4), rule="natural"),
            {"across_rounds": False},
            4,
        ),
        (
            "EXTRA ring, full participation",
            EXTRA(0.5, StaticSequence(nx.cycle_graph(5))),
            {"participation": np.ones((1, 5), bool), "across_rounds": False},
            5,
        ),
        ("SCAFFOLD, alternating halves", SCAFFOLD(0.3, 1), {"participation": _alternating(6)}, 3),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_the_reduced_certificate_is_the_dense_one(monkeypatch, label, method, options, order):
    fast, found = _symmetry_found(monkeypatch, method, **options)
    assert found and found[0] is not None and found[0].order == order, label
    dense = _dense(monkeypatch, method, **options)
    assert fast.certified and dense.certified, (fast, dense)
    assert fast.rate == pytest.approx(dense.rate, abs=SAME), label
    assert fast.solves < dense.solves  # the floor: one or two solves when it is tight
    # the proof is the full one: P over the whole reduced state, a multiplier per call
    assert fast.lyapunov[0].shape[0] >= fast.state_size
    assert fast.margin <= 0.0


def test_a_round_without_symmetry_takes_the_floor_alone(monkeypatch):
    """A ring then a star (no node shift maps the period to itself): the dense SDP, started
    at the slowest instance's rate, certifies what the bisection from [0, 1] does."""
    method = EXTRA(0.4, PeriodicSequence([nx.cycle_graph(4), nx.star_graph(3)]))
    fast, found = _symmetry_found(monkeypatch, method, across_rounds=False)
    assert found == [None]
    dense = _dense(monkeypatch, method, across_rounds=False)
    assert fast.certified and fast.rate == pytest.approx(dense.rate, abs=SAME)
    assert fast.solves <= 4 < dense.solves


def test_the_symmetry_is_the_largest_shift_group_of_the_round():
    """A directed ring: every shift (order n); an alternating pattern: shifts by 2 (order
    n / 2); a ring then a star: none."""

    def found(method, masks):
        n = masks.shape[1]
        system = round_system(method, masks, masks.shape[0]).normalized(1.0)
        return network_symmetry(method, system, n)

    gt = GradientTracking(0.1, DirectedRingSequence(6), rule="natural")
    assert found(gt, np.ones((1, 6), bool)).order == 6
    assert found(SCAFFOLD(0.3, 1), _alternating(6)).order == 3
    odd = np.array([[True, True, False, True, False, False]])  # no shift maps it to itself
    assert found(SCAFFOLD(0.3, 1), np.vstack([odd, ~odd])) is None
    periodic = EXTRA(0.4, PeriodicSequence([nx.cycle_graph(6), nx.star_graph(5)]))
    assert found(periodic, np.ones((2, 6), bool)) is None


def test_isotypic_bases_split_the_space_into_invariant_orthogonal_parts():
    rng = np.random.default_rng(0)
    n = 7
    shift = np.roll(np.eye(n), 1, axis=0)
    g = np.kron(np.eye(2), shift)
    bases = isotypic_bases(g, n)
    assert [b.shape[1] for b in bases] == [2, 4, 4, 4]
    stacked = np.hstack(bases)
    assert np.allclose(stacked.T @ stacked, np.eye(2 * n), atol=1e-12)
    for b in bases:  # each part is invariant: g maps it into itself
        assert np.allclose(b @ (b.T @ (g @ b)), g @ b, atol=1e-12)
    # a matrix commuting with g has no entries between two parts
    x = rng.normal(size=(2 * n, 2 * n))
    invariant = sum(
        np.linalg.matrix_power(g, j) @ x @ np.linalg.matrix_power(g, j).T for j in range(n)
    )
    for i, a in enumerate(bases):
        for j, b in enumerate(bases):
            if i != j:
                assert np.abs(a.T @ invariant @ b).max() < 1e-10


def test_a_symmetry_the_round_does_not_have_is_refused():
    method = EXTRA(0.4, PeriodicSequence([nx.cycle_graph(4), nx.star_graph(3)]))
    system = round_system(method, np.ones((2, 4), bool), 2).normalized(1.0).reduced()
    r = system.A.shape[0]
    wrong = Symmetry(np.eye(r)[::-1].copy(), np.roll(np.arange(system.calls), 1), 2)
    assert not wrong.holds_for(system)
    with pytest.raises(ValueError, match="symmetry"):
        SymmetricFeasibility([system], 1.0, 0.1, [], symmetry=wrong)


def test_the_floor_is_an_instance_rate():
    """instance_rate is the exact rate of a quadratic of the class: every curvature mu on a
    one-peer exponential sequence of GT is 1 - lr mu, as periodic_rate measures."""
    n, lr, mu = 4, 0.1, 0.1
    method = GradientTracking(lr, OnePeerExponential(n), rule="natural")
    masks = np.ones((method.graphs.period, n), bool)
    system = round_system(method, masks, masks.shape[0]).normalized(1.0).reduced()
    floor = instance_rate(system, mu) ** (1.0 / masks.shape[0])
    problem = Quadratic(np.arange(n, dtype=float)[:, None], np.full((n, 1), mu))
    measured = periodic_rate(method, problem, masks).per_round
    assert floor >= measured - 1e-9
    assert floor == pytest.approx(1 - lr * mu, abs=1e-9)


class _Threshold:
    """A feasibility whose certified rates are [threshold, 1]."""

    def __init__(self, threshold):
        self.threshold, self.solves, self.seconds, self.asked = threshold, 0, 0.0, []

    def solve(self, rho):
        self.solves += 1
        self.asked.append(rho)
        if rho < self.threshold:
            return None
        return Solution(rho, [], np.zeros(0), [], -1.0, "optimal")


@pytest.mark.parametrize("lower", [0.0, 0.9, 0.95 - 1e-9, 0.95, 0.5, 0.97])
def test_the_floor_steers_the_bisection_and_never_decides(lower):
    """From any floor (none, loose, tight, even a wrong one above the threshold) the rate is
    one a solve certified, within the tolerance of the threshold when the floor is not
    above it; a tight floor takes one or two solves."""
    tol, threshold = 1e-7, 0.95
    sdp = _Threshold(threshold)
    rate, found = bisect_rate(sdp, tol, lower)
    assert found is not None and found.rate == rate >= threshold
    if lower <= threshold:
        assert rate - threshold <= tol * (1 - threshold)
    if threshold - 1e-8 <= lower <= threshold:
        assert sdp.solves <= 2
    if lower > threshold:
        assert sdp.asked[0] >= lower  # a floor above the threshold only costs looseness


@pytest.mark.slow
def test_a_one_peer_exponential_network_of_20_nodes_is_certified():
    """n = 20 (a period of 5 matrices, 100 gradient calls a period): certified, never below
    the exact rate of a quadratic of the class (every curvature mu, and a heterogeneous
    one), and tight at 1 - lr mu, the average's rate with every curvature mu."""
    n, lr, mu = 20, 0.1, 0.1
    method = GradientTracking(lr, OnePeerExponential(n), rule="natural")
    found = certify(method, L=1.0, mu=mu)
    assert found.certified, found
    masks = np.ones((method.graphs.period, n), bool)
    rng = np.random.default_rng(1)
    for curvatures in (np.full(n, mu), rng.uniform(mu, 1.0, n)):
        problem = Quadratic(rng.normal(size=(n, 1)), curvatures[:, None])
        measured = periodic_rate(method, problem, masks).per_round
        assert measured <= found.rate + SAME
    assert found.rate == pytest.approx(1 - lr * mu, abs=SAME)


@pytest.mark.slow
def test_scaffold_with_20_clients_under_a_pattern_is_never_below_an_instance():
    """SCAFFOLD under alternating halves of 20 clients (shifts by 2: ten Fourier blocks):
    certified, and no quadratic of the class (every curvature mu, every curvature L,
    heterogeneous ones) runs slower than the certificate."""
    n = 20
    method = SCAFFOLD(0.3, 1)
    masks = _alternating(n)
    found = certify(method, L=1.0, mu=0.1, participation=masks)
    assert found.certified, found
    rng = np.random.default_rng(2)
    slowest = 0.0
    for curvatures in (np.full(n, 0.1), np.ones(n), *rng.uniform(0.1, 1.0, (4, n))):
        problem = Quadratic(rng.normal(size=(n, 1)), curvatures[:, None])
        slowest = max(slowest, periodic_rate(method, problem, masks).per_round)
    assert slowest <= found.rate + SAME
    assert slowest > 0.9  # a slow instance, not a trivial one
