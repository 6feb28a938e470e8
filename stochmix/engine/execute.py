"""Applying a round's phases to the state.

The general path applies each phase through its sparse rows (``backend.apply``). Phases
that rewrite whole blocks (a decentralized ``W_k`` mixing every node; see
:mod:`stochmix.engine.blockwise`) go to ``backend.apply_blockwise`` instead, one sparse
product per mixed block, where the backend has it (the general path otherwise). Runs of
consecutive node-local phases over the same nodes (see :class:`~stochmix.engine.phase.
LocalForm`) take a faster path when the backend supports it: the nodes are processed in
cache-sized chunks, and for each chunk every block row the run reads is gathered once into
a small dense buffer, all the run's phases are applied to the buffer (gradients and
reductions into outer rows included), and the rewritten rows are scattered back. A round
then streams each participant's rows through memory once instead of once per phase, which
is what a hand-written kernel does, but for any method whose phases have this shape.

This is exact, not an approximation: within such a run each node's rows depend only on
the same node's rows and on single rows no phase of the run has written yet (read from a
snapshot taken when the run starts), and an outer row is a sum over the nodes that can be
accumulated chunk by chunk and written when the run ends. Runs are cut where these
conditions would fail.

A run is compiled once per *structure* (which blocks each phase writes from which, which
coefficients are +-1, numbers or per-node arrays) into a
:class:`~stochmix.engine.program.LocalProgram`: straight-line NumPy code on preallocated
buffers. Later rounds with the same structure
(every round of a method, whatever its participants) reuse the program and its buffers and
only bind the round's nodes and coefficients.

With Numba installed and a problem that provides a compiled one-client gradient
(:meth:`Problem.row_gradient <stochmix.problems.Problem.row_gradient>`), large runs use a
:class:`~stochmix.engine.rowwise.RowwiseProgram` of the same structure instead: one
compiled loop over the nodes that applies every phase to one node's rows at a time
(``run(..., compiled=...)`` chooses).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import numpy as np

from .blockwise import chained
from .capabilities import Capabilities, capabilities
from .liveness import ZeroRows
from .method import Method, RunContext
from .phase import LocalForm, Phase
from .program import LocalProgram, ProgramCache
from .rowmap import RowMap, apply_map
from .rowwise import RowwiseProgram, numba_available, numba_unavailable
from .slowpath import SlowPaths
from .traffic import round_traffic

__all__ = [
    "LocalStep",
    "PROGRAMS",
    "ROWWISE_MIN_ENTRIES",
    "ROWWISE_MIN_WORK",
    "RowGradient",
    "WORKERS",
    "ZERO_ROWS",
    "compiled_refusal",
    "execute",
    "general_path",
    "plan_round",
    "row_gradient",
    "runs_rowwise",
]

WORKERS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
PROGRAMS = 64  # compiled programs kept (one per distinct structure of a run of phases)
# compiled="auto" takes the row-wise path for runs of phases of at least
# ROWWISE_MIN_ENTRIES node entries in runs expected to touch at least ROWWISE_MIN_WORK node
# entries in all (rounds x expected participants x d: compiling a structure costs 0.3-1 s
# once per machine, and the row-wise path saves about 3 ns an entry). The decision reads the
# run's arguments alone, never what the program cache holds.
ROWWISE_MIN_WORK = 3e8
ROWWISE_MIN_ENTRIES = 1 << 13


def _block_of(layout, row: int) -> tuple[str, int]:
    """The block that row ``row`` of Z belongs to, and the node it holds."""
    name, local = layout.locate(row)
    return name, local + layout.first_node(name)


class _Run:
    """A run of node-local phases being assembled (see :func:`_plan`).

    The run may end with a *tail*: phases without nodes (single rows from single rows,
    such as a server step) that read an outer row the run has written. They are applied
    after the run's outer rows are set.
    """

    def __init__(self, phase: Phase, lf: LocalForm):
        self.phases = [phase]
        self.forms = [lf]  # the phases' node-local forms
        self.tail = 0
        self.nodes = lf.nodes
        self.same_nodes = {id(self.nodes)}  # node arrays known equal to ``nodes``
        self.node_targets = set(lf.targets)
        self.outer_written = set(lf.outer_rows)

    def accepts(self, lf: LocalForm) -> bool:
        outer_only = not lf.nodes.size and bool(lf.outer)
        if self.tail:
            return outer_only
        nodes = lf.nodes
        if nodes.size and self.nodes.size:
            if id(nodes) not in self.same_nodes:
                if not np.array_equal(nodes, self.nodes):
                    return False
                self.same_nodes.add(id(nodes))
        elif nodes.size != self.nodes.size and not outer_only:
            return False
        if lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written:
            return outer_only  # as the first phase of the tail
        return True

    def add(self, phase: Phase, lf: LocalForm) -> None:
        if self.tail or (
            not lf.nodes.size
            and (lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written)
        ):
            self.tail += 1
        self.phases.append(phase)
        self.forms.append(lf)
        if not self.nodes.size:
            self.nodes = lf.nodes
            self.same_nodes = {id(self.nodes)}
        self.node_targets.update(lf.targets)
        self.outer_written.update(lf.outer_rows)

    @property
    def body(self) -> list[LocalForm]:
        """The forms of the phases applied chunk by chunk (all but the tail)."""
        return self.forms[: len(self.forms) - self.tail]


def _local_refusal(lf: LocalForm, method: Method, ctx: RunContext, memo: dict) -> str | None:
    """None when a node-local phase can run on the chunked path at all (distinct nodes,
    gradients taken at the method's default points, of the clients whose nodes they are);
    else why not, in words. (Which rows it may read and write one at a time is checked
    per run: :func:`_rows_ok`.)"""
    nodes = lf.nodes
    key: tuple
    if nodes.size > 1:  # a node twice would be written twice, not summed
        key = ("distinct", id(nodes))
        if key not in memo:
            ordered = nodes if (nodes[1:] > nodes[:-1]).all() else np.sort(nodes)
            memo[key] = bool((ordered[1:] > ordered[:-1]).all())
        if not memo[key]:
            return "its nodes repeat (a node's rows would be written twice, not summed)"
    if not lf.takes_gradients:
        return None
    if type(method).points is not Method.points:
        return (
            f"it takes gradients, at the points {type(method).__name__}.points gives (the "
            "node-local path takes them at the model rows)"
        )
    offset = method.client_node + ctx.layout.first_node(method.model_block)
    clients = lf.clients
    assert clients is not None  # a form that takes gradients names their clients
    key = ("clients", id(clients), id(lf.nodes))
    if key not in memo:
        memo[key] = clients.shape == lf.nodes.shape and np.array_equal(clients + offset, lf.nodes)
    if not memo[key]:
        return (
            f"its gradients' clients are not its nodes (client i is node i + {offset} of "
            f"{method.model_block!r})"
        )
    return None


def _plan(phases: list[Phase], local_ok: bool, method, ctx, whole: bool = False, why=None) -> list:
    """Split a round's phases into runs to chunk (``_Run``) and single phases. ``whole``:
    the backend applies whole-block forms (see :func:`_whole_runs`). ``why``: a dict that
    gets, for each phase left out of every run, why (by ``id`` of the phase)."""
    out: list[_Run | Phase] = []
    run: _Run | None = None
    memo: dict = {}
    why = {} if why is None else why
    for ph in phases:
        if ph.is_identity:
            continue
        lf = ph.local if local_ok else None
        if lf is not None:
            refusal = _local_refusal(lf, method, ctx, memo)
            if refusal is not None:
                lf, why[id(ph)] = None, refusal
        elif ph.local is None:
            why[id(ph)] = ph.local_why or "it is not node-local"
        if lf is not None and run is not None and run.accepts(lf):
            run.add(ph, lf)
            continue
        if run is not None:
            out.append(run)
            run = None
        if lf is not None:
            run = _Run(ph, lf)
        else:
            out.append(ph)
    if run is not None:
        out.append(run)
    checked: list[_Run | Phase] = []
    for item in out:
        if isinstance(item, _Run) and not _rows_ok(item, ctx, memo):
            checked += item.phases  # one at a time through the sparse path
            for ph in item.phases:
                why[id(ph)] = (
                    "its segment reads or writes a single row (a server or aggregate row) "
                    "that is one of the round's nodes' rows"
                )
        else:
            checked.append(item)
    return _whole_runs(checked) if whole else checked


def _hand_off(plan: list) -> list:
    """The plan with each pair of whole-block phases where the first may hand a block to
    the second (:func:`~stochmix.engine.blockwise.chained`: DGD's local step, then its
    product ``x <- W x``) replaced by copies of them that do."""
    out = list(plan)
    for i in range(len(out) - 1):
        first, second = out[i], out[i + 1]
        if not (isinstance(first, Phase) and isinstance(second, Phase)):
            continue
        one, two = first.blockwise, second.blockwise
        if one is None or two is None:
            continue
        block = chained(one, two)
        if block is not None:
            out[i] = first.twin(("hand_off", block), partial(replace, one, hand_off=block))
            out[i + 1] = second.twin(("take", block), partial(replace, two, take=block))
    return out


def _whole_runs(items: list) -> list:
    """A run of one node-local phase that rewrites one whole block, next to a phase that
    takes the whole-block path (a decentralized mixing step), takes the whole-block path
    too: a mixing product cuts the run anyway, and one expression on whole slices needs
    no gathering or scattering (DGD's local step). Runs that write several blocks stay
    chunked, where each node's rows stream through the cache once for all of them. (A
    federated round never qualifies: its model block holds the server row, which client
    phases do not rewrite.)"""

    def mixing(item) -> bool:
        return isinstance(item, Phase) and item.blockwise is not None

    out = []
    for i, item in enumerate(items):
        if (
            isinstance(item, _Run)
            and len(item.phases) == 1
            and ((i > 0 and mixing(items[i - 1])) or (i + 1 < len(items) and mixing(items[i + 1])))
            and item.phases[0].blockwise is not None
            and len(item.phases[0].blockwise.targets) == 1
        ):
            out += item.phases
        else:
            out.append(item)
    return out


def _rows_ok(run: _Run, ctx: RunContext, memo: dict) -> bool:
    """The single rows of a run are outside its nodes' rows: an outer row must not be
    one of the nodes' rows of any block, and a row read one at a time must not be a
    node's row of a block the run writes on its nodes (its snapshot would go stale)."""
    nodes = run.nodes
    if not nodes.size:
        return True

    def among_nodes(row):
        key = ("row", row, id(nodes))
        if key not in memo:
            block, node = _block_of(ctx.layout, row)
            memo[key] = block, bool((nodes == node).any())
        return memo[key]

    for lf in run.body:
        for row in lf.outer_rows:
            if among_nodes(row)[1]:
                return False
        for row in lf.single_reads:
            block, inside = among_nodes(row)
            if inside and block in run.node_targets:
                return False
    return True


# =================================================================== the round


_PROGRAMS = ProgramCache(PROGRAMS)
_ROWWISE = ProgramCache(PROGRAMS)


def _program(forms: list[LocalForm], model_block: str, tail: int) -> LocalProgram:
    key = (model_block, tail, tuple(lf.signature for lf in forms))
    return _PROGRAMS.built(key, lambda: LocalProgram(forms, model_block, tail))


def _rowwise(program: LocalProgram, gradient: tuple) -> RowwiseProgram:
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
        ),
    )


class RowGradient(NamedTuple):
    """The problem's compiled one-client gradient for the row-wise path (see
    :meth:`stochmix.problems.Problem.row_gradient`)."""

    kernel: object
    fetch: object
    data: tuple


def row_gradient(
    problem,
    backend,
    dtype,
    work: float = float("inf"),
    per_round: float = float("inf"),
    caps: Capabilities | None = None,
) -> RowGradient | None:
    """The :class:`RowGradient` when the row-wise path may run this problem on
    ``backend``, per ``backend.compiled`` (read from ``caps``, the backend's
    :func:`~stochmix.engine.capabilities.capabilities`; True, False or "auto": then compiling new
    programs only for a run of ``work`` >= :data:`ROWWISE_MIN_WORK` node entries, and
    none at all for rounds expected to touch fewer than :data:`ROWWISE_MIN_ENTRIES`
    (``per_round``): such runs never import Numba); else None. "auto" decides by these
    numbers alone, never by what a cache holds: the two paths agree to rounding, not bit
    for bit, and a run's numbers must not depend on what ran before it. Raises ValueError
    when ``compiled=True`` cannot be honoured.

    The problem's ``row_gradient`` is used where it declares ``pure_gradients`` and does
    not declare ``compiled_gradient`` false (a :class:`~stochmix.problems.Problem`
    subclass that rewrites its gradients without rewriting ``row_gradient`` has it false;
    see :attr:`~stochmix.problems.Problem.DECLARED_WITH`)."""
    mode = (capabilities(backend) if caps is None else caps).compiled
    if mode is False or (mode == "auto" and per_round < ROWWISE_MIN_ENTRIES):
        return None
    found = None
    if compiled_refusal(problem) is None:
        found = problem.row_gradient(np.dtype(dtype))
    if found is None and mode is True:
        why = numba_unavailable() or f"{type(problem).__name__} has no compiled gradient"
        raise ValueError(f"compiled=True: {why}; use compiled='auto' or False")
    if found is None or (mode == "auto" and work < ROWWISE_MIN_WORK):
        return None
    return RowGradient(*found)


def compiled_refusal(problem) -> str | None:
    """Why ``problem``'s gradients cannot run in the compiled loop, or None when they may
    (its ``row_gradient`` may still give none for a dtype)."""
    name = type(problem).__name__
    if not numba_available():
        return numba_unavailable()
    if not callable(getattr(problem, "row_gradient", None)):
        return f"{name} has no compiled gradient (row_gradient)"
    if not bool(getattr(problem, "compiled_gradient", True)):
        return f"{name} declares compiled_gradient false (it rewrites its gradients)"
    if not _pure_formula(problem):
        return f"{name}'s gradients are not declared a pure formula of its data (pure_gradients)"
    return None


# The problem's declared flags (see stochmix.protocols, "The fast paths of the gradients"):
# read as they are; a Problem subclass keeps them true to its methods when it is defined.
def _pure_formula(problem) -> bool:
    """Whether ``problem.gradients`` is a pure function of the problem's data (no random
    draws; see :attr:`stochmix.problems.Problem.pure_gradients`): such gradients may be
    split into chunks and threads."""
    return bool(getattr(problem, "pure_gradients", False))


def _unchecked(problem, member: str) -> bool:
    """Whether the engine may call ``problem.<member>`` (``gradients_unchecked`` or
    ``bind_clients``) for its gradients: pure ones, with the member, and not declared
    otherwise (``unchecked_gradients``)."""
    return (
        _pure_formula(problem)
        and bool(getattr(problem, "unchecked_gradients", True))
        and callable(getattr(problem, member, None))
    )


def _compiled_gradient(problem) -> bool:
    """Whether ``problem.row_gradient`` may be asked for the row-wise path: pure
    gradients, the member, and not declared otherwise (``compiled_gradient``)."""
    return (
        _pure_formula(problem)
        and bool(getattr(problem, "compiled_gradient", True))
        and callable(getattr(problem, "row_gradient", None))
    )


def _chunk_gradients(problem):
    """A function ``(clients, like) -> (x -> gradients of those clients at x)`` for the
    chunks, which ask the same clients once per local step. Problems whose gradients are a
    pure formula gather the clients' data once (``bind_clients``); others are called as
    they are."""
    if _unchecked(problem, "bind_clients"):
        return problem.bind_clients
    return lambda clients, like: lambda x: problem.gradients(clients, x)


@dataclass(frozen=True)
class LocalStep:
    """A compiled run of node-local phases, bound to one round: ``program`` applied to
    ``nodes`` with the coefficient values ``coefs`` and gradient ``clients``.
    ``outside`` lists nodes that must stay outside ``nodes`` for the program to be right
    (its outer rows and the single rows it reads of blocks it writes)."""

    program: LocalProgram
    nodes: np.ndarray
    coefs: tuple
    clients: np.ndarray | None
    outside: tuple
    labels: tuple = ()  #: the labels of the run's phases, in order (for messages)
    #: (gradient evaluations, messages, floats) of the run's phases (for templates)
    traffic: tuple | None = None


def _bind(run: _Run, method: Method, ctx: RunContext) -> LocalStep:
    forms = list(run.forms)
    # every single row the run reads or writes, tail included: a template may reuse the
    # run only for participants whose nodes avoid them all
    outside = {
        _block_of(ctx.layout, row)[1] for lf in forms for row in (*lf.outer_rows, *lf.single_reads)
    }
    return LocalStep(
        _program(forms, method.model_block, run.tail),
        run.nodes,
        tuple(c for lf in forms for c in lf.coefficients),
        next((lf.clients for lf in forms if lf.takes_gradients), None),
        tuple(sorted(outside)),
        tuple(ph.label for ph in run.phases),
        round_traffic(run.phases, method, ctx.dim),
    )


def plan_round(
    phases: list[Phase],
    backend,
    method: Method,
    ctx: RunContext,
    caps: Capabilities | None = None,
    *,
    notes: SlowPaths | None = None,
) -> list:
    """What :func:`execute` runs for a round: :class:`LocalStep` s and single phases.
    ``caps``: the backend's :func:`~stochmix.engine.capabilities.capabilities` (made here
    when None). ``notes`` gets the phases that take the general path, and why (see
    :mod:`stochmix.engine.slowpath`)."""
    # A method that returns the very same phase objects again (decentralized methods on a
    # static or periodic graph) gets the plan made for them, kept on the first phase
    # along with everything it was made for (compared by identity, so never stale).
    memo = phases[0].__dict__.setdefault("_plans", {}) if phases else None
    key = (id(backend), id(method), id(ctx), *map(id, phases))
    if memo is not None:
        found = memo.get(key)
        if found and all(
            a is b for a, b in zip(found[0], (backend, method, ctx, *phases), strict=True)
        ):
            return list(found[1])
    if caps is None:
        caps = capabilities(backend)
    local_ok, whole = caps.local_phases, caps.blockwise
    # a whole-block phase leaves the checks of the blocks the reported model sums to the
    # run, which checks that model after every round
    trusted = method.checked_by_output if whole else ()
    why: dict = {}
    items = _plan(phases, local_ok, method, ctx, whole, why)
    if notes is not None:
        _note_general(items, phases, why, backend, local_ok, whole, notes)
    plan = [
        _bind(item, method, ctx)
        if isinstance(item, _Run)
        else item.trusting(trusted)
        if isinstance(item, Phase)
        else item
        for item in items
    ]
    if caps.hands_off:
        plan = _hand_off(plan)
    if memo is not None:
        if len(memo) >= 256:
            memo.clear()
        # kept from the second time these phases come (reused phases only: the plan
        # refers to the phase that holds it, a cycle not worth making for phases built
        # afresh every round)
        memo[key] = ((backend, method, ctx, *phases), plan) if key in memo else None
    return list(plan)


def label_of(phase: Phase, phases: list) -> str:
    """A phase's label for messages, or ``#k`` (its place in the round) when it has none."""
    if phase.label:
        return phase.label
    return next((f"#{k}" for k, ph in enumerate(phases) if ph is phase), "#?")


def general_path(item, whole: bool) -> bool:
    """Whether a planned item is a phase that takes the general path (its sparse rows):
    not a segment, not a whole-block product, not a nonlinear row map."""
    if not isinstance(item, Phase) or isinstance(item, RowMap):
        return False
    return not (whole and item.blockwise is not None)


def _note_general(items, phases, why, backend, local_ok, whole, notes: SlowPaths) -> None:
    """Record in ``notes`` the planned phases that take the general path, and why."""
    what = "general path (its sparse rows built and applied every round)"
    if not local_ok and not hasattr(backend, "runs_local_phases"):
        # (a backend that declares runs_local_phases = False chose the general path)
        name = getattr(backend, "name", type(backend).__name__)
        notes.add("", what, f"the {name} backend runs no node-local segments (runs_local_phases)")
    for item in items:
        if not general_path(item, whole) or getattr(item, "row_sparse", False):
            continue  # (an activated mixing phase: its sparse rows are the active ones)
        reason = why.get(id(item))
        if reason is None:
            if not local_ok and item.local is not None:
                continue  # said once for the round, above
            reason = "it is not node-local"
        if not whole and item.local is None and item.blockwise is not None:
            reason = "it mixes whole blocks and the backend has no apply_blockwise"
        notes.add(label_of(item, phases), what, reason)


def _apply_blockwise(phase: Phase, z, backend, problem, method: Method, ctx: RunContext) -> bool:
    """``backend.apply_blockwise`` with the gradients of the whole-block form's clients,
    taken at the method's points (a slice of the model block, not a gathered copy, when
    the clients are consecutive and the method takes gradients at its model rows)."""
    form = phase.blockwise
    assert form is not None  # only whole-block phases come here
    grads = None
    clients = form.clients
    if clients is not None:
        if form.consecutive and type(method).points is Method.points:
            first = ctx.layout.start(method.model_block) + int(clients[0]) + method.client_node
            points = z[first : first + clients.size]
        else:
            points = method.points(z, ctx, clients)
        grads = _gradients_at(problem, clients, points, form.consecutive)
    return backend.apply_blockwise(z, phase, grads)


def _gradients_at(problem, clients, points, consecutive: bool = False):
    """``problem.gradients(clients, points)``, without its argument checks where the
    gradients are a pure formula with an unchecked twin (the engine's indices and points
    are valid by construction). ``consecutive`` clients are given as a slice where the
    problem declares ``client_slices`` with the methods that take it (their data is then
    read in place, not gathered)."""
    if _unchecked(problem, "gradients_unchecked"):
        if consecutive and getattr(problem, "client_slices", False):
            clients = slice(int(clients[0]), int(clients[0]) + clients.size)
        return problem.gradients_unchecked(clients, points)
    return problem.gradients(clients, points)


def runs_rowwise(compiled, kernel: RowGradient | None, nodes: int, dim: int) -> bool:
    """Whether a segment of ``nodes`` nodes runs the compiled row-wise loop (given the
    run's :func:`row_gradient` and the backend's ``compiled`` capability): always with
    ``compiled=True``, else for segments of at least :data:`ROWWISE_MIN_ENTRIES` node
    entries (smaller ones run NumPy programs)."""
    return kernel is not None and (compiled is True or nodes * dim >= ROWWISE_MIN_ENTRIES)


#: Whether runs of node-local phases skip blocks known to be zero (see
#: :mod:`stochmix.engine.liveness`); False runs every block as if it held values.
ZERO_ROWS = True
_VARIANTS = ProgramCache(PROGRAMS)


def _zero_rows(z, method: Method, ctx: RunContext) -> ZeroRows:
    """The run's knowledge of zero node rows (made, from the state, on its first round:
    a run that resumes from a checkpoint reads it from the restored state)."""
    found = ctx.zero_rows
    if not isinstance(found, ZeroRows):  # None until then
        found = ctx.zero_rows = ZeroRows(ctx.layout, method.client_node, ctx.n_clients)
        found.start(z)
    return found


def _variant(program: LocalProgram, nodes: np.ndarray, zero: ZeroRows) -> LocalProgram:
    """``program``, or its variant that does not read (nor write back zeros into) the
    blocks known to be zero at ``nodes`` (those it gathers or stores as zeros), and does
    not store the blocks whose node rows the state does not keep."""
    schedule = program.schedule
    scratch = frozenset(zero.layout.scratch) & frozenset(program.blocks)
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
            program.forms, program.model, program.tail_length, zero=relevant, scratch=scratch
        ),
    )


class _KeptRows:
    """A general phase seen by a state that keeps only the first ``kept`` rows of Z:
    its matrix without the columns past them (which it does not use; see
    :func:`~stochmix.engine.liveness.check_plan`)."""

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
    ``caps`` the backend's :func:`~stochmix.engine.capabilities.capabilities` (made here
    when None)."""
    finite = True
    bind = _chunk_gradients(problem)
    data = 2 * (problem.chunk_cost() if hasattr(problem, "chunk_cost") else z.shape[1])
    # Chunks and threads only where the gradients are a pure formula of the problem's
    # data; others (stochastic gradients) see every node at once, as on the general path.
    pure = _pure_formula(problem)
    if caps is None:
        caps = capabilities(backend)
    # a backend may run node-local programs in its own dialect (Torch, caps.own_programs),
    # and check the round's values once at its end instead of once per phase
    # (caps.round_hooks); phases that mix whole blocks go to the backend as one product
    # per block where it can (caps.blockwise)
    if caps.round_hooks:
        backend.begin_round()
    local_runs = caps.local_phases
    layout = ctx.layout
    zero = _zero_rows(z, method, ctx) if (ZERO_ROWS or layout.scratch) and local_runs else None
    for item in plan:
        if isinstance(item, LocalStep):
            program, grads = item.program, bind
            if zero is not None and (zero.known or layout.scratch):
                program = _variant(program, item.nodes, zero)
            planned = program  # every dialect below runs this one's schedule
            if caps.own_programs:
                program = backend.local_program(program)
            elif kernel is not None and runs_rowwise(
                caps.compiled, kernel, item.nodes.size, z.shape[1]
            ):
                program, grads = _rowwise(program, (kernel.kernel, kernel.fetch)), kernel
            ok = program.run(
                z,
                item.nodes,
                ctx.layout,
                item.coefs,
                item.clients,
                grads,
                data,
                WORKERS if pure else 1,
                whole=not pure,
            )
            if zero is not None:
                zero.after_program(planned, item.nodes)
        elif isinstance(item, RowMap):  # nonlinear: never inside a run (it has no local form)
            ok = apply_map(z, item, backend, problem, ctx.seed_sequence)
        elif caps.blockwise and item.blockwise is not None:
            ok = _apply_blockwise(item, z, backend, problem, method, ctx)
        else:
            grads = None
            if item.clients.size:
                grads = problem.gradients(item.clients, method.points(z, ctx, item.clients))
            ok = backend.apply(
                z, item if layout.kept == layout.size else _KeptRows(item, layout.kept), grads
            )
        if zero is not None and zero.known and not isinstance(item, LocalStep):
            _forget_written(zero, item)
        finite = ok and finite
    if caps.round_hooks:
        finite = backend.end_round() and finite
    return finite
