"""The run's :class:`~stochmix.engine.model.method.RunContext`, made one way for every run.

Every run's set-up (:func:`~stochmix.engine.runner.loop.prepare`), on one process or on a
rank's shard of the distributed backend, builds its context here, so that what a method
reads of the problem and of the participation process (the regularizer, how an activated
edge mixes) cannot differ between backends.
"""

from __future__ import annotations

from ..model.layout import Layout
from ..model.method import RunContext
from ..model.traffic import CountedProblem, sample_counts

__all__ = ["make_context"]


def make_context(method, problem, participation, layout: Layout, seed, probabilities) -> RunContext:
    """The context of a run of ``method`` on ``problem`` under ``participation``, its
    state laid out by ``layout``, with :meth:`method.start <stochmix.engine.Method.start>`
    called on it.

    Args:
        method: the run's method.
        problem: its problem (``n_clients``, ``dim``; ``regularizer`` where composite).
        participation: its participation process (``mixing``: "pairwise" or "weights"
            for an edge-activated process; "pairwise" when it has none).
        layout: where the method's blocks sit in the state.
        seed: the run's seed (as :func:`stochmix.run` got it).
        probabilities: ``participation.probabilities``, taken once by the caller (a copy
            of N numbers), or None.
    """
    n, dim = int(problem.n_clients), int(problem.dim)
    ctx = RunContext(layout, n, dim, probabilities, seed=seed)
    ctx.regularizer = getattr(problem, "regularizer", None)
    ctx.sample_counts = sample_counts(problem)
    ctx.map_problem = CountedProblem(problem, ctx.sample_counts)
    ctx.edge_mixing = getattr(participation, "mixing", "pairwise")
    method.start(ctx)
    return ctx
