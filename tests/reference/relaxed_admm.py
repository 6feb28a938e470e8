"""The local-training ADMM family written per node / per client with plain loops, from the
papers' update rules (not from the engine's node-sum form).

Relaxed ADMM (R-ADMM)
---------------------
N. Bastianello, R. Carli, L. Schenato, M. Todescato, "Asynchronous distributed optimization
over lossy networks via relaxed ADMM: stability and linear convergence", IEEE TAC 66(6),
2021 (arXiv:1901.09252), the distributed R-ADMM of Section III. Node i keeps one vector
z_ij per neighbour j (a dict keyed by the directed edge (i, j)); d_i = |N_i|. Iteration k:

    x_i^{k+1} = argmin_x f_i(x) - <sum_{j in N_i} z_ij^k, x> + rho d_i / 2 ||x||^2
    node j sends q_{j->i} = -z_ji^k + 2 rho x_j^{k+1} to each neighbour i;
    z_ij^{k+1} = (1 - alpha) z_ij^k + alpha q_{j->i}        (if the packet arrives)
    z_ij^{k+1} = z_ij^k                                       (if it is lost)

z_ij^0 = 0. ``received[k][(i, j)]`` (optional) says whether the packet j -> i of
iteration k arrives (the paper's lossy network); without it every packet arrives. The
exact argmin uses the node's affine gradient grad f_i(x) = H_i x - c_i, recovered here
column by column from gradients at 0 and at the unit vectors (no library solver). With
``local_steps`` K and ``local_lr`` gamma instead, the argmin is replaced by K gradient
steps on the same local problem from x_i^k:

    x <- x - gamma (grad f_i(x) + rho d_i x - sum_{j in N_i} z_ij^k).

LT-ADMM
-------
X. Ren, N. Bastianello, K. H. Johansson, T. Parisini, "Communication-efficient stochastic
distributed learning", arXiv:2501.13516, 2025 (LT-ADMM, Algorithm 1, full local
gradients): tau local steps phi <- phi - gamma grad f_i(phi) - beta (rho d_i x_i^k -
sum_j z_ij^k) from phi = x_i^k, the penalty's gradient frozen at the round's start and
scaled by its own step beta, x_i^{k+1} = phi, then z_ij^{k+1} = (1 - alpha) z_ij^k +
alpha (-z_ji^k + 2 rho x_j^{k+1}), alpha = 1/2 by default; with tau = 1 and beta = gamma
it is the relaxed ADMM above with the gradient solver. The paper's full text could not be
read here; the frozen form with the two steps is that of decent-bench's ``LT_ADMM``
(commit ad39310, whose comments cite Algorithm 1's lines and whose history includes
commits by the paper's second author). Another third-party summary (an optimizer zoo's
documentation) writes the penalty at phi with the one step gamma. (That summary also
writes the last term as -2 rho x_j; with that sign the minimiser is not a fixed
point -- summing the fixed-point conditions gives sum_i grad f_i = -4 rho |E| x -- so the
+ sign, which is R-ADMM's, is the one written here.)

Fed-LT
------
N. Bastianello, C. Liu, K. H. Johansson, "Enhancing privacy in federated learning through
local training", arXiv:2403.17572, 2024: the paper names its method Fed-PLT; without the
privacy noise of its local solver it is the local-training PRS written here (called Fed-LT
in the library). Only the abstract could be read here, so the rules are written from the
Peaceman-Rachford splitting of min sum_i f_i(x_i) s.t. x_i = y that the paper builds on,
and checked by the fixed-point argument in the test (the minimiser is the fixed point).
Server y, client i keeps x_i and z_i (x_i^0 = z_i^0 = x0). Round k with active set S_k:

    y^{k+1} = 1/N sum_{i=1..N} z_i^k                        (every client's z)
    for i in S_k: K steps  x_i <- x_i - gamma (grad f_i(x_i) + (x_i - (2 y^{k+1} - z_i^k)) / rho)
                  (from x_i^k: approximately prox_{rho f_i}(2 y^{k+1} - z_i^k))
                  z_i^{k+1} = z_i^k + 2 alpha (x_i^{k+1} - y^{k+1})
    for i not in S_k: x_i, z_i unchanged.

alpha = 1 is the Peaceman-Rachford step z + 2 (x - y) (the paper's); alpha < 1 relaxes it.
Returned: y^0 = x0, y^1, ..., one per round.
"""

import numpy as np

from tests.reference.decentralized import _grad, start


def _neighbours(graphs):
    """Each node's neighbours in the (symmetrised) graph of step 0, sorted."""
    a = graphs.adjacency(0).toarray()
    a = (a + a.T) > 0
    np.fill_diagonal(a, False)
    return [list(np.flatnonzero(a[i])) for i in range(a.shape[0])]


def _affine(problem, i, d):
    """(H_i, c_i) with grad f_i(x) = H_i x - c_i, from d + 1 gradients."""
    at_zero = _grad(problem, i, np.zeros(d))
    h = np.column_stack([_grad(problem, i, np.eye(d)[k]) - at_zero for k in range(d)])
    return h, -at_zero


def relaxed_admm(
    problem,
    graphs,
    iterations,
    x0,
    rho,
    alpha,
    local_lr=None,
    local_steps=1,
    received=None,
):
    """R-ADMM in edge variables; exact local solves when ``local_lr`` is None, else
    ``local_steps`` gradient steps of size ``local_lr``. Returns the mean over nodes of x
    after each iteration, shape (iterations + 1, d), row 0 the start."""
    n = problem.n_clients
    x = start(x0, n)
    d = x[0].size
    nbrs = _neighbours(graphs)
    z = {(i, j): np.zeros(d) for i in range(n) for j in nbrs[i]}
    history = [sum(x) / n]
    for k in range(iterations):
        new = []
        for i in range(n):
            pull = sum((z[(i, j)] for j in nbrs[i]), np.zeros(d))
            deg = len(nbrs[i])
            if local_lr is None:
                h, c = _affine(problem, i, d)
                new.append(np.linalg.solve(h + rho * deg * np.eye(d), c + pull))
            else:
                y = x[i].copy()
                for _ in range(local_steps):
                    y = y - local_lr * (_grad(problem, i, y) + rho * deg * y - pull)
                new.append(y)
        x = new
        updated = {}
        for (i, j), value in z.items():
            packet = -z[(j, i)] + 2.0 * rho * x[j]  # what node j sends to node i
            arrives = True if received is None else bool(received[k][(i, j)])
            updated[(i, j)] = (1.0 - alpha) * value + alpha * packet if arrives else value
        z = updated
        history.append(sum(x) / n)
    return np.array(history)


def lt_admm(problem, graphs, iterations, x0, lr, rho, local_steps, aux_lr=None, alpha=0.5):
    """LT-ADMM with full local gradients (Ren, Bastianello, Johansson & Parisini, Algorithm
    1 as decent-bench, co-written by the paper's second author, runs it): tau local steps
    phi <- phi - gamma grad f_i(phi) - beta (rho d_i x_i^k - sum_j z_ij^k) from x_i^k (the
    penalty's gradient frozen at the round's start), then the relaxed z update of R-ADMM;
    z_ij^0 = 0. Returns the mean over nodes of x after each iteration."""
    beta = lr if aux_lr is None else aux_lr
    n = problem.n_clients
    x = start(x0, n)
    d = x[0].size
    nbrs = _neighbours(graphs)
    z = {(i, j): np.zeros(d) for i in range(n) for j in nbrs[i]}
    history = [sum(x) / n]
    for _ in range(iterations):
        new = []
        for i in range(n):
            pull = sum((z[(i, j)] for j in nbrs[i]), np.zeros(d))
            frozen = rho * len(nbrs[i]) * x[i] - pull
            phi = x[i].copy()
            for _ in range(local_steps):
                phi = phi - lr * _grad(problem, i, phi) - beta * frozen
            new.append(phi)
        x = new
        z = {
            (i, j): (1.0 - alpha) * value + alpha * (-z[(j, i)] + 2.0 * rho * x[j])
            for (i, j), value in z.items()
        }
        history.append(sum(x) / n)
    return np.array(history)


def fed_lt(problem, masks, x0, lr, local_steps, rho, alpha):
    """Fed-LT (see the module docstring); ``masks`` (rounds, N) booleans, the active
    clients of each round. Returns y after each round, shape (rounds + 1, d)."""
    n = problem.n_clients
    x = start(x0, n)
    z = start(x0, n)
    history = [np.asarray(x0, dtype=float).copy()]
    for mask in masks:
        y = sum(z) / n
        for i in range(n):
            if not mask[i]:
                continue
            target = 2.0 * y - z[i]
            w = x[i].copy()
            for _ in range(local_steps):
                w = w - lr * (_grad(problem, i, w) + (w - target) / rho)
            x[i] = w
            z[i] = z[i] + 2.0 * alpha * (w - y)
        history.append(y.copy())
    return np.array(history)
