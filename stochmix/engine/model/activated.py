r"""Equations under activation: the rule that turns a whole-block equation into the
equations of the active nodes (see :meth:`~stochmix.engine.model.equations.Equations.activate`).

With the active nodes A (diagonal D), the equation ``T[:] = L + W_pull @ m + W_push @ m'``
(L the terms that are not mixed: block rows and gradients) becomes

.. math::

    T^+ = (I - D)\,T + D\,(L + W_{pull}\, m) + W_{push} D\, m'

* the active rows take the equation, with the pull operators' rows A (an active node
  reads its neighbours, active or not) and the push operators' columns A (only the active
  nodes send): ``T[A] = L[A] + (D W_pull) m + (W_push D)[A] m'``;
* the other rows keep their value, plus what active nodes push to them:
  ``T[R] = T[R] + (W_push D)[R] m'`` for the rows R reached;
* gradients (``grad()``) are the active nodes' only.

Pull operators are ``D W + (I - D)`` and push operators ``W D + (I - D)`` of
:mod:`stochmix.mixing.activation` when the equation's operand is the target itself
(``x[:] = W @ x``); with every node active the equation is the original one. A whole
block written ``x[:] = 0`` clears the active rows. Equations over chosen rows (``x[S]``)
and reductions are refused under activation: they would bypass the rule.

A push with an operator that sets every row (a graph's W) is one term of the active
rows' equation, :class:`~stochmix.engine.model.pushed.PushedColumns` (the columns A of W,
nothing sliced), applied as a scatter from the senders' columns after the active rows are
written; other push operators (an edge's matrix) are split here into the rows A and the
rows R they reach.

Cost: what the active rows and the rows they reach cost (:func:`~stochmix.mixing.
activation.pulled`, :class:`~stochmix.engine.model.pushed.PushedColumns` and
:func:`~stochmix.mixing.activation.pushed`), never O(n).
"""

from __future__ import annotations

import numpy as np

from ...mixing.activation import DIRECTIONS, pulled, pushed
from ...mixing.rowsparse import RowSparse
from .pushed import PushedColumns
from .terms import EVERY, _with

__all__ = ["active_target", "lower"]


def _refuse(target, why: str) -> ValueError:
    return ValueError(
        f"{target.text}: {why}; under activation a decentralized method writes whole "
        "blocks (x[:] = W @ x - lr * grad()) and the engine restricts them to the active "
        "nodes (see stochmix.engine.model.activated)"
    )


def active_target(eq, target):
    """The active rows of a whole-block target."""
    if not target.whole:
        raise _refuse(target, "the target names its rows")
    return target.handle[eq.active]


def lower(eq, target, expr, keep: bool, expression) -> None:
    """Write the activated form of ``target = expr`` (``+=`` when ``keep``) into ``eq``
    (see the module docstring); ``expression`` is the Expression class."""
    on_active = active_target(eq, target)
    active, rows = eq.active, on_active.rows
    # each operator sliced once for the round's equations: (id(op), id(rows)) -> (op, its
    # active rows, or (on the active rows, to the others or None)); the same objects in
    # every phase of the round, so that an operator mixing two blocks is one operator
    memo = eq.__dict__.setdefault("_activated", {})
    # the pushes are scattered from their columns where every push of the equation can be
    # (a whole operator, some nodes active); else all of them take the rows they reach (a
    # row reached by both kinds would keep its value twice)
    scatter = all(
        _scatters(t.op, rows)
        for t in expr.terms
        if t.op is not None and getattr(t.op, "mixes", "pull") == "push"
    )
    terms, sent = [], []
    for t in expr.terms:
        if t.op is not None:
            if getattr(t.op, "hops", None) is not None:  # a polynomial of W: K rounds
                raise ValueError(
                    f"{target.text}: {t.op!r} is {t.op.hops} rounds over W's edges, each "
                    "needing every node: it cannot mix under node or edge activation (mix "
                    "with W, or run under Full(n))"
                )
            direction = getattr(t.op, "mixes", "pull")
            if direction not in DIRECTIONS:
                raise ValueError(
                    f"{target.text}: a mixing operator's direction (op.mixes) must be one of "
                    f"{DIRECTIONS}, got {direction!r}"
                )
            key = (id(t.op), id(rows), scatter)
            found = memo.get(key)
            if found is None or found[0] is not t.op:
                made: object
                if direction == "pull":
                    made = pulled(t.op, rows)
                elif scatter:
                    made = PushedColumns(t.op, rows)
                else:
                    made = pushed(t.op, rows)
                    for part in made if made[0] is not t.op else ():
                        if part is not None:  # (its messages: the operator's, once)
                            part.__dict__["pushed_from"] = (t.op, rows)
                found = memo[key] = (t.op, made)
            if isinstance(found[1], PushedColumns):
                op = found[1]
                eq.pushes = True  # (the general path builds its sparse rows every round)
            elif direction == "pull":
                op = found[1]
            else:
                parts = found[1]
                op = parts[0]
                if parts[1] is not None:
                    sent.append((t, parts[1]))
                if op is not t.op:  # the active nodes' columns, built for the round
                    eq.pushes = True
            terms.append(_with(t, op=op, rows=rows, over=active))
        elif t.summed:
            raise _refuse(target, "it holds a reduction (total, mean, dot)")
        elif t.block is None:
            if t.rows is not EVERY:
                raise _refuse(target, "it takes the gradients of chosen clients (grad(S))")
            terms.append(_with(t, rows=active, over=active))
        elif t.whole:
            own = eq.block(t.block)[active]
            terms.append(_with(t, rows=own.rows, over=active, whole=False))
        elif t.over is None:
            terms.append(t)  # one row (an anchor), the same for every node
        else:
            raise _refuse(target, f"it reads chosen rows of {t.block!r}")
    eq._lower(on_active, expression(tuple(terms), active), keep)
    if sent:
        _receivers(eq, target, sent, expression)


def _scatters(op, rows: np.ndarray) -> bool:
    """Whether a push by ``op`` from the active ``rows`` is a :class:`PushedColumns`
    scatter: an operator that sets every row (a graph's W, not an edge's matrix), with
    some nodes inactive."""
    return op.rows.size == op.size > rows.size and not getattr(op, "closed", False)


def _receivers(eq, target, sent: list, expression) -> None:
    """``T[R] += (W_push D)[R] m`` for the inactive rows R that active nodes push to."""
    reached = sent[0][1].rows
    if any(not np.array_equal(part.rows, reached) for _, part in sent[1:]):
        reached = np.unique(np.concatenate([part.rows for _, part in sent]))
        sent = [(t, _over(part, reached)) for t, part in sent]
    handle = target.handle
    clients = reached - handle._shift
    selection = handle[clients]
    terms = tuple(_with(t, op=part, rows=selection.rows, over=clients) for t, part in sent)
    eq._lower(selection, expression(terms, clients), True)


def _over(part: RowSparse, rows: np.ndarray) -> RowSparse:
    """``part`` setting exactly ``rows`` (zero rows where it set none)."""
    r, c, v = part.entries()
    out = RowSparse._from_entries(part.size, r, c, v, set_rows=rows)
    out.reusable = False
    if "pushed_from" in part.__dict__:  # (its messages: its operator's, counted once)
        out.__dict__["pushed_from"] = part.__dict__["pushed_from"]
    return out
