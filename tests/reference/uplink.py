"""FedAvg with a compressed uplink, written per client: each participant trains from the
server model, then sends its update Delta_i = x_i - x_0 through a compressor Q, either as
Q(Delta_i) or, with EF21 (Richtárik, Sokolov and Fatkhullin, NeurIPS 2021, Algorithm 1
applied to the update), as the correction c_i = Q(Delta_i - e_i) to the estimate e_i that
client and server share (e_i <- e_i + c_i, zero at the start; the server uses e_i). The
server averages what it received with uniform weights."""

import numpy as np


def top_k(v, k):
    """Keep the k entries of largest magnitude (ties: the lower index first)."""
    out = np.zeros_like(v)
    keep = np.argsort(-np.abs(v), kind="stable")[:k]
    out[keep] = v[keep]
    return out


def fedavg_uplink(problem, masks, x0, lr, local_steps, k, error_feedback):
    """Server model after each round, shape (rounds + 1, dim)."""
    n = problem.n_clients
    x_server = np.array(x0, dtype=float)
    estimate = [np.zeros_like(x_server) for _ in range(n)]
    history = [x_server.copy()]
    for mask in masks:
        people = [i for i in range(n) if mask[i]]
        if people:
            total = np.zeros_like(x_server)
            for i in people:
                x = x_server.copy()
                for _ in range(local_steps):
                    x = x - lr * problem.gradients(np.array([i]), x[None, :])[0]
                delta = x - x_server
                if error_feedback:
                    estimate[i] = estimate[i] + top_k(delta - estimate[i], k)
                    total += estimate[i]
                else:
                    total += top_k(delta, k)
            x_server = x_server + total / len(people)
        history.append(x_server.copy())
    return np.array(history)
