"""Applying a planned round to the state: the one dispatcher every backend runs.

Each item of a plan (:func:`~stochmix.engine.plan.round_plan.plan_round`) goes to its
backend hook: a :class:`~stochmix.engine.plan.round_plan.LocalStep` to its compiled program
(the NumPy program of its structure, the backend's own dialect of it, or, with Numba and
a problem that provides a compiled one-client gradient
(:meth:`Problem.row_gradient <stochmix.problems.Problem.row_gradient>`), one compiled loop
over the nodes: ``run(..., compiled=...)`` chooses); a nonlinear row map to
:func:`~stochmix.engine.model.rowmap.apply_map`; a phase with a whole-block form to
``backend.apply_blockwise`` (one sparse product per mixed block); any other phase to
``backend.apply`` (the general path: its sparse rows).
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np

from ..._pool import on_threads
from ..codegen.cache import program_for, rowwise_for, variant
from ..model.method import Method, RunContext, model_points
from ..model.phase import Phase
from ..model.round_scalars import plain
from ..model.rowmap import RowMap, apply_map
from ..plan.capabilities import Capabilities, capabilities
from ..plan.gradients import (
    RowGradient,
    checked_samples,
    chunk_gradients,
    gradients_at,
    pure_formula,
    row_gradient,
    runs_rowwise,
    sampled_bind,
    sampled_gradients_at,
)
from ..plan.liveness import ZeroRows
from ..plan.round_plan import LocalStep, whole_path

__all__ = ["WORKERS", "ZERO_ROWS", "OneProcess", "execute"]

WORKERS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def _sampled_call(problem, sampled: tuple, clients, picks) -> RowGradient:
    """The row-wise loop's gradient for one round's draw: the problem's sampled kernel
    with the draw ``(clients, picks, scale)`` after its data (see
    :meth:`~stochmix.problems.Problem.sampled_row_gradient`)."""
    clients, picks, scale = checked_samples(problem, clients, picks)
    draw = (clients, np.ascontiguousarray(picks, dtype=np.int64), scale)
    return RowGradient(sampled[0], sampled[1], (*sampled[2], *draw))


#: A whole-block phase of at least this many scattered clients (an activated round) takes
#: their gradients by one compiled pass (:mod:`~stochmix.engine.codegen.gathered_gradients`)
#: where the problem has a compiled gradient and ``compiled`` is not False; from
#: :data:`SPLIT_CLIENTS` on, in two halves on two threads (each row alone: the same bits).
GATHER_MIN_CLIENTS = 1024
SPLIT_CLIENTS = 4096


def _apply_blockwise(
    phase: Phase, z, backend, problem, method: Method, ctx: RunContext, gathered=None
) -> bool:
    """``backend.apply_blockwise`` with the gradients of the whole-block form's clients,
    taken at the method's points (a slice of the model block, not a gathered copy, when
    the clients are consecutive and the method takes gradients at its model rows; else
    ``gathered(clients)`` where it gives them, or the problem's gradients at the gathered
    points)."""
    form = phase.blockwise
    assert form is not None  # only whole-block phases come here
    grads = None
    clients = form.clients
    if clients is not None:
        if form.consecutive and model_points(method):
            first = ctx.layout.start(method.model_block) + int(clients[0]) + method.client_node
            points = z[first : first + clients.size]
            grads = gradients_at(problem, clients, points, form.consecutive)
        elif gathered is not None:
            grads = gathered(clients)
        if grads is None:
            points = method.points(z, ctx, clients)
            grads = gradients_at(problem, clients, points, form.consecutive)
    return backend.apply_blockwise(z, phase, grads)


#: Whether runs of node-local phases skip blocks known to be zero (see
#: :mod:`stochmix.engine.plan.liveness`); False runs every block as if it held values.
ZERO_ROWS = True


def _zero_rows(z, method: Method, ctx: RunContext) -> ZeroRows:
    """The run's knowledge of zero node rows (made, from the state, on its first round:
    a run that resumes from a checkpoint reads it from the restored state)."""
    found = ctx.zero_rows
    if not isinstance(found, ZeroRows):  # None until then
        found = ctx.zero_rows = ZeroRows(ctx.layout, method.client_node, ctx.n_clients)
        found.start(z)
    return found


class _KeptRows:
    """A general phase seen by a state that keeps only the first ``kept`` rows of Z:
    its matrix without the columns past them (which it does not use; see
    :func:`~stochmix.engine.plan.liveness.check_plan`)."""

    def __init__(self, phase: Phase, kept: int):
        self._phase = phase
        self.mix = phase.mix[:, :kept]
        self.inject, self.rows, self.clients = phase.inject, phase.rows, phase.clients

    def __getattr__(self, name):
        return getattr(self._phase, name)


def _forget_written(zero: ZeroRows, item) -> None:
    """Tell ``zero`` what a phase that is not a run of node-local phases rewrote: whole
    blocks (a whole-block phase), its rows (other phases), or possibly anything."""
    if not isinstance(item, Phase):
        zero.after_phase(None)
    elif item.blockwise is not None:
        zero.forget(target.block for target in item.blockwise.targets)
    else:
        zero.after_phase(item.rows)


class OneProcess:
    """The round's items applied to a state held whole by one process (the NumPy and
    Torch backends): the item hooks of :func:`execute` for a backend that does not bring
    its own (:class:`~stochmix.protocols.Sharded` backends do: ``round_items``).

    Node-local runs go to their compiled program (the NumPy program of their structure,
    its variant that skips blocks known to be zero, the backend's own dialect, or the
    Numba row-wise loop), row maps to :func:`~stochmix.engine.model.rowmap.apply_map`,
    whole-block phases to ``backend.apply_blockwise`` and every other phase to
    ``backend.apply`` with its clients' gradients.
    """

    def __init__(self, z, backend, problem, method: Method, ctx: RunContext, kernel, caps):
        self.z, self.backend, self.problem, self.method, self.ctx = z, backend, problem, method, ctx
        self.kernel, self.caps = kernel, caps
        self.bind = chunk_gradients(problem)
        self.data = 2 * (problem.chunk_cost() if hasattr(problem, "chunk_cost") else z.shape[1])
        # Chunks and threads only where the gradients are a pure formula of the problem's
        # data; others (stochastic gradients) see every node at once, as on the general path.
        self.pure = pure_formula(problem)
        layout = ctx.layout
        on = (ZERO_ROWS or layout.scratch) and caps.local_phases
        self.zero = _zero_rows(z, method, ctx) if on else None

    def begin(self) -> None:
        # a backend may check the round's values once at its end instead of once per phase
        if self.caps.round_hooks:
            self.backend.begin_round()

    def local(self, item: LocalStep) -> bool:
        z, zero, caps, kernel = self.z, self.zero, self.caps, self.kernel
        layout = self.ctx.layout
        program, grads = program_for(item.structure), self.bind
        if zero is not None and (zero.known or layout.scratch):
            program = variant(program, item.nodes, zero)
        planned = program  # every dialect below runs this one's schedule
        rowwise = False
        # sampled gradients: the compiled loop where the problem has a sampled kernel,
        # else NumPy programs in one chunk
        drawn = item.samples is not None
        sampled = kernel.sampled if drawn and kernel is not None else None
        positions = False  # whether the gradient takes the node's place in the run
        if drawn:
            assert item.clients is not None and item.counts is None  # (see plan.runs)
            grads = sampled_bind(self.problem, item.clients, item.samples)
        if caps.own_programs:  # the backend's own dialect (Torch)
            program = self.backend.local_program(program)
        elif (
            kernel is not None
            and (sampled is not None or not drawn)
            and runs_rowwise(caps.compiled, kernel, item.nodes.size, z.shape[1])
        ):
            if sampled is None:
                program, grads = rowwise_for(program, (kernel.kernel, kernel.fetch)), kernel
            else:  # the kernel reads the draw by the node's place in the run
                drawn = False  # (pure: any chunks, any threads)
                program = rowwise_for(program, sampled[:2])
                grads = _sampled_call(self.problem, sampled, item.clients, item.samples)
                positions = True
            rowwise = True
        # the row-wise loop takes repeated phases by count, programs of chunks by prefix
        by_count: dict = {"counts": item.counts} if rowwise and item.counts is not None else {}
        if not by_count:
            item = item.by_prefix()
        ok = program.run(
            z,
            item.nodes,
            layout,
            plain(item.coefs),
            np.arange(item.nodes.size, dtype=np.int64) if positions else item.clients,
            grads,
            self.data,
            WORKERS if self.pure and not drawn else 1,
            whole=not self.pure or drawn,
            extents=item.extents,
            **by_count,
            **({"views": item.views} if item.views else {}),
            **({"products": self.backend.run_products(z, item.products)} if item.products else {}),
        )
        if zero is not None:
            zero.after_program(planned, item.nodes)
        return ok

    def row_map(self, item: RowMap) -> bool:
        problem = self.ctx.map_problem or self.problem  # counts the gradients it asks
        ok = apply_map(self.z, item, self.backend, problem, self.ctx.seed_sequence)
        self._forget(item)
        return ok

    def whole(self, item: Phase, following: list) -> bool:
        ok = _apply_blockwise(
            item, self.z, self.backend, self.problem, self.method, self.ctx, self._gathered
        )
        self._forget(item)
        return ok

    def _gathered(self, clients: np.ndarray):
        """The gradients of ``clients`` at their model rows by one compiled pass (see
        :data:`GATHER_MIN_CLIENTS`), or None where that pass does not apply."""
        z, method, caps = self.z, self.method, self.caps
        if (
            clients.size < GATHER_MIN_CLIENTS
            or caps.compiled is False
            or caps.own_programs
            or not self.pure
            or not isinstance(z, np.ndarray)
            or not model_points(method)
        ):
            return None
        found = self.kernel
        if found is None:  # (the run's kernel is asked for long runs alone: see row_gradient)
            found = row_gradient(self.problem, self.backend, z.dtype, caps=caps)
        if found is None:
            return None
        from ..codegen.gathered_gradients import gathered_function

        function = gathered_function(found.kernel, found.fetch)
        clients = np.ascontiguousarray(clients, dtype=np.int64)
        at = self.ctx.layout.rows(method.model_block, clients + method.client_node)
        out = np.empty((clients.size, z.shape[1]), dtype=z.dtype)
        if WORKERS > 1 and clients.size >= SPLIT_CLIENTS:
            parts = (slice(0, clients.size // 2), slice(clients.size // 2, None))
            on_threads([
                partial(function, found.data, clients[h], z, at[h], out[h]) for h in parts
            ])  # fmt: skip
        else:
            function(found.data, clients, z, at, out)
        return out

    def general(self, item: Phase) -> bool:
        z, ctx, layout = self.z, self.ctx, self.ctx.layout
        grads = None
        if item.clients.size:
            points = self.method.points(z, ctx, item.clients)
            if item.samples is not None:
                grads = sampled_gradients_at(self.problem, item.clients, points, item.samples)
            else:
                grads = self.problem.gradients(item.clients, points)
        phase = item if layout.kept == layout.size else _KeptRows(item, layout.kept)
        ok = self.backend.apply(z, phase, grads)
        self._forget(item)
        return ok

    def end(self, finite: bool) -> bool:
        if self.caps.round_hooks:
            return self.backend.end_round() and finite
        return finite

    def _forget(self, item) -> None:
        if self.zero is not None and self.zero.known:
            _forget_written(self.zero, item)


def execute(
    plan: list,
    z,
    backend,
    problem,
    method: Method,
    ctx: RunContext,
    kernel: RowGradient | None = None,
    caps: Capabilities | None = None,
) -> bool:
    """Apply a planned round to ``z`` in place; False if a rewritten entry is not finite.
    ``kernel`` is :func:`row_gradient`'s answer for this run (None: NumPy programs only),
    ``caps`` the backend's :func:`~stochmix.engine.plan.capabilities.capabilities` (made here
    when None).

    The one dispatcher of every backend: each planned item goes to a hook of the round's
    item runner, by kind: ``local`` (a run of node-local phases), ``row_map`` (a nonlinear
    map), ``whole`` (a phase with a whole-block form, on a backend that applies them) or
    ``general`` (any other phase); ``begin`` and ``end`` open and close the round (``end``
    gets whether every hook's values were finite and gives the round's answer). The
    runner is :class:`OneProcess` for a backend holding the whole state, or the one a
    sharded backend makes for its shard (``backend.round_items(z, problem, method,
    ctx)``)."""
    if caps is None:
        caps = capabilities(backend)
    if caps.sharded:
        items = backend.round_items(z, problem, method, ctx)
    else:
        items = OneProcess(z, backend, problem, method, ctx, kernel, caps)
    items.begin()
    finite = True
    for i, item in enumerate(plan):
        if isinstance(item, LocalStep):
            ok = items.local(item)
        elif isinstance(item, RowMap):  # nonlinear: never inside a run (it has no local form)
            ok = items.row_map(item)
        elif whole_path(item.blockwise, caps.blockwise, caps.row_subsets):
            ok = items.whole(item, plan[i + 1 :])
        else:
            ok = items.general(item)
        finite = ok and finite
    return items.end(finite)
