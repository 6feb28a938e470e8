"""Optimal symmetric weights of an undirected graph: the fastest mixing Markov chain and
the fastest distributed linear averaging, each solved as a semidefinite program.

For an undirected graph on n nodes with m edges ``e = {i, j}`` (``i < j``), let B be its
``(n, m)`` incidence matrix (column e is ``e_i - e_j``) and ``J = (1/n) 1 1^T``. Both rules
pick one weight ``w_e`` per edge and return

    ``W = I - B diag(w) B^T``

(``W[i, j] = W[j, i] = w_e`` on each edge, zero off the edges, ``W[i, i] = 1 - sum of
node i's edge weights``): symmetric, with ``W 1 = 1`` and ``1^T W = 1^T`` whatever w. They
choose w to minimise the second largest eigenvalue modulus (SLEM) of W, which is
``||W - J||_2`` for such a W and sets the rate of ``Z <- W Z`` towards the average
(``||W^k Z - J Z|| <= SLEM^k ||Z - J Z||``):

=========================  ===============================================================
rule                       problem
=========================  ===============================================================
``"fastest"``              minimise ``||W - J||_2`` over w subject to ``w >= 0`` and
(fastest mixing Markov     ``|B| w <= 1`` (W >= 0 entrywise: a symmetric doubly
chain, Boyd, Diaconis &    stochastic matrix, the transition matrix of a Markov chain on
Xiao 2004)                 the graph)
``"fdla"`` (fastest        minimise ``||W - J||_2`` over all real w (negative weights
distributed linear         allowed; W is symmetric with rows and columns summing to one,
averaging, Xiao & Boyd     but not always nonnegative), so its SLEM is at most that of
2004, symmetric case)      ``"fastest"``, itself at most that of ``"metropolis"``
=========================  ===============================================================

Both are the SDP ``minimise s`` subject to ``-s I <= I - J - B diag(w) B^T <= s I`` (two
``(n, n)`` linear matrix inequalities; ``"fastest"`` adds its ``m + m + n`` linear
inequalities) in the ``m + 1`` unknowns ``(w, s)``, solved with cvxpy (the Clarabel
interior-point solver, SCS when Clarabel fails). Along the directions in which the SLEM
grows only quadratically (a path's alternating weights, say) an interior-point solution
that is optimal to ``1e-9`` may sit ``1e-5`` away from the optimal weights, so the answer is
then centred: damped Newton steps (NumPy) to the analytic centre of the set whose SLEM is at
most the one found plus ``1e-12`` (and, for ``"fastest"``, of its linear constraints), a
few times over (the method of centres). This brings the weights to about ``1e-7`` of the
optimum (a path's weights 1/2 to ``1e-7``, a cycle's to ``1e-9``) and raises the SLEM by
``1e-10`` at most. Weights below ``1e-9`` in magnitude, before the centring (those edges stay
out of it) and after it, become exact zeros, ``"fastest"``'s negative rounding errors too;
the diagonal is ``1 - (off-diagonal row sum)``, so rows and columns sum to one to rounding
and ``"fastest"`` passes the doubly stochastic checks of :mod:`stochmix.mixing.checks` at
``1e-10``.

The optimum balances the second largest eigenvalue against the smallest, which sits at or
near ``-SLEM``: averaging alone gains the full SLEM, but a method that mixes and takes
gradient steps in the same iteration (gradient tracking, DGD) may need a smaller step with
these weights than with Metropolis' (whose eigenvalues are mostly positive).

Cost: one SDP per distinct graph. Clarabel works with the dense scaling matrix of each
``(n, n)`` inequality, about ``(n^2 / 2)^3`` operations per iteration, so a solve takes
about 0.02 s at n = 10, 0.1 s at n = 20, 5 to 10 s at n = 50 and minutes at n = 100 (m
matters little); the graph sequences solve each distinct graph once (a static or periodic
sequence once per period; a sequence of independent random graphs every step). A
disconnected graph (isolated nodes included) has SLEM 1 whatever the weights; the solver's
weights are kept, valid (symmetric, rows summing to one).

Needs cvxpy (``pip install "stochmix[analysis]"``), imported only when a weight is solved
for: ``import stochmix`` does not load it.

References:
    S. Boyd, P. Diaconis, L. Xiao. Fastest mixing Markov chain on a graph. SIAM Review
    46(4):667-689, 2004.

    L. Xiao, S. Boyd. Fast linear iterations for distributed averaging. Systems & Control
    Letters 53(1):65-78, 2004.

    S. Boyd, L. Vandenberghe. Convex Optimization. Cambridge University Press, 2004,
    sec. 11.2-11.3 (the log-barrier and its analytic centre, damped Newton steps).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .._lazy import optional_module
from .rowsparse import csr_from_triplets
from .weights import GraphLike, _undirected_links, _with_diagonal

__all__ = ["MAX_SDP_NODES", "fastest_mixing_weights", "fdla_weights"]

#: Weights of a smaller magnitude become exact zeros (rows sum to one: this is relative to
#: a row's total weight).
ZERO_WEIGHT = 1e-9
#: The most nodes "fastest" and "fdla" take: their semidefinite programs' memory and time
#: grow faster than n^3 (measured on a cycle: 60 nodes 5 s and 0.5 GB, 100 nodes 4 minutes
#: and 2.7 GB; 300 nodes asked for 16 GB).
MAX_SDP_NODES = 64
#: How far above the SDP's SLEM the centring may go (see the module's docstring).
_LEVEL_MARGIN = 1e-12
#: The share of Metropolis weights mixed into "fastest"'s solution so that the centring
#: starts strictly inside ``w > 0``, ``|B| w < 1`` (it raises the SLEM by at most this).
_INTERIOR_SHARE = 1e-10
_CENTRING_ROUNDS = 3
_NEWTON_STEPS = 60
_SOLVERS: tuple[tuple[str, dict], ...] = (
    ("CLARABEL", {}),
    ("SCS", {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 100_000}),
)


def fastest_mixing_weights(graph: GraphLike, n_nodes: int | None = None) -> sp.csr_array:
    """The fastest mixing symmetric Markov chain on an undirected graph (rule "fastest").

    Solves ``minimise ||W - (1/n) 1 1^T||_2`` over the symmetric nonnegative W with rows
    summing to one and ``W[i, j] = 0`` for each non-edge ``i != j``, as the SDP in the
    edge weights described in :mod:`stochmix.mixing.design` (Boyd, Diaconis & Xiao 2004).
    Its SLEM is at most Metropolis-Hastings' (which is one feasible W): on the path of n
    nodes every edge weighs 1/2 and the SLEM is ``cos(pi / n)``, on the complete graph
    ``W = (1/n) 1 1^T`` and the SLEM is 0.

    Args:
        graph: an undirected ``nx.Graph``, a ``nx.DiGraph`` holding every edge in both
            directions, or a square sparse matrix with symmetric nonzero pattern; nodes
            ``0..n-1``. Edge weights and self-loops are ignored.
        n_nodes: n, when some nodes are absent from the graph.

    Returns:
        ``(n, n)`` CSR array: symmetric, doubly stochastic (to rounding; entries below
        ``1e-9`` are exact zeros), nonzero off the diagonal only on edges.

    Raises:
        ValueError: ``graph`` is directed (some edge has no reverse), or has more than
            ``stochmix.mixing.design.MAX_SDP_NODES`` (64) nodes.
        ImportError: cvxpy is not installed (``pip install "stochmix[analysis]"``).
        RuntimeError: no SDP solver found a solution.

    References:
        S. Boyd, P. Diaconis, L. Xiao. Fastest mixing Markov chain on a graph. SIAM
        Review 46(4):667-689, 2004.
    """
    return _optimal_weights(graph, n_nodes, "fastest", nonnegative=True)


def fdla_weights(graph: GraphLike, n_nodes: int | None = None) -> sp.csr_array:
    """Fastest distributed linear averaging weights of an undirected graph (rule "fdla").

    Solves ``minimise ||W - (1/n) 1 1^T||_2`` over the symmetric W with ``W 1 = 1`` and
    ``W[i, j] = 0`` for each non-edge ``i != j``, the weights free in sign, as the SDP in
    the edge weights described in :mod:`stochmix.mixing.design` (Xiao & Boyd 2004, the
    symmetric case). Its SLEM is at most that of :func:`fastest_mixing_weights`; the
    price is that some weights (off the diagonal or on it) may be negative, so W is not
    always stochastic: a method whose ``needs`` say "doubly" stochastic refuses such a W
    unless run with ``check_mixing=False``.

    Args:
        graph: an undirected ``nx.Graph``, a ``nx.DiGraph`` holding every edge in both
            directions, or a square sparse matrix with symmetric nonzero pattern; nodes
            ``0..n-1``. Edge weights and self-loops are ignored.
        n_nodes: n, when some nodes are absent from the graph.

    Returns:
        ``(n, n)`` CSR array: symmetric, rows and columns summing to one (to rounding;
        entries below ``1e-9`` in magnitude are exact zeros), nonzero off the diagonal
        only on edges.

    Raises:
        ValueError: ``graph`` is directed (some edge has no reverse), or has more than
            ``stochmix.mixing.design.MAX_SDP_NODES`` (64) nodes.
        ImportError: cvxpy is not installed (``pip install "stochmix[analysis]"``).
        RuntimeError: no SDP solver found a solution.

    References:
        L. Xiao, S. Boyd. Fast linear iterations for distributed averaging. Systems &
        Control Letters 53(1):65-78, 2004.
    """
    return _optimal_weights(graph, n_nodes, "fdla", nonnegative=False)


def _optimal_weights(graph, n_nodes, rule: str, nonnegative: bool) -> sp.csr_array:
    dst, src, n = _undirected_links(graph, n_nodes, f"rule={rule!r}")
    if n > MAX_SDP_NODES:
        raise ValueError(
            f"graph has {n} nodes, above the {MAX_SDP_NODES} that rule={rule!r} solves: its "
            f"semidefinite program has two {n} x {n} matrix inequalities, whose solvers' "
            "memory and time grow faster than n^3 (minutes and GBs at 100 nodes); use "
            "rule='metropolis' for larger graphs"
        )
    once = dst < src  # each undirected edge once, as (tail, head) = (i, j) with i < j
    tail, head = dst[once], src[once]
    w = np.zeros(tail.size)
    if tail.size:
        w = _solve(tail, head, n, rule, nonnegative)
        if nonnegative:
            w = _feasible(tail, head, n, w)
        used = np.abs(w) >= ZERO_WEIGHT  # the edges the optimum leaves out stay out
        tail, head, w = tail[used], head[used], w[used]
        w = _centred(tail, head, n, w, nonnegative)
    w[np.abs(w) < ZERO_WEIGHT] = 0.0
    if nonnegative:
        w = _feasible(tail, head, n, w)
    keep = w != 0.0
    tail, head, w = tail[keep], head[keep], w[keep]
    # both directions of each edge, in the CSR order (row, column) that _with_diagonal takes
    rows, cols = np.concatenate([tail, head]), np.concatenate([head, tail])
    order = np.lexsort((cols, rows))
    values = np.concatenate([w, w])[order]
    diagonal = 1.0 - np.bincount(rows, weights=np.concatenate([w, w]), minlength=n)
    if nonnegative:
        diagonal = np.maximum(diagonal, 0.0)  # -1e-16 after _feasible's scaling
    return _with_diagonal(rows[order], cols[order], values, diagonal, n)


def _cvxpy(rule: str):
    return optional_module("cvxpy", "analysis", f"rule={rule!r} (a semidefinite program)")


def _incidence(tail: np.ndarray, head: np.ndarray, n: int) -> sp.csc_array:
    """The ``(n, m)`` incidence matrix: column e is ``e_tail - e_head``."""
    m = tail.size
    edges = np.arange(m)
    return sp.csc_array(
        (
            np.concatenate([np.ones(m), -np.ones(m)]),
            (np.concatenate([tail, head]), np.tile(edges, 2)),
        ),
        shape=(n, m),
    )


def _solve(tail, head, n: int, rule: str, nonnegative: bool) -> np.ndarray:
    """The SDP's edge weights, from the first solver of :data:`_SOLVERS` that solves it."""
    cp = _cvxpy(rule)
    B = _incidence(tail, head, n)
    w, s = cp.Variable(tail.size), cp.Variable()
    identity = np.eye(n)
    deviation = identity - np.full((n, n), 1.0 / n) - B @ cp.diag(w) @ B.T  # W - J
    constraints = [s * identity - deviation >> 0, s * identity + deviation >> 0]
    if nonnegative:
        constraints += [w >= 0, abs(B) @ w <= 1]
    problem = cp.Problem(cp.Minimize(s), constraints)
    failures = []
    installed = cp.installed_solvers()
    for solver, options in _SOLVERS:
        if solver not in installed:
            failures.append(f"{solver} is not installed")
            continue
        try:
            with warnings.catch_warnings():  # "inaccurate" solutions are checked below
                warnings.simplefilter("ignore")
                problem.solve(solver=solver, **options)
        except cp.error.SolverError as error:
            failures.append(f"{solver} failed: {error}")
            continue
        value = w.value
        if problem.status in ("optimal", "optimal_inaccurate") and value is not None:
            if np.all(np.isfinite(value)):
                return np.asarray(value, dtype=float)
        failures.append(f"{solver} ended with status {problem.status!r}")
    raise RuntimeError(
        f"rule={rule!r}: no SDP solver solved the {n}-node, {tail.size}-edge problem ("
        + "; ".join(failures)
        + ")"
    )


def _dense_laplacian(tail, head, n: int, w: np.ndarray) -> np.ndarray:
    """``B diag(w) B^T`` as a dense ``(n, n)`` array."""
    laplacian = csr_from_triplets(
        np.concatenate([tail, head, tail, head]),
        np.concatenate([head, tail, tail, head]),
        np.concatenate([-w, -w, w, w]),
        (n, n),
    )
    return laplacian.toarray()


def _slem(tail, head, n: int, w: np.ndarray) -> float:
    """``||I - B diag(w) B^T - J||_2``, from a dense symmetric eigen-solve."""
    deviation = np.eye(n) - 1.0 / n - _dense_laplacian(tail, head, n, w)
    return float(np.abs(np.linalg.eigvalsh(deviation)).max())


def _feasible(tail, head, n: int, w: np.ndarray) -> np.ndarray:
    """``w`` made feasible for "fastest": negatives to zero, then each edge's weight
    divided by the larger of its two nodes' totals where one exceeds 1 (symmetric, and
    every node's total <= 1 to rounding, so the diagonal is nonnegative)."""
    w = np.maximum(w, 0.0)
    totals = np.bincount(tail, weights=w, minlength=n) + np.bincount(head, weights=w, minlength=n)
    return w / np.maximum(1.0, np.maximum(totals[tail], totals[head]))


def _centred(tail, head, n: int, w: np.ndarray, nonnegative: bool) -> np.ndarray:
    """The SDP's weights moved to the analytic centre of ``{w' : SLEM(w') <= level}``
    (and of "fastest"'s linear constraints), ``level`` the current SLEM plus
    :data:`_LEVEL_MARGIN`, a few times (the method of centres); ``w`` itself when the
    graph is disconnected (SLEM 1 whatever the weights) or a step fails."""
    if tail.size == 0:
        return w
    if nonnegative:
        w = _feasible(tail, head, n, w)
        degree = np.bincount(tail, minlength=n) + np.bincount(head, minlength=n)
        metropolis = 1.0 / (1.0 + np.maximum(degree[tail], degree[head]))  # strictly inside
        w = (1.0 - _INTERIOR_SHARE) * w + _INTERIOR_SHARE * metropolis
    slem = _slem(tail, head, n, w)
    for _ in range(_CENTRING_ROUNDS):
        if slem > 1.0 - 1e-9:
            break
        moved = _newton_centre(tail, head, n, w, slem + _LEVEL_MARGIN, nonnegative)
        if moved is None:
            break
        moved_slem = _slem(tail, head, n, moved)
        if moved_slem > slem + _LEVEL_MARGIN:
            break
        improvement = slem - moved_slem
        w, slem = moved, moved_slem
        if improvement < 1e-13:
            break
    return w


def _barrier(tail, head, n: int, w, level: float, nonnegative: bool):
    """``(F^-1, G^-1, node slacks)`` at ``w`` with ``F = level I - (W - J)``, ``G = level I
    + (W - J)``, or None when ``w`` is outside the set (a Cholesky factorization fails or a
    linear constraint is not strict)."""
    laplacian = _dense_laplacian(tail, head, n, w)
    average = np.full((n, n), 1.0 / n)
    inverses = []
    for matrix in (
        (level - 1.0) * np.eye(n) + average + laplacian,
        (level + 1.0) * np.eye(n) - average - laplacian,
    ):
        try:
            factor = np.linalg.cholesky(matrix)
        except np.linalg.LinAlgError:
            return None
        inverse_factor = np.linalg.inv(factor)
        inverses.append(inverse_factor.T @ inverse_factor)
    slack = None
    if nonnegative:
        slack = 1.0 - np.diag(laplacian)
        if np.any(w <= 0.0) or np.any(slack <= 0.0):
            return None
    return inverses[0], inverses[1], slack


def _newton_centre(tail, head, n: int, w, level: float, nonnegative: bool):
    """Damped Newton steps maximising ``log det F + log det G`` (and, for "fastest",
    ``sum log w_e + sum log(1 - (|B| w)_i)``), F and G as in :func:`_barrier`: the
    analytic centre of the set where the SLEM is at most ``level``. None when ``w`` is
    not strictly inside."""
    state = _barrier(tail, head, n, w, level, nonnegative)
    if state is None:
        return None
    for _ in range(_NEWTON_STEPS):
        f_inverse, g_inverse, slack = state
        # K[e, f] = b_e^T X b_f for X = F^-1, G^-1, gathered from X's entries
        kf = _edge_gram(f_inverse, tail, head)
        kg = _edge_gram(g_inverse, tail, head)
        gradient = np.diag(kf) - np.diag(kg)
        hessian = kf * kf + kg * kg  # minus the barrier's Hessian: positive definite
        if nonnegative:
            on_nodes = 1.0 / slack[tail] + 1.0 / slack[head]
            gradient += 1.0 / w - on_nodes
            squared = 1.0 / slack**2
            hessian += np.diag(1.0 / w**2)
            hessian += _node_coupling(squared, tail, head)
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            return w
        decrement = float(gradient @ step)
        if not decrement >= 1e-10:  # converged (or NaN)
            break
        length = 1.0 / (1.0 + np.sqrt(decrement))  # inside the Dikin ellipsoid
        for _ in range(30):
            trial = w + length * step
            moved = _barrier(tail, head, n, trial, level, nonnegative)
            if moved is not None:
                break
            length /= 2.0
        else:
            break
        w, state = trial, moved
    return w


def _edge_gram(inverse: np.ndarray, tail, head) -> np.ndarray:
    """``B^T X B`` for a symmetric ``(n, n)`` X, from X's entries: ``(m, m)``."""
    return (
        inverse[np.ix_(tail, tail)]
        - inverse[np.ix_(tail, head)]
        - inverse[np.ix_(head, tail)]
        + inverse[np.ix_(head, head)]
    )


def _node_coupling(weights: np.ndarray, tail, head) -> np.ndarray:
    """``|B|^T diag(weights) |B|`` as a dense ``(m, m)`` array: the Hessian of
    ``-sum_i log(1 - (|B| w)_i)`` when ``weights`` are the slacks' inverse squares."""
    unsigned = abs(_incidence(tail, head, weights.size))
    return (unsigned.T @ sp.diags_array(weights) @ unsigned).toarray()
