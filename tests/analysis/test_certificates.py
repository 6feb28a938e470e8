"""Worst-case rate certificates (stochmix.analysis.certificates): the closed form for gradient
descent, soundness against the exact rates of the library's own operators on instances of
the class (random and searched), monotonicity in sigma and kappa, inexact methods said so,
tuning, and bad input refused before any solve."""

import sys

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("cvxpy")

from stochmix.algorithms import (  # noqa: E402
    D2,
    DGD,
    EXTRA,
    MSDA,
    NIDS,
    SCAFFOLD,
    SSDA,
    ExactDiffusion,
    FedAdam,
    FedAvg,
    GradientTracking,
    PushSum,
)
from stochmix.analysis import periodic_rate  # noqa: E402
from stochmix.analysis.certificates import (  # noqa: E402
    NotLinearError,
    certify,
    class_matrix,
    tune,
    worst_quadratic,
)
from stochmix.engine import NonlinearPhaseError  # noqa: E402
from stochmix.mixing import DirectedRingSequence, PeriodicSequence, StaticSequence  # noqa: E402
from stochmix.participation import Bernoulli, Full  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402

RING = StaticSequence(nx.cycle_graph(6))
SOUND = 1e-6  # the certificate's bisection tolerance is 1e-7, the solver's about 1e-8


# --------------------------------------------------------------------------- closed form
@pytest.mark.parametrize("kappa", [2.0, 10.0, 100.0])
def test_gradient_descent_rate_is_the_closed_form(kappa):
    """Gradient descent (FedAvg with one client and one local step) with step alpha:
    rho = max(|1 - alpha mu|, |1 - alpha L|), to 1e-6, over a grid of steps; a step past
    2 / L certifies nothing."""
    L, mu = 1.0, 1.0 / kappa
    for alpha in (0.2, 0.7, 1.2, 2.0 / (L + mu), 1.8):
        found = certify(FedAvg(alpha, 1), L=L, mu=mu, n_clients=1)
        assert found.certified
        assert found.rate == pytest.approx(max(abs(1 - alpha * mu), abs(1 - alpha * L)), abs=1e-6)
        assert found.margin <= 1e-9
    assert certify(FedAvg(2.2, 1), L=L, mu=mu, n_clients=1).status == "not certified"


def test_local_steps_of_one_client_compose():
    """K local steps of one client are K gradient steps: rho_round = rho_GD^K."""
    found = certify(FedAvg(0.5, 3), L=1.0, mu=0.1, n_clients=1)
    assert found.rate == pytest.approx(0.95**3, abs=1e-6)


# --------------------------------------------------------------------------- soundness
def _federated_cases():
    return [
        ("FedAvg K=1, 3 clients, server step 1.5", FedAvg(0.5, 1, server_lr=1.5), {"n_clients": 3}),
        ("SCAFFOLD K=3, 3 clients", SCAFFOLD(0.3, 3), {"n_clients": 3}),
        ("FedAvg K=4, 1 client", FedAvg(0.4, 4), {"n_clients": 1}),
    ]


def _decentralized_cases():
    erdos = StaticSequence(nx.connected_watts_strogatz_graph(7, 4, 0.5, seed=2))
    return [
        ("EXTRA ring", EXTRA(0.5, RING), {}),
        ("NIDS ring", NIDS(0.8, RING), {}),
        ("GT cta ring", GradientTracking(0.1, RING), {}),
        ("GT atc small world", GradientTracking(0.2, erdos, form="atc"), {}),
        ("ExactDiffusion small world", ExactDiffusion(0.6, erdos), {}),
        ("EXTRA sigma 0.5", EXTRA(0.5, RING), {"mixing": 0.5}),
        ("NIDS sigma 0.3", NIDS(0.8, RING), {"mixing": 0.3}),
        ("GT sigma 0.5", GradientTracking(0.1, RING), {"mixing": 0.5}),
        ("GT atc sigma 0.7", GradientTracking(0.05, RING, form="atc"), {"mixing": 0.7}),
        ("ExactDiffusion sigma 0.3", ExactDiffusion(0.5, RING), {"mixing": 0.3}),
    ]


@pytest.mark.parametrize(
    "label,method,options",
    _federated_cases() + _decentralized_cases(),
    ids=[c[0] for c in _federated_cases() + _decentralized_cases()],
)
def test_no_instance_is_slower_than_its_certificate(label, method, options):
    """The slowest quadratic of the class a search finds (and, over the sigma-class, with a
    W of the class) has an exact rate, measured by the library's operators, at most the
    certified one."""
    L, mu = 1.0, 0.1
    found = certify(method, L=L, mu=mu, **options)
    assert found.certified, found
    worst = worst_quadratic(method, L=L, mu=mu, trials=25, seed=1, **options)
    assert worst.rate <= found.rate + SOUND, (label, worst.rate, found.rate)
    assert worst.rate > 0.5  # the search finds a slow instance, not a trivial one


def test_dense_quadratics_in_several_dimensions_stay_under_the_certificate():
    """Random quadratics with dense Hessians in d = 3 (not diagonal: the analysis runs in
    one dimension and holds in every one), L and mu read off their spectra."""
    rng = np.random.default_rng(0)
    for seed in range(3):
        problem = Quadratic.random(6, 3, diagonal=False, seed=seed)
        eig = np.linalg.eigvalsh(problem.hessians)
        L, mu = float(eig.max()), float(eig.min())
        for method, options in (
            (EXTRA(0.5 / L, RING), {}),
            (GradientTracking(0.1 / L, RING), {"mixing": 0.5}),
        ):
            found = certify(method, L=L, mu=mu, **options)
            assert found.certified
            if options:
                w = class_matrix(6, 0.5, rng)
                from stochmix.analysis.certificates import method_for_mixing

                method = method_for_mixing(method, w)
                method.check_mixing = False
            measured = periodic_rate(method, problem, np.ones((1, 6), dtype=bool)).per_round
            assert measured <= found.rate + SOUND


def test_a_periodic_graph_sequence_is_certified_over_its_period():
    graphs = PeriodicSequence([nx.cycle_graph(5), nx.star_graph(4)])
    method = EXTRA(0.4, graphs)
    found = certify(method, L=1.0, mu=0.2)
    assert found.certified and found.period == 2
    worst = worst_quadratic(method, L=1.0, mu=0.2, trials=20)
    assert worst.rate <= found.rate + SOUND


def test_per_node_multipliers_agree_with_the_spectral_split():
    """On a symmetric W the certificate splits by W's eigenvalues (one multiplier for every
    node); the whole-network SDP (a multiplier per node, forced with a participation
    pattern) certifies no less and the two agree here."""
    spectral = certify(EXTRA(0.5, RING), L=1.0, mu=0.1)
    network = certify(EXTRA(0.5, RING), L=1.0, mu=0.1, participation=np.ones((1, 6), bool))
    assert network.state_size > spectral.state_size
    assert network.rate <= spectral.rate + SOUND
    assert spectral.rate == pytest.approx(network.rate, abs=1e-5)


# --------------------------------------------------------------------------- monotone
@pytest.mark.parametrize(
    "method",
    [EXTRA(0.5, RING), NIDS(0.5, RING), GradientTracking(0.05, RING), ExactDiffusion(0.5, RING)],
    ids=lambda m: m.name,
)
def test_rates_do_not_decrease_as_sigma_or_kappa_grow(method):
    by_sigma = [certify(method, L=1.0, mu=0.1, mixing=s).rate for s in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert all(b >= a - SOUND for a, b in zip(by_sigma, by_sigma[1:], strict=False)), by_sigma
    by_kappa = [certify(method, L=1.0, mu=1 / k, mixing=0.5).rate for k in (2, 5, 10, 50)]
    assert all(b >= a - SOUND for a, b in zip(by_kappa, by_kappa[1:], strict=False)), by_kappa


# --------------------------------------------------------------------------- inexact
def test_methods_without_a_linear_rate_to_the_minimiser_say_so():
    for method, options in (
        (FedAvg(0.3, 3), {"n_clients": 2}),
        (DGD(0.3, RING), {}),
        (DGD(0.3, RING), {"mixing": 0.5}),
        (FedAvg(0.3, 1), {"participation": np.array([[True, False], [False, True]])}),
    ):
        found = certify(method, L=1.0, mu=0.1, **options)
        assert found.status == "inexact" and found.rate == 1.0 and not found.certified
        assert "x_star" in found.reason and "rate 1" in found.reason
        assert found.solves == 0  # said before any SDP


@pytest.mark.parametrize(
    "method,sigma",
    [(D2(0.5, RING), 0.5), (GradientTracking(0.1, RING, form="atc"), 0.7)],
    ids=["D2", "GT atc"],
)
def test_a_diverging_setting_is_not_certified(method, sigma):
    """Where nothing is certified, the search finds an instance of the class that diverges
    (D2 needs W >= 0 in the PSD order; ATC tracking's step 0.1 / L is too long at sigma =
    0.7)."""
    found = certify(method, L=1.0, mu=0.1, mixing=sigma)
    assert found.status == "not certified" and found.rate == 1.0
    worst = worst_quadratic(method, L=1.0, mu=0.1, mixing=sigma, trials=40)
    assert worst.rate > 1.0


# --------------------------------------------------------------------------- tuning
def test_tuned_gradient_descent_step_is_two_over_l_plus_mu():
    L, mu = 1.0, 0.1
    tuned = tune(FedAvg(0.1, 1), L=L, mu=mu, n_clients=1)
    assert tuned.value == pytest.approx(2 / (L + mu), rel=1e-3)
    assert tuned.rate == pytest.approx((L - mu) / (L + mu), abs=1e-5)


def test_tuning_a_decentralized_method_beats_its_grid():
    tuned = tune(NIDS(0.1, RING), L=1.0, mu=0.1, mixing=0.5)
    assert tuned.certificate.certified
    assert tuned.rate <= min(rate for _, rate in tuned.tried) + 1e-6
    assert tuned.rate < certify(NIDS(0.1, RING), L=1.0, mu=0.1, mixing=0.5).rate


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args,match",
    [
        ({"L": 1.0, "mu": 0.0}, "mu"),
        ({"L": 1.0, "mu": -1.0}, "mu"),
        ({"L": 1.0, "mu": 2.0}, "mu"),
        ({"L": 0.0, "mu": 0.1}, "L"),
        ({"L": 1.0, "mu": 0.1, "mixing": 1.0}, "mixing"),
        ({"L": 1.0, "mu": 0.1, "mixing": -0.1}, "mixing"),
    ],
)
def test_bad_class_is_refused(args, match):
    with pytest.raises(ValueError, match=match):
        certify(EXTRA(0.5, RING), **args)


def test_methods_that_are_not_linear_are_refused_with_the_reason():
    directed = DirectedRingSequence(5)
    with pytest.raises(NotLinearError, match="PushSum.*points"):
        certify(PushSum(0.1, directed), L=1.0, mu=0.1)
    with pytest.raises(NotLinearError, match="FedAdam.*nonlinear"):
        certify(FedAdam(0.1, 2, server_lr=0.1), L=1.0, mu=0.1)
    with pytest.raises(NotLinearError, match="change with the"):
        certify(DGD(0.3, RING, decay=0.5), L=1.0, mu=0.1)


@pytest.mark.parametrize("kind", [SSDA, MSDA])
def test_dual_methods_are_refused_for_their_conjugate_row_map(kind):
    # SSDA's and MSDA's iteration applies grad f_i^*, a row map with a d x d matrix per
    # node read from the problem when a run starts: the refusal must say so, not merely
    # that a problem is missing
    with pytest.raises(NonlinearPhaseError) as refused:
        certify(kind(None, RING), L=1.0, mu=0.1)
    message = str(refused.value)
    assert message.startswith(kind.name)
    for part in ("conjugate gradient", "row map", "Hessians", "stochmix.run"):
        assert part in message, (part, message)


def test_bad_mixing_and_participation_are_refused():
    with pytest.raises(ValueError, match="mixing is for decentralized"):
        certify(FedAvg(0.1, 1), L=1.0, mu=0.1, mixing=0.5)
    with pytest.raises(ValueError, match="participation"):
        certify(FedAvg(0.1, 1), L=1.0, mu=0.1, participation=Bernoulli(0.5, 3))
    with pytest.raises(ValueError, match="participation"):
        certify(EXTRA(0.5, RING), L=1.0, mu=0.1, mixing=0.5, participation=Full(6))
    with pytest.raises(ValueError, match="every client"):
        certify(FedAvg(0.1, 1), L=1.0, mu=0.1, participation=np.array([[True, False]]))
    with pytest.raises(ValueError, match="weights and n_clients"):
        certify(EXTRA(0.5, RING), L=1.0, mu=0.1, n_clients=3)


def test_missing_cvxpy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cvxpy", None)
    with pytest.raises(ImportError, match=r"stochmix\[analysis\]"):
        certify(EXTRA(0.5, RING), L=1.0, mu=0.1)


def test_heavy_ball_tuned_for_quadratics_is_not_certified():
    """Lessard, Recht and Packard (2016), on the heavy-ball method: with the step and
    momentum that are optimal for quadratics (alpha = 4 / (sqrt L + sqrt mu)^2, beta =
    ((sqrt kappa - 1) / (sqrt kappa + 1))^2), quadratics converge at sqrt(beta), yet no
    certificate exists for the class (the paper shows a strongly convex function on which
    it cycles, kappa = 25). Heavy ball is FedAvgM with one client, one local step of 1 and
    server step alpha."""
    from stochmix.algorithms import FedAvgM

    L, mu = 1.0, 1.0 / 25
    alpha = 4 / (np.sqrt(L) + np.sqrt(mu)) ** 2
    beta = ((np.sqrt(L / mu) - 1) / (np.sqrt(L / mu) + 1)) ** 2
    method = FedAvgM(1.0, 1, beta=beta, server_lr=alpha)
    assert certify(method, L=L, mu=mu, n_clients=1).status == "not certified"
    worst = worst_quadratic(method, L=L, mu=mu, n_clients=1, trials=10)
    assert worst.rate == pytest.approx(np.sqrt(beta), abs=1e-9)
    gentle = certify(FedAvgM(1.0, 1, beta=0.5, server_lr=0.5), L=L, mu=mu, n_clients=1)
    assert gentle.certified


@pytest.mark.parametrize("scale", [1e-4, 1e3, 1e7])
def test_rates_do_not_depend_on_the_units_of_the_class(scale):
    """Scaling f by s (L and mu by s, steps by 1 / s) changes no iterate, so no rate: the
    SDP works in gradient units of L with a balanced state (SCAFFOLD's controls, EXTRA's
    gradient memory hold gradients)."""
    L, mu = scale, 0.1 * scale
    for method, unit, options in (
        (FedAvg(0.5 / scale, 1), FedAvg(0.5, 1), {"n_clients": 1}),
        (SCAFFOLD(0.3 / scale, 3), SCAFFOLD(0.3, 3), {"n_clients": 3}),
        (EXTRA(0.5 / scale, RING), EXTRA(0.5, RING), {}),
        (NIDS(0.5 / scale, RING), NIDS(0.5, RING), {"mixing": 0.5}),
    ):
        scaled = certify(method, L=L, mu=mu, **options)
        assert scaled.certified
        assert scaled.rate == pytest.approx(certify(unit, L=1.0, mu=0.1, **options).rate, abs=1e-6)
    far = certify(FedAvg(0.5 / scale, 3), L=L, mu=mu, n_clients=2)
    assert far.status == "inexact"


@pytest.mark.parametrize("scale", [1e-13, 1e13])
def test_a_tiny_coefficient_is_not_read_as_a_rounding_residue(scale):
    """Composition residues are cleared against the size of the terms summed into each
    entry, never against other entries: at L = 1e13 the step 0.5 / L is 1e-13 of the
    model's own coefficient, and clearing it against its row (an earlier rule) removed
    the whole state and certified rate 0 for a run at 0.95. (EXTRA below L = 1e-6 is
    called inexact by the end-of-run probe, as before that rule: not tested here.)"""
    L, mu = scale, 0.1 * scale
    cases = [(FedAvg(0.5 / scale, 1), {"n_clients": 2})]
    if scale > 1:
        cases.append((EXTRA(0.5 / scale, RING), {}))
    for method, options in cases:
        found = certify(method, L=L, mu=mu, **options)
        assert found.certified and found.rate == pytest.approx(0.95, abs=1e-6), found


def test_a_fixed_point_the_run_cannot_reach_is_not_certified():
    """Node activation conserves a weighted sum of gradient tracking's trackers that starts
    away from its value at x_star (the run ends elsewhere: the library refuses such runs
    unless check_mixing=False); a disconnected graph has no consensus. Both: inexact."""
    ring5 = StaticSequence(nx.cycle_graph(5))
    pattern = np.array([[1, 1, 0, 1, 0], [0, 1, 1, 0, 1]], dtype=bool)
    for method in (GradientTracking(0.1, ring5), NIDS(0.3, ring5)):
        found = certify(method, L=1.0, mu=0.1, participation=pattern)
        assert found.status == "inexact" and "x_star" in found.reason
    split = StaticSequence(nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3)))
    found = certify(GradientTracking(0.1, split, check_mixing=False), L=1.0, mu=0.1)
    assert found.status == "inexact"
    # a federated pattern in which every client takes part each period is still exact
    fed = certify(SCAFFOLD(0.3, 3), L=1.0, mu=0.1, participation=pattern[:, :3] | pattern[::-1, :3])
    assert fed.certified
