"""Soundness of certificates against runs that do not go through the library: the per-node
recursions of the papers (tests/reference), on objectives and mixing matrices written with
NumPy alone (tests/reference/function_class.py): rotated non-diagonal quadratics, piecewise
quadratics with kinks through x_star, log-sum-exp and Huber plus mu/2 ||x||^2, and static
non-symmetric or time-varying matrices of the sigma-class. The rate is measured here too
(:func:`measured_rate`, not Result.rate). No measured rate may exceed its certificate by
more than 1e-6, and the adversarial instances must come near it (the search is not
trivial). benchmarks/bench_certify.py runs the same search at a larger size."""

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

from stochmix.algorithms import (  # noqa: E402
    APAPC,
    EXTRA,
    NIDS,
    OPAPC,
    SCAFFOLD,
    ExactDiffusion,
    FedAvg,
    GradientTracking,
)
from stochmix.analysis.certificates import certify  # noqa: E402
from stochmix.mixing import StaticSequence  # noqa: E402
from tests.reference import decentralized, decentralized_zoo, fedavg, opapc, scaffold  # noqa: E402
from tests.reference import function_class as fc  # noqa: E402

L, MU, SIGMA = 1.0, 0.2, 0.5
SOUND = 1e-6
FAMILIES = {
    "flat quadratic": lambda n, rng: fc.rotated_quadratic(n, 2, L, MU, rng, levels=(MU,)),
    "rotated quadratic": lambda n, rng: fc.rotated_quadratic(n, 2, L, MU, rng),
    "kinked": lambda n, rng: fc.kinked(n, 2, L, MU, rng),
    "log-sum-exp": lambda n, rng: fc.log_sum_exp(n, 2, L, MU, rng),
    "huber": lambda n, rng: fc.huber(n, 2, L, MU, rng),
}


def measured_rate(errors, start=1e-2, stop=1e-10):
    """Least squares slope of log(error) over the last half of the rounds from the first
    error below ``start`` times the first one to the first below ``stop`` times it (the
    whole span when its half holds fewer than 10): exact on a geometric sequence, and clear
    of both the transient and rounding."""
    errors = np.asarray(errors, dtype=float) / errors[0]
    begin = int(np.argmax(errors <= start))
    end = int(np.argmax(errors <= stop)) if np.any(errors <= stop) else errors.size
    if end - (begin + end) // 2 >= 10:  # else (a fast run) the whole span
        begin = (begin + end) // 2
    assert end - begin >= 3, "too few rounds to measure"
    k = np.arange(begin, end)
    return float(np.exp(np.polyfit(k, np.log(errors[begin:end]), 1)[0]))


def _rounds(rate):
    return int(np.log(1e-12) / np.log(rate)) + 40


def _node_runner(monkeypatch):
    """The references report the nodes' mean; here they report every node's model (the
    certificate bounds the whole state, and over the sigma-class the slowest directions are
    the nodes' disagreement, which the mean does not see)."""
    stacked = lambda values: np.concatenate(values)  # noqa: E731
    monkeypatch.setattr(decentralized, "_mean", stacked)
    monkeypatch.setattr(decentralized_zoo, "_mean", stacked)


def _matrices(n, rng, kind):
    q = fc.disagreement_basis(n, rng)
    if kind == "static rotation":  # complex disagreement eigenvalues sigma e^{+-0.96 i}
        return fc.Sequence([fc.sigma_matrix(n, SIGMA, fc.plane_rotation(n - 1, 0.96), q)])
    if kind == "time-varying":  # a different orthogonal S every iteration, period 7
        return fc.Sequence(
            [fc.sigma_matrix(n, SIGMA, fc.rotation(n - 1, rng), q) for _ in range(7)]
        )
    signs = [np.eye(n - 1), -np.eye(n - 1)]  # alternating symmetric +-sigma
    return fc.Sequence([fc.sigma_matrix(n, SIGMA, s, q) for s in signs])


RING = StaticSequence(nx.cycle_graph(3))
DECENTRALIZED = {
    "EXTRA": (EXTRA(0.5, RING), lambda p, g, k, x0: decentralized_zoo.extra(p, g, k, x0, 0.5)),
    "NIDS": (NIDS(0.8, RING), lambda p, g, k, x0: decentralized_zoo.nids(p, g, k, x0, 0.8)),
    "exact diffusion": (
        ExactDiffusion(0.5, RING),
        lambda p, g, k, x0: decentralized_zoo.exact_diffusion(p, g, k, x0, 0.5),
    ),
    "DIGing": (
        GradientTracking(0.1, RING),
        lambda p, g, k, x0: decentralized.gradient_tracking(p, g, k, x0, 0.1),
    ),
    "ATC gradient tracking": (
        GradientTracking(0.2, RING, form="atc"),
        lambda p, g, k, x0: decentralized.gradient_tracking(p, g, k, x0, 0.2, form="atc"),
    ),
}


@pytest.mark.parametrize("name", list(DECENTRALIZED))
def test_no_independent_run_is_slower_than_the_sigma_class_certificate(name, monkeypatch):
    method, reference = DECENTRALIZED[name]
    found = certify(method, L=L, mu=MU, mixing=SIGMA)
    assert found.certified, found
    _node_runner(monkeypatch)
    rng = np.random.default_rng(7)
    n, rounds, rates = 3, _rounds(found.rate), {}
    for family, build in FAMILIES.items():
        for kind in ("static rotation", "time-varying", "alternating"):
            problem = build(n, rng)
            nodes = reference(problem, _matrices(n, rng, kind), rounds, rng.standard_normal(2))
            errors = np.linalg.norm(nodes - np.tile(problem.x_star, n), axis=1)
            rates[family, kind] = measured_rate(errors)
    worst = max(rates, key=rates.get)
    assert rates[worst] <= found.rate + SOUND, (name, worst, rates[worst], found.rate)
    assert rates[worst] > found.rate - 0.02, (name, rates, found.rate)  # a search, not a sample


OPTIMAL = {"APAPC": (APAPC, opapc.apapc), "OPAPC": (OPAPC, opapc.opapc)}


@pytest.mark.parametrize("name", list(OPTIMAL))
def test_no_independent_run_of_an_optimal_method_is_slower_than_its_certificate(name, monkeypatch):
    """APAPC and OPAPC at their paper's tuning, certified over their own ring's W, against
    the paper's per-node pseudo-code on every family (each node's model reported)."""
    cls, reference = OPTIMAL[name]
    ring = StaticSequence(nx.cycle_graph(8))  # OPAPC: T = 2 Chebyshev rounds
    found = certify(cls(None, ring, L=L, mu=MU), L=L, mu=MU)
    assert found.certified, found
    monkeypatch.setattr(opapc, "_mean", lambda values: np.concatenate(values))
    rng = np.random.default_rng(11)
    rates = {}
    for family, build in FAMILIES.items():
        problem = build(8, rng)
        nodes = reference(problem, ring, _rounds(found.rate), rng.standard_normal(2), L, MU)
        errors = np.linalg.norm(nodes - np.tile(problem.x_star, 8), axis=1)
        rates[family] = measured_rate(errors)
    worst = max(rates, key=rates.get)
    assert rates[worst] <= found.rate + SOUND, (name, worst, rates[worst], found.rate)
    assert rates[worst] > found.rate - 0.02, (name, rates, found.rate)


FEDERATED = {
    "SCAFFOLD K=3": (
        SCAFFOLD(0.3, 3),
        lambda p, masks, x0: scaffold.scaffold(p, masks, x0, 0.3, 3),
    ),
    "FedAvg K=1, server step 1.5": (
        FedAvg(0.5, 1, server_lr=1.5),
        lambda p, masks, x0: fedavg.fedavg(p, masks, x0, 0.5, 1, server_lr=1.5),
    ),
}


@pytest.mark.parametrize("name", list(FEDERATED))
def test_no_independent_federated_run_is_slower_than_its_certificate(name):
    method, reference = FEDERATED[name]
    n = 3
    found = certify(method, L=L, mu=MU, n_clients=n)
    assert found.certified, found
    rng = np.random.default_rng(3)
    masks = np.ones((_rounds(found.rate), n), dtype=bool)
    rates = {}
    for family, build in FAMILIES.items():
        for _ in range(2):
            problem = build(n, rng)
            server = reference(problem, masks, rng.standard_normal(2))
            rates[family] = max(
                rates.get(family, 0.0),
                measured_rate(np.linalg.norm(server - problem.x_star, axis=1)),
            )
    worst = max(rates, key=rates.get)
    assert rates[worst] <= found.rate + SOUND, (name, worst, rates[worst], found.rate)
    assert rates[worst] > found.rate - 0.05, (name, rates, found.rate)


def test_the_reference_objectives_are_of_the_class():
    """Each part's gradient is mu-strongly monotone and L-Lipschitz on random pairs of
    points, and x_star zeroes the gradients' sum."""
    rng = np.random.default_rng(0)
    for build in FAMILIES.values():
        problem = build(3, rng)
        total = problem.gradients(np.arange(3), np.tile(problem.x_star, (3, 1))).sum(axis=0)
        assert np.linalg.norm(total) < 1e-10
        for _ in range(50):
            x, y = 2 * rng.standard_normal((2, 2))
            i = np.array([rng.integers(3)])
            dg = problem.gradients(i, x[None])[0] - problem.gradients(i, y[None])[0]
            dx = x - y
            assert dg @ dx >= MU * (dx @ dx) - 1e-12
            assert np.linalg.norm(dg) <= L * np.linalg.norm(dx) + 1e-12


def test_the_rate_measurement_is_exact_on_geometric_sequences():
    for rho in (0.5, 0.9, 0.99):
        errors = 3.0 * rho ** np.arange(int(np.log(1e-13) / np.log(rho)))
        assert measured_rate(errors) == pytest.approx(rho, abs=1e-12)
