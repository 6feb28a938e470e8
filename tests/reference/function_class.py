"""Objectives of the class (parts L-smooth and mu-strongly convex) and mixing matrices of the
sigma-class, written from their definitions with NumPy alone (nothing of stochmix), for
soundness checks of certificates against the per-node references of this package.

Every objective has ``n_clients``, ``dim``, ``gradients(clients, points)`` (row k: the
gradient of part ``clients[k]`` at ``points[k]``) and ``x_star``, the minimiser of the
parts' average, computed here (by construction or by Newton's method on the sum).

- ``rotated_quadratic``: f_i(x) = 1/2 (x - c_i)^T R_i diag(h_i) R_i^T (x - c_i), R_i a random
  rotation, h_i at mu or L (dense, non-diagonal Hessians).
- ``kinked``: f_i(x) = g_i^T t + 1/2 sum_j h_ij(sign t_j) t_j^2 with t = R^T (x - x_star),
  sum_i g_i = 0: a piecewise quadratic whose curvature (in [mu, L]) switches on the
  hyperplanes through x_star; gradient g_i + h(t) * t, continuous, monotone, L-Lipschitz.
- ``log_sum_exp``: f_i(x) = mu/2 ||x||^2 + s log sum_j exp(a_ij^T x + b_ij) + q_i^T x, with
  s ||A_i||^2 / 2 <= L - mu (the Hessian of log-sum-exp is at most 1/2 in norm).
- ``huber``: f_i(x) = mu/2 ||x - c_i||^2 + s sum_j huber(a_ij^T x - b_ij), huber'' in [0, 1],
  s ||A_i||^2 <= L - mu.

``sigma_matrix(n, sigma, S, basis)``: ``11^T/n + sigma Q S Q^T`` for ``||S|| <= 1``: rows and
columns sum to 1 and ``||W - 11^T/n|| <= sigma``. ``Sequence(matrices)`` serves W_k =
``matrices[k % len(matrices)]`` as the per-node references read it
(``graphs.matrix(k, rule).toarray()``, the rule ignored).
"""

import numpy as np


class Objective:
    def __init__(self, gradient, hessian, n, dim, x_star=None):
        self._gradient, self._hessian = gradient, hessian
        self.n_clients, self.dim = n, dim
        self.x_star = self._newton() if x_star is None else np.asarray(x_star, dtype=float)

    def gradients(self, clients, points):
        return np.array([self._gradient(int(i), p) for i, p in zip(clients, points, strict=True)])

    def _newton(self):
        x = np.zeros(self.dim)
        for _ in range(100):
            g = sum(self._gradient(i, x) for i in range(self.n_clients))
            h = sum(self._hessian(i, x) for i in range(self.n_clients))
            step = np.linalg.solve(h, g)
            x = x - step
            if np.linalg.norm(step) < 1e-15 * (1 + np.linalg.norm(x)):
                break
        return x


def rotation(dim, rng):
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def rotated_quadratic(n, dim, L, mu, rng, levels=None):
    """Curvatures drawn from ``levels`` (default ``(mu, L)``)."""
    hess = []
    for _ in range(n):
        r = rotation(dim, rng)
        hess.append((r * rng.choice([mu, L] if levels is None else levels, size=dim)) @ r.T)
    c = rng.standard_normal((n, dim))
    x_star = np.linalg.solve(sum(hess), sum(h @ ci for h, ci in zip(hess, c, strict=True)))
    return Objective(lambda i, x: hess[i] @ (x - c[i]), lambda i, x: hess[i], n, dim, x_star)


def kinked(n, dim, L, mu, rng):
    x_star = rng.standard_normal(dim)
    r = rotation(dim, rng)
    g = rng.standard_normal((n, dim))
    g -= g.mean(axis=0)
    up = rng.choice([mu, L], size=(n, dim))
    down = rng.choice([mu, L], size=(n, dim))

    def gradient(i, x):
        t = r.T @ (x - x_star)
        return r @ (g[i] + np.where(t >= 0, up[i], down[i]) * t)

    return Objective(gradient, None, n, dim, x_star)


def log_sum_exp(n, dim, L, mu, rng, terms=4):
    a = rng.standard_normal((n, terms, dim))
    b = rng.standard_normal((n, terms))
    q = rng.standard_normal((n, dim))
    s = [2 * (L - mu) / np.linalg.norm(ai, 2) ** 2 for ai in a]

    def soft(i, x):
        z = a[i] @ x + b[i]
        p = np.exp(z - z.max())
        return p / p.sum()

    def gradient(i, x):
        return mu * x + s[i] * a[i].T @ soft(i, x) + q[i]

    def hessian(i, x):
        p = soft(i, x)
        return mu * np.eye(dim) + s[i] * a[i].T @ (np.diag(p) - np.outer(p, p)) @ a[i]

    return Objective(gradient, hessian, n, dim)


def huber(n, dim, L, mu, rng, terms=5, delta=0.5):
    a = rng.standard_normal((n, terms, dim))
    b = rng.standard_normal((n, terms))
    c = rng.standard_normal((n, dim))
    s = [(L - mu) / np.linalg.norm(ai, 2) ** 2 for ai in a]

    def gradient(i, x):
        return mu * (x - c[i]) + s[i] * a[i].T @ np.clip(a[i] @ x - b[i], -delta, delta)

    def hessian(i, x):
        inside = (np.abs(a[i] @ x - b[i]) < delta).astype(float)
        return mu * np.eye(dim) + s[i] * (a[i].T * inside) @ a[i]

    return Objective(gradient, hessian, n, dim)


def disagreement_basis(n, rng):
    basis, _ = np.linalg.qr(np.hstack([np.ones((n, 1)), rng.standard_normal((n, n - 1))]))
    return basis[:, 1:]


def plane_rotation(m, theta):
    """Every plane (0, 1), (2, 3), ... of R^m rotated by theta; the last axis kept (m odd)."""
    out = np.eye(m)
    c, s = np.cos(theta), np.sin(theta)
    for i in range(0, m - 1, 2):
        out[i : i + 2, i : i + 2] = [[c, -s], [s, c]]
    return out


def sigma_matrix(n, sigma, s, basis):
    return np.full((n, n), 1.0 / n) + sigma * basis @ s @ basis.T


class _Dense:
    def __init__(self, matrix):
        self._matrix = matrix

    def toarray(self):
        return self._matrix.copy()


class Sequence:
    def __init__(self, matrices):
        self.matrices = [np.asarray(m, dtype=float) for m in matrices]
        self.n_nodes = self.matrices[0].shape[0]

    def matrix(self, k, rule=None):
        return _Dense(self.matrices[k % len(self.matrices)])
