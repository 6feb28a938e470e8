"""The phases a run's equations built, kept so that a round that writes the same
equations again gets the same :class:`~stochmix.engine.model.phase.Phase` object back.

A phase is planned once per distinct object (the plan is kept on the phase, see
:func:`~stochmix.engine.plan.round_plan.plan_round`), so returning the very same phase for the
same equations is what makes a static or periodic graph planned once per distinct
mixing matrix, with nothing for a method to key or keep.

Equations are the same when they make the same builder calls with the same arguments:
strings and numbers by value, float coefficient arrays by content, and the two kinds of
objects whose content cannot change behind the cache by identity: the whole-block row
arrays this cache hands out (read-only) and mixing operators
(:class:`~stochmix.mixing.rowsparse.RowSparse`) that do not say ``reusable = False``.
An entry holds those objects, so an identity in a key can never name another object. A
call with any other array (the clients ``S`` of a round, which participation processes
may draw into a reused buffer) makes the phase uncached: the planner's own keys
(:meth:`~stochmix.engine.model.method.Method.phase_key`, ``template_key``) serve such rounds.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ...mixing.rowsparse import whole_rows

__all__ = ["PhaseCache"]

_PLAIN = frozenset({str, int, float, type(None)})
CAPACITY = 128  # phases kept, least recently used first out (a period's phases fit)


class PhaseCache:
    """One run's phases by the builder calls that made them, and its whole-block rows."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._phases: OrderedDict = OrderedDict()  # key -> (calls, phase)
        self._ranges: dict = {}  # (size, shift) -> (rows, clients), read-only
        self._owned: set = set()  # ids of the arrays in _ranges (alive for the run)
        self._known: dict = {}  # id -> its part of a key, for rows and operators
        self._held: list = []  # the objects of _known (their ids stay theirs)
        self.hits = 0
        self.misses = 0

    def whole(self, size: int, shift: int) -> tuple[np.ndarray, np.ndarray]:
        """Block-local rows ``0..size-1`` and their clients ``rows - shift``, read-only
        and the same objects for the whole run (the clients are the rows when shift = 0)."""
        found = self._ranges.get((size, shift))
        if found is None:
            # the array a whole-matrix RowSparse of this size holds: ``W @ x`` into
            # ``x[:]`` then sets the target's rows by identity, with no O(n) comparison
            rows = whole_rows(size)
            clients = rows
            if shift:
                clients = rows - shift
                clients.flags.writeable = False
            found = self._ranges[(size, shift)] = (rows, clients)
            self._owned.update((id(rows), id(clients)))
        return found

    def key(self, label: str, calls: list) -> tuple | None:
        """The key of ``calls`` (``(name, *args)`` tuples), or None when one argument is
        an array this cache did not hand out or an operator that is not reusable."""
        known = self._known
        try:  # the usual calls: plain values, and rows and operators met before
            return (
                label,
                *[
                    tuple([a if type(a) in _PLAIN else known[id(a)] for a in call])
                    for call in calls
                ],
            )
        except KeyError:
            pass
        parts: list = [label]
        for call in calls:
            part = []
            for arg in call:
                part.append(arg if type(arg) in _PLAIN else self._part(arg))
                if part[-1] is None and arg is not None:
                    return None
            parts.append(tuple(part))
        return tuple(parts)

    def _part(self, arg):
        """What a key holds for ``arg`` (None when it makes a phase uncached). The cache's
        rows and reusable operators are keyed by identity, remembered (and held, so that
        the identity stays theirs) for the next key."""
        if isinstance(arg, (str, int, float, np.integer, np.floating)):
            return arg
        if isinstance(arg, np.ndarray):
            if id(arg) in self._owned:
                part = self._known[id(arg)] = ("rows", id(arg))
                self._held.append(arg)
                return part
            if arg.dtype.kind == "f" and arg.ndim == 1:
                return ("coef", arg.tobytes())
            return None
        if getattr(arg, "reusable", False):
            part = self._known[id(arg)] = ("op", id(arg))
            self._held.append(arg)
            return part
        return None

    def get(self, key):
        found = self._phases.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._phases.move_to_end(key)
        return found[1]

    def put(self, key, calls: list, phase) -> None:
        if len(self._phases) >= self.capacity:
            self._phases.popitem(last=False)
        self._phases[key] = (calls, phase)  # the calls keep the objects the key names
