"""A run on the distributed backend: the run loop on this rank's shard of the state
(see :mod:`stochmix.engine.backends.distributed`).

Every rank builds the same plan of every round and applies it to its own rows; the
recorder reports the replicated server row or the network average, summed in a fixed
tree so that the numbers are the same bits on any number of ranks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..backends.distributed import DistributedBackend, Shard, _refuse, _reporter
from ..model.layout import Layout
from ..plan.planner import RoundPlanner
from ..plan.slowpath import SLOW_PATH_MIN_ROUNDS, SlowPaths
from .checkpointer import Checkpointer, run_identity
from .context import make_context
from .progress import Progress
from .recorder import Recorder
from .rounds import participant_stream, run_rounds

__all__ = ["run_sharded"]


def _rank_path(path, rank: int, size: int) -> Path:
    path = Path(path)
    return path.with_name(f"{path.stem}.rank{rank}-of-{size}{path.suffix}")


def run_sharded(
    method, problem, participation, rounds, back: DistributedBackend, *, x0, seed, dtype,
    metrics, on_divergence, callback, progress, checkpoint, checkpoint_every, evaluate_every,
    divergence_threshold, compiled,
):  # fmt: skip
    """:func:`stochmix.run` on a :class:`DistributedBackend` (arguments checked there):
    the same loop, on this rank's shard. Every rank returns the same Result (but its wall
    times); ``callback(r, z, ctx)`` gets this rank's rows."""
    if seed is None:  # every rank must draw the same rounds: rank 0's entropy
        seed = back.common(int(np.random.SeedSequence().generate_state(1)[0]))
    n, dim = int(problem.n_clients), int(problem.dim)
    probabilities = participation.probabilities  # a copy of N numbers: taken once
    expected = n if probabilities is None else float(np.sum(probabilities))
    layout = Layout(method.blocks(n))  # every row kept: a shard keeps no compact storage
    shard = back.shard = Shard(back, layout, n, method, dim)
    _refuse(method, problem, shard)
    # the context a single process makes (prepare): regularizer, edge mixing, start
    ctx = make_context(method, problem, participation, layout, seed, probabilities)
    z = shard.initial(x0, back.dtype)
    reported = _reporter(method, shard, layout)
    recorder = Recorder(problem, reported, ctx, metrics, rounds, evaluate_every, expected)
    notes = SlowPaths(method.name, warn=rounds > SLOW_PATH_MIN_ROUNDS and back.rank == 0)
    planner = RoundPlanner(method, back, ctx, notes=notes)
    saver = None
    if checkpoint is not None:
        identity = run_identity(
            method, problem, participation, seed, back, x0, metrics, compiled, recorder.interval
        )
        identity.update(ranks=back.size, rank=back.rank, segments=back.segments)
        path = _rank_path(checkpoint, back.rank, back.size)
        others = sorted(
            p.name
            for p in path.parent.glob(f"{Path(checkpoint).stem}.rank*-of-*{path.suffix}")
            if not p.name.endswith(f"-of-{back.size}{path.suffix}")
        )
        if others:
            raise ValueError(
                f"checkpoint {str(checkpoint)!r}: files {others} were written by a run on "
                f"another number of ranks; resume on that number (this run has {back.size})"
            )
        saver = Checkpointer(path, identity, checkpoint_every)
    stream = participant_stream(participation, seed)
    show = progress is not False and back.rank == 0
    bar = Progress(rounds, method.name, force=progress is True) if show else None

    saved = None if saver is None else saver.load(rounds)
    done = 0 if saved is None else int(saved["done"])
    if saver is not None:
        everyone = back.all_gather(np.array([done if saved is not None else -1]), "setup")
        if len({int(v[0]) for v in everyone}) > 1:
            raise ValueError(
                f"checkpoint {str(checkpoint)!r}: the ranks' files are at different rounds "
                f"({[int(v[0]) for v in everyone]}); remove them to start again"
            )
    return run_rounds(
        lambda r, participants, z: back.execute(
            planner.plan(r, participants), z, problem, method, ctx
        ),
        saved=saved, saver=saver, z=z, back=back, ctx=ctx, recorder=recorder, stream=stream,
        rounds=rounds, method=method, problem=problem, participation=participation,
        seed=seed, dtype=dtype, callback=callback, bar=bar,
        divergence_threshold=divergence_threshold, on_divergence=on_divergence,
        stacklevel=5,
    )  # fmt: skip
