"""Runs of node-local phases compiled to straight-line NumPy code.

A run of node-local phases (see :class:`~stochmix.engine.model.phase.LocalForm`) is applied to
the participants chunk by chunk: gather the chunk's rows of the blocks the run reads, apply
every phase to those dense buffers, scatter the rewritten rows back. What happens to which
buffer is planned once per structure by :func:`~stochmix.engine.plan.schedule.plan_schedule`
(pure data: a :class:`~stochmix.engine.plan.schedule.Schedule`); :class:`LocalProgram` is
that plan compiled, made of two parts:

* the *writer* (:mod:`~stochmix.engine.codegen.numpy_writer`): the schedule emitted as one
  Python function of plain NumPy calls on preallocated buffers (its arguments declared
  once, by :class:`ChunkCall`), so a round pays for its arithmetic and a handful of calls,
  not for interpreting the phases again;
* the *chunk runtime* (:mod:`~stochmix.engine.codegen.chunks`): that function applied over
  a round's nodes chunk by chunk (large rounds on two threads), then the outer rows set
  from their sums and from a snapshot of the single rows the run reads (taken at its
  start), then the run's tail (single rows from single rows, such as a server step).
  Written rows are checked for NaN and Inf as the schedule says.

:class:`ProgramCache` keeps programs by structure. The names of both parts are importable
from here.
"""

from __future__ import annotations

import threading

from ..model.phase import LocalForm
from ..plan.schedule import plan_schedule
from .chunks import (
    BUFFER_BYTES,
    CHUNK_PARAMETERS,
    MIN_CHUNK_ROWS,
    PARALLEL_BUFFER_BYTES,
    PARALLEL_MIN_ROWS,
    ChunkCall,
    ChunkRuntime,
)
from .numpy_writer import NumpyWriter, SourceWriter

__all__ = [
    "BUFFER_BYTES",
    "CHUNK_PARAMETERS",
    "ChunkCall",
    "LocalProgram",
    "MIN_CHUNK_ROWS",
    "PARALLEL_BUFFER_BYTES",
    "PARALLEL_MIN_ROWS",
    "ProgramCache",
    "SourceWriter",
]


class LocalProgram(NumpyWriter, ChunkRuntime):
    """One run structure compiled: call :meth:`run` with the round's nodes and values.

    The run is planned once into a :class:`~stochmix.engine.plan.schedule.Schedule`, which
    this class *emits* as straight-line NumPy code (one statement per step, see
    :class:`~stochmix.engine.codegen.numpy_writer.NumpyWriter`) and *runs* chunk by chunk
    (see :class:`~stochmix.engine.codegen.chunks.ChunkRuntime`); subclasses emit the same
    schedule in other languages by overriding the statement methods.

    Args:
        forms: the run's local forms, in order.
        model_block: where gradients are taken.
        tail: how many of the last forms only set single rows from single rows.
        zero: blocks whose rows at the run's nodes are zero when it starts (see
            :func:`~stochmix.engine.plan.schedule.plan_schedule`).
        scratch: blocks whose node rows the state does not keep (never stored).
        levels: per form of the body, -1 or the run's extent it is limited to (see
            :func:`~stochmix.engine.plan.schedule.plan_schedule`); runs of such a program
            take their ``extents``.
    """

    def __init__(
        self,
        forms: list[LocalForm],
        model_block: str,
        tail: int = 0,
        *,
        zero: frozenset = frozenset(),
        scratch: frozenset = frozenset(),
        levels: tuple = (),
    ):
        self.model = model_block
        self.forms, self.tail_length = forms, tail  # what a program of another dialect needs
        self.levels = tuple(levels)
        self.key = None  # what the engine caches the program under (its full structure)
        self.schedule = plan_schedule(forms, model_block, tail, zero, scratch, self.levels)
        self.zero, self.scratch = self.schedule.zero, self.schedule.scratch
        schedule = self.schedule
        self.blocks = list(schedule.blocks)
        self.gather = list(schedule.gather)
        self.written = list(schedule.written)
        self.singles = list(schedule.singles)
        self.outer_rows = list(schedule.outer_rows)
        self.outer_singles = list(schedule.outer_singles)
        self.tail = [list(entries) for entries in schedule.tail]
        self.needs_gradients = schedule.needs_gradients
        self.source = self._emit(schedule)
        self._function = self._compile(self.source)  # the generated function
        self._buffers = {}


class ProgramCache(dict):
    """Programs by structure key (at most ``size``; all are dropped when it is full),
    each built once even when runs on several threads ask for it at the same time."""

    _lock = threading.RLock()  # one for every cache: building a program may build another

    def __init__(self, size: int = 64):
        super().__init__()
        self.size = size

    def built(self, key, build):
        """The program under ``key``, built by ``build()`` the first time (its ``key``
        attribute set to ``key``)."""
        found = self.get(key)
        if found is None:
            with self._lock:
                found = self.get(key)
                if found is None:
                    if len(self) >= self.size:
                        self.clear()
                    found = build()
                    found.key = key
                    self[key] = found
        return found
