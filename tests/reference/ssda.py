"""SSDA and MSDA written per node from the pseudo-code of Scaman, Bach, Bubeck, Lee and
Massoulié, "Optimal algorithms for smooth and strongly convex distributed optimization in
networks" (ICML 2017, arXiv:1702.08704): Algorithm 1 (SSDA) and Algorithm 2 with its
procedure ACCELERATED_GOSSIP (MSDA). Plain loops over nodes; node i's vectors in lists.

The paper's gossip matrix is G = I - W, W = graphs.matrix(0, rule) (a fixed graph); its
spectrum is read with numpy.linalg.eigvalsh: lambda_1 = the largest eigenvalue,
lambda_{n-1} = the second smallest, gamma = lambda_{n-1} / lambda_1. f_i(theta) = 1/2
theta^T H_i theta - c_i^T theta (H_i, c_i from ``hessians_and_linear_terms``), alpha =
min_i lambda_min(H_i), beta = max_i lambda_max(H_i), kappa_l = beta / alpha, and
grad f_i^*(x) = the solution theta of H_i theta = x + c_i (numpy.linalg.solve per node).

- SSDA (Algorithm 1): eta = alpha / lambda_1, mu = (sqrt(kappa_l) - sqrt(gamma)) /
  (sqrt(kappa_l) + sqrt(gamma)); x_0 = y_0 = 0; for k: theta_{i,k} = grad f_i^*(x_{i,k});
  y_{i,k+1} = x_{i,k} - eta sum_j G[i, j] theta_{j,k};
  x_{i,k+1} = (1 + mu) y_{i,k+1} - mu y_{i,k}.
- MSDA (Algorithm 2): c_1 = (1 - sqrt(gamma)) / (1 + sqrt(gamma)), c_2 = (1 + gamma) /
  (1 - gamma), c_3 = 2 / ((1 + gamma) lambda_1), K = floor(1 / sqrt(gamma)), eta = alpha (1 +
  c_1^{2K}) / (1 + c_1^K)^2, mu = ((1 + c_1^K) sqrt(kappa_l) - 1 + c_1^K) / ((1 + c_1^K)
  sqrt(kappa_l) + 1 - c_1^K); the same loop with sum_j G[i, j] theta_j replaced by
  ACCELERATED_GOSSIP(theta, G, K): a_0 = 1, a_1 = c_2, x_0 = theta, x_1 = c_2 (I - c_3 G)
  theta, a_{k+1} = 2 c_2 a_k - a_{k-1}, x_{k+1} = 2 c_2 (I - c_3 G) x_k - x_{k-1}; returns
  x_0 - x_K / a_K.

Each function returns the mean over nodes of theta after each iteration (theta_{k+1} =
grad f^*(x_{k+1}) after iteration k), shape (iterations + 1, dim), row 0 = x0.

Source (issue 43): only the paper's abstract could be read in stored copies. Checked
otherwise: ACCELERATED_GOSSIP as written here (a_0, a_1, x_0, x_1, the three-term
recurrence, x_0 - x_K / a_K) is what two public third-party implementations run; and
MSDA's defaults are SSDA's on P_K = I - T_K(c_2 (I - c_3 G)) / T_K(c_2) with P_K's
spectrum bounded as T_K allows: eta = alpha over the bound (1 + c_1^K)^2 / (1 + c_1^{2K})
on lambda_1(P_K), mu SSDA's momentum with the bound gamma_K = ((1 - c_1^K) / (1 +
c_1^K))^2 on P_K's eigengap (both bounds hold on rings of 8, 13 and 20 nodes, checked
numerically for issue 43).
"""

import math

import numpy as np


def _local(problem):
    h, c = problem.hessians_and_linear_terms()
    eig = [np.linalg.eigvalsh(h[i]) for i in range(problem.n_clients)]
    alpha = min(e[0] for e in eig)
    beta = max(e[-1] for e in eig)
    return h, c, alpha, beta


def _gossip(graphs, rule):
    w = graphs.matrix(0, rule).toarray()
    g = np.eye(w.shape[0]) - w
    eig = np.linalg.eigvalsh(g)
    return g, eig[-1], eig[1] / eig[-1]


def _apply(matrix, values):
    n = len(values)
    out = []
    for i in range(n):
        total = np.zeros_like(values[0])
        for j in range(n):
            total = total + matrix[i, j] * values[j]
        out.append(total)
    return out


def _conjugates(h, c, x):
    return [np.linalg.solve(h[i], x[i] + c[i]) for i in range(len(x))]


def _accelerated_gossip(values, g, steps, c2, c3):
    n = len(values)
    s = np.eye(n) - c3 * g
    a_prev, a = 1.0, c2
    x_prev = list(values)
    x = [c2 * v for v in _apply(s, values)]
    for _ in range(1, steps):
        mixed = _apply(s, x)
        x_next = [2.0 * c2 * mixed[i] - x_prev[i] for i in range(n)]
        a_prev, a = a, 2.0 * c2 * a - a_prev
        x_prev, x = x, x_next
    return [values[i] - x[i] / a for i in range(n)]


def _dual_loop(problem, x0, iterations, eta, mu, gossip):
    n, d = problem.n_clients, problem.dim
    h, c, _, _ = _local(problem)
    x = [np.zeros(d) for _ in range(n)]
    y = [np.zeros(d) for _ in range(n)]
    history = [np.broadcast_to(np.asarray(x0, dtype=float), (n, d)).mean(axis=0)]
    for _ in range(iterations):
        theta = _conjugates(h, c, x)
        mixed = gossip(theta)
        y_next = [x[i] - eta * mixed[i] for i in range(n)]
        x = [(1.0 + mu) * y_next[i] - mu * y[i] for i in range(n)]
        y = y_next
        history.append(np.mean(_conjugates(h, c, x), axis=0))
    return np.array(history)


def ssda(problem, graphs, iterations, x0, rule="metropolis"):
    _, _, alpha, beta = _local(problem)
    g, top, gap = _gossip(graphs, rule)
    kappa = beta / alpha
    eta = alpha / top
    mu = (math.sqrt(kappa) - math.sqrt(gap)) / (math.sqrt(kappa) + math.sqrt(gap))
    return _dual_loop(problem, x0, iterations, eta, mu, lambda theta: _apply(g, theta))


def msda(problem, graphs, iterations, x0, rule="metropolis", steps=None):
    _, _, alpha, beta = _local(problem)
    g, top, gap = _gossip(graphs, rule)
    kappa = beta / alpha
    c1 = (1.0 - math.sqrt(gap)) / (1.0 + math.sqrt(gap))
    c2 = (1.0 + gap) / (1.0 - gap)
    c3 = 2.0 / ((1.0 + gap) * top)
    k = steps if steps is not None else math.floor(1.0 / math.sqrt(gap))
    eta = alpha * (1.0 + c1 ** (2 * k)) / (1.0 + c1**k) ** 2
    mu = ((1.0 + c1**k) * math.sqrt(kappa) - 1.0 + c1**k) / (
        (1.0 + c1**k) * math.sqrt(kappa) + 1.0 - c1**k
    )
    return _dual_loop(
        problem, x0, iterations, eta, mu, lambda theta: _accelerated_gossip(theta, g, k, c2, c3)
    )
