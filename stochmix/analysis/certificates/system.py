"""A method's round as a linear system in feedback with its gradients (and, over a class of
mixing matrices, with W): :class:`RoundSystem`, built from the method's own phases.

Every phase of a linear method is ``Z <- M Z + B grad F(S Z)`` (:mod:`stochmix.engine`),
``S`` picking the model rows of the clients it asks gradients of. Composing the phases of
one round (or one period of rounds) in one dimension (the analysis is the same in every
coordinate) gives

.. math::

    \\xi^+ = A \\xi + B_u u + B_v v,\\qquad
    y = C_y \\xi + D_{yu} u + D_{yv} v,\\qquad
    w = C_w \\xi + D_{wu} u + D_{wv} v,

with one entry of ``u`` (a gradient) and of ``y`` (the point it is taken at) per gradient
call of the round, ``clients[c]`` the client of call c, ``u_c = grad f_{clients[c]}(y_c)``;
``v = W w`` are the mixing products of the round when W is left as an uncertainty
(:func:`agent_systems`; empty otherwise). ``output`` is the row of the reported model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ..._validate import _show
from ...engine import Method, RowMap
from ...problems import Quadratic
from ..linear.operators import _check_points, run_context

__all__ = [
    "NotLinearError",
    "RoundSystem",
    "agent_steps",
    "agent_systems",
    "round_system",
    "spectral_systems",
]


class NotLinearError(ValueError):
    """The method is not a linear recursion with gradients at affine points of its state,
    so it has no state-space form to certify."""


@dataclass(frozen=True)
class RoundSystem:
    """One round (or period) of a method as ``xi+ = A xi + B [u; v]``, ``[y; w] = C xi +
    D [u; v]`` (see the module docstring). Shapes: A (m, m), B (m, p + q), C (p + q, m),
    D (p + q, p + q); ``clients`` (p,); ``output`` (m,). ``magnitudes``: bounds on the
    magnitudes of the terms summed into each entry of ``[A B]`` and ``[C D]`` (the same
    products composed with absolute values), when the system was composed from phases: an
    entry below a few hundred rounding errors of its bound is a composition residue."""

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    clients: np.ndarray
    output: np.ndarray
    mixings: int = 0  # q: entries of w (and v)
    magnitudes: tuple | None = field(default=None, compare=False, repr=False)

    @property
    def calls(self) -> int:
        """p: gradient calls of the round."""
        return int(self.clients.size)

    def normalized(self, L: float) -> RoundSystem:
        """The same system in gradient units of ``L`` (``u = L u~``: the class becomes
        [mu / L, 1]) and with its state balanced by a diagonal similarity in powers of 2
        (exact; Osborne's iteration on ``[A B; C D]``, the inputs and outputs kept as they
        are), so that the SDP's numbers are of one scale whatever L and whatever units the
        state keeps (models, gradients, duals).

        Entries within ``ROUNDING`` epsilons of their :attr:`magnitudes` (the sizes of the
        terms summed into them) are set to zero first: composing a round's phases leaves
        residues where the exact entry is 0, and balancing would scale a row of them up to
        the others' size, so that a conserved direction is no longer found by
        :meth:`reduced` (APAPC's dual average: 1 on the diagonal and residues up to 1.4e-14
        elsewhere, from terms of size 14, scaled to 1e-8 by the balancing). An entry is
        compared with its own terms, never with other entries: a small step (lr = 1e-13)
        is kept whatever the scale."""
        p = self.calls
        a, b, c, d = (x.copy() for x in (self.A, self.B, self.C, self.D))
        if self.magnitudes is not None:
            for value, size in zip((a, b, c, d), self.magnitudes, strict=True):
                value[np.abs(value) <= ROUNDING * np.finfo(float).eps * size] = 0.0
        b[:, :p] *= L
        d[:, :p] *= L
        out = self.output.copy()
        off = ~np.eye(a.shape[0], dtype=bool)
        for _ in range(40):
            rows = np.sqrt((np.where(off, a, 0.0) ** 2).sum(axis=1) + (b**2).sum(axis=1))
            cols = np.sqrt((np.where(off, a, 0.0) ** 2).sum(axis=0) + (c**2).sum(axis=0))
            ok = (rows > 0) & (cols > 0)
            f = np.ones_like(rows)
            f[ok] = np.exp2(np.round(0.5 * np.log2(cols[ok] / rows[ok])))
            if np.all(f == 1.0):
                break
            # xi' = f * xi: rows of A and B scale by f, columns of A and C by 1 / f
            a = a * f[:, None] / f[None, :]
            b = b * f[:, None]
            c = c / f[None, :]
            out = out / f
        return replace(self, A=a, B=b, C=c, D=d, output=out, magnitudes=None)

    def reduced(self) -> RoundSystem:
        """The same system on the state that matters: rows that reach neither a gradient
        point, a mixing product nor the output are left out (rows rewritten before they are
        read: clients' copies pulled from the server, say), and so are the directions the
        round conserves whatever the gradients (``c^T A = c^T``, ``c^T B = 0``: the sum of
        a tracker minus the gradients it tracks), which stay at their fixed-point values
        from a run's start as the library starts it."""
        idx, basis = self._reduction()
        a, b, c = self.A[np.ix_(idx, idx)], self.B[idx], self.C[:, idx]
        out = self.output[idx]
        if basis is not None:
            a, b, c = basis.T @ a @ basis, basis.T @ b, c @ basis
            out = basis.T @ out
        return replace(self, A=a, B=b, C=c, output=out, magnitudes=None)

    def _reduction(self) -> tuple[np.ndarray, np.ndarray | None]:
        """What :meth:`reduced` keeps: the state rows ``idx`` it reads, and the orthonormal
        columns ``basis`` (len(idx), m') of the complement of the conserved directions
        among them (None when there are none): the reduced state is
        ``basis.T @ xi[idx]``."""
        keep = (np.abs(self.C).sum(axis=0) > 0) | (self.output != 0)
        while True:
            grown = keep | (np.abs(self.A[keep]).sum(axis=0) > 0)
            if grown.sum() == keep.sum():
                break
            keep = grown
        idx = np.flatnonzero(keep)
        if idx.size:
            a, b = self.A[np.ix_(idx, idx)], self.B[idx]
            stacked = np.hstack([a - np.eye(idx.size), b])
            conserved = _left_null(stacked, max(1.0, float(np.abs(stacked).max())))
            if conserved.shape[1]:
                return idx, _complement(conserved)
        return idx, None


#: entries within this many machine epsilons of the magnitude of the terms summed into them
#: are composition residues, read as 0 (APAPC's: about 1 epsilon of theirs)
ROUNDING = 256.0


def _left_null(matrix: np.ndarray, scale: float) -> np.ndarray:
    """Orthonormal columns spanning ``{c : c^T matrix = 0}``."""
    u, s, _ = np.linalg.svd(matrix, full_matrices=True)
    rank = int((s > 1e-10 * scale).sum())
    return u[:, rank:]


def _complement(columns: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning the orthogonal complement of ``columns``' span."""
    u, _, _ = np.linalg.svd(columns, full_matrices=True)
    return u[:, columns.shape[1] :]


def _check_linear(method: Method) -> None:
    if not isinstance(method, Method):
        raise TypeError(f"method must be a stochmix Method, got {_show(method)}")
    try:
        _check_points(method)  # the exact operators' own test
    except NotImplementedError as error:
        raise NotLinearError(
            f"method {method.name}: {error}; no state-space form to certify"
        ) from None


def _linear_phases(method: Method, r: int, participants: np.ndarray, ctx) -> list:
    phases = [p for p in method.round_phases(r, participants, ctx) if not p.is_identity]
    for phase in phases:
        if isinstance(phase, RowMap):
            raise NotLinearError(
                f"method {method.name}: phase {phase.label!r} is a nonlinear row map "
                f"({phase.name}), so the round is not linear in the state and has no "
                "state-space form to certify"
            )
        if phase.draws is not None:
            raise NotLinearError(
                f"method {method.name}: phase {phase.label!r} takes sampled gradients "
                "(grad(S, samples=...)), an oracle that certificates over function classes "
                "do not model"
            )
    return phases


def _probe_problem(n: int) -> Quadratic:
    return Quadratic(np.zeros((n, 1)), np.ones((n, 1)))


def _compose(
    steps: list, m: int, output: np.ndarray, *, uncertain: bool, theta: float = 1.0
) -> RoundSystem:
    """Compose ``steps`` (M0, M1 or None, K (m, c) or None, points (c,), clients (c,)):
    ``Z <- (M0 + M1 (x) W) Z + K u`` with ``u`` the gradients at ``Z[points]``. With
    ``uncertain``, ``M1``'s products are inputs ``v = W w`` (``w`` the rows M1 reads);
    without, W acts as the number ``theta``: an eigenvalue of W on its eigenvector (1 on
    the network average)."""
    p = sum(0 if s[2] is None else s[3].size for s in steps)
    reads = [
        np.flatnonzero(np.abs(s[1]).sum(axis=0) > 0)
        if (uncertain and s[1] is not None)
        else np.zeros(0, np.int64)  # fmt: skip
        for s in steps
    ]
    q = sum(r.size for r in reads)
    x = np.hstack([np.eye(m), np.zeros((m, p + q))])
    size = np.abs(x)  # the magnitudes of the terms summed into each entry of x
    c_rows: list = []  # rows of [C D] for y
    w_rows: list = []  # rows of [C D] for w
    clients: list = []
    at_u, at_v = m, m + p
    for (m0, m1, k, points, who), read in zip(steps, reads, strict=True):
        if m1 is None or uncertain:
            base, base_size = m0, np.abs(m0)
        else:
            base, base_size = m0 + theta * m1, np.abs(m0) + abs(theta) * np.abs(m1)
        new, new_size = base @ x, base_size @ size
        if k is not None:
            c_rows.append((x[points], size[points]))
            new[:, at_u : at_u + who.size] += k
            new_size[:, at_u : at_u + who.size] += np.abs(k)
            clients.append(who)
            at_u += who.size
        if read.size:
            w_rows.append((x[read], size[read]))
            new[:, at_v : at_v + read.size] += m1[:, read]
            new_size[:, at_v : at_v + read.size] += np.abs(m1[:, read])
            at_v += read.size
        x, size = new, new_size
    rows = [*c_rows, *w_rows]
    cd = np.vstack([v for v, _ in rows]) if rows else np.zeros((0, m + p + q))
    cd_size = np.vstack([b for _, b in rows]) if rows else np.zeros((0, m + p + q))
    return RoundSystem(
        A=x[:, :m],
        B=x[:, m:],
        C=cd[:, :m],
        D=cd[:, m:],
        clients=np.concatenate(clients) if clients else np.zeros(0, np.int64),
        output=output,
        mixings=q,
        magnitudes=(size[:, :m], size[:, m:], cd_size[:, :m], cd_size[:, m:]),
    )


def _output_row(method: Method, ctx) -> np.ndarray:
    """The reported model as a row over the state (the output is linear: read it off the
    identity, one column per state row)."""
    m = ctx.layout.size
    return np.asarray(method.output(np.eye(m), ctx), dtype=float).reshape(m)


def round_system(method: Method, masks: np.ndarray, first_round: int) -> RoundSystem:
    """The concrete system of the rounds from ``first_round`` to ``first_round + P - 1`` with
    participants ``masks[r % P]`` (P = len(masks)), every mixing matrix the method's own.

    Raises:
        NotLinearError: a nonlinear phase, gradients at non-affine points, or rounds that
            change with the round index (a decaying step).
    """
    _check_linear(method)
    n = masks.shape[1]
    problem = _probe_problem(n)

    def period(start: int) -> RoundSystem:
        ctx = run_context(method, problem)
        m = ctx.layout.size
        steps = []
        for r in range(start, start + masks.shape[0]):
            who = np.flatnonzero(masks[r % masks.shape[0]])
            for phase in _linear_phases(method, r, who, ctx):
                mat = phase.matrix().toarray()
                k = points = clients = None
                if phase.inject is not None and phase.clients.size:
                    clients = phase.clients
                    k = phase.gradient_matrix(n).toarray()[:, clients]
                    points = ctx.layout.rows(method.model_block, clients + method.client_node)
                steps.append((mat, None, k, points, clients))
        return _compose(steps, m, _output_row(method, ctx), uncertain=False)

    one = period(first_round)
    two = period(first_round + masks.shape[0])
    if not _same_system(one, two):
        raise NotLinearError(
            f"method {method.name}: its rounds change with the round index (a decaying step, "
            "a schedule, a period of its own, or a graph sequence without a period), so one "
            "round's map does not describe the run; certify a constant step, and for a method "
            "with a period of its own pass participation masks with that many rounds"
        )
    return one


def _same_system(a: RoundSystem, b: RoundSystem) -> bool:
    if a.A.shape != b.A.shape or a.B.shape != b.B.shape or not np.array_equal(a.clients, b.clients):
        return False
    return all(
        np.allclose(x, y, rtol=1e-12, atol=1e-12)
        for x, y in ((a.A, b.A), (a.B, b.B), (a.C, b.C), (a.D, b.D))
    )


# --------------------------------------------------------------------------- per agent
_PROBE_NODES = 4


def _probe_matrix(n: int, seed: int = 12345) -> np.ndarray:
    """A symmetric doubly stochastic matrix with distinct generic entries."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.05, 0.2, size=(n, n))
    weights = np.triu(weights, 1)
    weights = weights + weights.T
    return np.eye(n) - (np.diag(weights.sum(axis=1)) - weights)


def _probe_method(method: Any, w: np.ndarray) -> Any:
    """A copy of a decentralized method whose every mixing matrix is ``w``."""
    from ...mixing.rowsparse import RowSparse
    from ...mixing.sequences import StaticSequence

    probe = copy.copy(method)
    probe.graphs = StaticSequence(nx.complete_graph(w.shape[0]))
    operator = RowSparse.whole(sp.csr_array(w))

    def mixing(k, rule, direction=None):
        op = copy.copy(operator)
        op.mixes = probe.direction(rule) if direction is None else direction
        return op

    probe.mixing = mixing
    probe.check_mixing = False
    return probe


class _KeepsTuning:
    """The start of a method pinned to its own tuning (:func:`pinned`): the class's own
    start, then the attributes ``_kept`` restored. A mixin of a class made for each method
    class (:func:`_keeping`), so that a copy or a pickle of the method keeps it and runs its
    own start (an instance attribute holding a closure ran the original's)."""

    _kept: dict

    def start(self, ctx) -> None:
        super().start(ctx)  # type: ignore[misc]
        for name, value in self._kept.items():
            setattr(self, name, copy.deepcopy(value))

    def __reduce_ex__(self, protocol):
        # the object's own reduction (its state, slots, __getstate__), with the made class
        # (not importable by name) rebuilt from the method's class
        reduced = object.__reduce_ex__(self, max(int(protocol), 2))
        base = type(self).__mro__[2]  # (the made class, this mixin, the method's class)
        return (_made, (base,), *reduced[2:])


_KEEPING: dict[type, type] = {}


def _keeping(base: type) -> type:
    """The class of ``base`` pinned to its own tuning (made once a class), named as ``base``
    (reprs and labels are unchanged)."""
    made = _KEEPING.get(base)
    if made is None:
        made = type(base.__name__, (_KeepsTuning, base), {"__qualname__": base.__qualname__})
        made.__module__ = base.__module__
        _KEEPING[base] = made
    return made


def _made(base: type) -> Any:
    """A new, empty pinned method of class ``base`` (copies and pickles fill it)."""
    return object.__new__(_keeping(base))


def pinned(target: Any, tuned: dict) -> Any:
    """``target`` (a copy of a method that mixes with other matrices) whose start keeps the
    attributes ``tuned`` (:func:`own_tuning`) instead of tuning them for its matrices: a
    copy of it of a class that restores them after the method's own start (copies and
    pickles of it do the same)."""
    if not tuned:
        return target
    base = type(target).__mro__[2] if isinstance(target, _KeepsTuning) else type(target)
    reduced: tuple = tuple(target.__reduce_ex__(4))
    state = reduced[2] if len(reduced) > 2 else None
    out = _made(base)
    if state:
        _set_state(out, state)
    out._kept = {name: copy.deepcopy(value) for name, value in tuned.items()}
    return out


def _set_state(target: Any, state) -> None:
    """What :mod:`copy` does with an object's reduced state: ``__setstate__``, or its
    ``__dict__`` and slots (a ``(dict, slots)`` pair)."""
    if hasattr(type(target), "__setstate__"):
        target.__setstate__(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        target.__dict__.update(state)
    for name, value in (slots or {}).items():
        setattr(target, name, value)


def own_tuning(method: Any) -> dict:
    """The attributes a run's start derives from the method's own graphs
    (``graph_tuned``: APAPC's step and coupling from W's spectrum), as a run on those graphs
    sets them; empty for methods without any."""
    names: frozenset = getattr(method, "graph_tuned", frozenset())
    if not names:
        return {}
    own = copy.copy(method)
    run_context(own, _probe_problem(method.graphs.n_nodes))
    return {name: copy.deepcopy(getattr(own, name)) for name in names}


def agent_steps(method: Method) -> tuple[list, np.ndarray]:
    """One agent's phases of an iteration of a decentralized method: for each phase
    ``(M0, M1, K, points, clients)`` with the phase's matrix ``M0 (x) I + M1 (x) W`` block by
    block (each block one row per node) and ``K`` the weight of the node's own gradient,
    taken at its model row; and the one-hot row of the model block (the output).

    Raises:
        NotLinearError: a block without one row per node, a mixing that is not affine in
            W, or gradients that are not every node's own.
    """
    _check_linear(method)
    n = _PROBE_NODES
    problem = _probe_problem(n)
    everyone = np.arange(n)
    tuned = own_tuning(method)

    def iteration(r: int, w: np.ndarray) -> tuple[list, int, int]:
        probe = pinned(_probe_method(method, w), tuned)  # not the probe matrix's tuning
        ctx = run_context(probe, problem)
        layout = ctx.layout
        for block in layout.blocks:
            if block.rows != n:
                raise NotLinearError(
                    f"method {method.name}: block {block.name!r} has {block.rows} rows for "
                    f"{n} nodes, not one per node, so the method has no per-agent form; "
                    "certify it over one mixing matrix (mixing=a graph or a matrix)"
                )
        names = [b.name for b in layout.blocks]
        rows = np.stack([layout.rows(name) for name in names])  # (blocks, n)
        model = names.index(method.model_block)
        steps = []
        for phase in _linear_phases(probe, r, everyone, ctx):
            mat = phase.matrix().toarray()
            m0, m1 = _split_blocks(mat, rows, w, method, phase)
            k = None
            if phase.inject is not None and phase.clients.size:
                if phase.clients.size != n:
                    raise NotLinearError(
                        f"method {method.name}: phase {phase.label!r} asks gradients of "
                        f"{phase.clients.size} of {n} nodes; the per-agent form needs every "
                        "node's gradient"
                    )
                g = phase.gradient_matrix(n).toarray()
                k = np.array([_scalar_block(g[rows[b]], method, phase) for b in range(len(names))])
                k = k[:, None]
            steps.append((m0, m1, k, np.array([model]), np.array([0])))
        return steps, len(names), model

    first = _probe_matrix(n)
    steps, blocks, model = iteration(1, first)
    if not _same_steps(steps, iteration(2, first)[0]):
        raise NotLinearError(
            f"method {method.name}: its iterations change with the iteration index (a "
            "decaying step), so one iteration's map does not describe the run"
        )
    if not _same_steps(steps, iteration(1, _probe_matrix(n, seed=54321))[0]):
        raise NotLinearError(
            f"method {method.name}: its iteration is M0 + M1 (x) W with M0 and M1 that depend "
            "on W itself (a mixing step tuned from the matrix's spectrum, such as FastMix's "
            "momentum), so one agent's form over other matrices is not the method's; "
            "certify it over one mixing matrix as a whole network (participation=Full(n))"
        )
    output = np.zeros(blocks)
    output[model] = 1.0
    return steps, output


def agent_systems(method: Method) -> tuple[RoundSystem, RoundSystem]:
    """One agent's view of an iteration of a decentralized method over any mixing matrix:
    the average system (W acting as the identity, on the network averages) and the
    disagreement system (W left as the input ``v = W w``), each of the size of the method's
    blocks, not of the network (Sundararajan, Van Scoy and Lessard, 2020). See
    :func:`agent_steps` for what the method must be."""
    steps, output = agent_steps(method)
    blocks = output.size
    average = _compose(steps, blocks, output, uncertain=False)
    disagreement = _compose(steps, blocks, output, uncertain=True)
    return average, disagreement


def spectral_systems(method: Method, eigenvalues: np.ndarray) -> list[RoundSystem]:
    """One agent's system per eigenvalue of a symmetric mixing matrix W: on W's orthonormal
    eigenvectors the iteration splits into one system of the size of the method's blocks per
    eigenvalue (W acts as the number), the first (eigenvalue 1) the network average. A
    sector constraint with one multiplier for every node sums alike over nodes and over
    eigenvectors, so the certificate of the n-node system is that of these systems."""
    steps, output = agent_steps(method)
    return [
        _compose(steps, output.size, output, uncertain=False, theta=float(t)) for t in eigenvalues
    ]


def _same_steps(steps: list, others: list) -> bool:
    """Whether two builds of an iteration's steps agree, each step's arrays to 1e-10 of the
    step's largest entry (the split's least squares and the composition leave residues
    of that step's scale: 2.4e-8 where EXTRA's step at L = 1e-9 is 5e8)."""
    if len(others) != len(steps):
        return False
    for s, t in zip(steps, others, strict=True):
        arrays = [x for x in (*s, *t) if isinstance(x, np.ndarray) and x.dtype.kind == "f"]
        scale = max([1.0, *(float(np.abs(x).max(initial=0.0)) for x in arrays)])
        for x, y in zip(s, t, strict=True):
            if x is None or y is None:
                if (x is None) != (y is None):
                    return False
            elif x.shape != y.shape or not np.allclose(x, y, rtol=0.0, atol=1e-10 * scale):
                return False
    return True


def _scalar_block(block: np.ndarray, method, phase) -> float:
    """``e`` where ``block == e I`` (a node's gradient enters its own rows only)."""
    n = block.shape[0]
    e = float(np.trace(block)) / n
    if not np.allclose(block, e * np.eye(n), atol=1e-12):
        raise NotLinearError(
            f"method {method.name}: phase {phase.label!r} adds a node's gradient to other "
            "nodes' rows, so it has no per-agent form"
        )
    return e


def _split_blocks(mat, rows, w, method, phase) -> tuple[np.ndarray, np.ndarray]:
    """Per-block coefficients (a, c) with ``mat[block i, block j] = a I + c W``."""
    nb, n = rows.shape
    basis = np.stack([np.eye(n).ravel(), w.ravel()], axis=1)
    m0, m1 = np.zeros((nb, nb)), np.zeros((nb, nb))
    for i in range(nb):  # blocks of the method (a handful), not nodes
        for j in range(nb):
            block = mat[np.ix_(rows[i], rows[j])]
            coef, *_ = np.linalg.lstsq(basis, block.ravel(), rcond=None)
            if np.abs(basis @ coef - block.ravel()).max() > 1e-10 * max(1.0, np.abs(block).max()):
                raise NotLinearError(
                    f"method {method.name}: phase {phase.label!r} mixes with a matrix that is "
                    "not affine in W (a I + c W, block by block), so it has no per-agent form "
                    "over a class of mixing matrices; certify it over one matrix instead"
                )
            m0[i, j], m1[i, j] = coef
    m1[np.abs(m1) < 1e-13] = 0.0
    return m0, m1
