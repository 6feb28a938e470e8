"""FedNova and FedAvg with uneven local work, written per client.

Reference: J. Wang, Q. Liu, H. Liang, G. Joshi, H. V. Poor, "Tackling the objective
inconsistency problem in heterogeneous federated optimization", NeurIPS 2020
(arXiv:2007.07481).

Conventions used here:

* One iteration is one communication round. ``masks[r]`` (bool, shape (N,)) says who
  takes part in round r; ``steps[r][i]`` is K_i, the number of local gradient steps client
  i takes in that round (entries of clients that do not take part are ignored).
* Local solver: plain gradient steps, x_i <- x_i - lr * grad f_i(x_i), starting from the
  server model x (no momentum, no proximal term). In the paper's notation the local
  update is -lr * G_i a_i with a_i the all-ones vector of length K_i, so ||a_i||_1 = K_i.
* Weights: q_i = 1/|S| over the round's participants S.
* FedNova: normalized update d_i = (x - x_i) / K_i (this is lr times the paper's
  normalized gradient, so ``lr`` multiplies every local gradient and does not appear a
  second time at the server); tau_eff = sum_{i in S} q_i K_i;
  x <- x - server_lr * tau_eff * sum_{i in S} q_i d_i.
* FedAvg with uneven work: x <- x + server_lr * sum_{i in S} q_i (x_i - x).
* A round nobody joins leaves the server model unchanged.

What the paper shows for these two (full participation, small lr): FedAvg, whose update
weighs client i's gradient by about K_i, goes to a stationary point of the surrogate
sum_i p_i K_i f_i / sum_j p_j K_j; FedNova goes to one of the true objective
sum_i p_i f_i. :func:`surrogate_minimizer` gives the minimiser of such a weighted sum for
quadratic clients.
"""

import numpy as np


def _local_sgd(problem, i, x_start, lr, k):
    """Client i's model after k gradient steps from x_start."""
    x = np.array(x_start, dtype=float)
    for _ in range(k):
        x = x - lr * problem.gradients(np.array([i]), x[None, :])[0]
    return x


def _participants(mask, steps, n):
    people = [i for i in range(n) if mask[i]]
    for i in people:
        k = int(steps[i])
        assert k == steps[i] and k >= 1, f"client {i} takes part with K_i = {steps[i]!r}"
    return people


def fednova(problem, masks, steps, x0, lr, server_lr=1.0):
    """Server model after each round, shape (rounds + 1, dim)."""
    n = problem.n_clients
    assert len(masks) == len(steps)
    x_server = np.array(x0, dtype=float)
    history = [x_server.copy()]
    for mask, k_round in zip(masks, steps, strict=True):
        people = _participants(mask, k_round, n)
        if people:
            q = 1.0 / len(people)
            tau_eff = 0.0
            direction = np.zeros_like(x_server)
            for i in people:
                k = int(k_round[i])
                x_i = _local_sgd(problem, i, x_server, lr, k)
                d_i = (x_server - x_i) / k
                tau_eff += q * k
                direction += q * d_i
            x_server = x_server - server_lr * tau_eff * direction
        history.append(x_server.copy())
    return np.array(history)


def fedavg_uneven(problem, masks, steps, x0, lr, server_lr=1.0):
    """FedAvg where client i takes K_i = steps[r][i] local steps in round r; uniform
    weights over the round's participants. Server model after each round, shape
    (rounds + 1, dim)."""
    n = problem.n_clients
    assert len(masks) == len(steps)
    x_server = np.array(x0, dtype=float)
    history = [x_server.copy()]
    for mask, k_round in zip(masks, steps, strict=True):
        people = _participants(mask, k_round, n)
        if people:
            q = 1.0 / len(people)
            update = np.zeros_like(x_server)
            for i in people:
                x_i = _local_sgd(problem, i, x_server, lr, int(k_round[i]))
                update += q * (x_i - x_server)
            x_server = x_server + server_lr * update
        history.append(x_server.copy())
    return np.array(history)


def surrogate_minimizer(hessians, linear_terms, weights):
    """Minimiser of sum_i w_i f_i for quadratic clients f_i(x) = 1/2 x^T H_i x - b_i^T x.

    Sign convention: grad f_i(x) = H_i x - b_i, so b_i is what
    ``Quadratic.hessians_and_linear_terms()`` returns as c_i (= H_i z_i for the centred
    form 1/2 (x - z_i)^T H_i (x - z_i), which differs from f_i by a constant only).

    ``hessians``: H, shape (N, d, d); ``linear_terms``: b, shape (N, d); ``weights``: w,
    shape (N,), nonnegative with sum_i w_i H_i positive definite. Solves
    (sum_i w_i H_i) x = sum_i w_i b_i; the scale of w does not matter. With w_i = K_i (and
    uniform p_i) this is where the paper says FedAvg with K_i local steps ends up; with
    w_i = 1 it is the true minimiser.
    """
    h = np.asarray(hessians, dtype=float)
    b = np.asarray(linear_terms, dtype=float)
    w = np.asarray(weights, dtype=float)
    n, d = b.shape
    assert h.shape == (n, d, d) and w.shape == (n,)
    lhs = np.zeros((d, d))
    rhs = np.zeros(d)
    for i in range(n):
        lhs += w[i] * h[i]
        rhs += w[i] * b[i]
    return np.linalg.solve(lhs, rhs)
