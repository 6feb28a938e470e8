"""Named state blocks stacked into one array.

A method's state is a list of blocks, each ``(rows_b, dim)``; the engine stacks them in
order into one array ``Z`` of shape ``(sum rows_b, dim)``. :class:`Layout` maps a block
name and block-local row indices to rows of ``Z``.

**Rows that are not kept.** A run may keep some blocks' *node rows* (the rows of the
clients, or peers) out of the state (see :mod:`stochmix.engine.plan.liveness`): FedAvg's client
models, overwritten by the pull before they are read. A layout built with ``scratch``
places those rows after every kept row: ``Z``'s first :attr:`Layout.kept` rows are the
state, and the rows past them have numbers (phases and analysis still see one row space
of :attr:`Layout.size` rows) but no storage. Without ``scratch`` the two sizes agree and
every block is one contiguous range, as above.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from ..._validate import as_int, choice

__all__ = [
    "Block",
    "INITIAL_VALUES",
    "Layout",
]

INITIAL_VALUES = ("model", "zeros", "ones")


@dataclass(frozen=True)
class Block:
    """One named block of the state.

    Attributes:
        name: how phases refer to the block ("x", "y", ...).
        rows: number of rows (nodes) it holds.
        init: initial value of every row: "model" (the starting point x0), "zeros" or
            "ones".
        first_node: the node that row 0 belongs to (row i belongs to node i + first_node).
            0 for blocks with a row per node (node 0 is the server in federated methods);
            1 for a block with one row per client and none for the server.
    """

    name: str
    rows: int
    init: str = "zeros"
    first_node: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Block name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "rows", as_int(self.rows, f"Block {self.name!r} rows", minimum=1))
        choice(self.init, f"Block {self.name!r} init", INITIAL_VALUES)


class Layout:
    """Where each block lives inside the stacked state.

    Args:
        blocks: the blocks, in stacking order.
        scratch: block name -> "dead" or "zero" for blocks whose node rows (those of
            nodes ``nodes[0] .. nodes[0] + nodes[1] - 1``) are not kept in the state:
            "dead" rows are written before they are read in every round, "zero" rows are
            zero whenever a round starts (see :mod:`stochmix.engine.plan.liveness`). They are
            numbered after every kept row.
        nodes: ``(first, count)``: the nodes that are clients or peers (with ``scratch``).

    >>> lay = Layout([Block("x", 3, "model"), Block("y", 3)])
    >>> lay.rows("y", [0, 2])
    array([3, 5])
    >>> lay = Layout([Block("x", 3, "model"), Block("y", 3)], {"x": "dead"}, (1, 2))
    >>> lay.kept, lay.size, lay.rows("x").tolist(), lay.rows("y").tolist()
    (4, 6, [0, 4, 5], [1, 2, 3])
    """

    def __init__(self, blocks: list[Block], scratch: dict | None = None, nodes=None):
        blocks = list(blocks)
        if not blocks:
            raise ValueError("blocks must hold at least one Block")
        names = [b.name for b in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"blocks must have distinct names, got {names}")
        self.blocks = tuple(blocks)
        self._by_name = {b.name: b for b in blocks}
        scratch = dict(scratch or {})
        for name, kind in scratch.items():
            self.block(name)
            choice(kind, f"scratch[{name!r}]", ("dead", "zero"))
        # block -> (lo, hi): its block-local node rows that are not kept (empty: none)
        self._apart: dict[str, tuple[int, int]] = {}
        if scratch:
            if nodes is None:
                raise ValueError("nodes=(first, count) is required with scratch")
            first, count = (int(v) for v in nodes)
            for name in scratch:
                b = self._by_name[name]
                lo = max(first, b.first_node) - b.first_node
                hi = min(first + count, b.first_node + b.rows) - b.first_node
                if hi > lo:
                    self._apart[name] = (lo, hi)
        self.scratch = {name: scratch[name] for name in self._apart}
        self.nodes = None if nodes is None else tuple(int(v) for v in nodes)
        self._start, self._node_start = {}, {}
        offset = 0
        for b in blocks:  # kept rows first, block by block
            self._start[b.name] = offset
            lo, hi = self._apart.get(b.name, (0, 0))
            offset += b.rows - (hi - lo)
        self.kept = offset
        for b in blocks:  # then the rows that are not kept
            if b.name in self._apart:
                lo, hi = self._apart[b.name]
                self._node_start[b.name] = offset
                offset += hi - lo
        self.size = offset

    def block(self, name: str) -> Block:
        """The block called ``name``."""
        try:
            return self._by_name[name]
        except KeyError:
            raise ValueError(f"block must be one of {list(self._by_name)}, got {name!r}") from None

    def start(self, name: str) -> int:
        """Row of ``Z`` that holds row 0 of block ``name``."""
        return self.row(name, 0)

    def row(self, name: str, local: int) -> int:
        """Row of ``Z`` that holds block-local row ``local`` of block ``name``."""
        self.block(name)
        local = int(local)
        apart = self._apart.get(name)
        if apart is None or local < apart[0]:
            return self._start[name] + local
        if local < apart[1]:
            return self._node_start[name] + local - apart[0]
        return self._start[name] + local - (apart[1] - apart[0])

    def node_offset(self, name: str) -> int:
        """``node_offset(b) + i`` is the row of ``Z`` that holds node i's row of block
        ``b`` (for the nodes the block holds, among the clients or peers where some of
        its rows are not kept)."""
        b = self.block(name)
        apart = self._apart.get(name)
        if apart is None:
            return self._start[name] - b.first_node
        return self._node_start[name] - apart[0] - b.first_node

    def apart_nodes(self, name: str) -> tuple[int, int] | None:
        """``(lo, hi)``: the nodes ``lo .. hi - 1`` whose rows of block ``name`` are not
        kept (where :meth:`node_offset` points into the rows apart), or None when the
        block keeps every row."""
        apart = self._apart.get(name)
        if apart is None:
            return None
        first = self.block(name).first_node
        return apart[0] + first, apart[1] + first

    def first_node(self, name: str) -> int:
        """The node that row 0 of block ``name`` belongs to."""
        return self.block(name).first_node

    def contiguous(self, name: str) -> bool:
        """Whether block ``name`` is one range of kept rows (it has no row apart)."""
        self.block(name)
        return name not in self._apart

    def slice(self, name: str) -> slice:
        """Rows of ``Z`` that block ``name`` occupies (a block kept whole)."""
        b = self.block(name)
        if name in self._apart:
            raise ValueError(
                f"block {name!r} is not one range of the state: its node rows are not kept "
                "(run with storage='full' to keep them)"
            )
        return slice(self._start[name], self._start[name] + b.rows)

    def rows(self, name: str, local=None) -> np.ndarray:
        """Rows of ``Z`` for block-local indices ``local`` (all rows when None)."""
        b = self.block(name)
        if local is None:
            local = np.arange(b.rows)
        local = np.asarray(local, dtype=np.int64)
        apart = self._apart.get(name)
        if apart is None:
            return local + self._start[name]
        lo, hi = apart
        out = local + self._start[name]
        out[local >= hi] -= hi - lo
        inside = (local >= lo) & (local < hi)
        out[inside] = local[inside] + (self._node_start[name] - lo)
        return out

    def locate(self, row: int) -> tuple[str, int]:
        """The block and block-local row that row ``row`` of ``Z`` holds."""
        row = int(row)
        for b in self.blocks:
            lo, hi = self._apart.get(b.name, (0, 0))
            local = row - self._start[b.name]
            if 0 <= local < b.rows - (hi - lo):  # a kept row
                return b.name, local if local < lo else local + (hi - lo)
            if b.name in self._node_start and 0 <= row - self._node_start[b.name] < hi - lo:
                return b.name, lo + row - self._node_start[b.name]
        raise ValueError(f"row must be a row of the state (0..{self.size - 1}), got {row}")

    def view(self, z, name: str):
        """The rows of block ``name`` in the stacked array ``z`` (a view, not a copy)."""
        return z[self.slice(name)]

    # (builtins.slice: in this class ``slice`` is the method)
    def _kept_pieces(self, name: str) -> list[tuple[builtins.slice, builtins.slice]]:
        """The kept rows of block ``name`` as ``(rows of Z, block-local rows)`` slices."""
        b = self.block(name)
        lo, hi = self._apart.get(name, (b.rows, b.rows))
        start, after = self._start[name], b.rows - hi
        pieces = [(slice(start, start + lo), slice(0, lo))]
        if after:
            pieces.append((slice(start + lo, start + lo + after), slice(hi, b.rows)))
        return [(rows, local) for rows, local in pieces if rows.stop > rows.start]

    def moved(self, z: np.ndarray, other: Layout) -> np.ndarray:
        """The state ``z`` laid out by ``other`` (the same blocks), laid out by this
        layout: rows kept by both are copied, rows this layout keeps and ``other`` does
        not are zero (what a "zero" row holds; a "dead" row is never read)."""
        out = np.zeros((self.kept, *z.shape[1:]), dtype=z.dtype)
        for b in self.blocks:
            mine, theirs = self.rows(b.name), other.rows(b.name)
            both = (mine < self.kept) & (theirs < other.kept)
            out[mine[both]] = z[theirs[both]]
        return out

    def initial(self, x0: np.ndarray, dtype=np.float64) -> np.ndarray:
        """The stacked initial state (its :attr:`kept` rows) for a starting point ``x0`` of
        shape (dim,), or (rows, dim): one row per row of each block that starts at the
        model (every such block must then have that many rows)."""
        z = np.zeros((self.kept, x0.shape[-1]), dtype=dtype)
        if x0.ndim == 2:
            for b in self.blocks:
                if b.init == "model" and b.rows != x0.shape[0]:
                    raise ValueError(
                        f"x0 has {x0.shape[0]} rows but block {b.name!r}, which starts at "
                        f"the model, has {b.rows}: x0 must have shape ({x0.shape[1]},) "
                        f"or ({b.rows}, {x0.shape[1]})"
                    )
        for b in self.blocks:
            if b.init == "zeros":
                continue
            for rows, local in self._kept_pieces(b.name):  # slices: no N-long index arrays
                z[rows] = 1.0 if b.init == "ones" else x0[local] if x0.ndim == 2 else x0
        return z

    def __repr__(self) -> str:
        inner = ", ".join(f"{b.name}:{b.rows}" for b in self.blocks)
        apart = "".join(f", {name} node rows {kind}" for name, kind in self.scratch.items())
        return f"Layout({inner}{apart})"
