"""Worst-case linear rates over a function class: :func:`certify` and its
:class:`Certificate`.

What is certified: for every objective ``f = sum_i w_i f_i`` whose parts ``f_i`` are
L-smooth and mu-strongly convex (each its own: heterogeneous clients or nodes), started as
the library starts the method (trackers at the first gradients), the state's distance to
the method's fixed point at the minimiser falls at least as fast as ``C rho^k`` per round
k, ``C`` fixed by the Lyapunov matrix. A decentralized method is certified over one
mixing matrix (its own graphs, a graph or a matrix), or over the class of every sequence of
doubly stochastic W_k with ``||W_k - 11^T/n|| <= sigma``, with an SDP whose size does not
depend on n.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ..._validate import _show, as_bool, as_float, as_int, as_real_array
from ...engine import Method
from .exactness import (
    Unverified,
    disconnected_reason,
    end_reason,
    sigma_probe,
    structural_reason,
)
from .lmi import Solution, require_cvxpy
from .rate import find_rate
from .symmetry import instance_rate, make_feasibility, network_symmetry
from .system import NotLinearError, RoundSystem, agent_systems, round_system, spectral_systems

__all__ = [
    "ACROSS_ROUNDS_CALLS",
    "ACROSS_ROUNDS_ROWS",
    "MAX_CLIENTS",
    "Certificate",
    "certify",
    "method_for_mixing",
]

#: The most clients (or nodes) the whole-round SDP takes: its Lyapunov matrix has one row
#: per state row of the round (clients x blocks). A round that a shift of the nodes maps
#: to itself (circulant W, symmetric patterns) is solved by Fourier blocks: about 1 s at
#: 32 nodes on two cores (:mod:`~stochmix.analysis.certificates.symmetry`), but the full
#: LMI's data kept for the check grows as n^4 (by count, 3.5 GB for gradient tracking on a
#: one-peer exponential sequence of 64 nodes). Other rounds solve the full one-round LMI
#: by a structured interior-point method (:mod:`~stochmix.analysis.certificates.structured`):
#: 0.1 to 0.5 s a solve at 10 nodes, 1 to 6 s at 20 (Clarabel: 3 to 9 s, and 505 s).
MAX_CLIENTS = 32

#: With ``across_rounds=None``, the constraints across rounds are used when no client or
#: node asks more gradients than this in a round (the lifted SDP has an inequality per
#: ordered pair of a part's points over two rounds: quadratic in its calls).
ACROSS_ROUNDS_CALLS = 2

#: With ``across_rounds=None``, a whole-network round without a shift symmetry uses the
#: constraints across rounds only when their LMI (state + two rounds' calls) has at most
#: this many rows: that SDP is solved by Clarabel as one dense LMI (about 1 s at 40 rows,
#: 30 s at 70 on two cores), while the one-round LMI has its structured solver
#: (:mod:`~stochmix.analysis.certificates.structured`).
ACROSS_ROUNDS_ROWS = 40

#: Entries of certificates built on this module, set by theirs when the package is imported
#: (so that this module imports none of them): ``"mean_square"``, the mean-square
#: certificate of :mod:`~stochmix.analysis.certificates.expectation`.
_ENTRIES: dict[str, Any] = {}


@dataclass
class Certificate:
    """A certified worst-case rate, or why there is none.

    Attributes:
        method: the method's name.
        rate: rho per round (per iteration for decentralized methods): the error falls at
            least as ``C rho^k``. 1.0 when nothing below 1 is certified.
        status: "certified" (rate < 1), "inexact" (the method has no fixed point at the
            minimiser for every objective of the class, or its run, started as
            :func:`stochmix.run` starts it, ends elsewhere: no linear rate to x_star
            exists), or "not certified" (the SDP found no certificate below 1: the method
            may diverge for some objective of the class, or the analysis is too loose; or
            where the run ends could not be computed).
        reason: a sentence saying why, for the last two.
        L, mu: the class. sigma: the spectral bound of the mixing class (None: one matrix
            or none). period: rounds in the analysed pattern; ``rate_per_period =
            rate ** period``.
        lyapunov: the certificate's P matrices (one per system; over the state and the
            round's gradients with constraints across rounds); multipliers: the gradients'
            (one per call and per pair of calls of one client; with constraints across
            rounds one per ordered pair of points of one part over two rounds, and
            "function_values" and "positivity", see
            :mod:`~stochmix.analysis.certificates.lifted`), then the mixing's; margin: the
            largest eigenvalue of the LMI at ``rate`` over its P's scale (<= 0; the
            solver's tolerance is about 1e-8).
        solves, seconds: SDP solves of the bisection and their time (a lifted solve and
            the one-round LMI tried after it at a rate it does not certify count two).
    """

    method: str
    rate: float
    status: str
    L: float
    mu: float
    sigma: float | None = None
    period: int = 1
    reason: str = ""
    lyapunov: list = field(default_factory=list, repr=False)
    multipliers: dict = field(default_factory=dict, repr=False)
    margin: float = float("nan")
    solves: int = 0
    seconds: float = 0.0
    state_size: int = 0

    @property
    def certified(self) -> bool:
        return self.status == "certified"

    @property
    def rate_per_period(self) -> float:
        return self.rate**self.period

    def iterations(self, accuracy: float = 1e-6) -> float:
        """Rounds the certificate needs to shrink the error by ``accuracy`` (inf if none)."""
        if not self.certified or self.rate <= 0:
            return 0.0 if self.rate == 0 else float("inf")
        return float(np.log(accuracy) / np.log(self.rate))

    def __str__(self) -> str:
        where = "" if self.sigma is None else f", sigma={self.sigma:g}"
        head = f"{self.method} (L={self.L:g}, mu={self.mu:g}{where})"
        if self.certified:
            return f"{head}: certified rate {self.rate:.6f} per round (margin {self.margin:.1e})"
        return f"{head}: {self.status}: {self.reason}"


def is_sigma(mixing) -> bool:
    """Whether ``mixing`` is a number: the spectral bound sigma of a class of matrices."""
    return isinstance(mixing, (int, float, np.floating)) and not isinstance(mixing, bool)


def _is_decentralized(method) -> bool:
    from ...algorithms.decentralized_base import DecentralizedMethod

    return isinstance(method, DecentralizedMethod)


def method_for_mixing(method: Any, mixing) -> Any:
    """A copy of a decentralized ``method`` that mixes with ``mixing``: a networkx graph
    (with the method's weight rules) or a square matrix (every rule reads its entries:
    rule "natural" on the weighted graph of the matrix)."""
    from ...mixing.sequences import GraphSequence, StaticSequence

    out = copy.copy(method)
    if isinstance(mixing, GraphSequence):
        out.graphs = mixing
        return out
    if isinstance(mixing, nx.Graph):
        out.graphs = StaticSequence(mixing)
        return out
    matrix = mixing.toarray() if sp.issparse(mixing) else as_real_array(mixing, "mixing")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"mixing must be a square matrix, got shape {matrix.shape}")
    graph = nx.from_numpy_array(matrix.T, create_using=nx.DiGraph)  # edge j -> i: W[i, j]
    out.graphs = StaticSequence(graph)
    for attribute in type(method).needs:
        setattr(out, attribute, "natural")
    return out


def _symmetric_spectrum(method) -> np.ndarray | None:
    """The distinct eigenvalues of the one symmetric matrix a decentralized method mixes with
    (graphs of period 1, one weight rule), the largest first; None when there is not one
    such matrix (then the whole network is analysed)."""
    graphs = method.graphs
    rules = {getattr(method, attribute) for attribute in type(method).needs}
    if graphs.period != 1 or len(rules) != 1:
        return None
    w = graphs.matrix(0, rules.pop())
    w = w.toarray() if sp.issparse(w) else np.asarray(w)
    if not np.allclose(w, w.T, atol=1e-12):
        return None
    values = np.sort(np.linalg.eigvalsh(w))[::-1]
    if abs(values[0] - 1.0) > 1e-9 or (values.size > 1 and values[1] > 1.0 - 1e-9):
        return None  # not stochastic, or disconnected: the whole network says so
    distinct = [values[0]]
    for value in values[1:]:
        if distinct[-1] - value > 1e-9:
            distinct.append(value)
    return np.array(distinct)


def _masks(participation, n: int | None) -> np.ndarray:
    if participation is None:
        return np.ones((1, 2 if n is None else n), dtype=bool)
    masks = getattr(participation, "masks_array", None)
    if masks is None and hasattr(participation, "probabilities"):
        p = participation.probabilities
        if p is not None and np.all(np.asarray(p) == 1.0):
            masks = np.ones((1, int(participation.n_clients)), dtype=bool)
    if masks is None and not hasattr(participation, "probabilities"):
        masks = participation
    if masks is None:
        raise ValueError(
            f"participation must be Full(n), a recorded or periodic pattern, or a (period, n) "
            f"boolean array of masks, got {participation!r}: a random participation has no "
            "fixed pattern to certify (mean_square=True certifies the mean-square error)"
        )
    arr = np.asarray(masks)
    if arr.dtype != np.bool_:
        raise ValueError(f"participation masks must be boolean, got dtype {arr.dtype}")
    arr = arr[None, :] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.shape[0] < 1 or not arr.any(axis=0).all():
        raise ValueError(
            "participation must be (period, n) masks in which every client takes part at "
            f"least once a period, got shape {arr.shape}"
            + ("" if arr.ndim != 2 else f" with clients {np.flatnonzero(~arr.any(axis=0))} never")
        )
    return arr


def certify(
    method: Method,
    *,
    L,
    mu,
    mixing=None,
    participation=None,
    n_clients=None,
    weights=None,
    pairs: bool = True,
    across_rounds: bool | None = None,
    tol: float = 1e-7,
    solver: str | None = None,
    mean_square: bool = False,
) -> Certificate:
    """The worst-case linear rate of ``method`` over every objective whose parts are
    L-smooth and mu-strongly convex.

    The method's own phases give its round as a linear system in feedback with the
    gradients (:mod:`~stochmix.analysis.certificates.system`); the rate is the smallest rho
    for which a quadratic Lyapunov function falls by rho^2 a round under sector constraints
    on every gradient call (:mod:`~stochmix.analysis.certificates.lmi`), found by bisection.

    Args:
        method: a method linear in its state with gradients at its model rows (not push-sum,
            not a prox, compression or adaptive step).
        L, mu: smoothness and strong convexity of every part, 0 < mu <= L.
        mixing: decentralized methods only. None: the method's own graphs (one period of a
            periodic sequence); a number sigma in [0, 1): every sequence of doubly
            stochastic W_k with ``||W_k - 11^T/n|| <= sigma`` (an SDP of the size of the
            method's blocks, whatever n); a networkx graph (with the method's rules) or a
            square matrix: that one matrix.
        participation: None (everyone), ``Full(n)``, a process with a fixed pattern
            (``masks_array``) or a (period, n) boolean array: the rounds of one period are
            certified as one map, the rate given per round.
        n_clients: clients of a federated method when ``participation`` does not say
            (default 2: the smallest number with heterogeneous clients).
        weights: the objective's positive weights over the parts (default equal; scaled
            to sum 1); the minimiser the method's run must reach is that of
            ``sum_i weights_i f_i``.
        pairs: add the inequalities between two gradient calls of one client in a round
            (tighter for local steps; off gives the sector constraints alone, and no
            constraints across rounds).
        across_rounds: with ``pairs``, certify with function values and the interpolation
            inequalities between the calls of two consecutive rounds as well
            (:mod:`~stochmix.analysis.certificates.lifted`: never looser, tight for heavy
            ball and Nesterov's method, where the one-round LMI is loose or refuses).
            None (default): on when no client or node asks more than
            two gradients a round (``ACROSS_ROUNDS_CALLS``) (momentum and accelerated
            methods, every per-agent decentralized system: about twice the solves of the
            one-round LMI), off for local steps (SCAFFOLD with K = 3 under a two-round
            pattern: 3 s one-round, 2 minutes lifted); True or False: always or never.
            Ignored when mu = L.
        tol: bisection tolerance on rho, in (0, 1).
        solver: an installed cvxpy solver of semidefinite programs (default Clarabel,
            else SCS).
        mean_square: certify the mean-square error under a random ``participation``
            process instead (Bernoulli, UniformSample, ...): a rate in expectation,
            :func:`~stochmix.analysis.certificates.certify_mean_square` (no constraints
            across rounds: ``across_rounds`` must be None or False).

    Returns:
        Certificate: the rate and its status ("certified", "inexact", "not certified").

    Exactness is part of every certificate (module ``certificates.exactness``): before any
    solve, the round must have a fixed point at the minimiser and
    the run, started as :func:`stochmix.run` starts it (round 0's own phases included),
    must end at ``argmin sum_i weights_i f_i`` of a probe quadratic with heterogeneous
    minimisers, under the given weights, mixing and participation; otherwise the status
    is "inexact" with a reason naming what differs (the uniform vs the weighted
    minimiser, the invariant the start breaks, the mixing matrix's stationary vector).

    Raises:
        ValueError: mu <= 0 or mu > L, tol outside (0, 1), a solver that is not an
            installed SDP solver, sigma outside [0, 1), a mixing for a federated method, a
            random participation, per-client local steps that are not one per client,
            more than :data:`MAX_CLIENTS` clients or nodes on the whole-round SDP, or a
            method that is not linear in its state (named, with the reason), before any
            solve.
        ImportError: cvxpy missing (``pip install "stochmix[analysis]"``).

    References:
        - L. Lessard, B. Recht, A. Packard, "Analysis and design of optimization algorithms
          via integral quadratic constraints", SIAM J. Optim. 26(1), 2016.
        - A. Sundararajan, B. Van Scoy, L. Lessard, "Analysis and design of first-order
          distributed optimization algorithms over time-varying graphs", IEEE TCNS 7(4),
          2020.
        - A. Taylor, J. Hendrickx, F. Glineur, "Smooth strongly convex interpolation and
          exact worst-case performance of first-order methods", Math. Program. 161, 2017.
    """
    L, mu = check_class(L, mu)
    pairs = as_bool(pairs, "pairs")
    across_rounds = as_bool(across_rounds, "across_rounds", optional=True)
    if as_bool(mean_square, "mean_square"):
        certify_mean_square = _ENTRIES["mean_square"]
        if across_rounds:
            raise ValueError(
                "across_rounds: the mean-square certificate uses the one-round constraints "
                "only, got across_rounds=True with mean_square=True"
            )
        return certify_mean_square(
            method, L=L, mu=mu, participation=participation, mixing=mixing,
            n_clients=n_clients, weights=weights, pairs=pairs, tol=tol, solver=solver,
        )  # fmt: skip
    tol, solver, decentralized = check_entry(method, tol, solver)
    sigma = check_mixing_argument(method, mixing, participation)
    if decentralized and (weights is not None or n_clients is not None):
        raise ValueError(
            f"weights and n_clients are for federated methods; {method.name}'s nodes are its "
            f"graph's and its objective their average (got weights={_show(weights)}, "
            f"n_clients={n_clients!r})"
        )
    start = time.perf_counter()
    pieces: list[RoundSystem] = []
    one: Any = None
    symmetry, lower = None, 0.0
    spectrum = np.ones(1)
    if sigma is not None:
        pieces = list(agent_systems(method))
    elif decentralized and participation is None:
        one = method if mixing is None else method_for_mixing(method, mixing)
        found_spectrum = _symmetric_spectrum(one)
        if found_spectrum is not None:
            spectrum = found_spectrum
            try:
                pieces = spectral_systems(one, spectrum)
            except NotLinearError:  # no per-agent form: the whole network below
                pieces = []
    if pieces:
        pieces = [piece.normalized(L) for piece in pieces]  # the class [mu / L, 1]
        targets = [(0, np.zeros(pieces[0].calls), np.ones(pieces[0].calls), "consensus")]
        targets += [
            (i, np.ones(piece.calls), np.zeros(piece.calls), "drift")
            for i, piece in enumerate(pieces[1:], start=1)
        ]
        reason = structural_reason(pieces, targets, method.name)
        if sigma is not None:  # the run's end over the class: a probe of two W's of it
            probe, probe_masks = sigma_probe(method, sigma)
        elif one.graphs.n_nodes > MAX_CLIENTS:  # over the class of this W, not n x n dense
            probe, probe_masks = sigma_probe(method, float(np.abs(spectrum[1:]).max(initial=0)))
        else:
            probe, probe_masks = one, np.ones((1, one.graphs.n_nodes), dtype=bool)
        probe_weights = np.full(probe_masks.shape[1], 1.0 / probe_masks.shape[1])
        systems = [piece.reduced() for piece in pieces]
        calls = pieces[0].calls
        pair_list = [(a, b) for a in range(calls) for b in range(a + 1, calls)]
        period = 1
    else:
        if decentralized:
            target: Any = method if mixing is None else method_for_mixing(method, mixing)
            graphs = target.graphs
            if graphs.period is None:
                raise ValueError(
                    f"mixing: {method.name}'s graphs ({type(graphs).__name__}) have no period, "
                    "so no finite pattern of mixing matrices describes the run; give "
                    "mixing=sigma to certify over every W_k with ||W_k - 11^T/n|| <= sigma"
                )
            n = graphs.n_nodes
            masks = _masks(participation, n)
            if participation is None:
                masks = np.ones((graphs.period, n), dtype=bool)
        else:
            target = method
            if n_clients is not None:
                n_clients = as_int(n_clients, "n_clients", minimum=1)
            masks = _masks(participation, n_clients)
        n = masks.shape[1]
        if participation is not None:
            argument = "participation"
        else:
            argument = (
                ("mixing" if mixing is not None else "graphs") if decentralized else "n_clients"
            )
        _check_size(method, n, decentralized, argument)
        w = np.full(n, 1.0 / n) if weights is None else as_real_array(weights, "weights")
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"weights must be {n} positive numbers, got {_show(weights)}")
        w = w / w.sum()
        period = masks.shape[0]
        system = round_system(target, masks, period).normalized(L)  # the class [mu / L, 1]
        targets = [(0, np.zeros(system.calls), np.ones(system.calls), "consensus")]
        for i in range(1, n):  # a basis of the gradients at a minimiser: sum_i w_i g_i = 0
            g = np.zeros(n)
            g[i], g[0] = 1.0, -w[i] / w[0]
            targets.append((0, g[system.clients], np.zeros(system.calls), "drift"))
        reason = structural_reason([system], targets, method.name)
        if not reason and decentralized:
            reason = disconnected_reason(target)
        probe, probe_masks, probe_weights = target, masks, w
        systems = [system.reduced()]
        symmetry = network_symmetry(target, system, n)  # a circulant round: by blocks
        lower = instance_rate(systems[0], mu / L)  # no certificate beats an instance
        who = system.clients
        pair_list = [
            (a, b) for a in range(who.size) for b in range(a + 1, who.size) if who[a] == who[b]
        ]
    if not pairs:
        pair_list = []
    out = Certificate(method.name, 1.0, "inexact", L, mu, sigma, period, reason)
    out.state_size = sum(s.A.shape[0] for s in systems)
    if not reason:  # exactness, always: where the run, started as run starts it, ends
        try:
            out.reason = end_reason(probe, probe_masks, probe_weights, L, mu)
        except Unverified as error:
            out.status = "not certified"
            out.reason = f"{error}; no rate is certified without knowing the run ends at x_star"
    if out.reason:
        out.seconds = time.perf_counter() - start
        return out
    require_cvxpy()
    whole_network = not pieces
    if across_rounds is None:
        per_part = np.unique(systems[0].clients, return_counts=True)[1]
        across_rounds = bool(per_part.max(initial=0) <= ACROSS_ROUNDS_CALLS)
        if whole_network and symmetry is None:  # the lifted LMI is solved dense: keep it small
            rows = systems[0].A.shape[0] + 2 * systems[0].calls
            across_rounds = across_rounds and rows <= ACROSS_ROUNDS_ROWS
    feasibility = make_feasibility(
        systems, mu / L, pair_list, 0.0 if sigma is None else sigma, solver,
        bool(pairs and across_rounds and mu < L), symmetry, whole_network,
    )  # fmt: skip
    rate_period, found = find_rate(feasibility, tol, lower)
    out.solves, out.seconds = feasibility.solves, time.perf_counter() - start
    if found is None or rate_period >= 1.0:
        out.status = "not certified"
        out.reason = (
            "no quadratic Lyapunov function with the sector constraints proves a rate below 1 "
            "for this class (the method may diverge for some objective of it, e.g. a step "
            "too large for L)"
        )
        return out
    _fill(out, found, rate_period, period)
    return out


def check_entry(method, tol, solver) -> tuple[float, str | None, bool]:
    """The checks every certificate's entry makes of ``tol``, ``solver`` and ``method``:
    ``(tol, solver, whether the method is decentralized)``, or the error naming the
    argument."""
    tol = as_float(tol, "tol", positive=True)
    if not tol < 1:
        raise ValueError(f"tol must be in (0, 1) (a tolerance on the rate), got tol={tol!r}")
    solver = check_solver(solver)
    if not isinstance(method, Method):
        raise TypeError(f"method must be a stochmix Method, got {_show(method)}")
    return tol, solver, _is_decentralized(method)


def check_class(L, mu) -> tuple[float, float]:
    """``(L, mu)`` as floats with ``0 < mu <= L``, or a ValueError naming the bad one."""
    L = as_float(L, "L", positive=True)
    mu = as_float(mu, "mu")
    if not (0 < mu <= L):
        raise ValueError(f"mu must be in (0, L] = (0, {L:g}], got mu={mu!r}")
    return L, mu


def check_solver(solver) -> str | None:
    """``solver`` upper-cased when it is an installed cvxpy solver of semidefinite programs
    (None: the default), else a ValueError naming it and those installed."""
    if solver is None:
        return None
    cp = require_cvxpy()
    usable = _sdp_solvers(cp)
    if not isinstance(solver, str) or solver.upper() not in usable:
        raise ValueError(
            f"solver must be an installed cvxpy solver of semidefinite programs, one of "
            f"{usable}, got solver={_show(solver)}"
        )
    return solver.upper()


def _sdp_solvers(cp) -> list[str]:
    installed = list(cp.installed_solvers())
    try:  # cvxpy's own table of what each conic solver takes
        from cvxpy.reductions.solvers.defines import SOLVER_MAP_CONIC

        return [
            name
            for name in installed
            if name in SOLVER_MAP_CONIC
            and any(
                "PSD" in c.__name__
                for c in getattr(SOLVER_MAP_CONIC[name], "SUPPORTED_CONSTRAINTS", ())
            )
        ] or installed
    except ImportError:  # another cvxpy layout: every installed solver
        return installed


def check_mixing_argument(method, mixing, participation) -> float | None:
    """sigma when ``mixing`` is a number (a decentralized method's class of matrices: in
    [0, 1), every node active), else None; a ValueError naming ``mixing`` or
    ``participation`` for a mixing given to a federated method, a sigma outside [0, 1),
    or a participation with a sigma."""
    if mixing is not None and not _is_decentralized(method):
        raise ValueError(
            f"mixing is for decentralized methods; {method.name} mixes through its server "
            f"(got mixing={_show(mixing)})"
        )
    if not (_is_decentralized(method) and is_sigma(mixing)):
        return None
    sigma = as_float(mixing, "mixing")
    if not (0 <= sigma < 1):
        raise ValueError(f"mixing (sigma) must be in [0, 1), got mixing={mixing!r}")
    if participation is not None:
        raise ValueError(
            "participation: the class of mixing matrices is certified with every node "
            f"active in every iteration, got participation={participation!r}"
        )
    return sigma


def _check_size(method, n: int, decentralized: bool, argument: str) -> None:
    """Refuse more than :data:`MAX_CLIENTS` clients or nodes, and per-client local steps
    that are not one per client, naming the argument."""
    if n > MAX_CLIENTS:
        what = "nodes" if decentralized else "clients"
        raise ValueError(
            f"{argument}: the whole-round certificate takes at most {MAX_CLIENTS} {what} "
            f"(stochmix.analysis.certificates.MAX_CLIENTS), got {n}"
            + (
                "; give mixing=sigma for a certificate whose size does not grow with n"
                if decentralized
                else ""
            )
        )
    steps: Any = getattr(method, "local_steps", None)
    if not decentralized and hasattr(steps, "check_clients"):
        try:
            steps.check_clients(n)
        except ValueError as error:
            raise ValueError(f"{error} (certified with {argument} of {n} clients)") from None


def _fill(out: Certificate, found: Solution, rate_period: float, period: int) -> None:
    out.status = "certified"
    out.rate = float(rate_period ** (1.0 / period))
    out.lyapunov = found.lyapunov
    out.multipliers = {"gradients": found.gradient_multipliers, "mixing": found.mixing_multipliers}
    if found.function_values is not None:
        out.multipliers["function_values"] = found.function_values
        out.multipliers["positivity"] = found.positivity
    out.margin = found.margin
