"""The distributed backend's process group: :class:`DistributedBackend` (the collectives
every rank calls, and its shard hooks: the rank's shard of a run, the item hooks of a
round on it, its checkpoint file), the :class:`Traffic` each rank counts through them,
and the closed form of a federated round's bytes (:func:`closed_form_bytes`). See
:mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...._validate import as_float_dtype
from ...model.layout import Layout
from ...model.method import Method, RunContext
from ..dispatch import execute
from .items import ShardItems
from .reporting import _refuse, _reporter
from .shard import Shard

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
    runs_sharded = True  # run() asks it for a shard of the state (make_shard) and rounds
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
        self.shard: Shard | None = None  # the run's (make_shard)

    def __repr__(self) -> str:
        return f"DistributedBackend(rank={self.rank}, ranks={self.size}, segments={self.segments})"

    # ------------------------------------------------------------------ arrays
    def asarray(self, array) -> np.ndarray:
        return np.asarray(array, dtype=self.dtype)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def apply(self, z, phase, gradients) -> bool:
        """Not used: a sharded state is applied through the round's item hooks
        (:meth:`round_items`)."""
        raise TypeError(
            "DistributedBackend applies rounds through its shard (round_items); a phase "
            "alone cannot be applied to a shard"
        )

    def apply_blockwise(self, z, phase, gradients) -> bool:
        """Not used either (a shard applies whole-block phases with halo exchanges:
        :meth:`round_items`); it is here so that rounds are planned with whole-block
        phases, exactly as the NumPy backend plans them."""
        return self.apply(z, phase, gradients)

    # ------------------------------------------------------------------ shard hooks
    def make_shard(self, layout: Layout, n_clients: int, method, dim: int, problem) -> Shard:
        """This rank's :class:`~.shard.Shard` of a run of ``method`` on ``problem``
        (kept as :attr:`shard`), after refusing, with an error naming the argument, what a
        shard cannot run."""
        self.shard = Shard(self, layout, n_clients, method, dim)
        _refuse(method, problem, self.shard)
        return self.shard

    def initial(self, x0: np.ndarray) -> np.ndarray:
        """This rank's rows of the run's initial state."""
        return self._shard().initial(x0, self.dtype)

    def reported(self, method):
        """What the recorder reads of ``method`` on the shard: the replicated server row,
        or the network average of the method's ``node_models``."""
        shard = self._shard()
        return _reporter(method, shard, shard.layout)

    def round_items(self, z, problem, method: Method, ctx: RunContext) -> ShardItems:
        """The item hooks of one round on this rank's shard (see
        :func:`~stochmix.engine.backends.dispatch.execute`)."""
        return ShardItems(self._shard(), z, problem, method, ctx)

    def checkpoint_file(self, path) -> Path:
        """This rank's file of a run checkpointed at ``path``: ``NAME.rankR-of-S.EXT``;
        refuses files of the same run written on another number of ranks."""
        path = Path(path)
        mine = path.with_name(f"{path.stem}.rank{self.rank}-of-{self.size}{path.suffix}")
        others = sorted(
            p.name
            for p in path.parent.glob(f"{path.stem}.rank*-of-*{path.suffix}")
            if not p.name.endswith(f"-of-{self.size}{path.suffix}")
        )
        if others:
            raise ValueError(
                f"checkpoint {str(path)!r}: files {others} were written by a run on another "
                f"number of ranks; resume on that number (this run has {self.size})"
            )
        return mine

    def identity(self) -> dict:
        """What a checkpoint of this rank records besides the run's own identity."""
        return {"ranks": self.size, "rank": self.rank, "segments": self.segments}

    def check_resume(self, done: int | None, path) -> None:
        """Refuse to resume unless every rank's file is at the same round (``done``:
        this rank's, None without a file)."""
        everyone = self.all_gather(np.array([-1 if done is None else done]), "setup")
        if len({int(v[0]) for v in everyone}) > 1:
            raise ValueError(
                f"checkpoint {str(path)!r}: the ranks' files are at different rounds "
                f"({[int(v[0]) for v in everyone]}); remove them to start again"
            )

    def execute(self, plan: list, z, problem, method: Method, ctx: RunContext) -> bool:
        """Deprecated (goes in the next release): apply a planned round to this rank's
        state through the one dispatcher,
        ``stochmix.engine.backends.dispatch.execute(plan, z, backend, problem, method,
        ctx)``, which is what this does."""
        warnings.warn(
            "DistributedBackend.execute is deprecated: the one dispatcher applies every "
            "backend's rounds (stochmix.engine.backends.dispatch.execute(plan, z, backend, "
            "problem, method, ctx))",
            DeprecationWarning,
            stacklevel=2,
        )
        return execute(plan, z, self, problem, method, ctx)

    def _shard(self) -> Shard:
        if self.shard is None:
            raise RuntimeError("DistributedBackend: no shard yet (make_shard comes first)")
        return self.shard

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


def closed_form_bytes(outer_rows: int, dim: int, ranks: int, itemsize: int = 8) -> dict:
    """The bytes one rank moves in a federated round whose node-local run has
    ``outer_rows`` aggregates (power-of-two ``ranks``): its subtree's sums in (one
    (outer_rows, d) array), the other ranks' out, plus the finiteness flag."""
    if ranks == 1:
        return {"sent": 0, "received": 0}
    piece = outer_rows * dim * itemsize
    return {"sent": piece + 8, "received": piece * (ranks - 1) + 8}
