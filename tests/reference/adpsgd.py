"""AD-PSGD written per node, from the paper (no engine).

X. Lian, W. Zhang, C. Zhang, J. Liu, "Asynchronous decentralized parallel stochastic
gradient descent", ICML 2018 (arXiv:1710.06952), Algorithm 1: iteration k picks a worker
i_k and an averaging matrix W_k that may depend on it (line 2); i_k computes a gradient at
the model it read (lines 3-4); the models are averaged with W_k (line 5); the gradient,
times the step, is taken off i_k's averaged model only (line 6). With W_k the average of
i_k and one neighbour j (the paper's implementation), one tick is

    g = grad F_i(x_i)                  (read before the average: zero delay)
    x_i <- (x_i + x_j) / 2 - a_k g,    x_j <- (x_i + x_j) / 2,    others unchanged,

a_k = lr / (k + 1)^decay. ``mixing="weights"``: x_i <- (1 - W[i, j]) x_i + W[i, j] x_j and
x_j <- (1 - W[j, i]) x_j + W[j, i] x_i, with W = graphs.matrix(k, rule).

Tick k is the k-th record of ``RandomEdge(...).activations(seed)`` (its sorted ``nodes``
[a, b] are the edge), and its initiator is ``nodes[c_k]`` for the coin ``c_k`` that
:mod:`stochmix.algorithms.adpsgd` documents, derived here from the run's integer seed s
with NumPy alone: block ``k // 4096`` of ``default_rng(SeedSequence(s, spawn_key=(crc32(
b"AD-PSGD initiator"), k // 4096))).integers(0, 2, size=4096)``, entry ``k % 4096``.
"""

import zlib

import numpy as np

from tests.reference.decentralized import _grad, _mean, start

STREAM = zlib.crc32(b"AD-PSGD initiator")


def coins(seed: int, ticks: int) -> np.ndarray:
    """The initiator coins of ticks 0..ticks-1 for the integer run seed ``seed``."""
    out = []
    for block in range((ticks + 4095) // 4096):
        ss = np.random.SeedSequence(seed, spawn_key=(STREAM, block))
        out.append(np.random.default_rng(ss).integers(0, 2, size=4096))
    return np.concatenate(out)[:ticks] if out else np.zeros(0, dtype=np.int64)


def initiators(records, seed: int) -> list[tuple[int, int]]:
    """(initiator, peer) of each record, for the run seed ``seed``."""
    c = coins(seed, len(records))
    pairs = []
    for k, record in enumerate(records):
        a, b = (int(v) for v in record.nodes)
        pairs.append((a, b) if c[k] == 0 else (b, a))
    return pairs


def adpsgd(problem, records, seed, x0, lr, decay=0.0, graphs=None, rule="metropolis",
           mixing="pairwise"):  # fmt: skip
    """AD-PSGD over the ticks ``records`` of a run with seed ``seed``.

    Returns ``(means, nodes, pairs)``: the mean of the node models after each tick, shape
    (ticks + 1, d) (row 0 the start), every node's model after the last tick (n, d), and
    the (initiator, peer) of each tick."""
    n = problem.n_clients
    x = start(x0, n)
    pairs = initiators(records, seed)
    history = [_mean(x)]
    for k, (i, j) in enumerate(pairs):
        g = _grad(problem, i, x[i])  # at the initiator's model before the average
        if mixing == "weights":
            w = graphs.matrix(k, rule).toarray()
            wi, wj = w[i, j], w[j, i]
        else:
            wi = wj = 0.5
        new_i = (1.0 - wi) * x[i] + wi * x[j] - lr / (k + 1) ** decay * g
        new_j = (1.0 - wj) * x[j] + wj * x[i]
        x[i], x[j] = new_i, new_j
        history.append(_mean(x))
    return np.array(history), np.array(x), pairs
