"""Round templates: a planned round with its participants abstracted out.

Most methods build the same phases every round up to *who* participates: the rows a phase
touches are the participants' indices shifted by a constant (``participants + 1`` in a
federated state) and the coefficients are the same numbers (a per-client coefficient
array is templated when all its entries are one number: the uniform weights 1/|S| of a
``dot``, kept as that number and made again, as an array of the round's length, for each
instance: the same values, the same program, the same bits). A method says so by returning
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

__all__ = [
    "RoundTemplate",
]


class _Uniform(float):
    """A per-node coefficient array whose entries are all this number (rebuilt, for each
    instance, as an array of the instance's length)."""


def _coefficient(value):
    """A template's form of a coefficient value: the number, a :class:`_Uniform` for an
    array of one repeated number, or None (an array of several values)."""
    if isinstance(value, float):
        return value
    value = np.asarray(value)
    if value.ndim == 1 and value.size and (value == value[0]).all():
        return _Uniform(value[0])
    return None


def _same_coefficients(a: tuple, b: tuple) -> bool:
    """Coefficient values equal entry by entry (numbers, or arrays of equal entries)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (
                isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y)
            ):
                return False
        elif x != y:
            return False
    return True


def _label_of_slot(step: LocalStep, slot: int) -> str:
    """The label of the phase of ``step`` whose coefficients hold value number ``slot``."""
    if not step.labels:
        return ""
    for lf, label in zip(step.program.forms, step.labels, strict=False):
        if slot < len(lf.coefficients):
            return label
        slot -= len(lf.coefficients)
    return ""


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
        self.steps = steps  # (program, node shift, coefs, client shift, outside, labels)
        self.verified = False

    @classmethod
    def from_plan(cls, plan: list, participants: np.ndarray) -> RoundTemplate | None:
        """The template of a planned round, or None when the plan is not one."""
        found = cls.attempt(plan, participants)
        return found if isinstance(found, RoundTemplate) else None

    @classmethod
    def attempt(
        cls, plan: list, participants: np.ndarray
    ) -> RoundTemplate | tuple[str, str] | None:
        """The template of a planned round; or, when the plan is not one, ``(label, why)``:
        the phase that stops it (its label, "" for the round) and why, in words; None for
        rounds of fewer than two participants (never templated, by design)."""
        if participants.size < 2:
            return None  # with one participant, node rows become single (absolute) rows
        steps = []
        for item in plan:
            if not isinstance(item, LocalStep):
                # a phase on the general path, a whole-block product or a row map
                return getattr(item, "label", ""), "it is not part of a node-local segment"
            coefs = tuple(_coefficient(c) for c in item.coefs)
            if None in coefs:  # per-node coefficients that depend on who participates
                label = _label_of_slot(item, coefs.index(None))
                return label, (
                    "it has per-client coefficients of several values (an array), which "
                    "depend on who participates: a template needs numbers"
                )
            node_shift = _shift(item.nodes, participants)
            client_shift = _shift(item.clients, participants)
            if node_shift is None or client_shift is None:
                label = item.labels[0] if item.labels else ""
                return label, "its rows are not the participants shifted by a constant"
            steps.append((item.program, node_shift, coefs, client_shift, item.outside, item.labels))
        return cls(steps)

    def instantiate(self, participants: np.ndarray) -> list | None:
        """The plan for ``participants``, or None if it would not be right."""
        if participants.size == 0:
            return None
        plan: list = []
        shifted: dict = {}
        for program, node_shift, coefs, client_shift, outside, labels in self.steps:
            nodes = self._indices(node_shift, participants, shifted)
            if nodes.size and any(bool((nodes == node).any()) for node in outside):
                return None
            clients = self._indices(client_shift, participants, shifted)
            if any(isinstance(c, _Uniform) for c in coefs):
                n = participants.size
                coefs = tuple(np.full(n, float(c)) if isinstance(c, _Uniform) else c for c in coefs)
            plan.append(LocalStep(program, nodes, coefs, clients, outside, labels))
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
            if not _same_coefficients(a.coefs, b.coefs) or a.outside != b.outside:
                return False
            for x, y in ((a.nodes, b.nodes), (a.clients, b.clients)):
                if x is None or y is None:
                    if x is not y:
                        return False
                elif not np.array_equal(x, y):
                    return False
        return True
