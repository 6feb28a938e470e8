"""What a round costs in the units of the literature: gradient evaluations, messages and
floats sent, read off the phases' own terms.

A phase ``Z[rows] <- M Z + B G`` sends a message from node j to node i for every
nonzero ``M[r, s]`` with row r of node i and row s of node j != i. Messages are counted
per mixing operator (the same operator applied to several blocks in one phase sends one
message per (sender, receiver) pair, carrying a row of each block; two different
operators of a phase count apart, as do rows copied between nodes), each row costing
``d`` floats, or what the method says a row of that block costs on the wire
(:meth:`~stochmix.engine.model.method.Method.sent_floats`, e.g. a compressed copy). The
gradient evaluations of a phase are the clients of each distinct client array ``G`` is
taken for. A round is the sum of its phases; a nonlinear row map
(:mod:`stochmix.engine.model.rowmap`) is node-local and sends nothing.

So FedAvg's round with participants S sends 2|S| messages (the pull of the server model
and the push of the update) and takes K|S| gradients; a decentralized iteration sends one
message per off-diagonal nonzero of W_k in each phase that mixes with it; under
activation only the active nodes' pulls and pushes count.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NO_TRAFFIC", "PhaseTraffic", "phase_traffic", "round_traffic"]


class PhaseTraffic:
    """One phase's cost: ``gradients`` (gradient evaluations), ``messages`` and ``rows``
    (block -> the rows of that block sent), counted as the module docstring says."""

    __slots__ = ("gradients", "messages", "rows")

    def __init__(self, gradients: int, messages: int, rows: dict):
        self.gradients, self.messages, self.rows = gradients, messages, rows


NO_TRAFFIC = PhaseTraffic(0, 0, {})


def _cross(op, shift: int) -> int:
    """Nonzero entries of ``op`` between two nodes (target node != source node, with
    target row r at node r + shift relative to the source), kept on the operator."""
    memo = op.__dict__.setdefault("_cross", {})
    found = memo.get(shift)
    if found is None:
        rows, cols, vals = op.entries()
        found = memo[shift] = int(np.count_nonzero((rows + shift != cols) & (vals != 0)))
    return found


def phase_traffic(layout, deferred: list) -> PhaseTraffic:
    """The traffic of a phase from its builder's terms (``PhaseBuilder._deferred``).

    Counted without sorting: an operator applied to several blocks in one phase sends
    one message per pair and a row of each block; distinct operators, and rows copied
    between nodes, add up (a pair that two different operators of one phase use counts
    twice). Gradients: one per client of each distinct client array."""
    gradients: dict = {}
    messages: dict = {}  # id(op) or a term's index -> messages
    rows: dict = {}
    for index, term in enumerate(deferred):
        kind = term[0]
        if kind == "gradient":
            clients = term[3]
            gradients[id(clients)] = int(np.size(clients))
            continue
        if kind == "apply":
            _, target, source, op, _ = term
            shift = layout.first_node(target) - layout.first_node(source)
            count = _cross(op, shift)
            key = id(op)
        elif kind == "combine":
            _, target, t_rows, source, s_rows, coef = term
            if np.ndim(coef) == 0 and coef == 0:
                continue
            t = np.asarray(t_rows, dtype=np.int64).reshape(-1) + layout.first_node(target)
            s = np.asarray(s_rows, dtype=np.int64).reshape(-1) + layout.first_node(source)
            if t.size == 0 or s.size == 0:
                continue
            if t.size == s.size:  # row to row
                count = int(np.count_nonzero(t != s))
            elif t.size == 1:  # a reduction onto one row
                count = s.size - int(np.count_nonzero(s == t[0]))
            else:  # one row broadcast
                count = t.size - int(np.count_nonzero(t == s[0]))
            key = index
        else:  # clear
            continue
        if count:
            messages[key] = count
            rows[source] = rows.get(source, 0) + count
    total = sum(gradients.values())
    if not messages:
        return PhaseTraffic(total, 0, {}) if total else NO_TRAFFIC
    return PhaseTraffic(total, sum(messages.values()), rows)


def round_traffic(phases, method, dim: int) -> tuple[int, int, int]:
    """``(gradient evaluations, messages, floats)`` of a round's phases."""
    gradients = messages = floats = 0
    for phase in phases:
        traffic = getattr(phase, "traffic", None)
        if traffic is None:  # a row map: node-local
            continue
        gradients += traffic.gradients
        messages += traffic.messages
        for block, rows in traffic.rows.items():
            floats += rows * method.sent_floats(block, dim)
    return gradients, messages, floats
