"""worst_quadratic over the whole sigma-class: non-symmetric matrices (complex disagreement
eigenvalues) and periodic sequences, checked against an independent closed form (the
per-mode characteristic polynomial of EXTRA), against the per-node reference run on the
matrices it returns, and its arguments refused when bad."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm

pytest.importorskip("cvxpy")

from stochmix.algorithms import EXTRA, GradientTracking  # noqa: E402
from stochmix.analysis import periodic_rate  # noqa: E402
from stochmix.analysis.certificates import certify, class_matrix, worst_quadratic  # noqa: E402
from stochmix.analysis.certificates.search import _mixing_with  # noqa: E402
from stochmix.mixing import StaticSequence  # noqa: E402
from stochmix.participation import Full  # noqa: E402
from stochmix.problems import Quadratic  # noqa: E402
from tests.reference import decentralized_zoo  # noqa: E402
from tests.reference import function_class as fc  # noqa: E402

RING = StaticSequence(nx.cycle_graph(6))


def _extra_static_worst(lr, sigma, L, mu):
    """max over |lambda| <= sigma (complex: a W of the class has any such disagreement
    eigenvalue) and h in [mu, L] of the roots of EXTRA's per-mode polynomial (Shi et al.
    2015, x+ = (1 + lambda - lr h) x - ((1 + lambda) / 2 - lr h) x-)."""
    r, t = np.meshgrid(np.linspace(0, sigma, 101), np.linspace(0, np.pi, 721))
    lam = (r * np.exp(1j * t)).ravel()
    best = 0.0
    for h in np.linspace(mu, L, 19):
        b, c = 1 + lam - lr * h, (1 + lam) / 2 - lr * h
        root = np.sqrt(b * b - 4 * c + 0j)
        best = max(best, float(np.max(np.maximum(abs(b + root), abs(b - root)) / 2)))
    return best


@pytest.mark.slow  # (long: run after the quick suite)
def test_the_search_finds_extras_complex_worst_case():
    """The symmetric-only search stops at 1 - lr mu = 0.95; the whole class reaches the
    closed form's 0.97374 (to its grid), and stays under the certificate."""
    closed = _extra_static_worst(0.5, 0.5, 1.0, 0.1)
    method = EXTRA(0.5, RING)
    old = worst_quadratic(
        method, L=1.0, mu=0.1, mixing=0.5, trials=20, matrices="symmetric", refine=0
    )
    new = worst_quadratic(method, L=1.0, mu=0.1, mixing=0.5, trials=20)
    assert old.rate < 0.95 + 1e-9
    assert new.rate > closed - 1e-5, (new.rate, closed)
    assert new.rate <= certify(method, L=1.0, mu=0.1, mixing=0.5).rate + 1e-6


@pytest.mark.parametrize("matrices", ["symmetric", "static", "periodic"])
def test_the_instance_found_is_of_the_class_and_measures_its_rate(matrices):
    worst = worst_quadratic(
        GradientTracking(0.1, RING), L=1.0, mu=0.1, mixing=0.5, trials=8, refine=6,
        matrices=matrices,
    )  # fmt: skip
    stack = worst.mixing if worst.mixing.ndim == 3 else worst.mixing[None]
    for w in stack:
        assert np.allclose(w.sum(axis=0), 1) and np.allclose(w.sum(axis=1), 1)
        assert np.linalg.norm(w - 1 / 6, 2) <= 0.5 + 1e-12
        if matrices == "symmetric":
            assert np.allclose(w, w.T)
    again = periodic_rate(worst.method, worst.problem, worst.masks).per_round
    assert again == pytest.approx(worst.rate, abs=1e-12)


def test_a_periodic_sequence_runs_as_the_per_node_reference():
    """The method mixing with a period of three non-symmetric matrices of the class runs as
    the per-node EXTRA with W_k = matrices[k % 3] (the same iterates), and its exact rate is
    the spectral radius of the paper's recursion composed over the period (NumPy), less
    the eigenvalue 1 of the conserved sum."""
    rng = np.random.default_rng(4)
    n, h, lr = 4, np.array([0.1, 0.1, 1.0, 0.5]), 0.5
    matrices = np.stack([class_matrix(n, 0.6, rng, symmetric=False) for _ in range(3)])
    target = _mixing_with(EXTRA(lr, StaticSequence(nx.cycle_graph(n))), matrices)
    problem = Quadratic(rng.standard_normal((n, 1)), h[:, None])
    run = sm.run(target, problem, Full(n), 40, x0=np.zeros(1), progress=False)
    mean = decentralized_zoo.extra(problem, fc.Sequence(matrices), 40, np.zeros(1), lr)
    assert np.abs(run.server - mean).max() < 1e-12
    exact = periodic_rate(target, problem, np.ones((3, n), dtype=bool)).per_round
    eye, period = np.eye(n), np.eye(2 * n)
    for k in (1, 2, 3):  # iterations k >= 1: x+ = (I + W_k - lr H) x - ((I + W_k)/2 - lr H) x-
        w, hess = matrices[k % 3], lr * np.diag(h)
        step = np.block([[eye + w - hess, hess - (eye + w) / 2], [eye, 0 * eye]])
        period = step @ period
    values = np.abs(np.linalg.eigvals(period))
    radius = float(np.max(values[np.abs(values - 1) > 1e-9])) ** (1 / 3)
    assert exact == pytest.approx(radius, abs=1e-9)


def test_class_matrix_draws_non_symmetric_matrices_of_the_class():
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = class_matrix(5, 0.7, rng, symmetric=False)
        assert np.allclose(w.sum(axis=0), 1) and np.allclose(w.sum(axis=1), 1)
        assert np.linalg.norm(w - 0.2, 2) == pytest.approx(0.7, abs=1e-12)
    assert not np.allclose(w, w.T)


def test_bad_search_arguments_are_refused():
    method = EXTRA(0.5, RING)
    with pytest.raises(ValueError, match="matrices.*'dynamic'"):
        worst_quadratic(method, L=1.0, mu=0.1, mixing=0.5, matrices="dynamic")
    with pytest.raises(ValueError, match="period must be >= 2"):
        worst_quadratic(method, L=1.0, mu=0.1, mixing=0.5, period=1)
    with pytest.raises(ValueError, match="period.*static"):
        worst_quadratic(method, L=1.0, mu=0.1, mixing=0.5, matrices="static", period=3)
    with pytest.raises(ValueError, match="refine must be >= 0"):
        worst_quadratic(method, L=1.0, mu=0.1, mixing=0.5, refine=-1)
    with pytest.raises(ValueError, match="give mixing=sigma.*matrices='static'"):
        worst_quadratic(method, L=1.0, mu=0.1, matrices="static")
    with pytest.raises(TypeError, match="symmetric"):
        class_matrix(4, 0.5, np.random.default_rng(0), symmetric=1)
