"""The distributed backend's process group: :class:`DistributedBackend` (the collectives
every rank calls, and the round it applies to its shard), the :class:`Traffic` each rank
counts through them, and the closed form of a federated round's bytes
(:func:`closed_form_bytes`). See :mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...._validate import as_float_dtype
from ...model.method import Method, RunContext

SEGMENTS = 64  #: the fixed grid of client segments (a power of two): at most this many ranks

__all__ = ["SEGMENTS", "DistributedBackend", "Traffic", "closed_form_bytes"]


@dataclass
class Traffic:
    """What one rank passed through the process group: bytes it put in (``sent``: its
    input to each collective) and bytes it got from the other ranks (``received``), and
    the number of collectives, in total and per kind."""

    sent: int = 0
    received: int = 0
    calls: int = 0
    by_kind: dict = field(default_factory=dict)

    def add(self, kind: str, sent: int, received: int) -> None:
        self.sent += sent
        self.received += received
        self.calls += 1
        k = self.by_kind.setdefault(kind, [0, 0, 0])
        k[0] += sent
        k[1] += received
        k[2] += 1

    def snapshot(self) -> tuple[int, int, int]:
        return self.sent, self.received, self.calls


class DistributedBackend:
    """The state of one rank of a torch.distributed group: its shard of client rows and
    every replicated row, as a NumPy array (see :mod:`stochmix.engine.backends.distributed`).

    Args:
        dtype: float64 (default) or float32.
        group: the process group (default: the world).
        segments: the grid of client segments, a power of two >= the number of ranks;
            the same grid must be used to compare runs bit for bit (default
            :data:`SEGMENTS`).

    Raises:
        ValueError: torch.distributed is not available or no process group is initialised
            (start the processes with ``torchrun``, or call
            ``torch.distributed.init_process_group`` first).
    """

    name = "distributed"
    runs_local_phases = True  # node-local runs: sharded, segment by segment
    runs_sharded = True  # run() hands the whole run to run_sharded
    compiled = False  # the shards run the NumPy programs

    def __init__(self, dtype=np.float64, group=None, segments: int = SEGMENTS):
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise ValueError(
                'backend="distributed" needs PyTorch: pip install "stochmix[torch]"'
            ) from None
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(
                'backend="distributed" needs an initialised torch.distributed process group: '
                "start the processes with torchrun (python -m stochmix run under torchrun "
                "does it for you), or call torch.distributed.init_process_group first"
            )
        self.dtype = as_float_dtype(dtype)
        if isinstance(segments, bool) or not isinstance(segments, (int, np.integer)):
            raise TypeError(f"segments must be a power of two, got {segments!r}")
        segments = int(segments)
        if segments < 1 or segments & (segments - 1):
            raise ValueError(f"segments must be a power of two, got {segments}")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.size > segments:
            raise ValueError(
                f"{self.size} ranks but {segments} client segments: each rank needs at least "
                "one segment (pass segments= a larger power of two)"
            )
        self.segments = segments
        nccl = str(dist.get_backend(group)).lower() == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else None
        self.traffic = Traffic()
        # the run's :class:`~stochmix.engine.backends.distributed.shard.Shard` (run_sharded
        # makes it; not imported here: the shard's module builds on this one)
        self.shard: Any = None

    def __repr__(self) -> str:
        return f"DistributedBackend(rank={self.rank}, ranks={self.size}, segments={self.segments})"

    # ------------------------------------------------------------------ arrays
    def asarray(self, array) -> np.ndarray:
        return np.asarray(array, dtype=self.dtype)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def apply(self, z, phase, gradients) -> bool:
        """Not used: a sharded state is applied through :meth:`execute`."""
        raise TypeError(
            "DistributedBackend applies whole rounds (execute); a phase alone cannot be "
            "applied to a shard"
        )

    def apply_blockwise(self, z, phase, gradients) -> bool:
        """Not used either (a shard applies whole-block phases through :meth:`execute`,
        with halo exchanges); it is here so that rounds are planned with whole-block
        phases, exactly as the NumPy backend plans them."""
        return self.apply(z, phase, gradients)

    # ------------------------------------------------------------------ collectives
    def _tensor(self, array: np.ndarray):
        t = self.torch.from_numpy(np.ascontiguousarray(array))
        return t if self.device is None else t.to(self.device)

    def all_gather(self, array: np.ndarray, kind: str = "all_gather") -> list[np.ndarray]:
        """Every rank's ``array`` (all the same shape and dtype), in rank order."""
        if self.size == 1:
            return [array]
        mine = self._tensor(array)
        out = [self.torch.empty_like(mine) for _ in range(self.size)]
        self.dist.all_gather(out, mine, group=self.group)
        self.traffic.add(kind, array.nbytes, array.nbytes * (self.size - 1))
        return [t.cpu().numpy() for t in out]

    def broadcast(self, array: np.ndarray, src: int, kind: str = "broadcast") -> np.ndarray:
        """``array`` of rank ``src`` on every rank (others pass an array of its shape)."""
        if self.size == 1:
            return array
        t = self._tensor(array)
        self.dist.broadcast(t, src=self.dist.get_global_rank(self.group, src)
                            if self.group is not None else src, group=self.group)  # fmt: skip
        mine = self.rank == src
        self.traffic.add(kind, array.nbytes if mine else 0, 0 if mine else array.nbytes)
        return t.cpu().numpy()

    def _global(self, rank: int) -> int:
        """The global rank of ``rank`` of the group."""
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def exchange(self, outgoing: list, incoming, dim: int, dtype) -> list:
        """Pairwise messages: ``outgoing[q]`` (an (rows, dim) array, or None) goes to rank
        q, and ``incoming[q]`` rows of ``dim`` values come from rank q; returns what
        arrived, by rank (None where nothing did). Only the ranks with something to move
        take part (``isend``/``irecv``: gloo has no ``all_to_all``); counted as one
        "halo" collective."""
        got: list = [None] * self.size
        if self.size == 1:
            return got
        requests, buffers, kept = [], {}, []
        sent = received = 0
        for q in range(self.size):
            if q != self.rank and int(incoming[q]):
                buffers[q] = self._tensor(np.empty((int(incoming[q]), dim), dtype=dtype))
                requests.append(self.dist.irecv(buffers[q], src=self._global(q), group=self.group))
                received += buffers[q].numel() * buffers[q].element_size()
        for q in range(self.size):
            rows = outgoing[q]
            if q != self.rank and rows is not None and len(rows):
                kept.append(self._tensor(rows))
                requests.append(self.dist.isend(kept[-1], dst=self._global(q), group=self.group))
                sent += rows.nbytes
        for request in requests:
            if request is not None:  # (None only for a rank outside the group)
                request.wait()
        self.traffic.add("halo", sent, received)
        for q, buffer in buffers.items():
            got[q] = buffer.cpu().numpy()
        return got

    def all_true(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank (one all-reduce of one number)."""
        if self.size == 1:
            return bool(flag)
        t = self._tensor(np.array([1.0 if flag else 0.0]))
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.group)
        self.traffic.add("all_reduce", 8, 8)
        return bool(t.cpu().numpy()[0] > 0.5)

    def common(self, value: int) -> int:
        """Rank 0's ``value`` (a non-negative integer) on every rank."""
        return int(self.broadcast(np.array([value], dtype=np.int64), 0, "setup")[0])

    # ------------------------------------------------------------------ rounds
    def execute(self, plan: list, z: np.ndarray, problem, method: Method, ctx: RunContext) -> bool:
        """Apply a planned round to this rank's state ``z``; False if a rewritten entry
        is not finite on any rank (the same answer on every rank)."""
        from ...model.rowmap import RowMap
        from ...plan.gradients import chunk_gradients as _chunk_gradients
        from ...plan.round_plan import LocalStep

        shard = self.shard
        if shard is None:
            raise RuntimeError("DistributedBackend.execute before the run made its shard")
        bind = _chunk_gradients(problem)
        data = 2 * (problem.chunk_cost() if hasattr(problem, "chunk_cost") else z.shape[1])
        finite = True
        shard.halos = {}  # halo rows fetched ahead for later phases of the round
        for i, item in enumerate(plan):
            if isinstance(item, LocalStep):
                ok = shard.local_step(item, z, bind, data, ctx)
            elif isinstance(item, RowMap):
                raise NotImplementedError(
                    f'backend="distributed": method {method.name} applies a nonlinear row '
                    f"map (phase {item.label!r}); row maps do not run on shards yet"
                )
            else:
                done = shard.whole_blocks(item, z, problem, method, plan[i + 1 :])
                if done is None:  # not a whole-block phase over the sharded nodes
                    done = shard.general(item, z, problem, method, ctx)
                ok = done
            finite = ok and finite
        return self.all_true(finite)


def closed_form_bytes(outer_rows: int, dim: int, ranks: int, itemsize: int = 8) -> dict:
    """The bytes one rank moves in a federated round whose node-local run has
    ``outer_rows`` aggregates (power-of-two ``ranks``): its subtree's sums in (one
    (outer_rows, d) array), the other ranks' out, plus the finiteness flag."""
    if ranks == 1:
        return {"sent": 0, "received": 0}
    piece = outer_rows * dim * itemsize
    return {"sent": piece + 8, "received": piece * (ranks - 1) + 8}
