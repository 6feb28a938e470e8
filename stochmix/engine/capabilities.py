"""What a backend can do beyond the four members every backend has, found once per run.

The optional capabilities are declared as Protocols in :mod:`stochmix.protocols`
(:class:`~stochmix.protocols.RunsLocalPhases`, :class:`~stochmix.protocols.
AppliesBlockwise`, :class:`~stochmix.protocols.RoundHooks`, ...). :func:`capabilities`
checks a backend against each of them and returns a frozen :class:`Capabilities` record;
:func:`stochmix.run` makes it once per run and hands it to the planner
(:func:`~stochmix.engine.execute.plan_round`), the executor
(:func:`~stochmix.engine.execute.execute`) and the choice of the compiled path
(:func:`~stochmix.engine.execute.row_gradient`), which read the record instead of the
backend's attributes. Called without one (tests, tools), they make it themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocols import (
    AppliesBlockwise,
    CompilesLocalPhases,
    EmitsLocalPrograms,
    HandsOffBlocks,
    RoundHooks,
    RunsLocalPhases,
    Sharded,
    Typed,
)

__all__ = ["Capabilities", "capabilities"]


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
            run is handed to :func:`stochmix.engine.distributed.run_sharded`.
        dtype: :class:`~stochmix.protocols.Typed`: the backend's ``dtype``; None without.
    """

    local_phases: bool = False
    compiled: Any = False
    own_programs: bool = False
    blockwise: bool = False
    hands_off: bool = False
    round_hooks: bool = False
    sharded: bool = False
    dtype: Any = None


def capabilities(backend) -> Capabilities:
    """``backend``'s :class:`Capabilities`, checked against the Protocols of
    :mod:`stochmix.protocols` (a flag counts where it is true).

    Raises:
        TypeError: ``backend`` has one of ``begin_round`` / ``end_round`` without the
            other (:class:`~stochmix.protocols.RoundHooks` needs both: a round opened and
            never checked, or checked and never opened, would be silently wrong).
    """
    local = isinstance(backend, RunsLocalPhases) and bool(backend.runs_local_phases)
    blockwise = isinstance(backend, AppliesBlockwise)
    hooks = isinstance(backend, RoundHooks)
    if not hooks and (hasattr(backend, "begin_round") or hasattr(backend, "end_round")):
        raise TypeError(
            f"backend {type(backend).__name__} has only one of begin_round and end_round; "
            "the round hooks (stochmix.protocols.RoundHooks) need both"
        )
    return Capabilities(
        local_phases=local,
        compiled=backend.compiled if isinstance(backend, CompilesLocalPhases) else False,
        own_programs=local and isinstance(backend, EmitsLocalPrograms),
        blockwise=blockwise,
        hands_off=blockwise and isinstance(backend, HandsOffBlocks) and bool(backend.hands_off),
        round_hooks=hooks,
        sharded=isinstance(backend, Sharded) and bool(backend.runs_sharded),
        dtype=backend.dtype if isinstance(backend, Typed) else None,
    )
