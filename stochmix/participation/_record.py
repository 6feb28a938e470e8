"""The record of one round of activation (its own module so that both the base class in
:mod:`.processes` and the processes of :mod:`.activation` can build it without an import
cycle); users import it from :mod:`stochmix.participation`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Int

from .._validate import as_float, as_int_array

_INT64 = np.dtype(np.int64)


def _frozen(value, name: str, ndim: int) -> np.ndarray:
    """``value`` as a read-only int64 array of ``ndim`` dimensions (a copy unless it already
    is one, so the caller's array is never frozen behind its back)."""
    if (
        type(value) is np.ndarray
        and value.dtype is _INT64
        and value.ndim == ndim
        and not value.flags.writeable
    ):
        return value
    arr = np.array(as_int_array(value, name, ndim=ndim), dtype=np.int64, copy=True)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class Activation:
    """One round of an activation process: who is active and, for gossip, which links.

    Attributes:
        nodes: the active nodes, sorted, distinct, int64, shape ``(k,)``.
        edges: the directed pairs ``(sender, receiver)`` activated this round, int64 of
            shape ``(e, 2)``; an undirected edge ``{i, j}`` appears as both ``(i, j)`` and
            ``(j, i)``. ``None`` for plain node activation.
        time: the continuous (simulated) time at the end of the round (a clock tick), or
            ``None`` when the process has no clock.
        steps: the local steps each node of ``nodes`` takes this round (a clock's deadline:
            the steps each client completed in time), int64 ``(k,)``, or ``None``: the
            method's own ``local_steps``.
        launched: for an asynchronous round (:class:`~stochmix.participation.Asynchronous`),
            the clients that pull the server model after this round's update and start
            training on it, sorted, int64; ``None`` otherwise.
        staleness: for an asynchronous round, the staleness of each arriving update (the
            server updates since its client pulled), int64 ``(k,)``; ``None`` otherwise.
        received: the nodes whose uploads reach the server (a sorted subset of ``nodes``:
            the others worked, but their uploads were lost; :class:`UplinkDrops`), or
            ``None``: every upload arrives.

    The arrays are read-only (a writeable array given to the constructor is copied first).
    Two records are equal when their nodes, edges and times are.
    """

    nodes: Int[np.ndarray, " k"]
    edges: Int[np.ndarray, "e 2"] | None = None
    time: float | None = None
    steps: Int[np.ndarray, " k"] | None = None
    launched: Int[np.ndarray, " m"] | None = None
    staleness: Int[np.ndarray, " k"] | None = None
    received: Int[np.ndarray, " r"] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", _frozen(self.nodes, "nodes", 1))
        if self.edges is not None:
            edges = _frozen(self.edges, "edges", 2)
            if edges.shape[1] != 2:
                raise ValueError(f"edges must have shape (e, 2), got {edges.shape}")
            object.__setattr__(self, "edges", edges)
        if self.time is not None:
            object.__setattr__(self, "time", as_float(self.time, "time"))
        for name in ("steps", "staleness"):
            value = getattr(self, name)
            if value is not None:
                arr = _frozen(value, name, 1)
                if arr.shape != self.nodes.shape:
                    raise ValueError(
                        f"{name} must hold one entry per node ({self.nodes.size}), got shape "
                        f"{arr.shape}"
                    )
                object.__setattr__(self, name, arr)
        if self.launched is not None:
            object.__setattr__(self, "launched", _frozen(self.launched, "launched", 1))
        if self.received is not None:
            received = _frozen(self.received, "received", 1)
            if not np.isin(received, self.nodes).all():
                raise ValueError("received must be a subset of nodes")
            object.__setattr__(self, "received", received)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Activation):
            return NotImplemented
        if (self.edges is None) != (other.edges is None) or self.time != other.time:
            return False
        if not np.array_equal(self.nodes, other.nodes):
            return False
        for name in ("steps", "launched", "staleness", "received"):
            a, b = getattr(self, name), getattr(other, name)
            if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                return False
        if self.edges is None or other.edges is None:
            return True  # both None (checked above)
        return np.array_equal(self.edges, other.edges)

    __hash__ = None  # type: ignore[assignment]  # equal by value, holds arrays


_new = object.__new__
_set = object.__setattr__


def _activation(nodes: np.ndarray, edges: np.ndarray | None, time: float | None) -> Activation:
    """An :class:`Activation` of arrays already read-only int64 of the right shapes and a
    float or None, built without the checks (the processes' per-tick path)."""
    record = _new(Activation)
    _set(record, "nodes", nodes)
    _set(record, "edges", edges)
    _set(record, "time", time)
    _set(record, "steps", None)
    _set(record, "launched", None)
    _set(record, "staleness", None)
    _set(record, "received", None)
    return record


class ActivationStream:
    """An endless stream of :class:`Activation` records drawn in blocks of equal shapes:
    ``next(stream)`` gives one record, and :meth:`peek` / :meth:`advance` let a caller
    take many at once as arrays (the engine's compiled segments do). Both consume the
    same records in the same order.

    Args:
        blocks: an iterator of ``(nodes, edges, times)``: ``nodes`` (B, k) int64, sorted
            rows; ``edges`` (B, e, 2) int64 or None; ``times`` (B,) float or None; every
            array read-only.
    """

    def __init__(self, blocks) -> None:
        self._blocks = blocks
        self._block: tuple = (np.zeros((0, 0), np.int64), None, None)
        self._at = 0

    def __iter__(self):
        return self

    def _fill(self) -> None:
        if self._at >= self._block[0].shape[0]:
            self._block, self._at = next(self._blocks), 0

    def __next__(self) -> Activation:
        self._fill()
        nodes, edges, times = self._block
        i = self._at
        self._at = i + 1
        return _activation(
            nodes[i],
            None if edges is None else edges[i],
            None if times is None else float(times[i]),
        )

    def peek(self, limit: int) -> tuple:
        """The next records (at most ``limit``, at least one) as ``(nodes, edges,
        times)`` arrays, without taking them: those left in the current block."""
        self._fill()
        nodes, edges, times = self._block
        stop = min(nodes.shape[0], self._at + int(limit))
        part = slice(self._at, stop)
        return (
            nodes[part],
            None if edges is None else edges[part],
            None if times is None else times[part],
        )

    def advance(self, count: int) -> None:
        """Take ``count`` records of those :meth:`peek` showed."""
        self._at += int(count)


__all__ = ["Activation", "ActivationStream"]
