"""APAPC and OPAPC written per node from the pseudo-code of Kovalev, Salim and Richtárik,
"Optimal and practical algorithms for smooth and strongly convex decentralized
optimization" (NeurIPS 2020, arXiv:2006.11773): Algorithm 1 (APAPC) and Algorithm 2
(OPAPC) with its procedure AcceleratedGossip. Plain loops over nodes; node i's vectors in
lists.

The paper's gossip matrix is G = I - W, W = graphs.matrix(0, rule) (a fixed graph), as a
dense array; its spectrum from numpy.linalg.eigvalsh: lambda_max = the largest eigenvalue,
lambda_min^+ = the second smallest, chi = lambda_max / lambda_min^+. L and mu are given
(the tests compute them from the Hessians), kappa = L / mu.

- APAPC (Algorithm 1, Theorem 1's parameters): tau = min(1, sqrt(chi / kappa) / 2),
  eta = 1 / (4 tau L), theta = 1 / (eta lambda_max), alpha = mu; x_f^0 = x^0 = x0, y^0 = 0;
  for k: x_g = tau x + (1 - tau) x_f;
  x_half_i = (x_i - eta (grad f_i(x_g_i) - alpha x_g_i + y_i)) / (1 + eta alpha);
  y_i <- y_i + theta sum_j G[i, j] x_half_j;
  x_new_i = (x_i - eta (grad f_i(x_g_i) - alpha x_g_i + y_i)) / (1 + eta alpha) (new y);
  x_f_i = x_g_i + 2 tau / (2 - tau) (x_new_i - x_i); x = x_new.
- OPAPC (Algorithm 2): T = floor(sqrt(chi)), c_1 = (sqrt(chi) - 1) / (sqrt(chi) + 1),
  c_2 = (chi + 1) / (chi - 1), c_3 = 2 chi / ((1 + chi) lambda_max), tau = min(1, (1 +
  c_1^T) / (2 sqrt(kappa) (1 - c_1^T))), eta = 1 / (4 tau L), theta = (1 + c_1^{2T}) /
  (eta (1 + c_1^T)^2), alpha = mu (eta may be given instead, theta following it); the
  same loop with sum_j G[i, j] x_half_j replaced by
  AcceleratedGossip(G, x_half, T): a_0 = 1, a_1 = c_2, z_0 = x, z_1 = c_2 (I - c_3 G) x,
  a_{t+1} = 2 c_2 a_t - a_{t-1}, z_{t+1} = 2 c_2 (I - c_3 G) z_t - z_{t-1}; returns
  z_0 - z_T / a_T.

Each function returns the mean over nodes of x after each iteration, shape (iterations +
1, dim), row 0 = the mean of x0.
"""

import math

import numpy as np


def _gossip(graphs, rule):
    w = graphs.matrix(0, rule).toarray()
    g = np.eye(w.shape[0]) - w
    eig = np.linalg.eigvalsh(g)
    return g, eig[-1], eig[-1] / eig[1]


def _apply(matrix, values):
    n = len(values)
    out = []
    for i in range(n):
        total = np.zeros_like(values[0])
        for j in range(n):
            total = total + matrix[i, j] * values[j]
        out.append(total)
    return out


def accelerated_gossip(values, g, steps, c2, c3):
    """The paper's AcceleratedGossip(G, x, T): x - z_T / a_T (node by node)."""
    n = len(values)
    s = np.eye(n) - c3 * g
    a_prev, a = 1.0, c2
    z_prev = list(values)
    z = [c2 * v for v in _apply(s, values)]
    for _ in range(1, steps):
        mixed = _apply(s, z)
        z_next = [2.0 * c2 * mixed[i] - z_prev[i] for i in range(n)]
        a_prev, a = a, 2.0 * c2 * a - a_prev
        z_prev, z = z, z_next
    return [values[i] - z[i] / a for i in range(n)]


def _mean(values):
    """What a row of the history holds: the nodes' mean (a test may report every node)."""
    return np.mean(values, axis=0)


def _loop(problem, x0, iterations, tau, eta, theta, alpha, communicate):
    n, d = problem.n_clients, problem.dim
    start = np.broadcast_to(np.asarray(x0, dtype=float), (n, d))
    x = [start[i].copy() for i in range(n)]
    xf = [start[i].copy() for i in range(n)]
    y = [np.zeros(d) for _ in range(n)]
    history = [_mean(x)]
    for _ in range(iterations):
        xg = [tau * x[i] + (1.0 - tau) * xf[i] for i in range(n)]
        grads = [problem.gradients(np.array([i]), xg[i][None, :])[0] for i in range(n)]
        half = [
            (x[i] - eta * (grads[i] - alpha * xg[i] + y[i])) / (1.0 + eta * alpha) for i in range(n)
        ]
        sent = communicate(half)
        y = [y[i] + theta * sent[i] for i in range(n)]
        new = [
            (x[i] - eta * (grads[i] - alpha * xg[i] + y[i])) / (1.0 + eta * alpha) for i in range(n)
        ]
        xf = [xg[i] + 2.0 * tau / (2.0 - tau) * (new[i] - x[i]) for i in range(n)]
        x = new
        history.append(_mean(x))
    return np.array(history)


def apapc(problem, graphs, iterations, x0, L, mu, rule="metropolis", tau=None, eta=None):
    g, top, chi = _gossip(graphs, rule)
    kappa = L / mu
    tau = min(1.0, 0.5 * math.sqrt(chi / kappa)) if tau is None else tau
    eta = 1.0 / (4.0 * tau * L) if eta is None else eta
    theta = 1.0 / (eta * top)
    return _loop(problem, x0, iterations, tau, eta, theta, mu, lambda v: _apply(g, v))


def opapc(problem, graphs, iterations, x0, L, mu, rule="metropolis", steps=None, eta=None):
    g, top, chi = _gossip(graphs, rule)
    kappa = L / mu
    root = math.sqrt(chi)
    steps = math.floor(root) if steps is None else steps
    c1 = (root - 1.0) / (root + 1.0)
    c2 = (chi + 1.0) / (chi - 1.0)
    c3 = 2.0 * chi / ((1.0 + chi) * top)
    tau = min(1.0, (1.0 + c1**steps) / (2.0 * math.sqrt(kappa) * (1.0 - c1**steps)))
    eta = 1.0 / (4.0 * tau * L) if eta is None else eta
    theta = (1.0 + c1 ** (2 * steps)) / (eta * (1.0 + c1**steps) ** 2)
    return _loop(
        problem,
        x0,
        iterations,
        tau,
        eta,
        theta,
        mu,
        lambda v: accelerated_gossip(v, g, steps, c2, c3),
    )
