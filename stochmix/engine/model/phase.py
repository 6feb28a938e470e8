"""One phase of the canonical recursion, stored by the rows it rewrites.

A phase is ``Z <- M Z + B G`` where ``G`` holds per-client gradients evaluated at the
current state. ``M`` is the identity except on a few rows, so a phase keeps only

* ``rows``: the rows of ``Z`` it rewrites, shape (k,);
* ``mix``: those rows of ``M``, a CSR array of shape (k, m);
* ``clients``: the clients whose gradients it needs, shape (c,);
* ``inject``: those rows of ``B``, a CSR array of shape (k, c) (None when c = 0).

Applying it computes ``mix @ Z + inject @ G`` from the old ``Z`` and scatters the result
into ``rows``: all rewritten rows change simultaneously. :meth:`Phase.matrix` still gives
the full ``M`` for analysis.

Most phases of a federated round are *node-local*: every participant's rows are rewritten
from rows of the same participant (and read-only rows such as the server's). The builder
recognises them (:mod:`stochmix.engine.model.local_form`) and attaches a :class:`LocalForm`,
which the engine runs as dense vectorized operations on the participants' rows, in
cache-sized chunks and several consecutive phases per chunk, without building the sparse
rows at all. The sparse form is built on first use (the general path, and analysis).

A phase that mixes whole blocks (an ``apply`` whose operator sets every row of its block,
as a decentralized iteration's ``W_k`` does) gets a whole-block form as well
(:attr:`Phase.blockwise`, see :mod:`stochmix.engine.model.blockwise`): the engine then applies
``W`` to the block as one sparse product, and the sparse rows are again built only when
asked for.

:class:`PhaseBuilder` writes a phase in terms of block names: every call adds terms to the
rows it names, and a rewritten row becomes the sum of its terms (a row with no term stays
as it was; a row meant to keep its value plus something needs :meth:`PhaseBuilder.keep`).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import cached_property, partial

import numpy as np
import scipy.sparse as sp

from ...mixing.rowsparse import RowSparse, csr_from_triplets, sorted_unique
from .blockwise import BlockwiseForm, blockwise_form
from .layout import Layout
from .local_form import (
    COEFFICIENT_ORDER,
    GradientTerm,
    LocalForm,
    NodeTerm,
    OuterTerm,
    RowTerm,
    ViewTerm,
    _index,
    _LocalDraft,
    coefficient_kind,
)
from .picked import _distinct
from .pushed import PushedColumns
from .traffic import NO_TRAFFIC, PhaseTraffic, phase_traffic

__all__ = [
    "COEFFICIENT_ORDER",
    "Draws",
    "GradientTerm",
    "LocalForm",
    "NodeTerm",
    "OuterTerm",
    "Phase",
    "PhaseBuilder",
    "RowTerm",
    "ViewTerm",
    "coefficient_kind",
]

#: A phase's rows are found by marks over the state's rows (and placed through a table of
#: them) when its entries number at least 1/DENSE_LOOKUP of the state's rows: O(m) work
#: against a sort and a binary search per entry (an activated push at n = 10^5 writes
#: about 10^5 entries a round); below it, sorting costs less than m.
DENSE_LOOKUP = 8


class Draws:
    """A phase's sampled gradients: client ``clients[k]`` draws the rows ``picks[k]`` of
    its finite sum (int64, shape (c, b); see :func:`~stochmix.engine.model.functions.grad`)."""

    __slots__ = ("clients", "picks")

    def __init__(self, clients: np.ndarray, picks: np.ndarray):
        self.clients, self.picks = clients, picks

    def same(self, clients: np.ndarray, picks: np.ndarray) -> bool:
        """Whether ``(clients, picks)`` is this draw."""
        return (self.clients is clients or np.array_equal(self.clients, clients)) and (
            self.picks is picks or np.array_equal(self.picks, picks)
        )

    def aligned(self, clients: np.ndarray) -> np.ndarray:
        """The picks of ``clients`` (a subset of this draw's, in any order)."""
        own = self.clients
        if own is clients or np.array_equal(own, clients):
            return self.picks
        order = np.argsort(own, kind="stable")
        return self.picks[order[np.searchsorted(own, clients, sorter=order)]]


class Phase:
    """``Z[rows] <- mix @ Z + inject @ G(clients)``; see the module docstring.

    Attributes:
        size: rows of the stacked state, m.
        label: a name for messages and profiles.
        local: the node-local form, when the phase has one.
        local_why: when it has none, why not (the first term that broke it, in words),
            where the builder knows; None otherwise.
    """

    #: ``(TripCounts, j)`` when the phase is the j-th repetition of a phase with per-node
    #: trip counts (see :mod:`stochmix.engine.model.trips`), else None
    trips: tuple | None = None
    #: the phase's sampled gradients (:class:`Draws`), or None: full gradients
    draws: Draws | None = None
    #: whether it reads or writes rows picked by index (``x.at[...]``), bound per round
    by_index: bool = False

    def __init__(
        self,
        size: int,
        triplets,
        local: LocalForm | None = None,
        label="",
        empty: bool | None = None,
        blockwise=None,
        local_why: str | None = None,
        traffic=None,
    ):
        self.size = size
        self._make_traffic = traffic
        #: whether the sparse rows are this phase's intended path (an activated mixing
        #: phase, :mod:`stochmix.engine.model.activated`): no slow-path note
        self.row_sparse = False
        #: an activated push, ``W D`` with the active nodes' columns of W, made for the
        #: round (:mod:`stochmix.engine.model.activated`): where it takes the general path
        #: its sparse rows are built and applied every round, a slow path the planner
        #: notes (a backend that applies row subsets scatters the columns instead)
        self.pushes = False
        self.label = label
        self.local = local
        self.local_why = None if local is not None else local_why
        self._make_triplets = triplets if callable(triplets) else (lambda: triplets)
        self._empty = empty
        self._make_blockwise = blockwise

    @cached_property
    def _triplets(self) -> tuple:
        """(targets, sources, coefs, gradient targets, clients, gradient coefs, zero rows),
        rows of Z, built on first use (the node-local path never needs them)."""
        return self._make_triplets()

    @cached_property
    def traffic(self) -> PhaseTraffic:
        """The phase's gradient evaluations, messages and rows sent
        (:mod:`stochmix.engine.model.traffic`), worked out on first use."""
        make = self._make_traffic
        return NO_TRAFFIC if make is None else make()

    @cached_property
    def rows(self) -> np.ndarray:
        """The rewritten rows of ``Z``, sorted, shape (k,)."""
        targets, _, _, g_targets, _, _, zero_rows = self._triplets
        every = np.concatenate([targets, g_targets, zero_rows])
        if every.size * DENSE_LOOKUP >= self.size:  # marks over the state's rows: O(m)
            marked = np.zeros(self.size, dtype=bool)
            marked[every] = True
            return np.flatnonzero(marked)
        return sorted_unique(every)

    def _places(self, targets: np.ndarray) -> np.ndarray:
        """Each of ``targets`` (rows of Z among :attr:`rows`) as its place in
        :attr:`rows` (``searchsorted``; through a table over the state's rows when there
        are many)."""
        rows = self.rows
        if targets.size * DENSE_LOOKUP < self.size:
            return np.searchsorted(rows, targets)
        table = np.empty(self.size, dtype=np.int64)
        table[rows] = np.arange(rows.size)
        return table[targets]

    @cached_property
    def mix(self) -> sp.csr_array:
        """The rewritten rows of ``M``, CSR of shape (k, m)."""
        targets, sources, coefs = self._triplets[:3]
        rows = self.rows
        return csr_from_triplets(self._places(targets), sources, coefs, (rows.size, self.size))

    @cached_property
    def clients(self) -> np.ndarray:
        """The clients whose gradients the phase needs, sorted, shape (c,)."""
        return sorted_unique(self._triplets[4]).astype(np.int64, copy=False)

    @cached_property
    def samples(self) -> np.ndarray | None:
        """The rows each of :attr:`clients` draws, (c, b) int64, when the phase takes
        sampled gradients (:attr:`draws`); None for full gradients."""
        draws = self.draws
        if draws is None:
            return None
        return draws.aligned(self.clients)

    @cached_property
    def inject(self) -> sp.csr_array | None:
        """The rewritten rows of ``B``, CSR of shape (k, c), or None without gradients."""
        _, _, _, g_targets, g_clients, g_coefs, _ = self._triplets
        if g_clients.size == 0:
            return None
        slot = np.searchsorted(self.clients, g_clients)
        return csr_from_triplets(
            self._places(g_targets),
            slot,
            g_coefs,
            (self.rows.size, self.clients.size),
        )

    def matrix(self) -> sp.csr_array:
        """The full ``(m, m)`` matrix ``M`` (identity outside ``rows``)."""
        return RowSparse(self.size, self.rows, self.mix).tocsr()

    def gradient_matrix(self, n_clients: int) -> sp.csr_array:
        """The full ``(m, n_clients)`` matrix ``B``: ``Z <- M Z + B grad F(X)``, where
        row i of ``grad F(X)`` is client i's gradient at its point."""
        _, _, _, g_targets, g_clients, g_coefs, _ = self._triplets
        return sp.csr_array((g_coefs, (g_targets, g_clients)), shape=(self.size, n_clients))

    @cached_property
    def blockwise(self) -> BlockwiseForm | None:
        """The whole-block form (see :mod:`stochmix.engine.model.blockwise`), when every term
        of the phase covers whole blocks (an ``apply`` sets every row of its block, index
        arrays are all of a block's rows in order); else None. Built on first use."""
        make = self._make_blockwise
        return None if make is None else make()

    def trusting(self, blocks) -> Phase:
        """This phase, or a copy of it whose whole-block form leaves out its NaN/Inf check
        of the blocks in ``blocks`` (those a run checks otherwise: the blocks its reported
        model sums, :attr:`~stochmix.engine.model.method.Method.checked_by_output`)."""
        form = self.blockwise
        if form is None or not any(ok and t.block in blocks for t, _, ok in form.order):
            return self
        return self.twin(
            ("trusting", blocks),
            lambda: replace(
                form,
                order=tuple((t, now, ok and t.block not in blocks) for t, now, ok in form.order),
            ),
        )

    def twin(self, key, make_form) -> Phase:
        """A copy of this phase whose whole-block form is ``make_form()``, made once per
        ``key`` (the same copy however often asked). It shares everything else, computed
        parts included; the phase itself is unchanged, for analysis and other runs."""
        twins = self.__dict__.setdefault("_twins", {})
        found = twins.get(key)
        if found is None:
            found = copy.copy(self)
            for memo in ("_plans", "_twins", "_product_forms"):  # (the planner's memos)
                found.__dict__.pop(memo, None)
            found.__dict__["blockwise"] = make_form()
            twins[key] = found
        return found

    @property
    def is_identity(self) -> bool:
        """True when the phase changes nothing."""
        if self._empty is not None:
            return self._empty
        targets, _, _, g_targets, _, _, zero_rows = self._triplets
        return targets.size == 0 and g_targets.size == 0 and zero_rows.size == 0

    def __repr__(self) -> str:
        name = f" {self.label!r}" if self.label else ""
        kind = ", node-local" if self.local is not None else ""
        return f"Phase{name}(rows={self.rows.size}, gradients={self.clients.size}{kind})"


class PhaseBuilder:
    """Collects the terms of one phase by block name, then :meth:`build` s it.

    Example (a local gradient step of the participants' rows ``nodes``)::

        PhaseBuilder(layout).keep("x", nodes).gradient("x", nodes, clients, -lr).build()
    """

    def __init__(self, layout: Layout, label: str = ""):
        self.layout = layout
        self.label = label
        self._deferred: list[tuple] = []
        self._touched = False  # whether any term names at least one row
        self._local = _LocalDraft(layout)
        self._draws: Draws | None = None  # the phase's sampled gradients
        self._owners: dict = {}  # rows picked by index: id(rows) -> (rows, their nodes)
        self._full = False  # whether it takes full gradients

    @staticmethod
    def _aligned(target_rows, other, coef):
        target_rows = np.asarray(target_rows, dtype=np.int64).reshape(-1)
        other = np.asarray(other, dtype=np.int64).reshape(-1)
        if target_rows.size == 0 or other.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0)
        n = max(target_rows.size, other.size)
        if target_rows.size != n:
            target_rows = np.full(n, target_rows[0])
        if other.size != n:
            other = np.full(n, other[0])
        coef = np.asarray(coef, dtype=np.float64)
        if coef.shape != (n,):
            coef = np.full(n, coef)
        return target_rows, other, coef

    def combine(self, target: str, target_rows, source: str, source_rows, coef=1.0):
        """Add ``coef * source[source_rows]`` to ``target[target_rows]``, entry by entry.

        Rows are block-local; the two index arrays are aligned, and a single index on one
        side broadcasts (one target row and many source rows is a weighted sum).
        """
        self._local.note_combine(target, target_rows, source, source_rows, coef)
        self._deferred.append(("combine", target, target_rows, source, source_rows, coef))
        self._touched = self._touched or bool(np.size(target_rows) and np.size(source_rows))
        return self

    def view(self, block: str, rows, nodes):
        """Declare that ``block[rows]`` (block-local rows, aligned with ``nodes``) are
        read or written as those nodes' own rows by the terms that follow with the same
        ``rows`` array (``x.at[...]``, rows picked by index). Changes no number of the
        phase, only its node-local form, which reads them through a view bound per round
        (a phase that writes one of them twice has none: the general path adds the two)."""
        nodes = _index(nodes)
        self._owners[id(rows)] = (rows, nodes)  # (for the traffic, whatever the form)
        self._local.note_view(block, rows, nodes)
        return self

    def reduce(self, target: str, target_row, source: str, source_rows, coef=1.0):
        """Add ``sum_i coef_i * source[source_rows[i]]`` to the one row ``target_row``: a
        reduction over the phase's nodes, read as one even when ``source_rows`` holds a
        single row (:meth:`combine` would read that as a single row of the state). The
        same numbers as ``combine``."""
        self._local.note_combine(target, target_row, source, source_rows, coef, reduction=True)
        self._deferred.append(("combine", target, target_row, source, source_rows, coef))
        self._touched = self._touched or bool(np.size(target_row) and np.size(source_rows))
        return self

    def per_node(self, target: str, rows):
        """Declare that ``target[rows]`` is written node by node, as the rows of the
        phase's nodes, even when ``rows`` holds a single row (which would otherwise be
        read as one row of the state, an outer row, when no other term names the nodes).
        Changes no number of the phase, only its node-local form."""
        rows = _index(rows)
        self._local.note_per_node(target, rows)
        return self

    def keep(self, target: str, rows, coef=1.0):
        """Rewritten rows start from their own value (times ``coef``)."""
        rows = _index(rows)
        return self.combine(target, rows, target, rows, coef)

    def clear(self, target: str, rows):
        """Rows become zero unless another term adds to them."""
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        self._local.note_clear(target, rows)
        self._deferred.append(("clear", target, rows))
        self._touched = self._touched or bool(rows.size)
        return self

    def apply(self, target: str, source: str, op: RowSparse, scale: float = 1.0):
        """Add ``scale * op[rows] @ source`` to ``target[rows]`` for the rows ``op`` sets.

        ``op`` is a square matrix over the nodes of both blocks (for example A_S, C_S or an
        averaging matrix from :mod:`stochmix.mixing`). Only ``op.rows`` are written: with
        ``target == source`` and an identity-elsewhere ``op`` this is ``target <- op @
        target``; a zero row of ``op`` makes its target row zero (plus any other term).
        """
        if op.size != self.layout.block(target).rows or op.size != self.layout.block(source).rows:
            raise ValueError(
                f"op has size {op.size} but blocks {target!r} and {source!r} have "
                f"{self.layout.block(target).rows} and {self.layout.block(source).rows} rows"
            )
        scale = float(scale)
        self._local.note_apply(target, source, op, scale)
        self._deferred.append(("apply", target, source, op, scale))
        self._touched = self._touched or bool(op.rows.size)
        return self

    def push(self, target: str, source: str, pushed: PushedColumns, scale: float = 1.0):
        """Add ``scale * C[:, A] @ source[A]`` to ``target`` (an activated push, see
        :mod:`~stochmix.engine.model.pushed`): the rows A (``pushed.senders``) are
        rewritten (their other terms plus what reaches them), the other rows reached keep
        their value plus what reaches them."""
        size = pushed.size
        if size != self.layout.block(target).rows or size != self.layout.block(source).rows:
            raise ValueError(
                f"the push has size {size} but blocks {target!r} and {source!r} have "
                f"{self.layout.block(target).rows} and {self.layout.block(source).rows} rows"
            )
        self._local.fail(f"it pushes {source!r} to the nodes the active nodes' columns reach")
        self._deferred.append(("push", target, source, pushed, float(scale)))
        self._touched = self._touched or bool(pushed.senders.size)
        return self

    def gradient(self, target: str, target_rows, clients, coef=1.0, samples=None):
        """Add ``coef * grad F_client(X_client)`` to ``target[target_rows]``, aligned.

        One target row and several clients is a sum of their gradients onto that row
        (:meth:`reduce_gradients`, whose nodes are then the phase's nodes).

        ``samples``: minibatch estimates instead (the problem's ``sampled_gradients``;
        see :func:`~stochmix.engine.model.functions.grad`), client ``clients[k]`` drawing
        the rows ``samples[k]`` (int64, shape (c, b)), one row per client. A phase takes
        either full gradients or one draw (the same clients and samples in every term)."""
        t, c = _index(target_rows), _index(clients)
        if samples is not None:
            samples = self._draw(target, t, c, samples)
        elif self._draws is not None and c.size:
            raise ValueError(self._mixed_draws)
        else:
            self._full = self._full or bool(c.size)
        if t.size == 1 and c.size > 1:
            return self.reduce_gradients(target, t, c, coef)
        self._local.note_gradient(target, t, c, coef, samples)
        self._deferred.append(("gradient", target, t, c, coef))
        self._touched = self._touched or bool(t.size and c.size)
        return self

    def reduce_gradients(self, target: str, target_row, clients, coef=1.0, nodes=None):
        """Add ``sum_i coef_i * grad F_{clients_i}(X_{clients_i})`` to the one row
        ``target_row``: a reduction of the clients' gradients, read as one even for a
        single client (the same numbers as :meth:`gradient` with one target row).

        ``nodes``: the clients' nodes (where their gradients are taken, client i at node
        ``i + client_node``); by default the nodes the phase's other terms name. The phase
        stays node-local with the other terms' gradients when the clients are the same: a
        phase ``c[S] = grad(S); g.server = mean(grad(S))`` takes each gradient once."""
        t, c = _index(target_row), _index(clients)
        if t.size != 1:
            raise ValueError(f"reduce_gradients sums onto one row, got {t.size} rows of {target!r}")
        if self._draws is not None and c.size:
            raise ValueError(self._mixed_draws)
        self._full = self._full or bool(c.size)
        self._local.note_reduce_gradients(target, t, c, coef, nodes)
        self._deferred.append(("gradient", target, t, c, coef))
        self._touched = self._touched or bool(c.size)
        return self

    _mixed_draws = (
        "a phase takes either full gradients or one draw of sampled gradients "
        "(grad(S, samples=...)) with the same clients and samples in every term"
    )

    def _draw(self, target: str, t: np.ndarray, c: np.ndarray, samples) -> np.ndarray:
        """Record the phase's draw of sampled gradients (see :meth:`gradient`)."""
        picks = np.array(samples, dtype=np.int64)  # (a copy: a later refill changes nothing)
        picks.flags.writeable = False
        if picks.ndim != 2 or picks.shape[0] != c.size:
            raise ValueError(
                f"samples must have shape ({c.size}, b), one row per client, got {picks.shape}"
            )
        if t.size != c.size:
            raise ValueError(
                f"sampled gradients are added to one row of {target!r} per client: got "
                f"{t.size} rows for {c.size} clients"
            )
        if self._full:
            raise ValueError(self._mixed_draws)
        if self._draws is None:
            if c.size > 1 and not _distinct(c):
                raise ValueError("a draw of sampled gradients takes each client once")
            self._draws = Draws(c, picks)
        elif not self._draws.same(c, picks):
            raise ValueError(self._mixed_draws)
        return self._draws.picks

    def _materialize(self) -> tuple:
        """The COO triplets of every term, in rows of Z."""
        lay = self.layout
        parts: dict[str, list] = {k: [] for k in ("t", "s", "c", "gt", "gc", "gv", "z")}
        reached: dict[str, list] = {}  # target -> the rows its pushes reach past A
        for op in self._deferred:
            kind = op[0]
            if kind == "combine":
                _, target, t_rows, source, s_rows, coef = op
                t, src, c = self._aligned(t_rows, s_rows, coef)
                parts["t"].append(lay.rows(target, t))
                parts["s"].append(lay.rows(source, src))
                parts["c"].append(c)
            elif kind == "clear":
                parts["z"].append(lay.rows(op[1], op[2]))
            elif kind in ("apply", "push"):
                _, target, source, sparse, scale = op
                rows, cols, vals = sparse.entries()
                parts["t"].append(lay.rows(target, rows))
                parts["s"].append(lay.rows(source, cols))
                parts["c"].append(scale * vals)
                parts["z"].append(lay.rows(target, sparse.rows))
                if kind == "push":  # the other rows reached keep their value
                    reached.setdefault(target, []).append(sparse.reached)
            else:
                _, target, t_rows, clients, coef = op
                t, c, v = self._aligned(t_rows, clients, coef)
                parts["gt"].append(lay.rows(target, t))
                parts["gc"].append(c)
                parts["gv"].append(v)

        for target, found in reached.items():
            rows = found[0] if len(found) == 1 else np.unique(np.concatenate(found))
            kept = lay.rows(target, rows)
            parts["t"].append(kept)
            parts["s"].append(kept)
            parts["c"].append(np.ones(kept.size))

        def cat(key, dtype):
            return np.concatenate(parts[key]) if parts[key] else np.zeros(0, dtype)

        return (
            cat("t", np.int64),
            cat("s", np.int64),
            cat("c", float),
            cat("gt", np.int64),
            cat("gc", np.int64),
            cat("gv", float),
            cat("z", np.int64),
        )

    def build(self) -> Phase:
        """The phase holding every term added so far."""
        empty = not self._touched
        draws = self._draws
        local = None if empty else self._local.finish()
        blockwise = None
        if not empty and draws is None:  # (sampled gradients: no whole-block form)
            blockwise = partial(blockwise_form, self.layout, list(self._deferred))
        traffic = None
        if not empty:
            owners = dict(self._owners)
            traffic = partial(phase_traffic, self.layout, list(self._deferred), draws, owners)
        phase = Phase(
            self.layout.size,
            self._materialize,
            local,
            self.label,
            empty=empty,
            blockwise=blockwise,
            local_why=self._local.why,
            traffic=traffic,
        )
        phase.draws = draws
        phase.by_index = bool(self._owners)
        return phase
