"""Certificates of the optimal decentralized methods on a fixed ring: APAPC and OPAPC
(Kovalev, Salim & Richtárik 2020) and Mudag (Ye et al.). Each certificate is never below
the exact rate of a problem of the class (sound), APAPC's and OPAPC's are at or below
their paper's rate, and the split of the round by W's eigenvalues gives the whole-network
SDP's rate (the per-agent form keeps the method's own tuning)."""

import math

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

from stochmix.algorithms import APAPC, OPAPC, Mudag  # noqa: E402
from stochmix.analysis import certify, periodic_rate  # noqa: E402
from stochmix.analysis.certificates.system import round_system, spectral_systems  # noqa: E402
from stochmix.mixing import StaticSequence  # noqa: E402
from stochmix.participation import Full  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402
from tests.reference import opapc as reference  # noqa: E402

KINDS = {"APAPC": APAPC, "OPAPC": OPAPC}


def paper_rate(name: str, graphs, kappa: float) -> float:
    """The paper's Theorem 1 (and its corollary for OPAPC, the same rule with P_T(G)'s
    spectrum): a Lyapunov function of squared distances falls by ``(1 + min(1 /
    sqrt(kappa chi), 1 / chi) / 4)^-1`` an iteration, chi = lambda_max(P) / lambda_min^+(P)
    (P = G = I - W for APAPC; chi(P_T) = ((1 + c_1^T) / (1 - c_1^T))^2 for OPAPC with T =
    floor(sqrt(chi(G)))), so the distance falls at least by its square root."""
    _, _, chi = reference._gossip(graphs, "metropolis")
    if name == "OPAPC":
        root = math.sqrt(chi)
        c1, steps = (root - 1.0) / (root + 1.0), math.floor(root)
        chi = ((1.0 + c1**steps) / (1.0 - c1**steps)) ** 2
    return math.sqrt(1.0 / (1.0 + min(1.0 / math.sqrt(kappa * chi), 1.0 / chi) / 4.0))


def logspace_problem(n: int, kappa: float) -> Quadratic:
    """Every node's Hessian diag(logspace(0, log10 kappa, 4)), centers drawn: a problem of
    the class [1, kappa] (the optimal-methods example's)."""
    rng = np.random.default_rng(0)
    return Quadratic(rng.normal(size=(n, 4)), np.tile(np.logspace(0, np.log10(kappa), 4), (n, 1)))


@pytest.mark.parametrize("kappa", [10.0, 1000.0])
@pytest.mark.parametrize("name", list(KINDS))
def test_certified_at_or_below_the_papers_rate_and_never_below_an_instance(name, kappa):
    ring = StaticSequence(nx.cycle_graph(8))
    found = certify(KINDS[name](None, ring, L=kappa, mu=1.0), L=kappa, mu=1.0)
    assert found.certified, found
    assert found.rate <= paper_rate(name, ring, kappa)
    method, masks = KINDS[name](None, ring, L=kappa, mu=1.0), np.ones((1, 8), dtype=bool)
    exact = periodic_rate(method, logspace_problem(8, kappa), masks)
    assert found.rate >= exact.per_round - 1e-7  # the bisection's tolerance
    if kappa == 1000.0:  # tight: the slowest instance has every curvature at mu
        assert found.rate == pytest.approx(exact.per_round, abs=1e-6)


def test_mudag_is_certified_above_its_exact_rate():
    """At the optimal-methods example's tuning (lr 1/L, K from the paper's rule: 16 rounds
    of FastMix on a ring of 8 at kappa 1000); its certificate took more than 9 minutes
    before the systems were cleared of composition residues."""
    ring = StaticSequence(nx.cycle_graph(8))
    w = ring.matrix(0, "metropolis").toarray()
    rounds = Mudag.paper_rounds(np.sort(np.linalg.eigvalsh(w))[-2], 1000.0)
    found = certify(Mudag(1e-3, ring, mix_rounds=rounds, mu=1.0), L=1000.0, mu=1.0)
    assert found.certified, found
    method = Mudag(1e-3, ring, mix_rounds=rounds, mu=1.0)
    exact = periodic_rate(method, logspace_problem(8, 1000.0), np.ones((1, 8), dtype=bool))
    assert exact.per_round - 1e-7 <= found.rate < 1.0


def test_the_eigenvalue_split_keeps_the_methods_own_tuning():
    """APAPC tunes its step and coupling from W's spectrum. The per-eigenvalue systems are
    composed from an iteration that mixes with a probe matrix; with the probe's tuning they
    certified 0.893468 where the whole network (the method's own W and tuning) gives
    0.926735. The two must agree, and over the sigma-class holding the ring's W the
    certificate must not be faster."""
    ring = StaticSequence(nx.cycle_graph(6))
    method = APAPC(None, ring, L=10.0, mu=1.0)
    split = certify(method, L=10.0, mu=1.0)
    whole = certify(method, L=10.0, mu=1.0, participation=Full(6))
    assert split.certified and whole.certified
    assert split.rate == pytest.approx(whole.rate, abs=1e-6)
    sigma = float(np.sort(np.abs(np.linalg.eigvalsh(ring.matrix(0, "metropolis").toarray())))[-2])
    over_class = certify(method, L=10.0, mu=1.0, mixing=sigma)
    assert over_class.rate >= split.rate - 1e-7


def test_a_conserved_direction_survives_the_balancing():
    """The consensus piece of APAPC's split: the dual average y is conserved, but composing
    the phases leaves residues of up to 1e-14 in its row; the balancing must not scale them
    into a direction that moves, so the normalized system reduces as the raw one does."""
    ring = StaticSequence(nx.cycle_graph(8))
    method = APAPC(None, ring, L=1000.0, mu=1.0)
    spectrum = np.linalg.eigvalsh(ring.matrix(0, "metropolis").toarray())[::-1]
    for piece in spectral_systems(method, spectrum):
        raw = piece.reduced()
        scaled = piece.normalized(1000.0).reduced()
        assert scaled.A.shape == raw.A.shape
    whole = round_system(method, np.ones((1, 8), dtype=bool), 1)
    assert whole.normalized(1000.0).reduced().A.shape == whole.reduced().A.shape


def test_certify_over_another_matrix_tunes_the_method_for_it():
    """``mixing=`` a graph: the method as it would run on that graph (its tuning from that
    W), the same through the eigenvalue split and the whole network (APAPC built on a
    complete graph, certified over a ring: 0.893468 with the complete graph's tuning)."""
    built = APAPC(None, StaticSequence(nx.complete_graph(6)), L=10.0, mu=1.0)
    ring = nx.cycle_graph(6)
    over = certify(built, L=10.0, mu=1.0, mixing=ring)
    own = certify(APAPC(None, StaticSequence(ring), L=10.0, mu=1.0), L=10.0, mu=1.0)
    assert over.certified and over.rate == pytest.approx(own.rate, abs=1e-6)


def test_a_mixing_step_tuned_from_the_matrix_has_no_per_agent_form():
    """Mudag's FastMix with one round, T = (1 + eta) W - eta I, is affine in W but eta comes
    from W's spectrum: the per-agent form with a probe matrix analysed another method and
    certified 0.925716 where the run diverges (exact rate 1.070384). The split now refuses
    it, and the whole network's SDP answers."""
    from stochmix.algorithms.accelerated_proximal import DAPG
    from stochmix.analysis.certificates.system import NotLinearError, agent_systems

    graphs, mu = StaticSequence(nx.path_graph(4)), 0.1
    problem = Quadratic(np.random.default_rng(0).normal(size=(4, 1)), np.full((4, 1), mu))
    for cls in (Mudag, DAPG):
        with pytest.raises(NotLinearError, match="depend on W"):
            agent_systems(cls(0.1, graphs, mix_rounds=1, mu=mu))
        found = certify(cls(0.1, graphs, mix_rounds=1, mu=mu), L=1.0, mu=mu)
        masks = np.ones((1, 4), dtype=bool)
        exact = periodic_rate(cls(0.1, graphs, mix_rounds=1, mu=mu), problem, masks).per_round
        assert exact > 1.0 and not found.certified


def test_the_worst_case_search_keeps_the_methods_own_tuning():
    """Over the sigma-class, ``worst_quadratic`` runs the method with matrices of the class,
    as ``certify`` analyses it: tuned for its own graphs (it was tuned for each drawn W)."""
    from stochmix.analysis import worst_quadratic

    method = APAPC(None, StaticSequence(nx.cycle_graph(6)), L=10.0, mu=1.0)
    found = worst_quadratic(
        method, L=10.0, mu=1.0, mixing=0.6, matrices="symmetric", trials=3, refine=2
    )
    own = APAPC(None, StaticSequence(nx.cycle_graph(6)), L=10.0, mu=1.0)
    periodic_rate(own, logspace_problem(6, 10.0), np.ones((1, 6), dtype=bool))  # starts it
    assert found.method.constants["eta"] == own.constants["eta"]
    assert found.method.constants["theta"] == own.constants["theta"]


def test_the_worst_case_method_copies_and_pickles_with_its_tuning():
    """The method ``worst_quadratic`` returns keeps its own tuning through ``copy.copy`` and
    ``pickle`` (a copy's start tunes the copy, not the original: the start was a closure over
    the original), and prints as its class."""
    import copy
    import pickle

    from stochmix.analysis import worst_quadratic

    method = APAPC(None, StaticSequence(nx.cycle_graph(6)), L=10.0, mu=1.0)
    found = worst_quadratic(
        method, L=10.0, mu=1.0, mixing=0.6, matrices="symmetric", trials=2, refine=1
    )
    want = dict(found.method.constants)
    problem = logspace_problem(6, 10.0)
    for other in (copy.copy(found.method), pickle.loads(pickle.dumps(found.method))):
        assert type(other).__name__ == "APAPC" and isinstance(other, APAPC)
        other.constants = {}
        found.method.constants = {"eta": -1.0}  # the original's, untouched by the copy's start
        periodic_rate(other, problem, np.ones((1, 6), dtype=bool))  # starts the copy
        assert other.constants["eta"] == want["eta"]
        assert other.constants["theta"] == want["theta"]
        assert found.method.constants == {"eta": -1.0}
        found.method.constants = dict(want)
    assert repr(found.method).startswith("APAPC(")


class _Slotted(APAPC):
    __slots__ = ("extra",)


def test_a_pinned_method_keeps_slots_and_cycles():
    """``pinned`` copies the method through its own reduction: slots kept, and a method
    that refers to itself refers to the copy (deepcopy and pickle)."""
    import copy
    import pickle

    from stochmix.analysis.certificates.system import pinned

    method = _Slotted(None, StaticSequence(nx.cycle_graph(6)), L=10.0, mu=1.0)
    method.extra = 42
    method.me = method
    made = pinned(method, {"tau": 0.5})
    assert made.extra == 42 and made.me is method  # a copy: its attributes as they were
    made.me = made
    for other in (copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert other.extra == 42 and other.me is other and other._kept == {"tau": 0.5}
        assert type(other) is type(made)
