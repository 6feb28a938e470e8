"""The other side of a certificate: the slowest quadratic of the class a small search finds
(:func:`worst_quadratic`), its exact rate measured by the library's own operators
(:func:`~stochmix.analysis.periodic_rate`). A certificate is sound when no instance is
slower than it, and tight by the gap between the two."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..._validate import as_int
from ...problems import Quadratic
from ..linear.periodic import periodic_rate
from .certify import (
    _is_decentralized,
    _masks,
    check_class,
    check_mixing_argument,
    method_for_mixing,
)

__all__ = ["WorstCase", "class_matrix", "worst_quadratic"]


@dataclass
class WorstCase:
    """The slowest instance found: its exact rate per round, the quadratic (one curvature
    per client or node, in [mu, L]) and, over a class of mixing matrices, the matrix W."""

    rate: float
    problem: Quadratic
    mixing: np.ndarray | None
    method: object
    masks: np.ndarray
    tried: int


def class_matrix(n: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """A random symmetric matrix of the sigma-class, shape (n, n).

    ``W = 11^T/n + sigma Q diag(s) Q^T``, Q an orthonormal basis of the disagreement
    directions and ``s`` in [-1, 1] reaching 1 or -1: ``W 1 = 1`` and the spectral norm
    of ``W - 11^T/n`` is sigma."""
    basis, _ = np.linalg.qr(np.hstack([np.ones((n, 1)), rng.standard_normal((n, n - 1))]))
    q = basis[:, 1:]
    s = rng.uniform(-1, 1, size=n - 1)
    s[rng.integers(n - 1)] = rng.choice([-1.0, 1.0])
    if rng.random() < 0.5:  # the extremes of the class: every disagreement eigenvalue at +-1
        s = rng.choice([-1.0, 1.0], size=n - 1)
    return np.full((n, n), 1.0 / n) + sigma * (q * s) @ q.T


def _curvatures(n: int, L: float, mu: float, rng: np.random.Generator) -> np.ndarray:
    kind = rng.integers(3)
    if kind == 0:
        return rng.choice([mu, L], size=n)
    if kind == 1:
        return rng.uniform(mu, L, size=n)
    return np.where(rng.random(n) < 0.5, mu, rng.uniform(mu, L, size=n))


def worst_quadratic(
    method,
    *,
    L,
    mu,
    mixing=None,
    participation=None,
    n_clients=None,
    trials: int = 200,
    seed=0,
) -> WorstCase:
    """The slowest diagonal quadratic of the class (each part ``h_i / 2 (x - c_i)^2`` with
    ``h_i`` in [mu, L]) a random search finds, and its exact asymptotic rate per round.

    The search draws ``trials`` instances (curvatures at the ends of [mu, L], inside it, or
    mixed; with ``mixing=sigma``, a symmetric W of the class drawn with every instance, on
    ``n_clients`` nodes, default 6) and then moves each curvature of the slowest to mu, L or
    the middle while that slows it down. Arguments as :func:`certify`.

    Raises:
        ValueError: mu <= 0 or mu > L, a sigma outside [0, 1), a mixing for a federated
            method, or a participation with a sigma, each named, before any search.
    """
    L, mu = check_class(L, mu)
    trials = as_int(trials, "trials", minimum=1)
    rng = np.random.default_rng(seed)
    sigma = check_mixing_argument(method, mixing, participation)
    if sigma is not None:
        n = 6 if n_clients is None else as_int(n_clients, "n_clients", minimum=2)
        masks = np.ones((1, n), dtype=bool)
    elif _is_decentralized(method):
        method = method if mixing is None else method_for_mixing(method, mixing)
        n = method.graphs.n_nodes
        masks = _masks(participation, n)
        if participation is None:
            masks = np.ones((method.graphs.period or 1, n), dtype=bool)
    else:
        masks = _masks(participation, n_clients)
        n = masks.shape[1]

    def instance(h, w):
        problem = Quadratic(rng.standard_normal((n, 1)), h[:, None])
        target = method
        if w is not None:
            target = method_for_mixing(method, w)
            target = copy.copy(target)
            target.check_mixing = False
        return periodic_rate(target, problem, masks).per_round, problem, target

    best = None
    for _ in range(trials):
        h = _curvatures(n, L, mu, rng)
        w = None if sigma is None else class_matrix(n, sigma, rng)
        rate, problem, target = instance(h, w)
        if best is None or rate > best[0]:
            best = (rate, h, w, problem, target)
    assert best is not None
    rate, h, w, problem, target = best
    for i in range(n):  # one pass of coordinate moves on the slowest
        for value in (mu, L, (mu + L) / 2):
            trial = h.copy()
            trial[i] = value
            found = instance(trial, w)
            if found[0] > rate:
                rate, problem, target = found
                h = trial
    return WorstCase(float(rate), problem, w, target, masks, trials)
