"""Round templates: a planned round with its participants abstracted out.

Most methods build the same phases every round up to *who* participates: the rows a phase
touches are the participants' indices shifted by a constant (``participants + 1`` in a
federated state) and the coefficients are the same numbers. A method says so by returning
a key from :meth:`~stochmix.engine.method.Method.template_key`. The engine then plans the
first round with a given key (and at least two participants: with one, a participant's
rows become single rows of the state, which a template cannot move) as usual, keeps the
plan as a :class:`RoundTemplate`, and for later rounds with the same key only substitutes
the new participants: no phases are built and nothing is compiled.

The engine does not take the method's word for it: the second round with a key is also
built in full and compared with the template's instance (same programs, coefficients and
indices); a key whose rounds differ is never templated again in that run. An instance
whose new nodes would collide with a row the program reads or writes one at a time falls
back to a full build.
"""

from __future__ import annotations

import numpy as np

from .execute import LocalStep


def _shift(indices, participants: np.ndarray):
    """``k`` with ``indices == participants + k``, or None."""
    if indices is None:
        return "none"
    if indices.size == 0:
        return "empty"
    if indices.shape != participants.shape:
        return None
    k = int(indices[0]) - int(participants[0])
    return k if np.array_equal(indices, participants + k) else None


class RoundTemplate:
    """A plan of :class:`~stochmix.engine.execute.LocalStep` s whose nodes and clients
    are the participants shifted by constants and whose coefficients are numbers."""

    def __init__(self, steps: list):
        self.steps = steps  # (program, node shift, coefs, client shift, outside)
        self.verified = False

    @classmethod
    def from_plan(cls, plan: list, participants: np.ndarray) -> RoundTemplate | None:
        """The template of a planned round, or None when the plan is not one."""
        if participants.size < 2:
            return None  # with one participant, node rows become single (absolute) rows
        steps = []
        for item in plan:
            if not isinstance(item, LocalStep):
                return None  # a phase on the general path: not templated
            if any(not isinstance(c, float) for c in item.coefs):
                return None  # per-node coefficients depend on who participates
            node_shift = _shift(item.nodes, participants)
            client_shift = _shift(item.clients, participants)
            if node_shift is None or client_shift is None:
                return None
            steps.append((item.program, node_shift, item.coefs, client_shift, item.outside))
        return cls(steps)

    def instantiate(self, participants: np.ndarray) -> list | None:
        """The plan for ``participants``, or None if it would not be right."""
        if participants.size == 0:
            return None
        plan, shifted = [], {}
        for program, node_shift, coefs, client_shift, outside in self.steps:
            nodes = self._indices(node_shift, participants, shifted)
            if nodes.size and any(bool((nodes == node).any()) for node in outside):
                return None
            clients = self._indices(client_shift, participants, shifted)
            plan.append(LocalStep(program, nodes, coefs, clients, outside))
        return plan

    @staticmethod
    def _indices(shift, participants, cache):
        if shift == "none":
            return None
        if shift == "empty":
            return np.zeros(0, dtype=np.int64)
        if shift not in cache:
            cache[shift] = participants + shift if shift else participants
        return cache[shift]

    def matches(self, plan: list, participants: np.ndarray) -> bool:
        """Whether a fully built plan equals this template's instance."""
        mine = self.instantiate(participants)
        if mine is None or len(mine) != len(plan):
            return False
        for a, b in zip(mine, plan, strict=True):
            if not isinstance(b, LocalStep) or a.program.key != b.program.key:
                return False
            if a.coefs != b.coefs or a.outside != b.outside:
                return False
            for x, y in ((a.nodes, b.nodes), (a.clients, b.clients)):
                if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
                    return False
        return True
