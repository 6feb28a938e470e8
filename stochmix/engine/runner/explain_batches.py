"""What :func:`~stochmix.engine.runner.explain.explain` says of the compiled batches of
rounds (:mod:`~stochmix.engine.runner.segments`): the segmenter a run would have, and what
a run under edge activation does with its gossip ticks."""

from __future__ import annotations

from ..plan.capabilities import capabilities
from .recorder import Recorder
from .segments import BATCH, MAX_NODES, segmenter, unsegmented

__all__ = ["BATCHED", "batches", "checkpointed", "ticks"]

#: what runs a round of a compiled batch (:class:`Segment`'s ``runs``)
BATCHED = "every phase in order (Numba)"


def batches(method, problem, participation, setup, back, dtype, options, rounds: int, notes=None):
    """The :class:`~stochmix.engine.runner.segments.Segmenter` the run would have (None
    where it has none), under the run's recording (its metrics may keep the rounds of
    every node from batches: :func:`~stochmix.engine.runner.segments.batches_every_node`)."""
    if options.clock is not None:
        return None
    recorder = Recorder(
        problem, method, setup.ctx, options.metrics, rounds, options.evaluate_every,
        setup.expected,
    )  # fmt: skip
    return segmenter(
        method, problem, participation, setup.layout, setup.ctx, back, capabilities(back),
        dtype, options.callback, lambda: None, rounds, recorder, notes,
    )  # fmt: skip


def checkpointed(made, options, done: int, rounds: int) -> None:
    """After round ``done`` of a run of ``rounds``: where the run writes a checkpoint
    there, its segmenter learns its keys again (as a run resumed from it does), and so
    does ``made``, the explained one (None: nothing to do)."""
    if made is None or options.checkpoint is None:
        return
    if done % options.checkpoint_every == 0 or done == rounds:
        made.forget()


def ticks(method, problem, participation, setup, back, dtype, options, plans) -> str:
    """What a run under edge activation does with its ticks ("" for other runs): the
    :class:`~stochmix.engine.runner.segments.Segmenter`'s refusals as its ``key`` makes
    them (the method's weights as the pair's mixing, rounds of more than
    :data:`~stochmix.engine.runner.segments.MAX_NODES` nodes)."""
    if getattr(participation, "activates", "nodes") != "edges" or options.clock is not None:
        return ""
    made = segmenter(
        method, problem, participation, setup.layout, setup.ctx, back, capabilities(back),
        dtype, options.callback, lambda: None,
    )  # fmt: skip
    if made is None or made.first_key is None:
        why = unsegmented(method, participation, back, setup.layout, options.callback)
        return "; gossip ticks: each built in full" + (f" ({why})" if why else "")
    if made.edge_mixing != "pairwise":
        return (
            f"; gossip ticks: each run as planned below, not in compiled segments (these "
            f"need pairwise averaging; the process mixes with {made.edge_mixing!r})"
        )
    large = sum(plan.participants > MAX_NODES for plan in plans)
    if large == len(plans):
        return (
            f"; gossip ticks: each run as planned below, not in compiled segments (these "
            f"take rounds of at most {MAX_NODES} nodes)"
        )
    if large:
        return (
            f"; gossip ticks: those of at most {MAX_NODES} nodes ({len(plans) - large} of "
            f"these {len(plans)}) run, after the first two of each kind, in compiled "
            f"segments of up to {BATCH} ticks (the method's segment_key, checked on the "
            "second tick; the rounds below that run in a compiled batch), the others as planned"
        )
    return (
        f"; gossip ticks: after the first two of each kind, run in compiled segments of up "
        f"to {BATCH} ticks (the method's segment_key, checked on the second tick; the rounds "
        "below that run in a compiled batch; a kind whose ticks the loop cannot apply is "
        "listed under the slow paths)"
    )
