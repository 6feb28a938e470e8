r"""AD-PSGD: asynchronous decentralized parallel SGD (Lian, Zhang, Zhang & Liu, ICML 2018),
one gossip tick per iteration, the tick's initiator alone taking a gradient.

The paper's Algorithm 1 (its "logical view" of the asynchronous system), in our words:
iteration k draws a worker i_k and a doubly stochastic averaging matrix W_k that may depend
on it (line 2); worker i_k draws a minibatch and computes its stochastic gradient at the
model it read, x̂_k^{i_k}, possibly stale (lines 3-4); the models are averaged with W_k
(line 5); and the gradient, times γ, is subtracted from worker i_k's averaged model only
(line 6). In the practical system W_k averages i_k with one neighbour j it picks: both
take (x_i + x_j) / 2.

Here one iteration is one tick of an edge-gossip process
(:class:`~stochmix.participation.RandomEdge`): its edge ``{i, j}`` is W_k's pair and a
fair coin (below) says which endpoint is the initiator i_k. The gradient is read at the
initiator's model before the averaging (the read of line 4 precedes the average of line 5;
no further delay is simulated: τ_k = 0):

.. math::

    x_i \leftarrow \tfrac12 (x_i + x_j) - a_k \nabla F_i(x_i),\qquad
    x_j \leftarrow \tfrac12 (x_i + x_j),\qquad x_l \text{ unchanged otherwise},

that is ``X <- W_e X - a_k e_i grad F_i(x_i)^T`` with ``W_e = I - (e_i - e_j)(e_i - e_j)^T
/ 2`` and a_k = lr / (k+1)^decay. The step multiplies the initiator's full local gradient
(the engine's ``grad F_i``: a minibatch problem's minibatch), nothing else: one gradient
evaluation per tick. Under ``RandomEdge(..., mixing="weights")`` the pair mixes with the
method's W_k instead: ``x_i <- (1 - w) x_i + w x_j`` and ``x_j <- (1 - w') x_j + w' x_i``
with ``w = W_k[i, j]``, ``w' = W_k[j, i]`` (the same as the edge matrix of every other
decentralized method; doubly stochastic when W_k is symmetric).

**The initiator.** A :class:`~stochmix.participation.RandomEdge` record lists its edge as
``(i, j), (j, i)`` with ``i < j`` whatever was drawn, so the record does not say who
initiated. The initiator of tick k is ``nodes[c_k]`` (``nodes = [i, j]`` sorted) for a
fair coin ``c_k`` drawn from the run's seed::

    root = SeedSequence of the run's seed         (ctx.seed_sequence)
    c_k  = default_rng(SeedSequence(root.entropy,
                spawn_key=(*root.spawn_key, INITIATOR_STREAM, k // 4096))
           ).integers(0, 2, size=4096)[k % 4096]

so the same seed gives the same initiators (a resumed run included), independently of the
edge stream. Worker i then initiates with probability ``p_i = P(i is an endpoint) / 2`` per
tick, and the paper's objective is ``f = sum_i p_i f_i`` (its problem (1): workers weighted
by how often they update): on a regular graph with uniform edges ``p_i = 1/n``, the plain
average; otherwise a weighted one (``RandomEdge.probabilities / 2`` gives the weights).

Cost and compiled segments: a tick is one phase over the two rows of its edge (the
initiator's gradient alone). Under pairwise averaging with a constant step the ticks run
in compiled gossip segments (:mod:`stochmix.engine.runner.segments`), as the other gossip
methods do: a segment's key holds the edge's positions among the tick's nodes, which the
coin does not change, so the coin ``c_k`` (the initiator's place among the sorted
endpoints) is the tick's :meth:`ADPSGD.segment_variants`, and the two kinds of tick (the
smaller or the larger endpoint initiates) get one compiled program each. Where segments
do not run (``mixing="weights"``, a callback, a problem without a compiled gradient, ...)
a tick with a constant step is planned once per (initiator, peer) pair and then reused
(:meth:`ADPSGD.phase_key`); with a decaying step every tick is built in full.

References:
    X. Lian, W. Zhang, C. Zhang and J. Liu, "Asynchronous decentralized parallel stochastic
    gradient descent", ICML 2018 (arXiv:1710.06952), Algorithm 1 and Theorem 1.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from .._validate import choice
from ..engine import Block, RunContext, grad
from ..mixing.rowsparse import RowSparse
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, _step_size

__all__ = ["ADPSGD", "INITIATOR_STREAM", "initiator_coins"]

#: The spawn-key word of the initiators' coins (see the module docstring).
INITIATOR_STREAM = zlib.crc32(b"AD-PSGD initiator")
_COINS = 4096  # coins drawn per generator


def initiator_coins(seed_sequence: np.random.SeedSequence, block: int) -> np.ndarray:
    """The coins of ticks ``4096 * block`` to ``4096 * block + 4095`` of a run whose seed
    has SeedSequence ``seed_sequence``: int64 of shape (4096,), 0 (the smaller endpoint
    initiates) or 1 (the larger); see the module docstring."""
    root = seed_sequence
    key = (*root.spawn_key, INITIATOR_STREAM, int(block))
    rng = np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=key))
    return rng.integers(0, 2, size=_COINS, dtype=np.int64)


class ADPSGD(DecentralizedMethod):
    r"""AD-PSGD (Lian et al. 2018, Algorithm 1): on each gossip tick, edge {i, j} with
    initiator i (a fair coin from the run's seed),

    .. math::

        x_i \leftarrow \tfrac12 (x_i + x_j) - a_k \nabla F_i(x_i^{\text{before}}),\qquad
        x_j \leftarrow \tfrac12 (x_i + x_j),

    a_k = lr / (k+1)^decay, the gradient at the initiator's model before the average (see
    :mod:`stochmix.algorithms.adpsgd` for the paper's lines, the coin and the objective
    ``sum_i p_i f_i`` it minimises). State: one block x of shape (n, d), row i node i's
    model; the reported model is the network average. One tick is one phase over the
    edge's two rows with one gradient (the initiator's): the ``gradients`` column counts
    1 per tick, ``sample_gradients`` the initiator's samples.

    It runs under :class:`~stochmix.participation.RandomEdge` only (one edge per tick, as
    in the paper's one worker per iteration); any other process is refused with a
    ValueError naming ``participation``. ``graphs`` is the sequence whose W_k mixes the
    pair under ``RandomEdge(..., mixing="weights")`` (pairwise averaging ignores it, but
    for the checks); ``rule`` its weight rule, doubly stochastic as the paper asks.

    Args:
        lr: the step γ (> 0).
        graphs: the graph sequence (n nodes, the problem's clients).
        rule: the weight rule of W_k (used under ``mixing="weights"``).
        decay: a_k = lr / (k+1)^decay (0: the constant step of Theorem 1).
        check_mixing: check W_k and that the gossip graph reaches every node.

    References:
        - X. Lian, W. Zhang, C. Zhang and J. Liu, "Asynchronous decentralized parallel
          stochastic gradient descent", ICML 2018 (arXiv:1710.06952), Algorithm 1 and
          Theorem 1.
    """

    name = "AD-PSGD"
    needs = {"rule": "doubly"}
    #: every tick builds the same phase up to its edge and its coin (the coin is the
    #: tick's :meth:`segment_variants`): ticks run in compiled segments
    rounds_repeat = True
    _run_state = DecentralizedMethod._run_state | {"_root", "_coins", "_weights"}

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", decay=0.0, check_mixing=True):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self._root: np.random.SeedSequence | None = None
        self._coins: tuple = (-1, None)  # (block, its coins)
        self._weights = "pairwise"

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model")]

    def check_participation(self, participation) -> None:
        """Refuse any process but :class:`~stochmix.participation.RandomEdge` (AD-PSGD's
        iteration is one worker averaging with one neighbour), then the checks of every
        decentralized method (the gossip graph reaches every node)."""
        from ..participation import RandomEdge

        if not isinstance(participation, RandomEdge):
            raise ValueError(
                f"participation: {self.name} runs one gossip tick per iteration (an "
                "initiator averaging with one neighbour, the initiator alone taking a "
                "gradient), so it needs RandomEdge(graph); got "
                f"{participation!r}"
            )
        super().check_participation(participation)

    def start(self, ctx: RunContext) -> None:
        super().start(ctx)
        self._root = ctx.seed_sequence
        self._coins = (-1, None)
        self._weights = getattr(ctx, "edge_mixing", "pairwise")

    def initiator(self, r: int, nodes: np.ndarray) -> int:
        """The initiator of tick ``r`` whose edge has the sorted endpoints ``nodes``."""
        return int(nodes[self._coin_block(r // _COINS)[r % _COINS]])

    def _pair(self, r: int, participants: np.ndarray, ctx: RunContext) -> tuple[int, int, Any]:
        """(initiator, peer, the record's edges) of tick ``r``."""
        record = getattr(ctx, "activation", None)
        edges = None if record is None else record.edges
        if edges is None or participants.size != 2 or edges.shape[0] != 2:
            raise ValueError(
                f"participation: {self.name} needs one activated edge per tick (RandomEdge); "
                f"round {r} activates nodes {participants.tolist()}"
            )
        i = self.initiator(r, participants)
        return i, int(participants[1] if i == participants[0] else participants[0]), edges

    def phase_key(self, r: int, participants: np.ndarray):
        """``("AD-PSGD", initiator, peer)`` (and the step's position in a periodic
        sequence under ``mixing="weights"``): ticks with equal keys build the same phase;
        None with a decaying step or an aperiodic sequence's weights."""
        if self.decay or participants.size != 2:
            return None
        i = self.initiator(r, participants)
        j = int(participants[1] if i == participants[0] else participants[0])
        if self._weights != "pairwise":
            period = self.graphs.period
            return None if not period else ("AD-PSGD", i, j, r % period)
        return ("AD-PSGD", i, j)

    def segment_variants(self, first: int, nodes: np.ndarray) -> np.ndarray:
        """The coins ``c_k`` of ticks ``first`` to ``first + B - 1`` (``nodes``: their sorted
        endpoints, shape (B, 2)): int64 of shape (B,), the initiator's place among its
        tick's endpoints (0: the smaller). Appended to each tick's segment key, it gives the
        two kinds of tick (whose gradient rows differ) a compiled program each."""
        return self._coin_range(first, nodes.shape[0])

    def _coin_range(self, first: int, count: int) -> np.ndarray:
        """The coins of ticks ``first`` to ``first + count - 1``: int64 of shape (count,)."""
        parts, k, stop = [], int(first), int(first) + int(count)
        while k < stop:
            coins = self._coin_block(k // _COINS)
            end = min(stop, (k // _COINS + 1) * _COINS)
            parts.append(coins[k % _COINS : k % _COINS + end - k])
            k = end
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _coin_block(self, block: int) -> np.ndarray:
        """The coins of block ``block`` (:func:`initiator_coins`), the last one kept."""
        kept, coins = self._coins
        if kept != block or coins is None:
            assert self._root is not None  # set by start
            coins = initiator_coins(self._root, block)
            self._coins = (block, coins)
        return coins

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        i, j, edges = self._pair(r, participants, ctx)
        self._edges = (edges, participants, ctx.edge_mixing)
        pair = self.mixing(r, self.rule)  # W_e: rows i and j (pairwise or W_k's weights)
        rows = pair.values
        at = {int(node): k for k, node in enumerate(pair.rows)}
        n = ctx.n_clients
        row_i = RowSparse(n, np.array([i]), rows[[at[i]]])
        row_j = RowSparse(n, np.array([j]), rows[[at[j]]])
        row_i.reusable = row_j.reusable = False  # made for this tick (plans key the pair)
        eq = self.equations(ctx)
        x = eq.block("x")
        initiator, peer = row_i.rows, row_j.rows
        x[initiator] = row_i @ x - _step_size(self.lr, self.decay, r) * grad(initiator)
        x[peer] = row_j @ x
        phase = eq.build("average, initiator steps")
        # its two sparse rows are the intended path, as for an activated mixing phase
        # (a tick costs its edge, never O(n)): no slow-path note
        phase.row_sparse = True
        return [phase]
