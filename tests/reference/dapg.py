"""DAPG (H. Ye, Z. Zhou, L. Luo and T. Zhang, "Decentralized accelerated proximal gradient
descent", NeurIPS 2020, Algorithm 1 with its FastMix subroutine) written per node: plain
Python loops over nodes and gossip rounds, NumPy float64 only, nothing from the library's
mixing or engine. Iteration t = 0, 1, ... uses W_t = graphs.matrix(t, rule) where the paper
writes W; W_t[i, j] is the weight node i gives to what it receives from node j.

FastMix(u, K) with momentum e, as each node runs it (u_i^{(-1)} = u_i^{(0)} = u_i):

  u_i^{(k+1)} = (1 + e) sum_j W[i, j] u_j^{(k)} - e u_i^{(k-1)},   k = 0, ..., K - 1,

and returns u^{(K)}. The default e = (1 - sqrt(1 - lam^2)) / (1 + sqrt(1 - lam^2)), lam the
second-largest eigenvalue modulus of W (from numpy.linalg.eigvalsh of the dense W).

DAPG, each node i keeping x_i, y_i, s_i and its last gradient, started at
x_i^0 = y_i^0 = x0 (row i of a per-node x0) and s_i^0 = grad f_i(y_i^0); b the momentum:

  v_i^t     = prox_{eta r}(y_i^t - eta s_i^t)            (v_i^t = y_i^t - eta s_i^t if r = 0)
  x^{t+1}   = FastMix(v^t, K)
  y_i^{t+1} = x_i^{t+1} + b (x_i^{t+1} - x_i^t)
  s^{t+1}   = FastMix(s^t, K) + (grad f_i(y_i^{t+1}) - grad f_i(y_i^t))_i

with b = (1 - a) / (1 + a), a = sqrt(mu eta), in the paper's tuning (eta = 1/L). Returns
the list [x^0, ..., x^T] of (n, d) arrays, row i node i's x.

Source: the stored copies of the paper that could be searched gave its abstract and
introduction only, not the algorithm box; the updates above are written from knowledge of
the paper (Mudag's recursion, the same authors', with the prox taken at each node on the
descended point before the multi-consensus step).
"""

import numpy as np


def fastmix_eta(w):
    """FastMix's default momentum from the dense symmetric W's eigenvalues."""
    values = np.linalg.eigvalsh(w)  # ascending; the last is 1
    lam = max(values[-2], -values[0])
    root = np.sqrt(1.0 - lam**2)
    return (1.0 - root) / (1.0 + root)


def fastmix(w, vectors, rounds, eta):
    """K rounds of FastMix over W, node by node; ``vectors`` a list of n 1-d arrays."""
    n = len(vectors)
    previous = [u.copy() for u in vectors]
    current = [u.copy() for u in vectors]
    for _ in range(rounds):
        mixed = []
        for i in range(n):
            total = np.zeros_like(current[0])
            for j in range(n):
                if w[i, j] != 0.0:
                    total = total + w[i, j] * current[j]
            mixed.append((1.0 + eta) * total - eta * previous[i])
        previous, current = current, mixed
    return current


def dapg(grad, prox, graphs, x0, lr, momentum, rounds, iterations, eta=None, rule="metropolis"):
    """The DAPG iterates [x^0, ..., x^T] (see the module docstring).

    ``grad(i, x)`` is grad f_i(x); ``prox(v, t)`` is prox_{t r}(v) for a 1-d v, or None for
    r = 0; ``eta`` FastMix's momentum (None: the default from each W_t's spectrum)."""
    x0 = np.asarray(x0, dtype=float)
    n = x0.shape[0]
    x = [x0[i].copy() for i in range(n)]
    y = [x0[i].copy() for i in range(n)]
    grads = [grad(i, y[i]) for i in range(n)]
    s = [g.copy() for g in grads]
    b = momentum
    history = [np.array(x)]
    for t in range(iterations):
        w = graphs.matrix(t, rule).toarray()
        e = fastmix_eta(w) if eta is None else eta
        v = []
        for i in range(n):
            point = y[i] - lr * s[i]
            v.append(point if prox is None else prox(point, lr))
        new_x = fastmix(w, v, rounds, e)
        y = [new_x[i] + b * (new_x[i] - x[i]) for i in range(n)]
        x = new_x
        mixed = fastmix(w, s, rounds, e)
        new_grads = [grad(i, y[i]) for i in range(n)]
        s = [mixed[i] + new_grads[i] - grads[i] for i in range(n)]
        grads = new_grads
        history.append(np.array(x))
    return history
