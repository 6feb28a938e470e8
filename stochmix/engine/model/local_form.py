"""The node-local form of a phase: what it is (:class:`LocalForm` and its term records)
and how the terms of a phase are recognised as one (:class:`_LocalDraft`).

A phase is node-local when every participant's rows are rewritten from rows of the same
participant (and read-only rows such as the server's), and each row written alone (the
server's) from rows of the participants or from single rows. The engine runs such a
phase as dense vectorized operations on the participants' rows (:mod:`stochmix.engine.
plan.schedule`, :mod:`stochmix.engine.codegen.program`), without its sparse rows.

:class:`~stochmix.engine.model.phase.PhaseBuilder` tells a :class:`_LocalDraft` every term
it is given; the draft gives up at the first term that breaks the form (keeping the reason
for :attr:`~stochmix.engine.model.phase.Phase.local_why`), and :meth:`_LocalDraft.finish`
gives the form the builder attaches to its phase. The whole-block form of a phase is
recognised in :mod:`stochmix.engine.model.blockwise`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np
from jaxtyping import Int

from ...mixing.rowsparse import Broadcast, Reduce, RowSparse
from .layout import Layout
from .picked import ProductTerm, ViewTerm, _distinct, view_name
from .round_scalars import RoundArray, RoundScalar

__all__ = [
    "COEFFICIENT_ORDER", "GradientTerm", "KernelTerm", "LocalForm", "NodeTerm", "OuterTerm",
    "ProductTerm", "RowTerm", "ViewTerm", "coefficient_kind", "view_name",
]  # fmt: skip


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


class KernelTerm(NamedTuple):
    """``target[nodes] <- kernel(source[nodes], *more[nodes]; *coef)``: an element-wise row
    kernel (see :mod:`stochmix.engine.model.kernels`) with its round scalars ``coef`` (a
    tuple of numbers, bound when the round runs: a prox's threshold, a box's bounds) and,
    for a kernel of several sources, the further ones ``more`` (an adaptive step's moments).
    In a *tail kernel* (:func:`tail_kernel`) target and sources are rows of Z (ints), not
    blocks."""

    target: str | int
    source: str | int
    kernel: str
    coef: tuple
    more: tuple = ()

    @property
    def sources(self) -> tuple:
        """Every source, the first one first."""
        return (self.source, *self.more)


#: The order in which a form's coefficient values are numbered (its groups of entries):
#: :attr:`LocalForm.coefficients` and the schedule's slots both follow it.
COEFFICIENT_ORDER = ("terms", "external", "gradients", "outer", "kernels")


@dataclass(frozen=True)
class LocalForm:
    """A node-local phase. For every target block T, on the rows of ``nodes``:

        T[nodes] <- sum_terms coef * S[nodes] + sum_external coef * Z[row] + sum_grad coef * G

    where ``S[nodes]`` are the same nodes' rows of a source block, ``Z[row]`` a single
    row broadcast to every node, and ``G`` the gradients of ``clients`` (aligned with
    ``nodes``). Target blocks without a term are zeroed on ``nodes``. A form may instead
    hold only ``kernels`` (:class:`KernelTerm`): ``T[nodes] <- kernel(S[nodes])``, an
    element-wise row kernel such as a prox, with no other term and no outer row. Besides,
    each *outer* row R (a single row of the state, not one of the nodes' rows) may be set to

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
    kernels: tuple[KernelTerm, ...] = ()
    views: tuple[ViewTerm, ...] = ()
    #: sampled gradients: the rows each of ``clients`` draws, (c, b) int64 (the
    #: problem's ``sampled_gradients``), bound per round; None: full gradients
    samples: np.ndarray | None = None
    #: mixing products its terms read as blocks (:class:`ProductTerm`; whole-block phases)
    products: tuple[ProductTerm, ...] = ()

    @cached_property
    def plain_blocks(self) -> frozenset:
        """The blocks the form reads or writes at its nodes' own rows (not by index)."""
        names = {*self.targets, *(t.source for t in self.terms)}
        names.update(o.ref for o in self.outer if o.kind == "sum")
        names.update(str(b) for k in self.kernels for b in k.sources)
        names.update(p.source for p in self.products)
        return frozenset(names - {v.name for v in self.views} - {p.name for p in self.products})

    @cached_property
    def signature(self) -> tuple:
        """Everything about the phase but its nodes and coefficient values: phases with
        equal signatures run the same operations (see :mod:`stochmix.engine.plan.round_plan`).
        A kernel's round scalars are always bound per round (their kind is "scalar")."""
        return (
            self.targets,
            *(
                tuple(e._replace(coef=coefficient_kind(e.coef)) for e in getattr(self, group))
                for group in COEFFICIENT_ORDER[:-1]
            ),
            tuple((e.target, e.sources, e.kernel, len(e.coef)) for e in self.kernels),
            tuple((v.name, v.block) for v in self.views),
            None if self.samples is None else "sampled",
            tuple((p.name, p.source) for p in self.products),
        )

    @cached_property
    def coefficients(self) -> tuple:
        """The coefficient values, numbered in :data:`COEFFICIENT_ORDER` (a kernel's round
        scalars one after the other)."""
        values = [e.coef for group in COEFFICIENT_ORDER[:-1] for e in getattr(self, group)]
        values += [c if isinstance(c, float) else float(c) for e in self.kernels for c in e.coef]
        return tuple(values)

    @cached_property
    def takes_gradients(self) -> bool:
        """Whether the phase needs the gradients of :attr:`clients` (for node rows or
        summed into an outer row)."""
        return bool(self.gradients) or any(o.kind == "grad" for o in self.outer)

    @cached_property
    def outer_rows(self) -> frozenset:
        """The outer rows the phase writes (a tail kernel's target among them)."""
        rows = {r for r, _, _, _ in self.outer}
        rows.update(k.target for k in self.kernels if isinstance(k.target, int))
        return frozenset(rows)

    @cached_property
    def single_reads(self) -> frozenset:
        """Rows of Z the phase reads one at a time (broadcasts, outer singles and a tail
        kernel's source)."""
        rows: set = {r for _, r, _ in self.external}
        rows.update(ref for _, kind, ref, _ in self.outer if kind == "row")
        rows.update(b for k in self.kernels for b in k.sources if isinstance(b, int))
        return frozenset(rows)


def coefficient_kind(coef) -> str:
    """How the engine multiplies by a coefficient: "one", "minus_one", "scalar" or
    "array" (one value per node)."""
    if isinstance(coef, RoundScalar):
        return "scalar"  # (read from its slot: its value in a later round may be another)
    if np.ndim(coef) == 0:
        return "one" if coef == 1.0 else "minus_one" if coef == -1.0 else "scalar"
    return "array"


@dataclass
class _LocalDraft:
    """What the builder has seen so far of a possible :class:`LocalForm`. Terms between
    single rows wait in ``singles`` until :meth:`finish` knows the nodes: they are node
    terms of a one-node phase, or outer rows.

    The builder tells it every term it is given (the ``note_*`` methods, with the builder's
    block-local rows, which ``layout`` turns into nodes and rows of Z)."""

    layout: Layout
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
    # rows picked by index: id(rows) -> (block, rows, nodes), and block -> rows
    views: dict = field(default_factory=dict)
    view_rows: dict = field(default_factory=dict)
    samples: np.ndarray | None = None  # the draw of sampled gradients

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

    def _nodes(self, block: str, local_rows: np.ndarray) -> np.ndarray:
        """The nodes of a block's rows."""
        first = self.layout.first_node(block)
        return local_rows if first == 0 else local_rows + first  # same object: cheap checks

    def _row(self, block: str, local_row) -> int:
        """The row of Z of a block's row."""
        return self.layout.row(block, int(local_row))

    def note_view(self, block: str, rows, nodes: np.ndarray) -> None:
        """``block[rows]`` are the rows of ``nodes`` picked by index (``PhaseBuilder.view``):
        the terms that name the same ``rows`` array read or write them as the nodes' own."""
        if not self.ok:
            return
        known = self.view_rows.get(block)
        if known is not None and known is not rows and not np.array_equal(known, rows):
            self.fail(f"it picks rows of {block!r} by two different indices")
            return
        self.view_rows[block] = rows
        self.views[id(rows)] = (block, rows, nodes)

    def _view(self, block: str, rows) -> tuple[str, np.ndarray] | None:
        """(the view's name, its nodes) when ``block[rows]`` are rows picked by index."""
        found = self.views.get(id(rows))
        if found is None or found[1] is not rows or found[0] != block:
            return None
        return view_name(block), found[2]

    def _combine_view(self, target, t_rows, t_view, source, s_rows, s_view, coef, reduction):
        """:meth:`note_combine` when a side is rows picked by index (always node rows)."""
        t_name, t_nodes = t_view or (target, self._nodes(target, t_rows))
        s_name, s_nodes = s_view or (source, self._nodes(source, s_rows))
        if t_view is None and (reduction or (t_rows.size == 1 and s_rows.size > 1)):
            if self.same(s_nodes):
                self.outer.append(
                    (self._row(target, t_rows[0]), "sum", s_name, _coef(coef, s_nodes.size))
                )
                self.outer_nodes.append(int(t_nodes[0]))
            else:
                self.fail(f"it sums {source!r} over other nodes than those of its other rows")
        elif s_view is None and s_rows.size == 1 and t_rows.size > 1:
            if self.on(t_nodes, t_name):
                self.external.append(
                    (t_name, self._row(source, s_rows[0]), _coef(coef, t_nodes.size))
                )
        elif s_nodes.size == t_nodes.size and (
            s_nodes is t_nodes or np.array_equal(s_nodes, t_nodes)
        ):
            if self.on(t_nodes, t_name):
                self.terms.append((t_name, s_name, _coef(coef, t_nodes.size)))
        else:
            self.fail(
                f"it writes {target!r} of some nodes from {source!r} of other nodes (a "
                "node's rows from another node's)"
            )

    def note_combine(self, target, t_rows, source, s_rows, coef, reduction=False):
        """``coef * source[s_rows]`` is added to ``target[t_rows]`` (``PhaseBuilder.combine``;
        with ``reduction``, a reduction onto one row: ``PhaseBuilder.reduce``)."""
        if not self.ok:
            return
        if self.views:
            t_view, s_view = self._view(target, t_rows), self._view(source, s_rows)
            if t_view or s_view:
                t_rows, s_rows = _index(t_rows), _index(s_rows)
                if t_rows.size and s_rows.size:
                    self._combine_view(
                        target, t_rows, t_view, source, s_rows, s_view, coef, reduction
                    )
                return
        t_rows, s_rows = _index(t_rows), _index(s_rows)
        if t_rows.size == 0 or s_rows.size == 0:
            return
        if t_rows.size == 1 and s_rows.size == 1 and not reduction:  # resolved later
            t_node = int(self._nodes(target, t_rows)[0])
            s_node = int(self._nodes(source, s_rows)[0])
            self.singles.append(
                (
                    target,
                    t_node,
                    self._row(target, t_rows[0]),
                    source,
                    (self._row(source, s_rows[0]), s_node),
                    _single(coef),
                )
            )
            return
        if t_rows.size == 1:  # one row, the weighted sum of many: an outer row
            s_nodes = self._nodes(source, s_rows)
            if self.same(s_nodes):
                self.outer.append(
                    (self._row(target, t_rows[0]), "sum", source, _coef(coef, s_nodes.size))
                )
                self.outer_nodes.append(int(self._nodes(target, t_rows)[0]))
            else:
                self.fail(f"it sums {source!r} over other nodes than those of its other rows")
            return
        t_nodes = self._nodes(target, t_rows)
        if s_rows.size == 1:  # one source row broadcast to every node
            if self.on(t_nodes, target):
                self.external.append(
                    (target, self._row(source, s_rows[0]), _coef(coef, t_nodes.size))
                )
            return
        s_nodes = self._nodes(source, s_rows)
        same = s_rows.size == t_rows.size and (
            s_nodes is t_nodes or np.array_equal(s_nodes, t_nodes)
        )
        if not same:
            self.fail(
                f"it writes {target!r} of some nodes from {source!r} of other nodes (a "
                "node's rows from another node's)"
            )
            return
        if self.on(t_nodes, target):
            self.terms.append((target, source, _coef(coef, t_nodes.size)))

    def note_per_node(self, target: str, rows: np.ndarray) -> None:
        """``target[rows]`` is written node by node (``PhaseBuilder.per_node``)."""
        if rows.size:
            view = self._view(target, rows) if self.views else None
            if view is None:
                self.on(self._nodes(target, rows), target)
            else:
                self.on(view[1], view[0])

    def note_clear(self, target: str, rows: np.ndarray) -> None:
        """``target[rows]`` is cleared (``PhaseBuilder.clear``)."""
        view = self._view(target, rows) if self.views else None
        if view is not None:
            if rows.size:
                self.on(view[1], view[0])
        elif rows.size == 1:
            node = int(self._nodes(target, rows)[0])
            self.singles.append((target, node, self._row(target, rows[0]), None, None, 0.0))
        elif rows.size:
            self.on(self._nodes(target, rows), target)

    def note_apply(self, target, source, op: RowSparse, scale: float):
        """``scale * op @ source`` is added to the rows of ``target`` that ``op`` sets
        (``PhaseBuilder.apply``)."""
        if not self.ok or op.rows.size == 0:
            return
        pattern = op.pattern
        if isinstance(pattern, Broadcast):
            if self.on(self._nodes(target, pattern.rows), target):
                self.external.append(
                    (target, self._row(source, pattern.source), float(scale * pattern.coef))
                )
            return
        if isinstance(pattern, Reduce):
            nodes = self._nodes(source, pattern.cols)
            if pattern.clears:
                self.on(self._nodes(target, pattern.cols), target)
            if not self.same(nodes):
                self.fail(f"it sums {source!r} over other nodes than those of its other rows")
                return
            row = self._row(target, pattern.row)
            self.outer_nodes.append(int(pattern.row) + self.layout.first_node(target))
            own = float(scale * pattern.self_coef)
            self.outer.append((row, "sum", source, _coef(scale * pattern.coefs, nodes.size)))
            self.outer.append((row, "row", self._row(source, pattern.row), own))
            return
        values = op._values
        if op.parent is not None and op._entries is None and values is None:
            # rows of a whole operator (an activated pull): their entry counts, unsliced
            values = op.parent.values
            several = bool((np.diff(values.indptr)[op.rows] != 1).any())
        else:
            several = op._entries is None and values is not None and values.nnz != op.rows.size
        if several:
            # not one entry per row: what the entries would show
            self.fail(f"it applies a matrix that mixes rows of several nodes into {target!r}")
            return
        rows, cols, vals = op.entries()
        vals = scale * vals
        one_per_row = rows.size == op.rows.size and np.array_equal(rows, op.rows)
        if (
            one_per_row
            and np.array_equal(cols, rows)
            and (self.layout.first_node(target) == self.layout.first_node(source))
        ):
            if self.on(self._nodes(target, op.rows), target):
                self.terms.append((target, source, _coef(vals, rows.size)))
        elif one_per_row and (cols == cols[0]).all() and not (rows == cols[0]).any():
            if self.on(self._nodes(target, op.rows), target):
                row = self._row(source, cols[0])
                self.external.append((target, row, _coef(vals, rows.size)))
        else:
            self.fail(f"it applies a matrix that mixes rows of several nodes into {target!r}")

    def note_gradient(self, target: str, t: np.ndarray, c: np.ndarray, coef, samples=None):
        """``coef * G`` of the clients ``c`` is added to ``target[t]``, aligned
        (``PhaseBuilder.gradient``; ``samples``: G sampled, drawing those rows)."""
        if samples is not None:
            self.samples = samples
        view = self._view(target, t) if self.views else None
        if self.ok and t.size and c.size:
            if view is not None:
                if t.size == c.size and self.same_clients(c) and self.on(view[1], view[0]):
                    self.gradients.append((view[0], _coef(coef, t.size)))
                elif t.size != c.size:
                    self.fail(f"it adds the gradients of {c.size} clients to {t.size} rows")
            elif t.size != c.size:
                self.fail(
                    f"it adds the gradients of {c.size} clients to {t.size} rows of {target!r}"
                )
            elif self.same_clients(c):
                if self.on(self._nodes(target, t), target):
                    self.gradients.append((target, _coef(coef, t.size)))

    def note_reduce_gradients(self, target: str, t: np.ndarray, c: np.ndarray, coef, nodes):
        """The gradients of the clients ``c`` are summed onto the one row ``target[t]``
        (``PhaseBuilder.reduce_gradients``)."""
        if self.ok and c.size and self.same_clients(c):
            if nodes is not None and not self.same(_index(nodes)):
                self.fail("it sums gradients over other nodes than those of its other rows")
            else:
                self.gradient_sums += nodes is None
                self.outer.append((self._row(target, t[0]), "grad", None, _coef(coef, c.size)))
                self.outer_nodes.append(int(self._nodes(target, t)[0]))

    def same_clients(self, c: np.ndarray) -> bool:
        """Whether ``c`` are the phase's gradient clients (which they become if there are
        none yet); gives up on the node-local form when not."""
        if self.clients is None or self.clients is c or np.array_equal(self.clients, c):
            self.clients = c
            return True
        return self.fail("it takes the gradients of two different sets of clients")

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
        views = self._views()
        if not self.ok:
            return None
        return LocalForm(
            nodes,
            tuple(self.targets),
            tuple(NodeTerm(*t) for t in self.terms),
            tuple(RowTerm(*t) for t in self.external),
            tuple(GradientTerm(*t) for t in self.gradients),
            self.clients,
            tuple(OuterTerm(*t) for t in self.outer),
            views=views,
            samples=self.samples if self.gradients else None,
        )

    def _views(self) -> tuple[ViewTerm, ...]:
        """The form's rows picked by index (giving up when a block is also read or written
        at node rows or single rows: a view is its block's only access in a form)."""
        if not self.view_rows:
            return ()
        used = {t for t in self.targets} | {t[1] for t in self.terms}
        used.update(o[2] for o in self.outer if o[1] == "sum")
        views = []
        for block, rows in self.view_rows.items():
            name = view_name(block)
            if name not in used:
                continue
            if block in used:
                self.fail(f"it reads or writes {block!r} both by index and at node rows")
                return ()
            if name in self.targets and rows.size > 1 and not _distinct(rows):
                self.fail(f"it writes a row of {block!r} picked by index twice (they add up)")
                return ()
            z_rows = {r for _, r, *_ in self.external} | {o[0] for o in self.outer}
            z_rows.update(o[2] for o in self.outer if o[1] == "row")
            if any(self.layout.locate(int(r))[0] == block for r in z_rows):
                self.fail(f"it reads or writes {block!r} both by index and as single rows")
                return ()
            views.append(ViewTerm(name, block, rows))
        return tuple(views)


def _single(coef) -> float:
    """The coefficient of a single row from a single row (a round scalar kept)."""
    if isinstance(coef, RoundScalar):
        return coef
    return float(coef) if np.ndim(coef) == 0 else float(np.asarray(coef).ravel()[0])


def _index(rows) -> np.ndarray:
    """Rows as a 1-d int64 array; an int64 vector comes back as the same object, so that
    later "same nodes?" checks can stop at identity."""
    rows = np.asarray(rows, dtype=np.int64)
    return rows if rows.ndim == 1 else rows.reshape(-1)


def _coef(coef, n: int):
    """A number stays a number (a round scalar keeps its rule); an array is checked to
    align with the n nodes."""
    if isinstance(coef, RoundScalar):
        return coef
    if isinstance(coef, RoundArray) and coef.shape == (n,):
        return coef  # (its rule kept; one without a rule stays marked: templates refuse it)
    arr = np.asarray(coef, dtype=np.float64)
    if arr.ndim == 0:
        return float(arr)
    return arr if arr.shape == (n,) else np.broadcast_to(arr, (n,)).copy()
