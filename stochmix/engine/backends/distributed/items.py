"""A round's items on a rank's shard: :class:`ShardItems`, the item hooks that the one
dispatcher (:func:`~stochmix.engine.backends.dispatch.execute`) calls for the distributed
backend, as :class:`~stochmix.engine.backends.dispatch.OneProcess` serves one process.
See :mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...model.method import Method, RunContext
from ...model.phase import Draws
from ...model.rowmap import call_map
from ...plan.gradients import chunk_gradients, sampled_gradients_at

__all__ = ["ShardItems"]


class ShardItems:
    """The hooks of one round on ``shard`` (a :class:`~.shard.Shard`): node-local runs
    per segment, whole-block phases with halo exchanges, row maps and general phases
    with the client rows they read gathered first; the round ends with one all-reduce of
    the finiteness flag, so every rank stops at the same round."""

    def __init__(self, shard: Any, z: np.ndarray, problem, method: Method, ctx: RunContext):
        self.shard, self.z, self.problem, self.method, self.ctx = shard, z, problem, method, ctx
        self.bind = chunk_gradients(problem)
        self.data = 2 * (problem.chunk_cost() if hasattr(problem, "chunk_cost") else z.shape[1])

    def begin(self) -> None:
        self.shard.halos = {}  # halo rows fetched ahead for later phases of the round

    def local(self, item) -> bool:
        bind = self.bind
        if item.samples is not None:  # a draw of sampled gradients: each chunk its picks
            bind = _sampled_chunks(self.problem, item.clients, item.samples)
        return self.shard.local_step(item, self.z, bind, self.data, self.ctx)

    def whole(self, item, following: list) -> bool:
        done = self.shard.whole_blocks(item, self.z, self.problem, self.method, following)
        if done is None:  # not a whole-block phase over the sharded nodes
            return self.general(item)
        return done

    def general(self, item) -> bool:
        return self.shard.general(item, self.z, self.problem, self.method, self.ctx)

    def row_map(self, item) -> bool:
        """``target[rows] <- f(sources...)`` as one process computes it: the source rows
        are gathered on every rank (client rows from their owners, one ``all_gather``),
        every rank calls ``f`` on all of them (the same inputs, the same draws of
        ``info.rng``: the same values), and each rank keeps the target rows it holds."""
        shard, z = self.shard, self.z
        sources = [np.asarray(rows, dtype=np.int64) for _, _, rows in item.sources]
        wanted = np.unique(np.concatenate(sources)) if sources else np.zeros(0, np.int64)
        wanted = wanted[shard.owner(wanted) >= 0]  # client rows: the same set on every rank
        fetched = shard._fetch(wanted, z) if shard.backend.size > 1 else None
        args = [shard.values(rows, z, wanted, fetched) for rows in sources]
        problem = self.ctx.map_problem or self.problem  # counts the gradients it asks
        new = call_map(item, args, problem, self.ctx.seed_sequence, z.shape[1])
        rows = np.asarray(item.z_rows, dtype=np.int64)
        own = shard.owner(rows)
        held = (own == -1) | (own == shard.backend.rank)
        z[shard.local(rows[held])] = new[held].astype(z.dtype, copy=False)
        return bool(np.isfinite(new).all())

    def end(self, finite: bool) -> bool:
        return self.shard.backend.all_true(finite)


def _sampled_chunks(problem, clients: np.ndarray, picks: np.ndarray):
    """What :func:`~stochmix.engine.plan.gradients.chunk_gradients` gives, for a run that
    takes the sampled gradients of ``clients`` drawing ``picks`` (one row per client):
    a chunk's gradients from its clients' rows of ``picks``, so that a shard's segments
    and chunks each take their own part of the draw."""
    draw = Draws(clients, picks)

    def bind(chunk, like):
        own = draw.aligned(chunk)
        return lambda x: sampled_gradients_at(problem, chunk, x, own)

    return bind
