"""Why a round leaves the fast path: reasons found while planning, one warning each.

The fast paths of a round are the node-local segments (runs of node-local phases, run as
NumPy programs or the compiled loop, see :mod:`stochmix.engine.plan.round_plan`), the whole-block
phases of decentralized methods (one sparse product per mixed block) and round templates
(:mod:`stochmix.engine.plan.template`, for methods that give a ``template_key``). A phase that
takes none of them goes through the *general path*: its sparse rows are built and applied
every round, about ten times the cost of a node-local phase for a small federated round.
Nonlinear row maps (:class:`~stochmix.engine.model.rowmap.RowMap`) have one path of their own
and are not reported.

The planner (:func:`~stochmix.engine.plan.round_plan.plan_round` and the
:class:`~stochmix.engine.plan.planner.RoundPlanner`) records each reason as a
:class:`SlowPath` naming the phase by its label, in a :class:`SlowPaths` of the run. A
run of more than :data:`SLOW_PATH_MIN_ROUNDS` rounds warns once per distinct reason with
a :class:`SlowPathWarning`, when it first meets it (never once per round); shorter runs
stay quiet, as their planning costs more than the slow path does. ``stochmix.explain``
prints the same reasons with the round's plan.

What is *not* a slow path: a small round that runs NumPy programs instead of the
compiled loop (``compiled="auto"`` compiles only for runs long enough to repay it), a
problem without a compiled gradient (NumPy programs are fast too; ``explain`` says which
one runs), rounds of one participant (never templated, by design: they are built in
full so that a run gives the same numbers with or without templates).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

import jaxtyping

#: Runs of more rounds than this warn about their slow paths (shorter ones do not: a
#: slow phase costs about a millisecond a round, less than planning a short run).
SLOW_PATH_MIN_ROUNDS = 50

# frames a warning looks past to find the user's call: stochmix's own, and the run-time
# type checker's wrappers around them (jaxtyping, a dependency; the test suite installs it)
_INSIDE: tuple[str, ...] = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
_INSIDE += (os.path.dirname(os.path.abspath(jaxtyping.__file__)) + os.sep,)


class SlowPathWarning(UserWarning):
    """A phase of the run leaves the engine's fast path; the message names the phase and
    says why (``stochmix.explain`` shows the whole round's plan)."""


@dataclass(frozen=True)
class SlowPath:
    """One reason a round is slower than it could be.

    Attributes:
        phase: the label of the phase it is about ("" when the reason is not about one
            phase, e.g. the backend's).
        what: what happens instead: "general path" (the phase's sparse rows are built
            and applied every round), "not templated" (the method's ``template_key`` is
            not used) or "one phase at a time" (a node-local segment cut up).
        why: the reason, in words.
    """

    phase: str
    what: str
    why: str

    def __str__(self) -> str:
        where = f"phase {self.phase!r}" if self.phase else "the round"
        return f"{where}: {self.what}: {self.why}"


class SlowPaths:
    """The slow paths met in one run, each recorded once, in the order met.

    Args:
        method: the method's name, for the warning's message.
        warn: whether to warn (once per distinct reason) when a reason is first met.
    """

    def __init__(self, method: str = "", warn: bool = False):
        self.method = method
        self.warn = warn
        self._found: dict[SlowPath, None] = {}

    def add(self, phase: str, what: str, why: str) -> None:
        """Record a reason (nothing happens if it was met before)."""
        note = SlowPath(phase, what, why)
        if note in self._found:
            return
        self._found[note] = None
        if self.warn:
            name = f"{self.method}: " if self.method else ""
            warnings.warn(
                f"{name}{note} (stochmix.explain(method, problem, participation) prints the "
                "round's plan)",
                SlowPathWarning,
                stacklevel=_outside(sys._getframe()),
            )

    def __iter__(self):
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)

    def __bool__(self) -> bool:
        return bool(self._found)


def _outside(frame) -> int:
    """The ``stacklevel`` of a :func:`warnings.warn` called in ``frame`` that points at
    the first frame outside the stochmix package (the user's ``run`` call; a type
    checker's wrappers around stochmix's functions are looked past)."""
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INSIDE):
        frame = frame.f_back
        level += 1
    return level


__all__ = ["SLOW_PATH_MIN_ROUNDS", "SlowPath", "SlowPathWarning", "SlowPaths"]
