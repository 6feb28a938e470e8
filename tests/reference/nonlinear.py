"""FedAdam / FedYogi / FedAdagrad, FedProx and CHOCO-SGD written per client or per node
from the papers' pseudo-code (plain loops).

- Adaptive server optimizers (Reddi et al. 2021, Algorithm 2): each client in S starts at
  x_0 and takes K gradient steps; Delta = mean_{i in S} (x_i - x_0);
  m <- b1 m + (1 - b1) Delta; v <- v + Delta^2 (adagrad) | b2 v + (1 - b2) Delta^2 (adam)
  | v - (1 - b2) Delta^2 sign(v - Delta^2) (yogi); x_0 <- x_0 + eta m / (sqrt(v) + tau);
  m_{-1} = 0, v_{-1} = initial_v. Rounds nobody joins are skipped.
- FedProx (Li et al. 2020): client i minimises F_i(y) + mu/2 ||y - x_0||^2, exactly
  ((H_i + mu I) y = H_i z_i + mu x_0 for a quadratic, = c_i + mu x_0 for least squares,
  solved client by client) or by K gradient steps from x_0; x_0 <- x_0 + eta mean_S (y_i - x_0).
- CHOCO-SGD (Koloskova et al. 2019, Algorithm 2), x^_i = 0 at the start, for node i:
  x_i <- x_i - eta grad F_i(x_i); q_i = Q(x_i - x^_i); x^_i <- x^_i + q_i (+ sigma xi_i);
  x_i <- x_i + gamma sum_j W[i, j] (x^_j - x^_i). The round's random numbers come from
  SeedSequence(seed, spawn_key=(0x726F776D, k, crc32(b"compress"))) (the engine's map
  generator, documented in stochmix.engine.model.rowmap): first one (n, d) array of uniforms
  (rand-k: node i keeps the k coordinates of its smallest uniforms; QSGD: node i's
  rounding draws), then (n, d) standard normals for the channel noise; node i reads row i.
"""

import zlib

import numpy as np

from tests.reference.decentralized import _grad, _mean, start


def adaptive(problem, masks, x0, lr, local_steps, server_lr, kind, beta1, beta2, tau, initial_v):
    """Server model after each round, shape (rounds + 1, dim)."""
    n = problem.n_clients
    x_server = np.array(x0, dtype=float)
    m = np.zeros_like(x_server)
    v = np.full_like(x_server, initial_v)
    history = [x_server.copy()]
    for mask in masks:
        participants = [i for i in range(n) if mask[i]]
        if participants:
            delta = np.zeros_like(x_server)
            for i in participants:
                x = x_server.copy()
                for _ in range(local_steps):
                    x = x - lr * _grad(problem, i, x)
                delta += (x - x_server) / len(participants)
            m = beta1 * m + (1 - beta1) * delta
            if kind == "adam":
                v = beta2 * v + (1 - beta2) * delta**2
            elif kind == "yogi":
                v = v - (1 - beta2) * delta**2 * np.sign(v - delta**2)
            else:
                v = v + delta**2
            x_server = x_server + server_lr * m / (np.sqrt(v) + tau)
        history.append(x_server.copy())
    return np.array(history)


def _prox(problem, i, x_server, mu):
    if hasattr(problem, "hessians"):
        h = np.asarray(problem.hessians[i])
        h = np.diag(h) if h.ndim == 1 else h
        rhs = h @ problem.centers[i]
    else:
        hess, lin = problem.hessians_and_linear_terms()
        h, rhs = hess[i], lin[i]
    return np.linalg.solve(h + mu * np.eye(len(x_server)), rhs + mu * x_server)


def fedprox(problem, masks, x0, lr, mu, local_steps, server_lr, solver):
    """Server model after each round, shape (rounds + 1, dim)."""
    n = problem.n_clients
    x_server = np.array(x0, dtype=float)
    history = [x_server.copy()]
    for mask in masks:
        participants = [i for i in range(n) if mask[i]]
        if participants:
            update = np.zeros_like(x_server)
            for i in participants:
                if solver == "exact":
                    y = _prox(problem, i, x_server, mu)
                else:
                    y = x_server.copy()
                    for _ in range(local_steps):
                        y = y - lr * (_grad(problem, i, y) + mu * (y - x_server))
                update += (y - x_server) / len(participants)
            x_server = x_server + server_lr * update
        history.append(x_server.copy())
    return np.array(history)


def _compress(kind, arg, vector, uniforms):
    d = vector.size
    if kind == "none":
        return vector.copy()
    if kind in ("top_k", "rand_k", "rand_k_unbiased"):
        order = np.argsort(-np.abs(vector)) if kind == "top_k" else np.argsort(uniforms)
        out = np.zeros(d)
        scale = d / arg if kind == "rand_k_unbiased" else 1.0
        for j in order[:arg]:
            out[j] = scale * vector[j]
        return out
    norm = np.linalg.norm(vector)
    out = np.zeros(d)
    if norm > 0:
        for j in range(d):
            level = np.floor(arg * abs(vector[j]) / norm + uniforms[j])
            out[j] = np.sign(vector[j]) * norm * level / arg
    if kind == "qsgd":
        out /= 1 + min(d / arg**2, np.sqrt(d) / arg)
    return out


def choco(problem, graphs, iterations, x0, lr, gamma, compression, seed, noise=0.0):
    """Network average after each iteration, shape (iterations + 1, dim), and the final
    node models (n, dim)."""
    kind, _, arg = compression.partition(":")
    arg = int(arg) if arg else 0
    n = problem.n_clients
    x = start(x0, n)
    d = x[0].size
    xhat = [np.zeros(d) for _ in range(n)]
    history = [_mean(x)]
    for k in range(iterations):
        w = graphs.matrix(k, "metropolis").toarray()
        key = (0x726F776D, k, zlib.crc32(b"compress"))
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
        uniforms = rng.random((n, d)) if kind in ("rand_k", "rand_k_unbiased", "qsgd",
                                                  "qsgd_unscaled") else None  # fmt: skip
        normals = rng.standard_normal((n, d)) if noise else None
        half = [x[i] - lr * _grad(problem, i, x[i]) for i in range(n)]
        for i in range(n):
            q = _compress(kind, arg, half[i] - xhat[i], None if uniforms is None else uniforms[i])
            xhat[i] = xhat[i] + q
            if noise:
                xhat[i] = xhat[i] + noise * normals[i]
        x = [
            half[i] + gamma * sum(w[i, j] * (xhat[j] - xhat[i]) for j in range(n)) for i in range(n)
        ]
        history.append(_mean(x))
    return np.array(history), np.array(x)
