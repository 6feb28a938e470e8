"""A rank's shard of the state: :class:`Shard`, which rows the rank holds and its part of
each round (node-local runs per segment, whole-block phases with halo exchanges, general
phases with the client rows they read gathered), and the fixed binary tree its sums are
added along (``_tree``). See :mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...._arrays import row_sums
from ...codegen.cache import program_for
from ...model.blockwise import BlockTarget, BlockwiseForm
from ...model.layout import Block, Layout
from ...model.method import RunContext, model_points
from ...model.phase import Phase
from ...model.round_scalars import plain
from ...model.whole_block import apply_blockwise_numpy
from ...plan.gradients import sampled_gradients_at
from .halo import PLANS, HaloPlan, _ByIdentity, _Mixed, halo_plan

__all__ = ["Shard"]


def _tree(parts: np.ndarray) -> np.ndarray:
    """The sum of ``parts`` (a power-of-two count along axis 0) as a binary tree:
    neighbours first, the same additions whatever split the parts came from."""
    while parts.shape[0] > 1:
        parts = parts[0::2] + parts[1::2]
    return parts[0]


class Shard:
    """Which rows of the stacked state a rank holds, and the rank's part of each round.

    Client ``c`` is node ``c + K`` of every block (``K = client_node + first_node`` of
    the model block); the clients are cut into ``segments`` consecutive segments
    (``floor(j N / segments)`` ...) and rank ``k`` of ``R`` holds segments ``[k G / R,
    (k + 1) G / R)``. Rows of nodes outside the clients are replicated. In a block of one
    row per client (every block of a decentralized method) the rank's rows are one slice
    of its state (:attr:`node_blocks`); whole-block phases over such blocks run through
    :meth:`whole_blocks`, with a :class:`HaloPlan` per distinct mixing matrix
    (:attr:`plans`, :attr:`plans_built`).
    """

    def __init__(self, backend: Any, layout: Layout, n_clients: int, method, dim: int = 0):
        self.backend = backend
        self.layout, self.n = layout, int(n_clients)
        self.first = int(method.client_node + layout.first_node(method.model_block))
        G, R, k = backend.segments, backend.size, backend.rank
        self.bounds = np.array([(j * self.n) // G for j in range(G + 1)], dtype=np.int64)
        self.seg_rank = np.array([(j * R) // G for j in range(G)], dtype=np.int64)
        # rank k's segments: those j with floor(j R / G) == k
        mine = np.flatnonzero(self.seg_rank == k)
        self.seg_lo, self.seg_hi = int(mine[0]), int(mine[-1]) + 1
        self.lo, self.hi = int(self.bounds[self.seg_lo]), int(self.bounds[self.seg_hi])
        self.aligned = G % R == 0 and (R & (R - 1)) == 0  # a subtree per rank
        keep = []
        for b in layout.blocks:
            nodes = np.arange(b.first_node, b.first_node + b.rows)
            client = (nodes >= self.first) & (nodes < self.first + self.n)
            own = (nodes >= self.first + self.lo) & (nodes < self.first + self.hi)
            keep.append(layout.start(b.name) + np.flatnonzero(~client | own))
        self.keep = np.concatenate(keep).astype(np.int64)
        self.row_node = np.empty(layout.size, dtype=np.int64)  # global row -> node
        for b in layout.blocks:
            self.row_node[layout.slice(b.name)] = np.arange(b.first_node, b.first_node + b.rows)
        # blocks of one row per client (every block of a decentralized method): a rank
        # holds their rows [lo, hi), a slice of its state; whole-block phases over them
        # run on the shard with halo exchanges
        self.node_blocks = {
            b.name: self._own_slice(b) for b in layout.blocks if self._one_row_per_client(b)
        }
        self.client_rank = np.repeat(self.seg_rank, np.diff(self.bounds))  # client -> rank
        self.plans = _ByIdentity(PLANS)  # mixing matrix -> HaloPlan
        self.forms = _ByIdentity(4 * PLANS)  # phase -> its form on the shard
        self.plans_built = 0
        self.halos: dict = {}  # halo rows fetched ahead (see whole_blocks), per round
        self.local_ctx = None  # the shard's own rows as a context (decentralized methods)
        if len(self.node_blocks) == len(layout.blocks) and self.hi > self.lo:
            local = Layout([Block(b.name, self.hi - self.lo, b.init, 0) for b in layout.blocks])
            self.local_ctx = RunContext(local, self.hi - self.lo, int(dim))

    def _one_row_per_client(self, block) -> bool:
        return block.first_node == self.first and block.rows == self.n

    def _own_slice(self, block) -> slice:
        """Where this rank's rows of a block of one row per client live in its state."""
        start = int(np.searchsorted(self.keep, self.layout.start(block.name) + self.lo))
        return slice(start, start + self.hi - self.lo)

    # ------------------------------------------------------------------ rows
    def owner(self, rows) -> np.ndarray:
        """The rank holding each global row, -1 for replicated rows."""
        rows = np.asarray(rows, dtype=np.int64)
        client = self.row_node[rows] - self.first
        inside = (client >= 0) & (client < self.n)
        out = np.full(rows.shape, -1, dtype=np.int64)
        if inside.any():
            seg = np.searchsorted(self.bounds, client[inside], side="right") - 1
            out[inside] = self.seg_rank[np.minimum(seg, len(self.seg_rank) - 1)]
        return out

    def local(self, rows) -> np.ndarray:
        """Where global ``rows`` (held by this rank) live in its state."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.keep, rows)
        if rows.size and (at.max() >= self.keep.size or (self.keep[at] != rows).any()):
            raise RuntimeError(f"rank {self.backend.rank} does not hold rows {rows}")
        return at

    def at(self, row: int) -> int:
        return int(self.local(np.array([row]))[0])

    def initial(self, x0: np.ndarray, dtype) -> np.ndarray:
        """This rank's rows of the initial state (``x0``: shape (d,), or (n, d) with a
        row per node for decentralized methods)."""
        z = np.zeros((self.keep.size, x0.shape[0]), dtype=dtype)
        for b in self.layout.blocks:
            sl = self.layout.slice(b.name)
            inside = (self.keep >= sl.start) & (self.keep < sl.stop)
            if b.init == "model" and x0.ndim == 2:  # one row per node
                z[inside] = x0[self.keep[inside] - sl.start]
            elif b.init == "model":
                z[inside] = x0
            elif b.init == "ones":
                z[inside] = 1.0
        return z

    # ------------------------------------------------------------------ sums
    def reduce(self, parts: np.ndarray, kind: str = "sums") -> np.ndarray:
        """The sum over every segment of the grid of per-segment values, on every rank:
        ``parts`` holds this rank's segments' values, shape (its segments, ...). The
        segments are added as one fixed binary tree (:func:`_tree`), whatever the number
        of ranks: a rank whose segments form an aligned subtree sends its subtree's sum,
        others send each segment's (one ``all_gather``)."""
        back = self.backend
        if self.aligned:
            pieces = back.all_gather(_tree(parts)[None], kind)
            return _tree(np.concatenate(pieces))
        # every segment's value, padded to the most segments a rank holds
        most = -(-back.segments // back.size)
        padded = np.zeros((most, *parts.shape[1:]), dtype=parts.dtype)
        padded[: parts.shape[0]] = parts
        pieces = back.all_gather(padded, kind)
        counts = np.bincount(self.seg_rank, minlength=back.size)
        return _tree(np.concatenate([p[:c] for p, c in zip(pieces, counts, strict=True)]))

    def segment_sums(self, rows: np.ndarray) -> np.ndarray:
        """Per segment of this rank, the sum of its nodes' ``rows`` (this rank's nodes in
        order, shape (m, ...)) over the nodes: shape (its segments, ...)."""
        cuts = self.bounds[self.seg_lo : self.seg_hi + 1] - self.lo
        out = np.zeros((cuts.size - 1, *rows.shape[1:]), dtype=rows.dtype)
        for i in range(cuts.size - 1):
            if cuts[i + 1] > cuts[i]:
                out[i] = row_sums(rows[cuts[i] : cuts[i + 1]])
        return out

    # ------------------------------------------------------------------ node-local runs
    def local_step(self, item, z, bind, data, ctx) -> bool:
        """A run of node-local phases on this rank's nodes (``bind``: the chunks'
        gradients; for sampled gradients each chunk's part of the draw)."""
        if item.views:
            raise ValueError(
                f'backend="distributed": phase(s) {", ".join(map(repr, item.labels))} read or '
                "write rows picked by index (x.at[...]), which a shard does not split: run "
                "the method with backend='numpy' or 'torch'"
            )
        coefs = plain(item.coefs)  # what the programs compute with (round scalars as floats)
        if coefs is not item.coefs:
            item = replace(item, coefs=coefs)
        program, nodes = program_for(item.structure), item.nodes
        if nodes.size and int(nodes.max()) < self.first:
            return self._shared_step(program, item, z, bind, data)
        singles = set(program.singles) | set(program.outer_rows)
        singles |= {r for row, ref, _ in program.outer_singles for r in (row, ref) if r is not None}
        singles |= {
            r
            for e in program.tail
            for entry in e
            for r in (entry.row, entry.ref, *entry.more)
            if r is not None
        }
        single_rows = np.array(sorted(singles), dtype=np.int64)
        owners = set(self.owner(single_rows).tolist()) - {-1}
        if not owners:
            return self._segments(program, item, z, bind, data, ctx)
        node_owners = set(self.seg_rank_of_clients(nodes - self.first).tolist())
        if len(owners | node_owners) > 1:
            raise NotImplementedError(
                "distributed: a node-local run that reads single rows of clients held by "
                "several ranks is not supported yet"
            )
        return self._on_owner(program, item, z, bind, data, ctx, owners.pop(), single_rows)

    def _shared_step(self, program, item, z, bind, data) -> bool:
        """A run over nodes that are no clients (a server's row kernel): their rows are
        held by every rank, which each apply it to their copy (the same numbers)."""
        global_rows = program.node_rows(item.nodes, self.layout)
        if any((self.owner(np.asarray(r)) != -1).any() for r in global_rows):
            raise NotImplementedError(
                "distributed: a node-local run over rows that one rank holds and that are "
                "no client's is not supported yet"
            )
        self._snap = program.snapshot(z, self.at)
        rows = [self.local(r) for r in global_rows]
        ok, acc = program.accumulate(
            z, rows, item.nodes.size, item.coefs, item.clients, bind, data, self._snap
        )
        ok = program.finish(z, acc, self._snap, item.coefs, self.at) and ok
        self._snap = None
        return ok

    def seg_rank_of_clients(self, clients) -> np.ndarray:
        seg = np.searchsorted(self.bounds, clients, side="right") - 1
        return self.seg_rank[np.minimum(seg, len(self.seg_rank) - 1)]

    def _partials(self, program, item, z, bind, data, ctx, segs) -> tuple[bool, np.ndarray]:
        """The outer rows' sums of segments ``segs`` (an (s, outer rows, d) array), the
        segments' rows of the nodes written."""
        nodes, d = item.nodes, z.shape[1]
        out = np.zeros((len(segs), len(program.outer_rows), d), dtype=z.dtype)
        finite = True
        cuts = np.searchsorted(nodes, self.first + self.bounds[segs[0] : segs[-1] + 2])
        snapshot = self._snap
        for i in range(len(segs)):
            a, b = int(cuts[i]), int(cuts[i + 1])
            if a == b:
                continue
            part = nodes[a:b]
            rows = [self.local(r) for r in program.node_rows(part, self.layout)]
            coefs = tuple(
                c[a:b] if np.ndim(c) and np.shape(c)[0] == nodes.size else c for c in item.coefs
            )
            clients = None if item.clients is None else item.clients[a:b]
            ok, acc = program.accumulate(
                z, rows, b - a, coefs, clients, bind, data, snapshot, whole=False
            )
            finite = finite and ok
            for j, r in enumerate(program.outer_rows):
                out[i, j] = acc[r]
        return finite, out

    def _segments(self, program, item, z, bind, data, ctx) -> bool:
        self._snap = program.snapshot(z, self.at)
        segs = list(range(self.seg_lo, self.seg_hi))
        finite, parts = self._partials(program, item, z, bind, data, ctx, segs)
        acc = {}
        if program.outer_rows:
            total = self.reduce(parts, "sums")
            acc = {r: total[j] for j, r in enumerate(program.outer_rows)}
        ok = program.finish(z, acc, self._snap, item.coefs, self.at)
        self._snap = None
        return finite and ok

    def _on_owner(self, program, item, z, bind, data, ctx, owner, singles) -> bool:
        back = self.backend
        rows = set(program.outer_rows) | {entry.row for e in program.tail for entry in e}
        written = np.array(sorted(rows), dtype=np.int64)
        shared = written[self.owner(written) == -1]
        values = np.zeros((shared.size, z.shape[1]), dtype=z.dtype)
        finite = True
        if back.rank == owner:
            self._snap = program.snapshot(z, self.at)
            segs = list(range(back.segments))  # the owner holds every node of the run
            finite, parts = self._partials(program, item, z, bind, data, ctx, segs)
            acc = {r: v for r, v in zip(program.outer_rows, _tree(parts), strict=True)}
            finite = program.finish(z, acc, self._snap, item.coefs, self.at) and finite
            self._snap = None
            values[:] = z[self.local(shared)]
        if shared.size:
            values = back.broadcast(values, owner, "owner rows")
            if back.rank != owner:
                z[self.local(shared)] = values
        return finite

    # ------------------------------------------------------------------ whole blocks
    def whole_blocks(self, phase, z, problem, method, following=()) -> bool | None:
        """Apply a whole-block phase (a decentralized mixing step, see
        :mod:`stochmix.engine.model.blockwise`) to this rank's rows, as the NumPy backend applies
        it to all of them: each product ``W @ S`` as this rank's rows of ``W`` times its
        rows of S and the halo rows it receives (:class:`HaloPlan`), the other terms row by
        row, gradients for its own nodes. Returns False if a new entry is not finite, None
        when the phase is not a whole-block phase over blocks of one row per client (the
        general path then).

        One exchange carries the halos of every product of the phase and of the
        ``following`` phases of the round (the rest of the plan) that can be fetched now:
        those of the whole-block phases up to the first other item, whose source blocks
        no phase before them rewrites (gradient tracking's two products a round, x's and
        y's, move in one exchange)."""
        local, mixed = self._form_of(phase)
        if local is None:
            return None
        halos = self.halos  # (id(matrix), source) -> [rows, phases still to read them]
        if self.backend.size > 1 and any(m.key not in halos for m in mixed):
            ahead = [*mixed, *self._ahead(local, following)]
            wanted = [m for m in ahead if m.key not in halos]
            got = self._exchange(wanted, z)
            for m in wanted:
                halos.setdefault(m.key, [got[m.key], 0])[1] += 1
        plans = {id(m.matrix): m.plan for m in mixed}
        grads = None
        if local.clients is not None:
            grads = self._gradients(local.clients, z, problem, method)

        def product(term, state):
            own = state[term.rows]
            plan = plans[id(term.matrix)]
            if not plan.rows:
                return plan.local @ own
            return plan.local @ np.concatenate((own, halos[id(term.matrix), term.source][0]))

        finite = apply_blockwise_numpy(z, local, grads, product)
        for m in mixed:  # read: dropped once every phase counted on it has read it
            entry = halos.get(m.key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del halos[m.key]
        return finite

    def _form_of(self, phase) -> tuple:
        """:meth:`_local_form` of ``phase``'s whole-block form, kept per phase object."""
        found = self.forms.get(phase)
        if found is None:
            form = phase.blockwise if isinstance(phase, Phase) else None
            found = self.forms.put(phase, self._local_form(form))
        return found

    def _ahead(self, local, following) -> list:
        """The products (:class:`_Mixed`) of the whole-block phases among ``following``
        (up to the first other item) whose source blocks neither ``local`` nor a phase
        between rewrites: their halos hold now what those phases will read."""
        from ...plan.round_plan import LocalStep

        written = {t.block for t in local.targets}
        ahead = []
        for item in following:
            if isinstance(item, LocalStep) or type(item) is not Phase:
                break
            form, mixed = self._form_of(item)
            if form is None:
                break
            ahead += [m for m in mixed if m.source not in written]
            written |= {t.block for t in form.targets}
        return ahead

    def _local_form(self, form) -> tuple:
        """``form`` on this rank's rows (targets, sources and per-row coefficients cut to
        its nodes), with the products' matrices, plans and sources (:class:`_Mixed`, one
        per distinct pair); (None, ()) when the form is not one this shard can run
        (blocks other than one row per client, or gradients of clients other than the
        target rows' own nodes)."""
        if form is None:
            return None, ()
        blocks = self.node_blocks
        used = {t.block for t in form.targets} | {
            term.source for t in form.targets for term in t.terms if term.source is not None
        }
        clients = form.clients
        if not used <= blocks.keys() or (
            clients is not None and not (form.consecutive and int(clients[0]) == 0)
        ):
            return None, ()
        lo, hi = self.lo, self.hi
        mixed, targets = {}, {}
        for target in form.targets:
            terms = []
            for term in target.terms:
                rows = None if term.source is None else blocks[term.source]
                coef = term.coef[lo:hi] if np.ndim(term.coef) else term.coef
                terms.append(replace(term, rows=rows, coef=coef))
                if term.kind == "mix":
                    assert rows is not None  # a product reads a source block
                    key = (id(term.matrix), term.source)
                    if key not in mixed:
                        plan = self._plan(term.matrix)
                        mixed[key] = _Mixed(term.matrix, plan, term.source, rows)
            targets[target.block] = BlockTarget(target.block, blocks[target.block], tuple(terms))
        local = BlockwiseForm(
            tuple(targets[t.block] for t in form.targets),
            None if clients is None else clients[lo:hi],
            form.consecutive,
            tuple((targets[t.block], direct, check) for t, direct, check in form.order),
        )
        return local, tuple(mixed.values())

    def _plan(self, matrix) -> HaloPlan:
        """The halo plan of ``matrix``, made once per distinct matrix (by identity: a
        static or periodic graph sequence hands the same matrix back every time)."""
        plan = self.plans.get(matrix)
        if plan is None:
            if matrix.shape != (self.n, self.n):
                raise ValueError(
                    f"distributed: a mixing matrix of shape {matrix.shape} over blocks of "
                    f"{self.n} nodes"
                )
            plan = self.plans.put(matrix, halo_plan(matrix, self.lo, self.hi, self.client_rank))
            self.plans_built += 1
        return plan

    def _exchange(self, mixed: Sequence[_Mixed], z) -> dict:
        """The halo rows of every product (:class:`_Mixed`) from the ranks that hold them:
        one message per pair of ranks, carrying the rows of every product. Returns
        ``(id(matrix), source) -> (h, d)`` rows in the order of ``plan.halo``."""
        back = self.backend
        if back.size == 1 or not mixed:
            return {}
        mixed = tuple({m.key: m for m in mixed}.values())
        d = z.shape[1]
        outgoing, incoming = [], np.zeros(back.size, dtype=np.int64)
        for q in range(back.size):
            rows = [m.rows.start + m.plan.send[q] for m in mixed if m.plan.send[q].size]
            outgoing.append(z[np.concatenate(rows)] if rows else None)
            incoming[q] = sum(int(m.plan.receive[q]) for m in mixed)
        got = back.exchange(outgoing, incoming, d, z.dtype)
        halos, at = {}, np.zeros(back.size, dtype=np.int64)
        for m in mixed:
            pieces = []
            for q in np.flatnonzero(m.plan.receive).tolist():
                count = int(m.plan.receive[q])
                pieces.append(got[q][at[q] : at[q] + count])
                at[q] += count
            halos[id(m.matrix), m.source] = (
                np.concatenate(pieces) if pieces else np.zeros((0, d), dtype=z.dtype)
            )
        return halos

    def _gradients(self, clients, z, problem, method):
        """The gradients of this rank's ``clients`` (its own nodes, in order) at the
        method's points, as :func:`~stochmix.engine.backends.dispatch._apply_blockwise`
        takes them."""
        from ...plan.gradients import gradients_at as _gradients_at

        if model_points(method):
            model = self.node_blocks[method.model_block]
            return _gradients_at(problem, clients, z[model])
        if self.local_ctx is None:
            raise NotImplementedError(
                f"distributed: {type(method).__name__} takes gradients at its own points "
                "(Method.points overridden) over blocks that are not one row per node"
            )
        local = np.arange(self.hi - self.lo)
        return _gradients_at(problem, clients, method.points(z, self.local_ctx, local))

    # ------------------------------------------------------------------ general phases
    def general(self, phase, z, problem, method, ctx) -> bool:
        """``z[rows] <- mix @ z + inject @ G`` for the rows this rank holds, with the
        client rows read from other shards gathered first."""
        back = self.backend
        rows = np.asarray(phase.rows, dtype=np.int64)
        row_own = self.owner(rows)
        held = np.flatnonzero((row_own == -1) | (row_own == back.rank))
        mix = phase.mix.tocsr()
        clients = np.asarray(phase.clients, dtype=np.int64)
        points_rows = np.zeros(0, dtype=np.int64)
        if clients.size:
            if not model_points(method):
                raise NotImplementedError(
                    f"distributed: {type(method).__name__} takes gradients at its own points "
                    "(Method.points overridden); not supported yet"
                )
            points_rows = ctx.layout.rows(method.model_block, clients + method.client_node)
        # the client rows some rank reads but does not hold: gathered for everyone
        entry_row = np.repeat(row_own, np.diff(mix.indptr))
        col_own = self.owner(mix.indices)
        need = (col_own >= 0) & ((entry_row == -1) | (entry_row != col_own))
        wanted = np.union1d(mix.indices[need], points_rows[self.owner(points_rows) >= 0])
        fetched = self._fetch(wanted, z) if back.size > 1 else None

        def values(global_rows):
            return self.values(global_rows, z, wanted, fetched)

        sub = mix if held.size == rows.size else mix[held]
        cols = np.unique(sub.indices)
        compact = sp.csr_matrix(
            (sub.data, np.searchsorted(cols, sub.indices), sub.indptr),
            shape=(held.size, cols.size),
        )
        new = compact @ values(cols)
        if phase.inject is not None and clients.size:
            points = values(points_rows)
            if phase.samples is not None:
                grads = sampled_gradients_at(problem, clients, points, phase.samples)
            else:
                grads = problem.gradients(clients, points)
            inject = phase.inject if held.size == rows.size else phase.inject.tocsr()[held]
            new += inject @ grads
        new = np.asarray(new).astype(z.dtype, copy=False)
        z[self.local(rows[held])] = new
        return bool(np.isfinite(new.sum()))

    def values(self, global_rows, z, wanted: np.ndarray, fetched) -> np.ndarray:
        """The values of global rows ``global_rows``: from this rank's state where it
        holds them, else from ``fetched`` (:meth:`_fetch` of the sorted ``wanted``)."""
        global_rows = np.asarray(global_rows, dtype=np.int64)
        out = np.empty((global_rows.size, z.shape[1]), dtype=z.dtype)
        own = self.owner(global_rows)
        here = (own == -1) | (own == self.backend.rank)
        out[here] = z[self.local(global_rows[here])]
        if (~here).any():
            out[~here] = fetched[np.searchsorted(wanted, global_rows[~here])]
        return out

    def _fetch(self, wanted: np.ndarray, z) -> np.ndarray:
        """The values of global client rows ``wanted`` (sorted), gathered from their
        owners."""
        back = self.backend
        own = self.owner(wanted)
        counts = np.bincount(own, minlength=back.size) if wanted.size else np.zeros(back.size, int)
        out = np.empty((wanted.size, z.shape[1]), dtype=z.dtype)
        if not wanted.size:
            return out
        padded = np.zeros((int(counts.max()), z.shape[1]), dtype=z.dtype)
        mine = wanted[own == back.rank]
        padded[: mine.size] = z[self.local(mine)]
        for r, piece in enumerate(back.all_gather(padded, "rows")):
            out[own == r] = piece[: counts[r]]
        return out
