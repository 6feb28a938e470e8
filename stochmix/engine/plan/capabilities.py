"""What a backend can do beyond the four members every backend has, found once per run.

The optional capabilities are declared as Protocols in :mod:`stochmix.protocols`
(:class:`~stochmix.protocols.RunsLocalPhases`, :class:`~stochmix.protocols.
AppliesBlockwise`, :class:`~stochmix.protocols.RoundHooks`, ...). :func:`capabilities`
checks a backend against each of them and returns a frozen :class:`Capabilities` record;
:func:`stochmix.run` makes it once per run and hands it to the planner
(:func:`~stochmix.engine.plan.round_plan.plan_round`), the executor
(:func:`~stochmix.engine.backends.dispatch.execute`) and the choice of the compiled path
(:func:`~stochmix.engine.plan.gradients.row_gradient`), which read the record instead of the
backend's attributes. Called without one (tests, tools), they make it themselves.

The check is :func:`implements`: the Protocol's members looked up on the backend object
itself, each time. ``isinstance`` against a runtime-checkable Protocol whose members are
all methods looks at the class instead, and caches its answer per class, so it would
miss a member hidden by ``__getattribute__`` or deleted after a first check.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

from ...protocols import (
    AppliesBlockwise,
    CompilesLocalPhases,
    ComputesProducts,
    EmitsLocalPrograms,
    HandsOffBlocks,
    RoundHooks,
    RunsLocalPhases,
    Sharded,
    Typed,
)

__all__ = ["Capabilities", "capabilities", "implements"]


@functools.cache
def members(protocol: type) -> tuple[tuple[str, bool], ...]:
    """The members ``protocol`` declares, its Protocol bases' included (private names
    left out), each as ``(name, is_method)``."""
    found: dict[str, bool] = {}
    for klass in reversed(protocol.__mro__):
        if klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        found.update(dict.fromkeys(getattr(klass, "__annotations__", {}), False))
        found.update({name: True for name, value in vars(klass).items() if callable(value)})
    return tuple((name, method) for name, method in found.items() if not name.startswith("_"))


def implements(obj, protocol: type) -> bool:
    """Whether ``obj`` has every member of ``protocol``, looked up on ``obj`` itself
    (``getattr``; a method must not be None)."""
    missing = object()
    for name, method in members(protocol):
        value = getattr(obj, name, missing)
        if value is missing or (method and value is None):
            return False
    return True


@dataclass(frozen=True)
class Capabilities:
    """The optional capabilities of one backend (see :mod:`stochmix.protocols`).

    Attributes:
        local_phases: :class:`~stochmix.protocols.RunsLocalPhases` with
            ``runs_local_phases`` true: runs of node-local phases are planned as segments
            and run by node-local programs.
        compiled: :class:`~stochmix.protocols.CompilesLocalPhases`: the backend's
            ``compiled`` (True, False or "auto"); False without it.
        own_programs: :class:`~stochmix.protocols.EmitsLocalPrograms`: segments run
            through ``backend.local_program(program)``.
        blockwise: :class:`~stochmix.protocols.AppliesBlockwise`: whole-block phases go to
            ``backend.apply_blockwise``.
        hands_off: :class:`~stochmix.protocols.HandsOffBlocks` with ``hands_off`` true:
            a whole-block phase may hand a block to the next.
        round_hooks: :class:`~stochmix.protocols.RoundHooks`: ``begin_round()`` before
            and ``end_round()`` after each round.
        sharded: :class:`~stochmix.protocols.Sharded` with ``runs_sharded`` true: the
            backend keeps a rank's shard of the state (``make_shard`` in the run's set-up)
            and applies each round's items through its own hooks (``round_items``).
        dtype: :class:`~stochmix.protocols.Typed`: the backend's ``dtype``; None without.
        row_subsets: whole-block forms restricted to some rows of their blocks (an
            activated round's active rows, :attr:`~stochmix.engine.model.blockwise.
            BlockwiseForm.subset`) go to ``apply_blockwise`` too (the backend's
            ``applies_row_subsets`` is true); else such phases take the general path.
        trips: the repetitions of a phase with per-node trip counts run as one run of
            node-local phases limited to prefixes of its nodes (the backend's
            ``applies_trip_counts`` is true; see :mod:`stochmix.engine.model.trips`);
            else each repetition is a run of its own. The run's set-up turns it off for
            gradients that draw random numbers (they are drawn for all nodes at once).
        products: :class:`~stochmix.protocols.ComputesProducts`: a whole-block phase whose
            terms are node-local but for its mixing products joins runs of node-local
            phases, the backend's ``run_products`` computing them when the run starts (see
            :mod:`stochmix.engine.model.product_form`); else it stays a whole-block phase.
        compiled_samples: runs that take sampled gradients (``grad(samples=...)``) run in
            the compiled loop, through the problem's
            :meth:`~stochmix.problems.Problem.sampled_row_gradient`: they may then take
            mixing products too (on the NumPy programs a whole-block pass is faster). Set
            by the run's set-up where the loop runs this problem; False here.
    """

    local_phases: bool = False
    compiled: Any = False
    own_programs: bool = False
    blockwise: bool = False
    hands_off: bool = False
    round_hooks: bool = False
    sharded: bool = False
    dtype: Any = None
    row_subsets: bool = False
    trips: bool = False
    products: bool = False
    compiled_samples: bool = False


def capabilities(backend) -> Capabilities:
    """``backend``'s :class:`Capabilities`, checked against the Protocols of
    :mod:`stochmix.protocols` (a flag counts where it is true).

    Raises:
        TypeError: ``backend`` has one of ``begin_round`` / ``end_round`` without the
            other (:class:`~stochmix.protocols.RoundHooks` needs both: a round opened and
            never checked, or checked and never opened, would be silently wrong).
    """
    local = implements(backend, RunsLocalPhases) and bool(backend.runs_local_phases)
    blockwise = implements(backend, AppliesBlockwise)
    hooks = implements(backend, RoundHooks)
    if not hooks and (hasattr(backend, "begin_round") or hasattr(backend, "end_round")):
        raise TypeError(
            f"backend {type(backend).__name__} has only one of begin_round and end_round; "
            "the round hooks (stochmix.protocols.RoundHooks) need both"
        )
    return Capabilities(
        local_phases=local,
        compiled=backend.compiled if implements(backend, CompilesLocalPhases) else False,
        own_programs=local and implements(backend, EmitsLocalPrograms),
        blockwise=blockwise,
        hands_off=blockwise and implements(backend, HandsOffBlocks) and bool(backend.hands_off),
        round_hooks=hooks,
        sharded=implements(backend, Sharded) and bool(backend.runs_sharded),
        dtype=backend.dtype if implements(backend, Typed) else None,
        row_subsets=blockwise and bool(getattr(backend, "applies_row_subsets", False)),
        trips=local and bool(getattr(backend, "applies_trip_counts", False)),
        products=local and implements(backend, ComputesProducts),
    )
