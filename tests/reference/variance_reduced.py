"""GT-SVRG, GT-SAGA and GT-SARAH written per node (plain loops over nodes, NumPy float64).

Setting. Node i = 0, ..., n-1 holds f_i(x) = (1/m_i) sum_{j < m_i} f_{i,j}(x); the global
objective is (1/n) sum_i f_i. ``component(i, j, x)`` returns grad f_{i,j}(x) (1-d). W is a
dense symmetric doubly stochastic (n, n) matrix, W[i, r] the weight node i gives to node r.
Every function returns the list [x^0, x^1, ..., x^K] (K = len(picks)) of (n, d) arrays,
row i of x^k being node i's k-th iterate in the paper's numbering.

Sources. The algorithm boxes themselves could not be retrieved with the search tools
(only abstracts of the papers are stored); the updates below are written from my knowledge
of the papers and cross-checked against public implementations (see each function). The
papers:

* R. Xin, U. A. Khan, S. Kar, "Variance-reduced decentralized stochastic optimization with
  accelerated convergence", IEEE Trans. Signal Processing 68, 2020 (arXiv:1912.04230),
  Algorithm 1 (GT-SAGA) and Algorithm 2 (GT-SVRG). Both are written in the
  "combine-then-adapt" form x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^k.
* GT-SARAH: R. Xin, U. A. Khan, S. Kar, "Fast decentralized nonconvex finite-sum
  optimization with recursive variance reduction", SIAM J. Optimization 32(1), 2022
  (arXiv:2008.07428, first titled "A near-optimal stochastic gradient method for
  decentralized non-convex finite-sum optimization"). NOTE: the title "A fast randomized
  incremental gradient method for decentralized nonconvex optimization" (IEEE TAC 67(10),
  2022, arXiv:2011.03853) is the same authors' *GT-SAGA* paper for nonconvex problems, not
  GT-SARAH; GT-SARAH below follows the SIOPT / arXiv:2008.07428 paper.

Conventions common to all three (and to the plain gradient tracking of the self-check):

* ``picks[k]`` is an int array (n, b); row i holds the b indices node i draws at
  iteration k. A minibatch estimate is the MEAN over those b components (repeated indices
  count as often as they appear). Where a method evaluates two points (GT-SVRG: the new
  iterate and the snapshot; GT-SARAH: the new and the previous iterate; GT-SAGA: the new
  iterate and the stored table entries), the same b indices are used at both.
* One iteration k = 0, ..., K-1 is, at every node i, in this order:
    1. x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^k     (mix x, step with the OLD y);
    2. the estimator v_i^{k+1} is formed at the NEW point x_i^{k+1} with picks[k][i];
    3. y_i^{k+1} = sum_r W[i, r] y_r^k + v_i^{k+1} - v_i^k   (gradient tracking).
* Initialisation (not an iteration): v_i^0 = y_i^0 = grad f_i(x_i^0), the full local
  gradient (mean of all m_i components) at x^0.
"""

import numpy as np


def _as_state(x0):
    x0 = np.array(x0, dtype=np.float64)
    if x0.ndim != 2:
        raise ValueError("x0 must have shape (n, d)")
    return [x0[i].copy() for i in range(x0.shape[0])]


def _full(component, i, m, x):
    """grad f_i(x) = (1/m_i) sum_j grad f_{i,j}(x)."""
    total = np.zeros_like(x)
    for j in range(m):
        total = total + np.asarray(component(i, j, x), dtype=np.float64)
    return total / m


def _batch(component, i, indices, x):
    """Mean over the b picked components of grad f_{i,j}(x)."""
    indices = [int(j) for j in np.asarray(indices).reshape(-1)]
    if not indices:
        raise ValueError("each row of picks[k] needs at least one index")
    total = np.zeros_like(x)
    for j in indices:
        total = total + np.asarray(component(i, j, x), dtype=np.float64)
    return total / len(indices)


def _mix(W, values, i):
    """sum_r W[i, r] values_r."""
    total = np.zeros_like(values[0])
    for r in range(len(values)):
        if W[i, r] != 0.0:
            total = total + W[i, r] * values[r]
    return total


def _check(W, n_samples, x, picks):
    n = len(x)
    W = np.asarray(W, dtype=np.float64)
    if W.shape != (n, n):
        raise ValueError("W must be (n, n) with n = x0.shape[0]")
    if len(n_samples) != n:
        raise ValueError("n_samples needs one entry per node")
    for k, p in enumerate(picks):
        p = np.asarray(p)
        if p.ndim != 2 or p.shape[0] != n or p.shape[1] < 1:
            raise ValueError(f"picks[{k}] must have shape (n, b) with b >= 1")
    return W, [int(m) for m in n_samples]


def gt_svrg(component, n_samples, W, x0, lr, picks, snapshot_every):
    """GT-SVRG (Xin, Khan & Kar, IEEE TSP 68, 2020, Algorithm 2), per node.

    Start: y_i^0 = v_i^0 = grad f_i(x_i^0) (full local gradient).
    Snapshot: at every iteration k with k % T == 0 (T = ``snapshot_every``; the first at
    k = 0) node i sets tau_i = x_i^k (the iterate BEFORE this iteration's mixing step) and
    computes the full local gradient mu_i = grad f_i(tau_i); both are kept for the T
    iterations k, ..., k + T - 1 (the paper's inner loop t = sT, ..., (s+1)T - 1 with
    snapshot x^{sT}).
    Iteration k, at node i (S = picks[k][i], b indices):
        x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^k
        v_i^{k+1} = mean_{s in S} [grad f_{i,s}(x_i^{k+1}) - grad f_{i,s}(tau_i)] + mu_i
        y_i^{k+1} = sum_r W[i, r] y_r^k + v_i^{k+1} - v_i^k
    So v_i^{T} (the last estimate of an inner loop) still uses the old snapshot; the new
    snapshot tau = x^{T} is taken at the start of iteration T.
    Cross-checked with the SVRG estimator of Johnson & Zhang (2013) and with the public
    PMGT-LSVRG / GT-type codes (estimator at the mixed point, tracker += v_new - v_old).
    """
    x = _as_state(x0)
    W, m = _check(W, n_samples, x, picks)
    T = int(snapshot_every)
    if T < 1:
        raise ValueError("snapshot_every must be >= 1")
    n = len(x)
    v = [_full(component, i, m[i], x[i]) for i in range(n)]
    y = [v[i].copy() for i in range(n)]
    tau = [None] * n
    mu = [None] * n
    history = [np.array(x)]
    for k, pick in enumerate(picks):
        pick = np.asarray(pick)
        if k % T == 0:
            for i in range(n):
                tau[i] = x[i].copy()
                mu[i] = _full(component, i, m[i], tau[i])
        new_x = [_mix(W, x, i) - lr * y[i] for i in range(n)]
        new_v = [
            _batch(component, i, pick[i], new_x[i]) - _batch(component, i, pick[i], tau[i]) + mu[i]
            for i in range(n)
        ]
        new_y = [_mix(W, y, i) + new_v[i] - v[i] for i in range(n)]
        x, v, y = new_x, new_v, new_y
        history.append(np.array(x))
    return history


def gt_saga(component, n_samples, W, x0, lr, picks):
    """GT-SAGA (Xin, Khan & Kar, IEEE TSP 68, 2020, Algorithm 1), per node.

    Table: node i keeps G_i[j] = grad f_{i,j}(z_{i,j}) for j < m_i, initialised at x^0:
    z_{i,j} = x_i^0, so G_i[j] = grad f_{i,j}(x_i^0) for every j.
    Start: y_i^0 = g_i^0 = grad f_i(x_i^0) = mean_j G_i[j].
    Iteration k, at node i (S = picks[k][i], b indices, G_i the table BEFORE the update):
        x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^k
        g_i^{k+1} = mean_{s in S} [grad f_{i,s}(x_i^{k+1}) - G_i[s]] + (1/m_i) sum_j G_i[j]
        G_i[s] <- grad f_{i,s}(x_i^{k+1}) for s in S (z_{i,s} = x_i^{k+1}; table updated
                  AFTER it was used in g; other entries unchanged)
        y_i^{k+1} = sum_r W[i, r] y_r^k + g_i^{k+1} - g_i^k
    The table average is the average of the whole table before this iteration's update.
    Cross-checked with the public decent-bench GT_SAGA (SAGA estimator with the table mean,
    entries for the drawn samples replaced after use) and PMGT-SAGA codes.
    """
    x = _as_state(x0)
    W, m = _check(W, n_samples, x, picks)
    n = len(x)
    table = [
        np.array([np.asarray(component(i, j, x[i]), dtype=np.float64) for j in range(m[i])])
        for i in range(n)
    ]
    g = [table[i].mean(axis=0) for i in range(n)]
    y = [g[i].copy() for i in range(n)]
    history = [np.array(x)]
    for pick in picks:
        pick = np.asarray(pick)
        new_x = [_mix(W, x, i) - lr * y[i] for i in range(n)]
        new_g = []
        for i in range(n):
            indices = [int(s) for s in pick[i]]
            average = table[i].mean(axis=0)
            fresh = {
                s: np.asarray(component(i, s, new_x[i]), dtype=np.float64) for s in set(indices)
            }
            correction = np.zeros_like(new_x[i])
            for s in indices:
                correction = correction + fresh[s] - table[i][s]
            new_g.append(correction / len(indices) + average)
            for s, value in fresh.items():
                table[i][s] = value
        new_y = [_mix(W, y, i) + new_g[i] - g[i] for i in range(n)]
        x, g, y = new_x, new_g, new_y
        history.append(np.array(x))
    return history


def gt_sarah(component, n_samples, W, x0, lr, picks, restart_every):
    """GT-SARAH (Xin, Khan & Kar, SIAM J. Optim. 32(1), 2022 / arXiv:2008.07428), per node.

    (The brief cited IEEE TAC 67(10), 2022, "A fast randomized incremental gradient method
    for decentralized nonconvex optimization"; that paper is the nonconvex GT-SAGA. GT-SARAH
    is in the SIOPT paper, whose algorithm is implemented here.)

    The paper's loop, with q = ``restart_every`` and y^0 = 0, v^{-1} = 0:
        v_i^k = grad f_i(x_i^k)                                        if k % q == 0,
        v_i^k = mean_{s in S} [grad f_{i,s}(x_i^k) - grad f_{i,s}(x_i^{k-1})] + v_i^{k-1}  else,
        y_i^{k+1} = sum_r W[i, r] y_r^k + v_i^k - v_i^{k-1},
        x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^{k+1}.
    Writing u_i^k = y_i^{k+1} (the tracker that moves x^k to x^{k+1}) gives u_i^0 = v_i^0 =
    grad f_i(x_i^0) and exactly the shared order of this module, with the same x^k:

    Start: u_i^0 = v_i^0 = grad f_i(x_i^0) (full local gradient; k = 0 is a restart).
    Iteration k, at node i (S = picks[k][i], b indices):
        x_i^{k+1} = sum_r W[i, r] x_r^k - alpha u_i^k
        if (k + 1) % q == 0:  v_i^{k+1} = grad f_i(x_i^{k+1})   (restart; picks[k] unused)
        else:                 v_i^{k+1} = mean_{s in S} [grad f_{i,s}(x_i^{k+1})
                                                         - grad f_{i,s}(x_i^k)] + v_i^k
        u_i^{k+1} = sum_r W[i, r] u_r^k + v_i^{k+1} - v_i^k
    So v^k is a full local gradient exactly when k is a multiple of q (k = 0, q, 2q, ...),
    the paper's outer loop of length q; the SARAH differences use the same b indices at
    x_i^{k+1} and x_i^k. Cross-checked with the public nda GT_SARAH code (liboyue/
    Network-Distributed-Algorithm): full gradient at the start of each outer loop, y mixed
    then corrected by v - v_last, x mixed minus eta times the new y, y and v starting at 0.
    """
    x = _as_state(x0)
    W, m = _check(W, n_samples, x, picks)
    q = int(restart_every)
    if q < 1:
        raise ValueError("restart_every must be >= 1")
    n = len(x)
    v = [_full(component, i, m[i], x[i]) for i in range(n)]
    u = [v[i].copy() for i in range(n)]
    history = [np.array(x)]
    for k, pick in enumerate(picks):
        pick = np.asarray(pick)
        new_x = [_mix(W, x, i) - lr * u[i] for i in range(n)]
        if (k + 1) % q == 0:
            new_v = [_full(component, i, m[i], new_x[i]) for i in range(n)]
        else:
            new_v = [
                _batch(component, i, pick[i], new_x[i]) - _batch(component, i, pick[i], x[i]) + v[i]
                for i in range(n)
            ]
        new_u = [_mix(W, u, i) + new_v[i] - v[i] for i in range(n)]
        x, v, u = new_x, new_v, new_u
        history.append(np.array(x))
    return history


def _plain_gt(component, n_samples, W, x0, lr, picks):
    """Plain stochastic gradient tracking in the same order (comparison only):
    y_i^0 = g_i^0 = grad f_i(x_i^0); x_i^{k+1} = sum_r W[i, r] x_r^k - alpha y_i^k;
    g_i^{k+1} = mean_{s in picks[k][i]} grad f_{i,s}(x_i^{k+1});
    y_i^{k+1} = sum_r W[i, r] y_r^k + g_i^{k+1} - g_i^k."""
    x = _as_state(x0)
    W, m = _check(W, n_samples, x, picks)
    n = len(x)
    g = [_full(component, i, m[i], x[i]) for i in range(n)]
    y = [g[i].copy() for i in range(n)]
    history = [np.array(x)]
    for pick in picks:
        pick = np.asarray(pick)
        new_x = [_mix(W, x, i) - lr * y[i] for i in range(n)]
        new_g = [_batch(component, i, pick[i], new_x[i]) for i in range(n)]
        new_y = [_mix(W, y, i) + new_g[i] - g[i] for i in range(n)]
        x, g, y = new_x, new_g, new_y
        history.append(np.array(x))
    return history


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    n, m, d = 5, 10, 3
    A = rng.standard_normal((n, m, d))
    B = A @ rng.standard_normal(d) + 0.5 * rng.standard_normal((n, m))

    def component(i, j, x):
        return A[i, j] * (A[i, j] @ x - B[i, j])

    # exact minimiser of (1/n) sum_i (1/m_i) sum_j 0.5 (a_ij^T x - b_ij)^2
    H = sum(A[i].T @ A[i] / m for i in range(n))
    c = sum(A[i].T @ B[i] / m for i in range(n))
    x_star = np.linalg.solve(H, c)

    # ring with Metropolis weights: w_ir = 1 / (1 + max(deg_i, deg_r)) on edges
    adjacency = np.zeros((n, n), dtype=bool)
    for i in range(n):
        adjacency[i, (i + 1) % n] = adjacency[(i + 1) % n, i] = True
    degree = adjacency.sum(axis=1)
    W = np.zeros((n, n))
    for i in range(n):
        for r in range(n):
            if adjacency[i, r]:
                W[i, r] = 1.0 / (1.0 + max(degree[i], degree[r]))
        W[i, i] = 1.0 - W[i].sum()
    assert np.allclose(W, W.T) and np.allclose(W.sum(axis=1), 1.0)

    L = max(float(A[i, j] @ A[i, j]) for i in range(n) for j in range(m))
    lr = 0.02
    iterations = 4000
    picks = [rng.integers(0, m, size=(n, 1)) for _ in range(iterations)]
    x0 = rng.standard_normal((n, d))
    samples = [m] * n

    def error(xk):
        return float(np.max(np.linalg.norm(xk - x_star, axis=1)))

    print(f"L_max = {L:.3f}, lr = {lr}, iterations = {iterations}, |x0 - x*| = {error(x0):.3e}")
    runs = {
        "GT-SVRG (T=2m)": gt_svrg(component, samples, W, x0, lr, picks, snapshot_every=2 * m),
        "GT-SAGA": gt_saga(component, samples, W, x0, lr, picks),
        "GT-SARAH (q=m)": gt_sarah(component, samples, W, x0, lr, picks, restart_every=m),
        "plain GT": _plain_gt(component, samples, W, x0, lr, picks),
    }
    checkpoints = [500, 1000, 2000, 3000, 4000]
    print("max_i |x_i^k - x*| at k =", checkpoints)
    for name, history in runs.items():
        print(f"{name:16s}", "  ".join(f"{error(history[k]):.3e}" for k in checkpoints))
