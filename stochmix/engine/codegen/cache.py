"""The programs compiled so far, one per structure: NumPy programs, their variants that
skip blocks known to be zero, and row-wise (Numba) programs, each kept in a bounded cache
(the row-wise programs' generated source is also kept on disk: see
:mod:`stochmix.engine.codegen.rowwise`)."""

from __future__ import annotations

import numpy as np

from ..plan.liveness import ZeroRows
from ..plan.round_plan import Structure
from .program import LocalProgram, ProgramCache
from .rowwise import RowwiseProgram

__all__ = ["PROGRAMS", "program_for", "rowwise_for", "variant"]

PROGRAMS = 64  # compiled programs kept (one per distinct structure of a run of phases)
_PROGRAMS = ProgramCache(PROGRAMS)
_ROWWISE = ProgramCache(PROGRAMS)
_VARIANTS = ProgramCache(PROGRAMS)


def program_for(structure: Structure) -> LocalProgram:
    """The NumPy program of a run of node-local phases of this structure (compiled on
    first use)."""
    return _PROGRAMS.built(
        structure,
        lambda: LocalProgram(
            list(structure.forms), structure.model, structure.tail, levels=structure.levels
        ),
    )


def rowwise_for(program: LocalProgram, gradient: tuple) -> RowwiseProgram:
    """The row-wise program of ``program``'s structure calling the compiled ``gradient``
    ``(kernel, fetch)`` (compiled by Numba on first use)."""
    return _ROWWISE.built(
        (program.key, *gradient),
        lambda: RowwiseProgram(
            program.forms,
            program.model,
            program.tail_length,
            gradient,
            zero=program.zero,
            scratch=program.scratch,
            levels=program.levels,
        ),
    )


def variant(program: LocalProgram, nodes: np.ndarray, zero: ZeroRows) -> LocalProgram:
    """``program``, or its variant that does not read (nor write back zeros into) the
    blocks known to be zero at ``nodes`` (those it gathers or stores as zeros), and does
    not store the blocks whose node rows the state does not keep."""
    schedule = program.schedule
    layout = zero.layout
    scratch = frozenset(layout.scratch) & frozenset(program.blocks)
    if scratch and nodes.size and layout.nodes is not None:
        first, count = layout.nodes
        if int(nodes.max()) < first or int(nodes.min()) >= first + count:
            scratch = frozenset()  # a run over nodes that are no clients (a server's row)
    relevant: frozenset = frozenset()
    if zero.known and nodes.size:
        used = set(schedule.gather)
        used.update(program.blocks[st.block] for st in schedule.stores if st.value is None)
        lo, hi = int(nodes.min()), int(nodes.max())
        relevant = frozenset(b for b in zero.known & used if zero.covers(b, lo, hi))
    if not relevant and not scratch:
        return program
    return _VARIANTS.built(
        (program.key, relevant, scratch),
        lambda: LocalProgram(
            program.forms,
            program.model,
            program.tail_length,
            zero=relevant,
            scratch=scratch,
            levels=program.levels,
        ),
    )
