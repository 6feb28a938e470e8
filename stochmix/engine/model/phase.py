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
recognises them and attaches a :class:`LocalForm`, which the engine runs as dense
vectorized operations on the participants' rows, in cache-sized chunks and several
consecutive phases per chunk, without building the sparse rows at all. The sparse form is
built on first use (the general path, and analysis).

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
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from ...mixing.rowsparse import Broadcast, Reduce, RowSparse, csr_from_triplets, sorted_unique
from .blockwise import BlockwiseForm, blockwise_form
from .layout import Layout
from .traffic import NO_TRAFFIC, PhaseTraffic, phase_traffic

__all__ = [
    "COEFFICIENT_ORDER",
    "GradientTerm",
    "LocalForm",
    "NodeTerm",
    "OuterTerm",
    "Phase",
    "PhaseBuilder",
    "RowTerm",
    "coefficient_kind",
]


class NodeTerm(NamedTuple):
    """``target[nodes] += coef * source[nodes]`` (coef a number or one per node)."""

    target: str
    source: str
    coef: object


class RowTerm(NamedTuple):
    """``target[nodes] += coef * Z[row]``: one row of the state broadcast to every node."""

    target: str
    row: int
    coef: object


class GradientTerm(NamedTuple):
    """``target[nodes] += coef * G``: the gradients of the phase's clients."""

    target: str
    coef: object


class OuterTerm(NamedTuple):
    """A term of outer row ``row``: ``kind`` "sum" (``sum_i coef_i * ref[nodes_i]``, ref
    a block), "grad" (``sum_i coef_i * G_i``, the phase's gradients summed; ref None),
    "row" (``coef * Z[ref]``, ref a row) or "zero" (the row is set)."""

    row: int
    kind: str
    ref: object
    coef: object


#: The order in which a form's coefficient values are numbered (its groups of entries):
#: :attr:`LocalForm.coefficients` and the schedule's slots both follow it.
COEFFICIENT_ORDER = ("terms", "external", "gradients", "outer")


@dataclass(frozen=True)
class LocalForm:
    """A node-local phase. For every target block T, on the rows of ``nodes``:

        T[nodes] <- sum_terms coef * S[nodes] + sum_external coef * Z[row] + sum_grad coef * G

    where ``S[nodes]`` are the same nodes' rows of a source block, ``Z[row]`` a single
    row broadcast to every node, and ``G`` the gradients of ``clients`` (aligned with
    ``nodes``). Target blocks without a term are zeroed on ``nodes``. Besides, each
    *outer* row R (a single row of the state, not one of the nodes' rows) may be set to

        Z[R] <- sum_reductions sum_i coef_i * S[nodes_i] + sum_singles coef * Z[row]

    (the server aggregating its clients), where a reduction may also sum the gradients
    ``G`` (the same gradients the node rows receive: a phase that both keeps each
    client's gradient and averages them, ``c[S] = grad(S); g.server = mean(grad(S))``,
    takes them once). Coefficients are numbers, or arrays aligned with ``nodes`` where
    they multiply node rows.

    Attributes:
        outer: ``(R, kind, ref, coef)`` with kind "sum" (ref a source block, a reduction
            over the nodes), "grad" (ref None: the gradients, summed over the nodes),
            "row" (ref a row of Z) or "zero" (R is set, to zero unless another entry adds
            to it); R and ref are rows of Z.
    """

    nodes: Int[np.ndarray, " s"]
    targets: tuple
    terms: tuple[NodeTerm, ...]
    external: tuple[RowTerm, ...]  # rows of Z
    gradients: tuple[GradientTerm, ...]
    clients: np.ndarray | None = None
    outer: tuple[OuterTerm, ...] = ()  # rows of Z

    @cached_property
    def signature(self) -> tuple:
        """Everything about the phase but its nodes and coefficient values: phases with
        equal signatures run the same operations (see :mod:`stochmix.engine.plan.round_plan`)."""
        return (
            self.targets,
            *(
                tuple(e._replace(coef=coefficient_kind(e.coef)) for e in getattr(self, group))
                for group in COEFFICIENT_ORDER
            ),
        )

    @cached_property
    def coefficients(self) -> tuple:
        """The coefficient values, numbered in :data:`COEFFICIENT_ORDER`."""
        return tuple(e.coef for group in COEFFICIENT_ORDER for e in getattr(self, group))

    @cached_property
    def takes_gradients(self) -> bool:
        """Whether the phase needs the gradients of :attr:`clients` (for node rows or
        summed into an outer row)."""
        return bool(self.gradients) or any(o.kind == "grad" for o in self.outer)

    @cached_property
    def outer_rows(self) -> frozenset:
        """The outer rows the phase writes."""
        return frozenset(r for r, _, _, _ in self.outer)

    @cached_property
    def single_reads(self) -> frozenset:
        """Rows of Z the phase reads one at a time (broadcasts and outer singles)."""
        rows: set = {r for _, r, _ in self.external}
        rows.update(ref for _, kind, ref, _ in self.outer if kind == "row")
        return frozenset(rows)


def coefficient_kind(coef) -> str:
    """How the engine multiplies by a coefficient: "one", "minus_one", "scalar" or
    "array" (one value per node)."""
    if np.ndim(coef) == 0:
        return "one" if coef == 1.0 else "minus_one" if coef == -1.0 else "scalar"
    return "array"


class Phase:
    """``Z[rows] <- mix @ Z + inject @ G(clients)``; see the module docstring.

    Attributes:
        size: rows of the stacked state, m.
        label: a name for messages and profiles.
        local: the node-local form, when the phase has one.
        local_why: when it has none, why not (the first term that broke it, in words),
            where the builder knows; None otherwise.
    """

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
        return sorted_unique(np.concatenate([targets, g_targets, zero_rows]))

    @cached_property
    def mix(self) -> sp.csr_array:
        """The rewritten rows of ``M``, CSR of shape (k, m)."""
        targets, sources, coefs = self._triplets[:3]
        rows = self.rows
        return csr_from_triplets(
            np.searchsorted(rows, targets), sources, coefs, (rows.size, self.size)
        )

    @cached_property
    def clients(self) -> np.ndarray:
        """The clients whose gradients the phase needs, sorted, shape (c,)."""
        return sorted_unique(self._triplets[4]).astype(np.int64, copy=False)

    @cached_property
    def inject(self) -> sp.csr_array | None:
        """The rewritten rows of ``B``, CSR of shape (k, c), or None without gradients."""
        _, _, _, g_targets, g_clients, g_coefs, _ = self._triplets
        if g_clients.size == 0:
            return None
        slot = np.searchsorted(self.clients, g_clients)
        return csr_from_triplets(
            np.searchsorted(self.rows, g_targets),
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
            for memo in ("_plans", "_twins"):  # plan_round's memo and this one are ours
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


@dataclass
class _LocalDraft:
    """What the builder has seen so far of a possible :class:`LocalForm`. Terms between
    single rows wait in ``singles`` until :meth:`finish` knows the nodes: they are node
    terms of a one-node phase, or outer rows."""

    ok: bool = True
    why: str | None = None  # why the phase is not node-local (the first reason found)
    nodes: np.ndarray | None = None
    targets: list = field(default_factory=list)
    terms: list = field(default_factory=list)
    external: list = field(default_factory=list)
    gradients: list = field(default_factory=list)
    clients: np.ndarray | None = None
    outer: list = field(default_factory=list)
    singles: list = field(default_factory=list)  # (target, t_node, t_row, source, s_row, coef)
    outer_nodes: list = field(default_factory=list)  # the node of each outer row
    # gradient sums whose nodes were not given: the phase's nodes must be theirs
    gradient_sums: int = 0

    def fail(self, why: str) -> bool:
        """Give up on a node-local form, for the reason ``why`` (the first one is kept)."""
        if self.ok:
            self.ok, self.why = False, why
        return False

    def on(self, nodes: np.ndarray, target: str) -> bool:
        """Register target rows at ``nodes``; False (and give up) if the nodes differ."""
        if not self.ok:
            return False
        if not self.same(nodes):
            return self.fail(
                f"it writes {target!r} on other nodes than its other rows (one phase, one "
                "set of nodes)"
            )
        if target not in self.targets:
            self.targets.append(target)
        return True

    def same(self, nodes: np.ndarray) -> bool:
        """Whether ``nodes`` are the draft's nodes (which they become if there are none)."""
        if self.nodes is None:
            self.nodes = nodes
            return True
        return self.nodes is nodes or (
            self.nodes.shape == nodes.shape and np.array_equal(self.nodes, nodes)
        )

    def finish(self) -> LocalForm | None:
        """The local form, or None when the phase is not node-local."""
        for target, t_node, t_row, source, s_row, coef in self.singles:
            if not self.ok:
                return None
            nodes = self.nodes
            if nodes is not None and nodes.size == 1 and nodes[0] == t_node:
                if source is None:
                    self.on(nodes, target)
                elif s_row[1] == t_node:
                    if self.on(nodes, target):
                        self.terms.append((target, source, coef))
                elif self.on(nodes, target):  # another node's row, broadcast to the node
                    self.external.append((target, s_row[0], coef))
            elif nodes is not None and bool((nodes == t_node).any()):
                # a row among the nodes with terms of its own
                self.fail(f"it writes a single row of {target!r} that is one of its nodes' rows")
            elif source is None:
                self.outer.append((t_row, "zero", None, 0.0))
            else:
                self.outer.append((t_row, "row", s_row[0], coef))
        if self.ok and self.gradient_sums and self.nodes is None:
            self.fail(
                "it sums gradients onto one row but names no node rows to take them at "
                "(give the clients' nodes: PhaseBuilder.reduce_gradients(nodes=...))"
            )
        if not self.ok or (self.nodes is None and not self.outer):
            return None
        if self.nodes is not None and self.outer_nodes:
            if any(bool((self.nodes == node).any()) for node in set(self.outer_nodes)):
                # an outer row is one of the nodes' own rows
                self.fail("a row it sums onto is one of its nodes' own rows")
                return None
        nodes = self.nodes if self.nodes is not None else np.zeros(0, dtype=np.int64)
        if nodes.size == 0 and not self.outer:
            return None
        return LocalForm(
            nodes,
            tuple(self.targets),
            tuple(NodeTerm(*t) for t in self.terms),
            tuple(RowTerm(*t) for t in self.external),
            tuple(GradientTerm(*t) for t in self.gradients),
            self.clients,
            tuple(OuterTerm(*t) for t in self.outer),
        )


def _index(rows) -> np.ndarray:
    """Rows as a 1-d int64 array; an int64 vector comes back as the same object, so that
    later "same nodes?" checks can stop at identity."""
    rows = np.asarray(rows, dtype=np.int64)
    return rows if rows.ndim == 1 else rows.reshape(-1)


def _coef(coef, n: int):
    """A number stays a number; an array is checked to align with the n nodes."""
    arr = np.asarray(coef, dtype=np.float64)
    if arr.ndim == 0:
        return float(arr)
    return arr if arr.shape == (n,) else np.broadcast_to(arr, (n,)).copy()


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
        self._local = _LocalDraft()

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

    def _nodes(self, block: str, local_rows: np.ndarray) -> np.ndarray:
        first = self.layout.first_node(block)
        return local_rows if first == 0 else local_rows + first  # same object: cheap checks

    def _row(self, block: str, local_row) -> int:
        return self.layout.row(block, int(local_row))

    def _note_combine(self, target, t_rows, source, s_rows, coef, reduction=False):
        draft = self._local
        if not draft.ok:
            return
        t_rows, s_rows = _index(t_rows), _index(s_rows)
        if t_rows.size == 0 or s_rows.size == 0:
            return
        if t_rows.size == 1 and s_rows.size == 1 and not reduction:  # resolved later
            t_node = int(self._nodes(target, t_rows)[0])
            s_node = int(self._nodes(source, s_rows)[0])
            draft.singles.append(
                (
                    target,
                    t_node,
                    self._row(target, t_rows[0]),
                    source,
                    (self._row(source, s_rows[0]), s_node),
                    float(coef) if np.ndim(coef) == 0 else float(np.asarray(coef).ravel()[0]),
                )
            )
            return
        if t_rows.size == 1:  # one row, the weighted sum of many: an outer row
            s_nodes = self._nodes(source, s_rows)
            if draft.same(s_nodes):
                draft.outer.append(
                    (self._row(target, t_rows[0]), "sum", source, _coef(coef, s_nodes.size))
                )
                draft.outer_nodes.append(int(self._nodes(target, t_rows)[0]))
            else:
                draft.fail(f"it sums {source!r} over other nodes than those of its other rows")
            return
        t_nodes = self._nodes(target, t_rows)
        if s_rows.size == 1:  # one source row broadcast to every node
            if draft.on(t_nodes, target):
                draft.external.append(
                    (target, self._row(source, s_rows[0]), _coef(coef, t_nodes.size))
                )
            return
        s_nodes = self._nodes(source, s_rows)
        same = s_rows.size == t_rows.size and (
            s_nodes is t_nodes or np.array_equal(s_nodes, t_nodes)
        )
        if not same:
            draft.fail(
                f"it writes {target!r} of some nodes from {source!r} of other nodes (a "
                "node's rows from another node's)"
            )
            return
        if draft.on(t_nodes, target):
            draft.terms.append((target, source, _coef(coef, t_nodes.size)))

    def combine(self, target: str, target_rows, source: str, source_rows, coef=1.0):
        """Add ``coef * source[source_rows]`` to ``target[target_rows]``, entry by entry.

        Rows are block-local; the two index arrays are aligned, and a single index on one
        side broadcasts (one target row and many source rows is a weighted sum).
        """
        self._note_combine(target, target_rows, source, source_rows, coef)
        self._deferred.append(("combine", target, target_rows, source, source_rows, coef))
        self._touched = self._touched or bool(np.size(target_rows) and np.size(source_rows))
        return self

    def reduce(self, target: str, target_row, source: str, source_rows, coef=1.0):
        """Add ``sum_i coef_i * source[source_rows[i]]`` to the one row ``target_row``: a
        reduction over the phase's nodes, read as one even when ``source_rows`` holds a
        single row (:meth:`combine` would read that as a single row of the state). The
        same numbers as ``combine``."""
        self._note_combine(target, target_row, source, source_rows, coef, reduction=True)
        self._deferred.append(("combine", target, target_row, source, source_rows, coef))
        self._touched = self._touched or bool(np.size(target_row) and np.size(source_rows))
        return self

    def per_node(self, target: str, rows):
        """Declare that ``target[rows]`` is written node by node, as the rows of the
        phase's nodes, even when ``rows`` holds a single row (which would otherwise be
        read as one row of the state, an outer row, when no other term names the nodes).
        Changes no number of the phase, only its node-local form."""
        rows = _index(rows)
        if rows.size:
            self._local.on(self._nodes(target, rows), target)
        return self

    def keep(self, target: str, rows, coef=1.0):
        """Rewritten rows start from their own value (times ``coef``)."""
        rows = _index(rows)
        return self.combine(target, rows, target, rows, coef)

    def clear(self, target: str, rows):
        """Rows become zero unless another term adds to them."""
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        draft = self._local
        if rows.size == 1:
            node = int(self._nodes(target, rows)[0])
            draft.singles.append((target, node, self._row(target, rows[0]), None, None, 0.0))
        elif rows.size:
            draft.on(self._nodes(target, rows), target)
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
        self._note_apply(target, source, op, scale)
        self._deferred.append(("apply", target, source, op, scale))
        self._touched = self._touched or bool(op.rows.size)
        return self

    def _note_apply(self, target, source, op: RowSparse, scale: float):
        draft = self._local
        if not draft.ok or op.rows.size == 0:
            return
        pattern = op.pattern
        if isinstance(pattern, Broadcast):
            if draft.on(self._nodes(target, pattern.rows), target):
                draft.external.append(
                    (target, self._row(source, pattern.source), float(scale * pattern.coef))
                )
            return
        if isinstance(pattern, Reduce):
            nodes = self._nodes(source, pattern.cols)
            if pattern.clears:
                draft.on(self._nodes(target, pattern.cols), target)
            if not draft.same(nodes):
                draft.fail(f"it sums {source!r} over other nodes than those of its other rows")
                return
            row = self._row(target, pattern.row)
            draft.outer_nodes.append(int(pattern.row) + self.layout.first_node(target))
            own = float(scale * pattern.self_coef)
            draft.outer.append((row, "sum", source, _coef(scale * pattern.coefs, nodes.size)))
            draft.outer.append((row, "row", self._row(source, pattern.row), own))
            return
        values = op._values
        if op._entries is None and values is not None and values.nnz != op.rows.size:
            # not one entry per row: what the entries would show
            draft.fail(f"it applies a matrix that mixes rows of several nodes into {target!r}")
            return
        rows, cols, vals = op.entries()
        vals = scale * vals
        one_per_row = rows.size == op.rows.size and np.array_equal(rows, op.rows)
        if (
            one_per_row
            and np.array_equal(cols, rows)
            and (self.layout.first_node(target) == self.layout.first_node(source))
        ):
            if draft.on(self._nodes(target, op.rows), target):
                draft.terms.append((target, source, _coef(vals, rows.size)))
        elif one_per_row and (cols == cols[0]).all() and not (rows == cols[0]).any():
            if draft.on(self._nodes(target, op.rows), target):
                row = self._row(source, cols[0])
                draft.external.append((target, row, _coef(vals, rows.size)))
        else:
            draft.fail(f"it applies a matrix that mixes rows of several nodes into {target!r}")

    def gradient(self, target: str, target_rows, clients, coef=1.0):
        """Add ``coef * grad F_client(X_client)`` to ``target[target_rows]``, aligned.

        One target row and several clients is a sum of their gradients onto that row
        (:meth:`reduce_gradients`, whose nodes are then the phase's nodes)."""
        t, c = _index(target_rows), _index(clients)
        if t.size == 1 and c.size > 1:
            return self.reduce_gradients(target, t, c, coef)
        draft = self._local
        if draft.ok and t.size and c.size:
            if t.size != c.size:
                draft.fail(
                    f"it adds the gradients of {c.size} clients to {t.size} rows of {target!r}"
                )
            elif self._same_clients(c):
                if draft.on(self._nodes(target, t), target):
                    draft.gradients.append((target, _coef(coef, t.size)))
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
        draft = self._local
        if draft.ok and c.size and self._same_clients(c):
            if nodes is not None and not draft.same(_index(nodes)):
                draft.fail("it sums gradients over other nodes than those of its other rows")
            else:
                draft.gradient_sums += nodes is None
                draft.outer.append((self._row(target, t[0]), "grad", None, _coef(coef, c.size)))
                draft.outer_nodes.append(int(self._nodes(target, t)[0]))
        self._deferred.append(("gradient", target, t, c, coef))
        self._touched = self._touched or bool(c.size)
        return self

    def _same_clients(self, c: np.ndarray) -> bool:
        """Whether ``c`` are the phase's gradient clients (which they become if there are
        none yet); gives up on the node-local form when not."""
        draft = self._local
        if draft.clients is None or draft.clients is c or np.array_equal(draft.clients, c):
            draft.clients = c
            return True
        return draft.fail("it takes the gradients of two different sets of clients")

    def _materialize(self) -> tuple:
        """The COO triplets of every term, in rows of Z."""
        lay = self.layout
        parts: dict[str, list] = {k: [] for k in ("t", "s", "c", "gt", "gc", "gv", "z")}
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
            elif kind == "apply":
                _, target, source, sparse, scale = op
                rows, cols, vals = sparse.entries()
                parts["t"].append(lay.rows(target, rows))
                parts["s"].append(lay.rows(source, cols))
                parts["c"].append(scale * vals)
                parts["z"].append(lay.rows(target, sparse.rows))
            else:
                _, target, t_rows, clients, coef = op
                t, c, v = self._aligned(t_rows, clients, coef)
                parts["gt"].append(lay.rows(target, t))
                parts["gc"].append(c)
                parts["gv"].append(v)

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
        local = None if empty else self._local.finish()
        blockwise = None if empty else partial(blockwise_form, self.layout, list(self._deferred))
        return Phase(
            self.layout.size,
            self._materialize,
            local,
            self.label,
            empty=empty,
            blockwise=blockwise,
            local_why=self._local.why,
            traffic=None if empty else partial(phase_traffic, self.layout, list(self._deferred)),
        )
