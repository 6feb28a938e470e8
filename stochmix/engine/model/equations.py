r"""Phases written as equations: a thin linear-expression layer over :class:`PhaseBuilder`.

A method writes the lines of its paper and gets the phase that :class:`PhaseBuilder`
calls would give (the same matrices, the same node-local form, the same numbers)::

    eq = Equations(ctx)
    x, h, hsum = eq.blocks("x", "h", "hsum")
    S = participants
    x[S] -= lr * grad(S)                        # a local step of the participants
    step = eq.build("local step")               # ... and the handles write the next phase
    x.server -= dot(w, x.server - x[S] - beta * h[S]) + eta * beta / n * hsum.server
    h[S] = x.server - x[S]                      # memory of the participants
    hsum.server += total(x.server - x[S] - h[S])
    update = eq.build("stale update")

The expressions (``x[S]``, ``x.server``, ``grad(S)``, their linear combinations and the
reductions ``total``, ``mean`` and ``dot``, with the index space they share) are
:mod:`stochmix.engine.model.expressions` and :mod:`stochmix.engine.model.functions`; this
module re-exports them. Here they become equations.

**Equations** assign to a row selection of a block handle:

* ``x[S] = e`` (``x.server = e``): the rows become ``e``; ``x[S] = 0`` clears them;
* ``x[S] += e`` (``-= e``): the rows keep their value plus (minus) ``e``; the target's own
  rows inside ``e`` fold into the kept coefficient (``x.server += eta * mean(x[S] -
  x.server)`` keeps x_0 with coefficient ``1 - eta``).

A per-client target takes a per-client expression over the same clients, or a one-row
expression (broadcast); a one-row target takes a one-row expression.

**Simultaneous semantics.** Every equation of one :class:`Equations` (one phase) reads the
state *before* the phase, whatever their order: ``h[S] = x.server - x[S]`` after an update
of ``x.server`` in the same phase still reads the old server row. That is the phase
``Z <- M Z + B G``. Rows may be assigned once per phase; :meth:`Equations.build` closes
a phase, and the same handles then write the next one.

**Exactly today's phases.** Each equation becomes the :class:`PhaseBuilder` calls a method
would write by hand, in the order its terms are written: ``+=`` gives ``keep`` first, then
one ``combine`` per term (``gradient`` for ``grad``; ``reduce`` and ``reduce_gradients``
for the terms of a reduction), ``= 0`` gives ``clear``. Term
coefficients are evaluated as (product of the factors) / (product of the divisors), and a
mean of a single row is that row (no ``|S| / |S|``), so hand-written coefficients such as
``eta / |S|`` and ``1 - eta`` come out to the last bit.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Int

from .expressions import (
    BlockRows,
    Expression,
    Selection,
    _is_number,
    _same_clients,
    _Update,
    show,
)
from .functions import dot, grad, mean, total
from .layout import Layout
from .phase import Phase, PhaseBuilder
from .phase_cache import PhaseCache
from .pushed import PushedColumns
from .terms import EVERY, _Term, _with, client_array

__all__ = ["BlockRows", "Equations", "Expression", "Selection", "dot", "grad", "mean", "total"]


class Equations:
    """The equations of one phase; :meth:`build` gives the :class:`Phase`.

    Args:
        ctx: a :class:`~stochmix.engine.model.method.RunContext` (or anything with ``layout`` and
            ``n_clients``), or a :class:`Layout` with ``n_clients`` given.
        label: the phase's name in messages and profiles.
        n_clients: N, when ``ctx`` is a layout.
        client_node: the node of client 0: 1 in federated layouts (node 0 the server), 0 in
            decentralized ones (no server).

    Every equation reads the state before the phase (see the module docstring).
    """

    def __init__(self, ctx, label: str = "", *, n_clients: int | None = None, client_node: int = 1):
        if isinstance(ctx, Layout):
            if n_clients is None:
                raise ValueError("n_clients is required when ctx is a Layout")
            layout = ctx
            cache = PhaseCache()
        else:
            layout = ctx.layout
            n_clients = ctx.n_clients if n_clients is None else n_clients
            cache = ctx.phase_cache
        if client_node not in (0, 1):
            raise ValueError(f"client_node must be 0 or 1, got {client_node!r}")
        self.layout = layout
        self.n_clients = int(n_clients)
        self.client_node = client_node
        self.label = label
        self.cache = cache
        self._calls: list = []  # the PhaseBuilder calls of the phase being written
        self._checked: dict = {}  # id(clients) -> (clients, checked array)
        self._shifted: dict = {}  # (id(clients), shift) -> (clients, rows)
        self._written: dict = {}  # block -> list of written rows (ints or arrays)
        self._pending: list = []  # updates ``u += e`` not yet written to a block
        self.active: np.ndarray | None = None  # the active clients (see activate)

    def blocks(self, *names: str) -> tuple[BlockRows, ...]:
        """Handles of the named blocks, in the order asked."""
        return tuple(BlockRows(self, name) for name in names)

    def block(self, name: str) -> BlockRows:
        """The handle of one block."""
        return BlockRows(self, name)

    def build(self, label: str | None = None) -> Phase:
        """The phase of the equations written since the last build (named ``label``, else
        the constructor's label); the handles then write the next phase.
        """
        if self._pending:
            text = self._pending[0].target.text
            raise ValueError(
                f"an update of {text} was never written: write ``{text} += ...`` on the "
                "block itself, not on a selection kept in a variable"
            )
        label = self.label if label is None else label
        calls, self._calls, self._written = self._calls, [], {}
        key = self.cache.key(label, calls)
        phase = None if key is None else self.cache.get(key)
        if phase is None:
            builder = PhaseBuilder(self.layout, label)
            for name, *args in calls:
                getattr(builder, name)(*args)
            phase = builder.build()
            # the rows of active nodes mixing with their neighbours: the sparse rows are
            # this phase's fast path (a round costs what its active nodes cost)
            phase.row_sparse = self.active is not None
            phase.pushes = self.pushes
            if key is not None:
                self.cache.put(key, calls, phase)
        self.pushes = False
        return phase

    #: whether the phase being written pushes along the active nodes' columns of a
    #: matrix (node activation: :mod:`stochmix.engine.model.activated`)
    pushes = False

    def _call(self, *call) -> None:
        self._calls.append(call)

    # -- indices -------------------------------------------------------------------------

    def _clients(self, clients) -> np.ndarray:
        """Client indices as a 1-d int64 array in [0, N), checked once per array."""
        found = self._checked.get(id(clients))
        if found is not None and found[0] is clients:
            return found[1]
        arr = client_array(clients, "clients")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_clients):
            bad = arr[(arr < 0) | (arr >= self.n_clients)][0]
            raise ValueError(
                f"client index {bad} is out of range: clients are 0..{self.n_clients - 1}"
            )
        if isinstance(clients, np.ndarray):
            self._checked[id(clients)] = (clients, arr)
        return arr

    def _rows(self, clients: np.ndarray, shift: int) -> np.ndarray:
        """``clients + shift``, one array object per (clients, shift) so that the builder's
        "same nodes?" checks stop at identity."""
        if shift == 0:
            return clients
        found = self._shifted.get((id(clients), shift))
        if found is not None and found[0] is clients:
            return found[1]
        rows = clients + shift
        self._shifted[(id(clients), shift)] = (clients, rows)
        return rows

    def _nodes_of(self, target: Selection) -> np.ndarray:
        """The nodes of a selection's clients (one row per client: rows picked by index)."""
        assert target.clients is not None  # (x.at[...] names its clients)
        return self._rows(target.clients, self.client_node)

    # -- lowering ------------------------------------------------------------------------

    def _pending_update(self, update: _Update) -> _Update:
        self._pending.append(update)
        return update

    def _equation(self, target: Selection, value) -> None:
        if isinstance(value, _Update):
            if value in self._pending:
                self._pending.remove(value)
            if value.target.handle is not target.handle or value.target.text != target.text:
                raise TypeError(f"{target.text} = <an update of {value.target.text}>")
            self._write(target, value.expr, keep=True)
        elif isinstance(value, Expression):
            self._write(target, value, keep=False)
        elif isinstance(value, BlockRows):
            self._write(target, value[:], keep=False)
        elif _is_number(value) and value == 0:
            if self.active is not None:
                from .activated import active_target

                target = active_target(self, target)
            self._claim(target)
            if target.view:
                self._call("view", target.handle.name, target.rows, self._nodes_of(target))
            self._call("clear", target.handle.name, target.rows)
        else:
            raise TypeError(
                f"{target.text} = ... needs an expression of the state (or 0 to clear), "
                f"got {value!r}"
            )

    def _write(self, target: Selection, expr: Expression, keep: bool) -> None:
        """Lower ``target = expr`` (``+= expr`` when ``keep``), activated when the
        equations are (:meth:`activate`)."""
        if self.active is None:
            self._lower(target, expr, keep)
        else:
            if target.view or any(t.view or t.samples is not None for t in expr.terms):
                raise ValueError(
                    f"{target.text}: rows picked by index (x.at[...]) and sampled gradients "
                    "(grad(samples=...)) are not written under node activation (activate)"
                )
            from .activated import lower  # imported here: it builds on this module's terms

            lower(self, target, expr, keep, Expression)

    def activate(self, nodes: Int[np.ndarray, " a"]) -> Equations:
        """Write the following equations for the active ``nodes`` only (sorted client
        indices); returns ``self``.

        A whole-block equation ``x[:] = ...`` then holds on the active rows, with each
        mixing operator activated by its direction (``op.mixes``: "pull", the default,
        or "push"; see :mod:`stochmix.mixing.activation`), ``grad()`` the active nodes'
        gradients, and every other row kept, but for what active nodes push to it. The
        rules are in :mod:`stochmix.engine.model.activated`."""
        self.active = self._clients(nodes)
        return self

    def _claim(self, target: Selection) -> None:
        """Refuse rows written twice in one phase (they would silently add up). A whole
        block (``x[:]``) is distinct rows by construction, and meets any other rows of its
        block: no pass over its rows."""
        name = target.handle.name
        whole = target.whole
        if whole:
            rows = target.rows
        else:
            rows = np.atleast_1d(np.asarray(target.rows, dtype=np.int64))
            if target.clients is not None and rows.size > 1:
                if not (np.diff(rows) > 0).all() and np.unique(rows).size != rows.size:
                    what = "rows picked by index" if target.view else "the clients S"
                    raise ValueError(f"{target.text}: {what} must be distinct")
        done = self._written.setdefault(name, [])
        for old, old_whole in done:
            if (rows.size and old.size) if whole or old_whole else np.isin(rows, old).any():
                raise ValueError(
                    f"{target.text}: rows of block {name!r} are assigned twice in this phase; "
                    "every equation of a phase reads the state before it, so write one "
                    "equation per row (or use two phases)"
                )
        done.append((rows, whole))

    def _lower(self, target: Selection, expr: Expression, keep: bool) -> None:
        name = target.handle.name
        if target.clients is None:
            if expr.clients is not None:
                raise ValueError(
                    f"{target.text} is one row but the expression has one value per client "
                    f"({expr.clients.size} clients): reduce it with total(), mean() or dot()"
                )
        else:
            if expr.clients is not None and not _same_clients(expr.clients, target.clients):
                raise ValueError(
                    f"{target.text}: the expression runs over other clients "
                    f"({show(expr.clients)}) than the target ({show(target.clients)})"
                )
            for t in expr.terms:
                if t.summed:
                    raise ValueError(
                        f"{target.text} has one row per client but the expression is a "
                        "reduction (total, mean, dot) onto one row"
                    )
        terms = [self._resolved(t, target) for t in expr.terms]
        self._claim(target)
        call = self._call
        if target.view:
            call("view", name, target.rows, self._nodes_of(target))
        for t in terms:
            if t.view:
                call("view", t.block, t.rows, self._rows(t.over, self.client_node))
        if target.clients is not None:  # one row per client, even for one client
            call("per_node", name, target.rows)
        if keep:
            own = 1.0
            rest = []
            for t in terms:
                if t.block == name and not t.summed and t.op is None and _same_rows(t, target):
                    own = own + t.coef
                else:
                    rest.append(t)
            call("keep", name, target.rows, own)
            terms = rest
        for t in terms:
            if t.op is not None:
                call("push" if isinstance(t.op, PushedColumns) else "apply", name, t.block,
                     t.op, t.coef)  # fmt: skip
            elif t.block is None and t.summed:  # the clients' gradients summed onto one row
                nodes = self._rows(t.rows, self.client_node)  # where they are taken
                call("reduce_gradients", name, target.rows, t.rows, t.coef, nodes)
            elif t.block is None and t.samples is not None:
                call("gradient", name, target.rows, t.rows, t.coef, t.samples)
            elif t.block is None:
                call("gradient", name, target.rows, t.rows, t.coef)
            elif t.summed:  # a reduction over the clients, even over one
                call("reduce", name, target.rows, t.block, t.rows, t.coef)
            else:
                call("combine", name, target.rows, t.block, t.rows, t.coef)

    def _resolved(self, t: _Term, target: Selection) -> _Term:
        """``t`` checked against the equation's target: gradients of clients in [0, N)
        (``grad()``: the target's clients, which must be every client), a mixing
        operator over the target's block and exactly its rows."""
        if t.block is None:
            if t.rows is EVERY:
                clients = target.clients
                if (
                    clients is None
                    or clients.size != self.n_clients
                    or not (
                        target.rows is self.cache.whole(self.n_clients, 0)[0]
                        or np.array_equal(clients, np.arange(self.n_clients))
                    )
                ):
                    raise ValueError(
                        f"{target.text}: grad() is every client's gradient, but the target "
                        "does not hold one row per client: write grad(S) with the clients"
                    )
                if t.samples is not None and t.samples.shape[0] != clients.size:
                    raise ValueError(
                        f"{target.text}: grad(samples=...) needs one row of samples for each "
                        f"of the {clients.size} clients, got shape {t.samples.shape}"
                    )
                return _with(t, rows=clients, over=clients)
            self._clients(t.rows)
            return t
        if t.op is not None:
            op, name = t.op, target.handle.name
            size = self.layout.block(name).rows
            if op.size != size or op.size != self.layout.block(t.block).rows:
                raise ValueError(
                    f"{target.text} = W @ {t.block} + ...: W is {op.size} x {op.size} but "
                    f"blocks {name!r} and {t.block!r} have {size} and "
                    f"{self.layout.block(t.block).rows} rows"
                )
            rows = target.rows
            if target.clients is None or not (
                op.rows is rows or (op.rows.size == np.size(rows) and np.array_equal(op.rows, rows))
            ):
                raise ValueError(
                    f"{target.text} = W @ {t.block} + ...: W sets rows "
                    f"{show(op.rows)} of the block, the target is other rows; write the "
                    f"target as {name}[:] for a matrix over every row"
                )
            if type(t.num) is not float and np.ndim(t.num) != 0:
                raise ValueError(
                    f"{target.text}: W @ {t.block} takes a number as its coefficient, not "
                    "per-client weights (put them in W)"
                )
        return t


def _same_rows(term: _Term, target: Selection) -> bool:
    if target.clients is None:
        return term.over is None and term.rows == target.rows
    return term.over is not None and (
        term.rows is target.rows or np.array_equal(term.rows, target.rows)
    )
