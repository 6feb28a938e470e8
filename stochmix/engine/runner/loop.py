"""The run loop: it applies the phases a method returns and records the results.

:func:`run` checks its arguments and hands the work to small parts, each testable alone:

* :class:`~stochmix.engine.plan.planner.RoundPlanner`: each round's plan, built from the
  method's phases or reused (plan cache, round templates);
* :func:`~stochmix.engine.backends.dispatch.execute`: applies a plan to the state;
* :class:`~stochmix.engine.runner.recorder.Recorder`: the per-round record (model, metrics,
  participants, wall time);
* :class:`~stochmix.engine.runner.checkpointer.Checkpointer`: saving, verifying and resuming
  (imported by runs that checkpoint only, as is ``CheckpointWarning``, named here too).

It knows nothing about any particular method; it needs a
:class:`~stochmix.engine.model.method.Method` and objects that meet the contracts declared in
:mod:`stochmix.protocols`: a problem (``n_clients``, ``dim``, ``gradients(clients,
points)``, optionally ``x_star``, ``f_star``, ``objective(x)``, ``gradient(x)``, ...), a
participation process (``n_clients``, ``probabilities`` and ``masks(seed)`` or
``participants(seed)``) and a backend.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..._lazy import LazyExports
from ..backends.dispatch import execute
from ..backends.threads import resolve_threads, torch_threads
from ..model.layout import Layout
from ..model.method import Method, RunContext
from ..plan.capabilities import Capabilities, capabilities
from ..plan.gradients import RowGradient, pure_formula, row_gradient
from ..plan.liveness import PlanCheck, find_scratch
from ..plan.planner import RoundPlanner
from ..plan.round_plan import plan_round
from ..plan.slowpath import SLOW_PATH_MIN_ROUNDS, SlowPaths
from .arguments import RunOptions
from .context import make_context
from .progress import Progress
from .recorder import Recorder
from .result import Result
from .rounds import DivergenceError, DivergenceWarning, participant_stream, run_rounds
from .segments import NOT_SEGMENTED, segmenter, unsegmented

if TYPE_CHECKING:
    from ...protocols import BackendLike, ParticipationLike, ProblemLike
    from .checkpointer import CheckpointWarning
else:
    # run() checks these contracts itself, first, with errors naming the argument
    # (RunOptions.checked); a runtime type checker (the test suite's) sees no constraint here
    BackendLike = ParticipationLike = ProblemLike = Any

__all__ = ["CheckpointWarning", "DivergenceError", "DivergenceWarning", "run"]

#: imported on first use: a run without ``checkpoint=`` needs neither the checkpoint
#: files (zip archives of the state) nor their warning
_EXPORTS = LazyExports(__name__, {"CheckpointWarning": "stochmix.engine.runner.checkpointer"})

if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()


#: storage="auto" leaves rows out of states that would take at least this many bytes in
#: full (memory matters there, and rounds get faster: fewer rows to move; smaller runs skip
#: the few milliseconds of probing), and out of every state of a run on the compiled loop
#: (a long run by construction, whose rounds the compact state makes faster at any size:
#: FedAvg at 10^4 clients, d = 10, 0.17 against 0.28 ms a round)
COMPACT_MIN_BYTES = 1 << 26


def run(
    method: Method,
    problem: ProblemLike,
    participation: ParticipationLike,
    rounds: int,
    *,
    x0=None,
    seed=0,
    backend: str | BackendLike = "numpy",
    dtype=np.float64,
    metrics=("distance", "objective", "gradient_norm", "consensus"),
    on_divergence: str = "warn",
    callback=None,
    device=None,
    mixing=None,
    progress="auto",
    checkpoint=None,
    checkpoint_every: int = 100,
    compiled="auto",
    evaluate_every="auto",
    divergence_threshold: float = 1e50,
    storage="auto",
    clock=None,
) -> Result:
    """Run ``method`` on ``problem`` for ``rounds`` rounds of ``participation``.

    Each round draws one participation mask, asks the method for its phases and applies
    them in order: ``Z[rows] <- mix @ Z + inject @ G`` with ``G`` the gradients of the
    clients the phase names, taken at the method's points of the current ``Z``.

    Args:
        method: the algorithm (a :class:`Method`).
        problem: the objective, with per-client gradients.
        participation: the participation process, over ``problem.n_clients`` clients.
        rounds: number of rounds.
        x0: starting point, shape (dim,); zeros by default. Decentralized methods
            (``client_node == 0``) also take (n_clients, dim): node i starts at row i.
        seed: seeds the participation stream; the same seed gives the same masks, so every
            method in a comparison sees the same rounds.
        backend: "numpy" (SciPy sparse on the CPU), "torch" (tensors on ``device``),
            "distributed" (inside an initialised torch.distributed process group: client
            rows sharded over the ranks, the same bits on any number of ranks; see
            :mod:`stochmix.engine.backends.distributed`) or a backend object. Where Torch is
            loaded, the run's Torch work (the torch backend, a TorchModel's gradients)
            runs on the backend's ``threads`` (default one intra-op thread), set for the
            run and restored after it, even when it raises
            (:mod:`stochmix.engine.backends.threads`).
        device: Torch device ("cpu", "cuda", "cuda:1", ...); torch backend only.
        mixing: "dense", "sparse" or "auto" (default): how the torch backend applies phases.
        compiled: "auto" (default), True or False: whether the NumPy backend runs
            node-local phases through Numba-compiled loops over one node at a time (needs
            Numba, a core dependency where it supports the Python, and a problem with a
            compiled gradient: Quadratic, LeastSquares, Logistic). "auto" does so when it
            can, the run is long enough to repay compiling (about rounds x expected
            participants x dim >= 3e8) and a round touches at least 8192 node entries
            (participants x dim); True
            always (an error when it cannot); False never. Results agree with the NumPy
            path to rounding.
        progress: "auto" shows a progress line on a terminal for runs longer than two
            seconds (and the line a resumed checkpoint writes); True forces it, False hides
            it.
        checkpoint: a file path. Every ``checkpoint_every`` rounds the run's state is saved
            there atomically; if the file exists when the run starts, the run resumes from
            it (it must have been written by the same method, problem, participation, seed
            and backend) and continues exactly as if it had never stopped. A resumed run
            says so: "resumed from round 120 of 300 (checkpoint PATH)", or "checkpoint
            PATH is already complete (300 of 300 rounds); nothing to run" (its Result is
            returned at once), as an INFO message of the ``stochmix`` logger and, where
            the progress line is on, a line on stderr; ``Result.config["resumed_from"]``
            holds the round.
        checkpoint_every: rounds between checkpoints.
        dtype: float64 (default) or float32.
        metrics: which per-round metrics to record, among distance (needs x_star),
            objective (the gap f(x) - f_star, in ``Result.objective_gap``; where f_star is
            unknown, as for a TorchModel, the value f(x) itself, in ``Result.objective``,
            and ``objective_gap`` is None), gradient_norm and consensus. Distance costs
            O(d); objective and gradient_norm cost O(d^2) for problems that have them in
            closed form (Quadratic, LeastSquares) and a pass over all clients otherwise.
        evaluate_every: "auto" (default) or a positive integer k: metrics that cost a pass
            over all clients are evaluated only every k-th round (and always at round 0
            and the last round; NaN in between). "auto" picks k from the problem's size so
            that they take at most about 10% of the run (see
            :mod:`stochmix.engine.runner.recorder`), the same k every time.
        on_divergence: "warn" (stop, warn and return the partial result marked diverged)
            or "raise".
        divergence_threshold: a run whose reported model has an entry larger in magnitude
            than this many times max(1, the largest entry of its start) is treated as
            diverged, like NaN or Inf (a finite 1e60 is as useless); checked each round in
            O(d).
        callback: called as ``callback(r, z, ctx)`` after each round.
        storage: "auto" (default), "full" or "compact": which rows the state keeps.
            "full" keeps every row of every block. "compact" leaves out the node rows
            that the method's phases never read from the state (FedAvg's client models,
            overwritten by the pull before they are read; FOCUS's client trackers, zero
            after every collect; see :mod:`stochmix.engine.plan.liveness`): memory ``O(|S| d)``
            instead of O(N d) for each such block, the same numbers. "auto" is
            "compact" for states of at least :data:`COMPACT_MIN_BYTES` in full (finding
            the rows costs a few milliseconds of planning probe rounds) and for runs on
            the compiled loop, unless a callback is given (it gets the state ``z`` and
            may read any row; with "compact" it gets the kept rows, laid out by
            ``ctx.layout``).

        clock: a :class:`~stochmix.timing.Clock`: simulated time. Each round's cohort
            then takes the time its clients need (compute per local step, download and
            upload latencies), the server waits up to the clock's deadline (late clients
            are dropped, or contribute the steps they completed), and the Result gets a
            ``time`` column (seconds at the end of each round). Asynchronous methods
            (:class:`~stochmix.algorithms.FedBuff`, :class:`~stochmix.algorithms.FedAsync`)
            take their arrival order from it (every client 1 s a step when None).
            Every backend (under ``backend="distributed"`` every rank runs the same clock).

    Returns:
        A :class:`Result`; ``result.server[r]`` is the model after round r.
    """
    options = RunOptions(
        x0=x0, seed=seed, backend=backend, dtype=dtype, metrics=metrics,
        on_divergence=on_divergence, callback=callback, device=device, mixing=mixing,
        progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
        compiled=compiled, evaluate_every=evaluate_every,
        divergence_threshold=divergence_threshold, storage=storage, clock=clock,
    )  # fmt: skip
    rounds, options = options.checked(method, problem, participation, rounds)
    back = options.make_backend()
    # Torch's intra-op threads at the run's count, restored however the run ends
    threads = back.threads if hasattr(back, "threads") else resolve_threads()
    with torch_threads(threads):
        return _run(method, problem, participation, rounds, back, options)


def _run(method, problem, participation, rounds: int, back, options: RunOptions) -> Result:
    """The run on its built backend, its ``options`` checked (see :func:`run`): one
    set-up (:func:`prepare`, with the backend's shard where it keeps one, a rank's part
    of the state), one dispatcher (:func:`~stochmix.engine.backends.dispatch.execute`),
    one loop over the rounds (:func:`~stochmix.engine.runner.rounds.run_rounds`), on every
    backend."""
    caps = capabilities(back)  # the backend's optional capabilities, found once
    setup = prepare(method, problem, participation, rounds, back, options, caps=caps)
    options = setup.options  # (a sharded run's seed is rank 0's where none was given)
    rows, layout, ctx, planner = setup.rows, setup.layout, setup.ctx, setup.planner
    clock = options.clock
    if caps.sharded:
        z = back.initial(options.x0)
        reported = back.reported(method)
    else:
        z = back.asarray(layout.initial(options.x0))
        reported = method
    recorder = Recorder(
        problem, reported, ctx, options.metrics, rounds, options.evaluate_every, setup.expected
    )
    saver = _checkpointer(method, problem, participation, back, options, recorder, caps)
    if hasattr(problem, "reseed"):  # stochastic gradients restart with the run's seed
        problem.reseed(options.seed if isinstance(options.seed, int) else None)
    stream = participant_stream(participation, options.seed)
    if clock is not None:
        stream = clock.stream(stream, method, ctx, options.seed)
    shown = options.progress is not False and getattr(back, "rank", 0) == 0  # rank 0 shows
    bar = Progress(rounds, method.name, force=options.progress is True) if shown else None

    saved = None if saver is None else saver.load(rounds)
    if saver is not None and caps.sharded:
        back.check_resume(None if saved is None else int(saved["done"]), options.checkpoint)
    n = int(problem.n_clients)
    check = PlanCheck(layout, method, n) if layout.scratch else (lambda plan, r: plan)
    result = run_rounds(
        lambda r, participants, z: execute(
            check(planner.plan(r, participants), r), z, back, problem, method, ctx, rows, caps
        ),
        saved=saved, saver=saver, z=z, back=back, ctx=ctx, recorder=recorder, stream=stream,
        rounds=rounds, method=method, problem=problem, participation=participation,
        options=options, bar=bar, traffic=planner.round_traffic,
        segments=None if clock is not None or caps.sharded else segmenter(
            method, problem, participation, layout, ctx, back, caps, options.dtype,
            options.callback, lambda: planner.phases, rounds, recorder, planner.notes,
        ),
    )  # fmt: skip
    if clock is not None and clock.deadline is not None and result.participants[1:].sum() == 0:
        warnings.warn(
            f"no client met deadline={clock.deadline!r} in any of the {rounds} rounds: the "
            "model never moved (give the clients more time)",
            RuntimeWarning,
            stacklevel=3,
        )
    return result


def _checkpointer(method, problem, participation, back, options, recorder, caps):
    """The run's :class:`Checkpointer`, or None without ``options.checkpoint`` (a
    sharded backend checkpoints each rank to a file of its own)."""
    if options.checkpoint is None:
        return None
    from .checkpointer import Checkpointer, run_identity

    identity = run_identity(
        method, problem, participation, options.seed, back, options.x0, options.metrics,
        options.compiled, recorder.interval, options.clock,
    )  # fmt: skip
    path = options.checkpoint
    if caps.sharded:
        identity.update(back.identity())
        path = back.checkpoint_file(path)
    return Checkpointer(path, identity, options.checkpoint_every)


class Setup(NamedTuple):
    """What a run is planned with (see :func:`prepare`)."""

    back: object  #: the backend
    rows: RowGradient | None  #: the compiled one-client gradient, or None
    layout: Layout
    ctx: RunContext
    planner: RoundPlanner
    expected: float  #: the expected participants of a round
    options: RunOptions  #: the run's options (its seed drawn where it had none and a shard)


def prepare(
    method, problem, participation, rounds: int, back, options: RunOptions, warn=None,
    caps: Capabilities | None = None,
) -> Setup:  # fmt: skip
    """The set-up of a run of ``rounds`` rounds, before its state exists: the compiled
    gradient (or None), the rows the state keeps (``options.storage``), the layout and
    context (:func:`~stochmix.engine.runner.context.make_context`: ``method.start``
    called) and the round planner, whose notes warn about slow paths (``warn``; by default
    in runs of more than :data:`~stochmix.engine.plan.slowpath.SLOW_PATH_MIN_ROUNDS`
    rounds, on rank 0 of a sharded run). :func:`run` and :func:`stochmix.explain` plan
    with it. ``caps``: the backend's :func:`~stochmix.engine.plan.capabilities.capabilities`
    (made here when None).

    The shard hook: a sharded backend (:class:`~stochmix.protocols.Sharded`) keeps every
    row of its part of the state (``storage="compact"`` is refused) and makes its shard
    here (``back.make_shard``, which refuses what a shard cannot run); a run without a
    seed takes rank 0's, so that every rank draws the same rounds."""
    if not options.is_checked:
        raise ValueError("prepare needs RunOptions checked against the run (options.checked)")
    caps = capabilities(back) if caps is None else caps
    if caps.trips and not pure_formula(problem):  # random draws: for all nodes at once
        caps = dataclasses.replace(caps, trips=False)
    n, dim = int(problem.n_clients), int(problem.dim)
    probabilities = participation.probabilities  # a copy of N numbers: taken once
    expected = n if probabilities is None else float(np.sum(probabilities))
    if warn is None:
        warn = rounds > SLOW_PATH_MIN_ROUNDS and getattr(back, "rank", 0) == 0
    if caps.sharded:
        if options.storage == "compact":
            raise ValueError(
                f'storage="compact" is not supported by backend={back.name!r}: a rank keeps '
                'every row of its shard (use storage="auto" or "full")'
            )
        if options.seed is None:  # every rank must draw the same rounds: rank 0's entropy
            entropy = int(np.random.SeedSequence().generate_state(1)[0])
            options = options.replace(seed=back.common(entropy))
        layout = Layout(method.blocks(n))
        back.make_shard(layout, n, method, dim, problem)
        rows = None
    else:
        state_dtype = options.dtype if caps.dtype is None else caps.dtype
        work, per_round = rounds * expected * dim, expected * dim
        rows = row_gradient(problem, back, state_dtype, work, per_round, caps)
        if caps.products and rows is None and not caps.own_programs:
            # products inside NumPy programs stream every row through chunk buffers where
            # a whole-block pass reads slices in place: slower (gradient tracking, n =
            # 10^4, d = 10: 1.7 against 1.0 ms an iteration); the compiled loop takes them
            caps = dataclasses.replace(caps, products=False)
        elif rows is not None and rows.sampled is not None and not caps.own_programs:
            caps = dataclasses.replace(caps, compiled_samples=True)
        scratch = {}
        storage = options.storage
        if storage == "compact" or (
            storage == "auto"
            and options.callback is None
            and (
                rows is not None or _full_bytes(method, n, dim, options.dtype) >= COMPACT_MIN_BYTES
            )
        ):
            # (a process that loses uploads splits rounds the probes never see: rows the
            # probes find unread may be read by the received participants' second run)
            if caps.local_phases and not getattr(participation, "loses_uploads", False):
                scratch = find_scratch(
                    method, n, dim, probabilities,
                    lambda phases, m, c: plan_round(phases, back, m, c, caps),
                    getattr(problem, "regularizer", None),
                )  # fmt: skip
        layout = Layout(method.blocks(n), scratch, (method.client_node, n))
    ctx = make_context(method, problem, participation, layout, options.seed, probabilities)
    notes = SlowPaths(method.name, warn=warn)
    if caps.compiled is not False and not caps.sharded:
        why = unsegmented(method, participation, back, layout, options.callback)
        if why is not None:
            notes.add("", NOT_SEGMENTED, why)
    planner = RoundPlanner(method, back, ctx, caps, notes=notes)
    return Setup(back, rows, layout, ctx, planner, expected, options)


def _full_bytes(method: Method, n: int, dim: int, dtype) -> int:
    """The bytes of ``method``'s state with every row of every block kept."""
    return Layout(method.blocks(n)).size * dim * np.dtype(dtype).itemsize
