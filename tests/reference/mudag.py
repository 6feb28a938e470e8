"""Mudag (Ye, Luo, Zhou & Zhang, "Multi-consensus decentralized accelerated gradient
descent", JMLR 24, 2023, arXiv:2005.00797) written per node from the paper's Algorithm 1
(Mudag) and its FastMix procedure. Iteration t = 0, 1, ... uses W_t = graphs.matrix(t,
rule) where the paper writes W; W_t[i, j] is the weight node i gives to what it receives
from node j.

FastMix(z, K) over W, per node, K rounds of messages (z^{-1} = z^0):

  z_i^{j+1} = (1 + eta_w) sum_l W[i, l] z_l^j - eta_w z_i^{j-1},   j = 0, ..., K - 1,

with eta_w = (1 - sqrt(1 - lam^2)) / (1 + sqrt(1 - lam^2)) and lam W's second-largest
eigenvalue modulus (the paper's lambda_2(W) for W positive semidefinite), unless given.

Mudag, every node i started at x_i^0 = y_i^0 = x0 (row i of a per-node x0) and
s_i^0 = grad F_i(y_i^0), beta = (1 - alpha) / (1 + alpha), alpha = sqrt(mu eta):

  x^{t+1} = FastMix(y^t - eta s^t, K)
  y_i^{t+1} = x_i^{t+1} + beta (x_i^{t+1} - x_i^t)
  s^{t+1} = FastMix(s^t, K) + grad F(y^{t+1}) - grad F(y^t)      (row i: node i's)

Returns the mean over nodes of x after each iteration, shape (iterations + 1, dim), row 0
the start.

Source (issue 43): the stored copies of the paper give its opening only, not the algorithm
boxes, so the updates above are written from knowledge of the paper. FastMix's momentum
eta_w and its recurrence with z^{-1} = z^0 agree with two public third-party
implementations read for the check (a DeEPCA re-implementation and a Mudag comparison
script); one of them loops k = 0..K (K + 1 products of W), the other K times, so the
count of products per FastMix is not settled by them; here it is K.
"""

import numpy as np

from tests.reference.decentralized import _grad, _mean, _mix, start


def fastmix_momentum(w):
    """FastMix's default eta_w from a dense symmetric W (its eigenvalues by LAPACK)."""
    values = np.linalg.eigvalsh(w)
    lam = max(values[-2], -values[0])
    root = np.sqrt(1.0 - lam**2)
    return (1.0 - root) / (1.0 + root)


def fastmix(w, values, rounds, eta_w):
    """K rounds of the momentum gossip on the per-node vectors ``values``."""
    n = len(values)
    before, now = [v.copy() for v in values], [v.copy() for v in values]
    for _ in range(rounds):
        mixed = _mix(w, now)
        after = [(1.0 + eta_w) * mixed[i] - eta_w * before[i] for i in range(n)]
        before, now = now, after
    return now


def mudag(problem, graphs, iterations, x0, lr, beta, rounds, eta_w=None, rule="metropolis"):
    n = problem.n_clients
    x = start(x0, n)
    y = [xi.copy() for xi in x]
    grads = [_grad(problem, i, y[i]) for i in range(n)]
    s = [gi.copy() for gi in grads]
    history = [_mean(x)]
    for t in range(iterations):
        w = graphs.matrix(t, rule).toarray()
        mix = fastmix_momentum(w) if eta_w is None else eta_w
        new_x = fastmix(w, [y[i] - lr * s[i] for i in range(n)], rounds, mix)
        y = [new_x[i] + beta * (new_x[i] - x[i]) for i in range(n)]
        x = new_x
        new_grads = [_grad(problem, i, y[i]) for i in range(n)]
        mixed_s = fastmix(w, s, rounds, mix)
        s = [mixed_s[i] + new_grads[i] - grads[i] for i in range(n)]
        grads = new_grads
        history.append(_mean(x))
    return np.array(history)
