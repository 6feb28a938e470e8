"""The whole-network certificate of a round without a shift symmetry, solved by the
structured interior-point method (structured.py): the same rates as the dense cvxpy SDP
(Clarabel, kept with solver="CLARABEL") to 1e-6, the same decisions rate by rate, every
certificate checked on the full LMI, never below an instance's exact rate, and n = 20
certified (slow)."""

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

from stochmix.algorithms import EXTRA, SCAFFOLD, GradientTracking  # noqa: E402
from stochmix.analysis import periodic_rate  # noqa: E402
from stochmix.analysis.certificates import certify, round_system  # noqa: E402
from stochmix.analysis.certificates.lmi import Feasibility  # noqa: E402
from stochmix.analysis.certificates.structured import StructuredFeasibility  # noqa: E402
from stochmix.analysis.certificates.symmetry import instance_rate  # noqa: E402
from stochmix.mixing import PeriodicSequence, StaticSequence  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402

SAME = 1e-6  # the issue's: the dense formulation's rate to 1e-6


def _directed(n, seed=3):
    """A doubly stochastic, strongly connected, non-circulant W = (I + C + S) / 3: C a
    random n-cycle, S a random permutation."""
    rng = np.random.default_rng(seed)
    cycle = rng.permutation(n)
    c = np.zeros((n, n))
    c[cycle, np.roll(cycle, 1)] = 1.0
    return (np.eye(n) + c + np.eye(n)[rng.permutation(n)]) / 3


def _ring_star(method, n):
    return method(PeriodicSequence([nx.cycle_graph(n), nx.star_graph(n - 1)]))


def _odd_pattern():
    odd = np.array([[True, True, False, True, False, False]])
    return np.vstack([odd, ~odd])


CASES = [
    ("EXTRA ring then star", _ring_star(lambda g: EXTRA(0.4, g), 5), {}),
    ("GT ring then star", _ring_star(lambda g: GradientTracking(0.05, g), 5), {}),
    (
        "GT directed non-circulant",
        GradientTracking(0.05, StaticSequence(nx.cycle_graph(6))),
        {"mixing": _directed(6)},
    ),
    ("SCAFFOLD odd pattern", SCAFFOLD(0.3, 1), {"participation": _odd_pattern()}),
]


@pytest.mark.parametrize("label,method,options", CASES, ids=[c[0] for c in CASES])
def test_the_structured_certificate_is_the_dense_one(label, method, options):
    fast = certify(method, L=1.0, mu=0.1, across_rounds=False, **options)
    dense = certify(method, L=1.0, mu=0.1, across_rounds=False, solver="CLARABEL", **options)
    assert fast.certified and dense.certified, (fast, dense)
    assert fast.rate == pytest.approx(dense.rate, abs=SAME), label
    assert fast.margin <= 0.0
    assert fast.lyapunov[0].shape[0] == fast.state_size


def _system(method, masks):
    system = round_system(method, masks, masks.shape[0]).normalized(1.0).reduced()
    who = system.clients
    pairs = [(a, b) for a in range(who.size) for b in range(a + 1, who.size) if who[a] == who[b]]
    return system, pairs


def test_each_decision_is_the_dense_one_and_checked_on_the_full_lmi():
    """Rate by rate (below the floor, near it, far above): certified where Clarabel
    certifies, and every certificate is a P > 0 and multipliers >= 0 whose full LMI,
    recomputed, is negative semidefinite."""
    method = _ring_star(lambda g: EXTRA(0.4, g), 6)
    system, pairs = _system(method, np.ones((2, 6), bool))
    fast = StructuredFeasibility([system], 1.0, 0.1, pairs)
    dense = Feasibility([system], 1.0, 0.1, pairs)
    lower = instance_rate(system, 0.1)
    for rho in (lower - 1e-3, lower + 1e-2, lower + 5e-2, 0.999):
        a, b = fast.solve(rho), dense.solve(rho)
        assert (a is None) == (b is None), rho
        if a is None:
            continue
        p = a.lyapunov[0]
        assert np.linalg.eigvalsh(p)[0] > 0 and np.all(a.gradient_multipliers >= 0)
        e, f, stack, _, _ = fast._parts[0][2]
        size = e.shape[1]
        lmi = (a.gradient_multipliers @ stack).reshape(size, size)
        lmi = lmi + e.T @ p @ e - rho * rho * (f.T @ p @ f)
        assert np.linalg.eigvalsh((lmi + lmi.T) / 2)[-1] <= 0.0
    assert fast.solves == 4 and fast.steps > 0


def test_no_instance_is_slower_than_the_structured_certificate():
    n = 8
    w = _directed(n, seed=5)
    method = GradientTracking(0.1, StaticSequence(nx.cycle_graph(n)))
    found = certify(method, L=1.0, mu=0.1, mixing=w, across_rounds=False)
    assert found.certified, found
    rng = np.random.default_rng(0)
    target = GradientTracking(
        0.1, StaticSequence(nx.from_numpy_array(w.T, create_using=nx.DiGraph))
    )
    target.rule = "natural"
    slowest = 0.0
    for h in (np.full(n, 0.1), np.ones(n), *rng.uniform(0.1, 1.0, (3, n))):
        problem = Quadratic(rng.normal(size=(n, 1)), h[:, None])
        slowest = max(slowest, periodic_rate(target, problem, np.ones((1, n), bool)).per_round)
    assert slowest <= found.rate + SAME
    assert slowest > 0.9


def test_the_structured_solver_takes_one_system_without_mixing_inputs():
    method = _ring_star(lambda g: EXTRA(0.4, g), 4)
    system, pairs = _system(method, np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="one system"):
        StructuredFeasibility([system, system], 1.0, 0.1, pairs)


@pytest.mark.slow
@pytest.mark.parametrize(
    "label,method,options",
    [
        ("GT ring then star", _ring_star(lambda g: GradientTracking(0.05, g), 20), {}),
        (
            "GT directed non-circulant",
            GradientTracking(0.05, StaticSequence(nx.cycle_graph(20))),
            {"mixing": _directed(20)},
        ),
    ],
    ids=["ring-star", "directed"],
)
def test_a_network_of_20_nodes_without_symmetry_is_certified(label, method, options):
    """n = 20 without a shift symmetry (P 59 wide): certified, checked on the full LMI,
    and never below the exact rate of the slowest quadratic instance tried."""
    found = certify(method, L=1.0, mu=0.1, **options)
    assert found.certified and found.margin <= 0.0, found
    system, _ = _system(method if not options else _with(method, options), _masks(method, options))
    assert found.rate_per_period >= instance_rate(system, 0.1) - SAME


def _with(method, options):
    from stochmix.analysis.certificates import method_for_mixing

    return method_for_mixing(method, options["mixing"])


def _masks(method, options):
    n = method.graphs.n_nodes
    return np.ones((1 if options else method.graphs.period, n), bool)


def test_the_compiled_schur_complement_is_numpys_bit_for_bit(monkeypatch):
    """The Kronecker part of the Schur complement, compiled with Numba (one pass, no index
    arrays of size m^2), adds the same terms in the same order as the NumPy gathers: equal
    bits, so a certificate does not depend on Numba being installed."""
    from stochmix.analysis.certificates import structured

    if structured._compiled_kron() is None:
        pytest.skip("Numba is not available here: the NumPy path is the only one")
    r = 7
    a, b = np.triu_indices(r)
    compiled = structured._Gather(r, a, b)
    monkeypatch.setattr(structured, "_compiled_kron", lambda: None)
    plain = structured._Gather(r, a, b)
    rng = np.random.default_rng(1)
    first, second = np.zeros((2, a.size, a.size))
    for weight in (1.0, 2.0, -0.37):
        u, v = rng.standard_normal((2, r, r))
        compiled.add_kron(first, u, v.T, weight)  # a transposed (non-contiguous) operand
        plain.add_kron(second, u, v.T, weight)
    assert np.abs(first).max() > 1.0
    assert np.array_equal(first, second)
    assert np.array_equal(compiled.kron(u, v), plain.kron(u, v))
    # the whole certificate: equal rates and solves with and without the compiled part
    method = _ring_star(lambda s: EXTRA(0.4, s), 6)
    without = certify(method, L=1.0, mu=0.1)
    monkeypatch.undo()
    with_numba = certify(method, L=1.0, mu=0.1)
    assert (with_numba.rate, with_numba.solves) == (without.rate, without.solves)
