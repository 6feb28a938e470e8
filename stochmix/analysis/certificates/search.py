"""The other side of a certificate: the slowest quadratic of the class a search finds
(:func:`worst_quadratic`), its exact rate measured by the library's own operators
(:func:`~stochmix.analysis.periodic_rate`). A certificate is sound when no instance is
slower than it, and tight by the gap between the two.

Over the sigma-class (every sequence of W_k with ``W_k 1 = 1``, ``1^T W_k = 1^T`` and
``||W_k - 11^T/n|| <= sigma``) the search draws symmetric matrices, non-symmetric ones
(whose disagreement eigenvalues are complex, ``sigma e^{i theta}``) and periodic sequences
of them, each written ``W = 11^T/n + sigma Q S Q^T`` with Q an orthonormal basis of the
disagreement directions and ``||S|| <= 1``."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.optimize import minimize_scalar

from ..._validate import as_bool, as_int, choice
from ...problems import Quadratic
from ..linear.periodic import periodic_rate
from .certify import (
    _is_decentralized,
    _masks,
    check_class,
    check_mixing_argument,
    method_for_mixing,
)
from .system import own_tuning, pinned

__all__ = ["MATRICES", "WorstCase", "class_matrix", "worst_quadratic"]

#: What :func:`worst_quadratic` searches over the sigma-class (``matrices=``): symmetric
#: static matrices only (the earlier search: it misses the complex disagreement
#: eigenvalues that make EXTRA, NIDS and exact diffusion slowest), static matrices
#: symmetric or not, or those and periodic sequences of ``period`` of them (the default).
MATRICES = ("symmetric", "static", "periodic")


@dataclass
class WorstCase:
    """The slowest instance found: its exact rate per round, the quadratic (one curvature
    per client or node, in [mu, L]) and, over a class of mixing matrices, the matrix W
    (n, n), or the periodic sequence (p, n, n) whose iteration k mixes with ``W[k % p]``.
    ``method`` mixes with it (rule "natural" on its entries) and ``masks`` (p, n) is the
    pattern :func:`~stochmix.analysis.periodic_rate` measured it with:
    ``periodic_rate(method, problem, masks).per_round == rate``."""

    rate: float
    problem: Quadratic
    mixing: np.ndarray | None
    method: object
    masks: np.ndarray
    tried: int


def _basis(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, n - 1) orthonormal columns orthogonal to the ones vector."""
    basis, _ = np.linalg.qr(np.hstack([np.ones((n, 1)), rng.standard_normal((n, n - 1))]))
    return basis[:, 1:]


def _rotation(m: int, theta: float) -> np.ndarray:
    """Every plane (0, 1), (2, 3), ... of R^m rotated by theta (the last axis kept when m
    is odd): eigenvalues ``e^{+-i theta}``, spectral norm 1."""
    out = np.eye(m)
    c, s = np.cos(theta), np.sin(theta)
    for i in range(0, m - 1, 2):
        out[i : i + 2, i : i + 2] = [[c, -s], [s, c]]
    return out


def _orthogonal(m: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((m, m)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _contraction(m: int, rng: np.random.Generator) -> np.ndarray:
    """A random (m, m) matrix of spectral norm 1, generally not symmetric: orthogonal
    (Haar), a rotation of every plane by one angle in a random basis, or ``U diag(s) V^T``
    with singular values in [0, 1] reaching 1."""
    kind = rng.integers(3)
    if kind == 0:
        return _orthogonal(m, rng)
    if kind == 1:
        v = _orthogonal(m, rng)
        return v @ _rotation(m, rng.uniform(0, np.pi)) @ v.T
    s = rng.uniform(0, 1, size=m)
    s[rng.integers(m)] = 1.0
    return (_orthogonal(m, rng) * s) @ _orthogonal(m, rng)


def class_matrix(
    n: int, sigma: float, rng: np.random.Generator, *, symmetric: bool = True
) -> np.ndarray:
    """A random matrix of the sigma-class, shape (n, n): ``W 1 = 1``, ``1^T W = 1^T`` and
    the spectral norm of ``W - 11^T/n`` is sigma (entries may be negative: the class, as
    the certificate's analysis, asks for no more).

    ``W = 11^T/n + sigma Q S Q^T``, Q an orthonormal basis of the disagreement directions.
    ``symmetric=True`` (default): ``S = diag(s)`` in Q's basis with ``s`` in [-1, 1]
    reaching 1 or -1 (half the time every ``s`` at +-1). ``symmetric=False``: S of norm 1
    and generally not symmetric (orthogonal, one rotation angle in every plane, or singular
    values in [0, 1]), so the disagreement eigenvalues are complex."""
    symmetric = as_bool(symmetric, "symmetric")
    q = _basis(n, rng)
    if not symmetric:
        return np.full((n, n), 1.0 / n) + sigma * q @ _contraction(n - 1, rng) @ q.T
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


def _mixing_with(method, matrices: np.ndarray):
    """A copy of ``method`` mixing with W = ``matrices`` (n, n), or at iteration k with
    ``matrices[k % p]`` (p, n, n); every rule "natural", the stochasticity check off."""
    from ...mixing.sequences import PeriodicSequence

    if matrices.ndim == 2:
        target = copy.copy(method_for_mixing(method, matrices))
    else:
        target = copy.copy(method)
        target.graphs = PeriodicSequence(
            [nx.from_numpy_array(w.T, create_using=nx.DiGraph) for w in matrices]
        )
        for attribute in type(method).needs:
            setattr(target, attribute, "natural")
    target.check_mixing = False
    return pinned(target, own_tuning(method))  # tuned for its own graphs, as certify does


def _search_options(sigma, matrices, period, refine) -> tuple[str, int, int]:
    """``(matrices, period, refine)`` checked, with their defaults; a ValueError naming
    the argument for a bad value, or for any of them given without a sigma."""
    if sigma is None:
        given = {"matrices": matrices, "period": period, "refine": refine}
        named = {k: v for k, v in given.items() if v is not None}
        if named:
            raise ValueError(
                f"{', '.join(named)} search the class of mixing matrices: give mixing=sigma "
                f"(got {', '.join(f'{k}={v!r}' for k, v in named.items())})"
            )
        return "symmetric", 1, 0
    matrices = "periodic" if matrices is None else choice(matrices, "matrices", MATRICES)
    if period is not None and matrices != "periodic":
        raise ValueError(
            f"period is the length of the periodic sequences, searched with "
            f"matrices='periodic' (got period={period!r}, matrices={matrices!r})"
        )
    period = 2 if period is None else as_int(period, "period", minimum=2)
    refine = 60 if refine is None else as_int(refine, "refine", minimum=0)
    return matrices, period if matrices == "periodic" else 1, refine


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
    matrices: str | None = None,
    period: int | None = None,
    refine: int | None = None,
) -> WorstCase:
    """The slowest diagonal quadratic of the class (each part ``h_i / 2 (x - c_i)^2`` with
    ``h_i`` in [mu, L]) a random search finds, and its exact asymptotic rate per round
    (:func:`~stochmix.analysis.periodic_rate`: the spectral radius of the round's map).

    The search draws ``trials`` instances (curvatures at the ends of [mu, L], inside it, or
    mixed) and then moves each curvature of the slowest to mu, L or the middle while that
    slows it down. Arguments as :func:`certify`.

    With ``mixing=sigma`` (on ``n_clients`` nodes, default 6) every instance also draws
    mixing from the class, of the kinds ``matrices`` names (``"symmetric"``, ``"static"``
    or ``"periodic"``, the default: every kind): a symmetric W (:func:`class_matrix`), a
    non-symmetric one (``symmetric=False``), or a periodic sequence of ``period``
    (default 2) matrices of either kind. Unless ``matrices="symmetric"`` it then tries
    equal curvatures (mu, L, the middle) with every disagreement eigenvalue at
    ``sigma e^{+-i theta}`` (a rotation, theta on a grid, then refined), and ends with
    ``refine`` (default 60) random moves of the slowest instance's matrices within the
    class (for ``"periodic"``, as many again from the slowest static matrix repeated
    ``period`` times, each its own move), each kept when it slows the instance down.
    ``matrices="symmetric"`` with ``refine=0`` is the search before non-symmetric
    matrices were tried.

    Raises:
        ValueError: mu <= 0 or mu > L, a sigma outside [0, 1), a mixing for a federated
            method, a participation with a sigma, an unknown ``matrices``, ``period`` < 2
            or with a static search, ``refine`` < 0, or ``matrices``, ``period`` or
            ``refine`` without a sigma, each named, before any search.
    """
    L, mu = check_class(L, mu)
    trials = as_int(trials, "trials", minimum=1)
    sigma = check_mixing_argument(method, mixing, participation)
    matrices, period, refine = _search_options(sigma, matrices, period, refine)
    rng = np.random.default_rng(seed)
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
    tried = 0

    def instance(h, w):
        nonlocal tried
        tried += 1
        problem = Quadratic(rng.standard_normal((n, 1)), h[:, None])
        if w is None:
            return periodic_rate(method, problem, masks).per_round, problem, method, masks
        target = _mixing_with(method, w)
        pattern = np.ones((1 if w.ndim == 2 else w.shape[0], n), dtype=bool)
        return periodic_rate(target, problem, pattern).per_round, problem, target, pattern

    kinds = {"symmetric": 1, "static": 2, "periodic": 3}[matrices]
    best = None
    for _ in range(trials):
        h = _curvatures(n, L, mu, rng)
        w = None if sigma is None else _draw(n, sigma, rng, int(rng.integers(kinds)), period)
        found = instance(h, w)
        if best is None or found[0] > best[0][0]:
            best = (found, h, w)
    assert best is not None
    if sigma is not None and matrices != "symmetric":
        best = _rotations(instance, best, n, sigma, L, mu, rng)
    found, h, w = best
    for i in range(n):  # one pass of coordinate moves on the slowest
        for value in (mu, L, (mu + L) / 2):
            trial = h.copy()
            trial[i] = value
            moved = instance(trial, w)
            if moved[0] > found[0]:
                found, h = moved, trial
    if sigma is not None and w is not None and refine and sigma > 0:
        q = _basis(n, rng)
        starts = [w] if w.ndim == 3 or period == 1 else [w, np.stack([w] * period)]
        for start in starts:
            found, w = _climb(instance, (found, w), h, start, q, sigma, matrices, refine, rng)
    rate, problem, target, pattern = found
    return WorstCase(float(rate), problem, w, target, pattern, tried)


def _draw(n: int, sigma: float, rng, kind: int, period: int) -> np.ndarray:
    """A matrix of the class: symmetric (kind 0), not (1), or a sequence (p, n, n) (2)."""
    if kind < 2:
        return class_matrix(n, sigma, rng, symmetric=kind == 0)
    return np.stack(
        [class_matrix(n, sigma, rng, symmetric=rng.random() < 0.3) for _ in range(period)]
    )


def _rotations(instance, best, n: int, sigma: float, L: float, mu: float, rng):
    """Equal curvatures with every disagreement eigenvalue at ``sigma e^{+-i theta}``:
    theta on a grid of (0, pi], the best refined by a bounded scalar search."""
    q = _basis(n, rng)
    j = np.full((n, n), 1.0 / n)

    def w_of(theta):
        return j + sigma * q @ _rotation(n - 1, theta) @ q.T

    grid = np.linspace(0, np.pi, 13)[1:]
    top = None
    for value in (mu, L, (mu + L) / 2):
        h = np.full(n, value)
        for theta in grid:
            found = instance(h, w_of(theta))
            if top is None or found[0] > top[0]:
                top = (found[0], value, theta)
    assert top is not None
    h = np.full(n, top[1])
    step = grid[1] - grid[0]
    out = minimize_scalar(
        lambda t: -instance(h, w_of(t))[0],
        bounds=(top[2] - step, top[2] + step),
        method="bounded",
        options={"xatol": 1e-5, "maxiter": 25},
    )
    for theta in (top[2], float(out.x)):
        w = w_of(theta)
        found = instance(h, w)
        if found[0] > best[0][0]:
            best = (found, h, w)
    return best


def _project(s: np.ndarray, symmetric: bool) -> np.ndarray:
    """The nearest matrix of spectral norm <= 1 (symmetric ones kept symmetric)."""
    if symmetric:
        values, vectors = np.linalg.eigh((s + s.T) / 2)
        return (vectors * np.clip(values, -1.0, 1.0)) @ vectors.T
    u, values, vt = np.linalg.svd(s)
    return (u * np.minimum(values, 1.0)) @ vt


def _climb(instance, best, h, start, q, sigma, matrices, budget: int, rng):
    """Random moves of every matrix of ``start`` within the class (``S + scale G``
    projected on the unit ball, in the basis q), kept when they slow the instance down
    below ``best = (found, w)``; the scale halves every third of the budget. Returns the
    slowest ``(found, w)``."""
    found, w = best
    j = np.full(start.shape[-1], 1.0 / start.shape[-1])
    s = np.stack([q.T @ (m - j) @ q / sigma for m in (start if start.ndim == 3 else start[None])])
    symmetric = matrices == "symmetric"
    scale = 0.3
    for step in range(budget):
        moved = np.stack([_project(m + scale * rng.standard_normal(m.shape), symmetric) for m in s])
        candidate = np.stack([j + sigma * q @ m @ q.T for m in moved])
        candidate = candidate if start.ndim == 3 else candidate[0]
        trial = instance(h, candidate)
        if trial[0] > found[0]:
            found, s, w = trial, moved, candidate
        if (step + 1) % max(budget // 3, 1) == 0:
            scale /= 2
    return found, w
