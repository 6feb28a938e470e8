"""Decentralized and federated composite-optimization methods written per node / per client
(plain Python loops, one node or client at a time, NumPy float64 only), from the papers'
pseudo-code. Independent of the library under test.

Common conventions
------------------

* ``grad(i, x)`` returns grad f_i(x) of node / client i at the 1-d point x.
* ``prox(v, t)`` returns prox_{t r}(v) = argmin_u r(u) + ||u - v||^2 / (2 t). The regularizer
  r is the same at every node, so the decentralized methods solve
  min_x sum_i f_i(x) + n r(x), i.e. min_x (1/n) sum_i f_i(x) + r(x), and the federated ones
  min_x (1/M) sum_m f_m(x) + r(x). ``prox`` is never called with t = 0: prox_{0 r} is the
  identity and the vector is returned as it is (this only happens in FedDualAvg, whose
  first proximal step is 0).
* ``W`` is a dense symmetric doubly stochastic (n, n) mixing matrix; node i receives
  sum_j W[i, j] v_j. ``adjacency`` is a dense symmetric 0/1 (n, n) array without
  self-loops; N_i = {j : adjacency[i, j] != 0}, d_i = |N_i|.
* ``x0`` (n, d): row i is node i's starting point. Every decentralized function returns the
  list [x^0, x^1, ..., x^K] (K = ``iterations``) of (n, d) arrays, x^k the paper's k-th primal
  iterate (after the prox where there is one), row i = node i.
* The federated functions return the list [x_0, x_1, ..., x_R] of server models (1-d), R =
  ``len(cohorts)``.

Methods (x_i^k: node i at iteration k; W~ a second mixing matrix)
----------------------------------------------------------------

* PG-EXTRA (W. Shi, Q. Ling, G. Wu, W. Yin, "A proximal gradient algorithm for
  decentralized composite optimization", IEEE TSP 63(22), 2015, Algorithm 1), with
  W~ = (I + W)/2:
    first iteration  x_i^{1/2} = sum_j W[i, j] x_j^0 - a grad f_i(x_i^0),
                     x_i^1 = prox_{a r}(x_i^{1/2});
    k >= 1           x_i^{k+1/2} = sum_j W[i, j] x_j^k + x_i^{k-1/2}
                                   - sum_j W~[i, j] x_j^{k-1}
                                   - a (grad f_i(x_i^k) - grad f_i(x_i^{k-1})),
                     x_i^{k+1} = prox_{a r}(x_i^{k+1/2}).
* NIDS (Z. Li, W. Shi, M. Yan, "A decentralized proximal-gradient method with network
  independent step-sizes and separated convergence rates", IEEE TSP 67(17), 2019,
  Algorithm 1 with a common step a), W~ = I - c a (I - W) (c = 1/(2a): W~ = (I + W)/2):
    first iteration  z_i^1 = x_i^0 - a grad f_i(x_i^0)          (no communication),
                     x_i^1 = prox_{a r}(z_i^1);
    k >= 1           z_i^{k+1} = z_i^k - x_i^k + sum_j W~[i, j] (2 x_j^k - x_j^{k-1}
                                   - a grad f_j(x_j^k) + a grad f_j(x_j^{k-1})),
                     x_i^{k+1} = prox_{a r}(z_i^{k+1}).
  (The same updates as the authors' public MATLAB class ``NIDS.m``.)
* Decentralized consensus ADMM (W. Shi, Q. Ling, K. Yuan, G. Wu, W. Yin, "On the linear
  convergence of the ADMM in decentralized consensus optimization", IEEE TSP 62(7), 2014,
  the node-wise iteration, their eq. (9)), duals alpha_i^0 = 0:
    grad f_i(x_i^{k+1}) + alpha_i^k + 2 c d_i x_i^{k+1} = c (d_i x_i^k + sum_{j in N_i} x_j^k),
    alpha_i^{k+1} = alpha_i^k + c (d_i x_i^{k+1} - sum_{j in N_i} x_j^{k+1}).
* DLM (Q. Ling, W. Shi, G. Wu, A. Ribeiro, "DLM: decentralized linearized alternating
  direction method of multipliers", IEEE TSP 63(15), 2015): the ADMM above with f_i replaced
  by its linearization at x_i^k plus (rho/2) ||x - x_i^k||^2, i.e. duals alpha_i^0 = 0 and
    x_i^{k+1} = x_i^k - [c sum_{j in N_i} (x_i^k - x_j^k) + grad f_i(x_i^k) + alpha_i^k]
                        / (2 c d_i + rho),
    alpha_i^{k+1} = alpha_i^k + c sum_{j in N_i} (x_i^{k+1} - x_j^{k+1}).
* FedMid and FedDualAvg (H. Yuan, M. Zaheer, S. Reddi, "Federated composite optimization",
  ICML 2021), mirror map h = ||x||^2 / 2, so grad h = identity and
  grad (h + t r)^* = prox_{t r}; see the two functions' docstrings.

Sources: the stored copies of these papers that could be searched gave their abstracts and
introductions only, not the algorithm boxes, so the updates above are written from
knowledge of the papers and cross-checked against public code: the NIDS authors' MATLAB
class (which implements both NIDS and PG-EXTRA, first iterations included), the FCO
authors' TensorFlow Federated FedDualAvg (proximal step = accumulated client learning rate,
eta_s eta_c r K + eta_c k on the clients, eta_s eta_c (r+1) K on the server), and a public
implementation quoting Shi et al.'s eq. (9). DLM's step is derived from that ADMM by the
linearization the DLM paper describes.
"""

import numpy as np

# --------------------------------------------------------------------------- helpers


def _rows(x0):
    """Each node's starting point as its own float64 vector (a list of n 1-d arrays)."""
    x0 = np.asarray(x0, dtype=float)
    return [x0[i].copy() for i in range(x0.shape[0])]


def _stack(values):
    """The list of node vectors as one (n, d) array (row i = node i)."""
    return np.array([np.array(v, dtype=float) for v in values])


def _receive(matrix, values, i):
    """What node i receives: sum_j matrix[i, j] values[j], one neighbour at a time."""
    total = np.zeros_like(values[0])
    for j in range(len(values)):
        if matrix[i, j] != 0.0:
            total = total + matrix[i, j] * values[j]
    return total


def _neighbours(adjacency, i):
    return [j for j in range(adjacency.shape[0]) if j != i and adjacency[i, j] != 0]


def _prox(prox, v, t):
    """prox_{t r}(v); prox_{0 r} is the identity (``prox`` is not called with t = 0)."""
    v = np.asarray(v, dtype=float)
    if t == 0.0:
        return v.copy()
    return np.asarray(prox(v, t), dtype=float)


def _grad(grad, i, x):
    return np.asarray(grad(i, x), dtype=float)


# --------------------------------------------------------------------------- PG-EXTRA


def pg_extra(grad, prox, W, x0, alpha, iterations):
    """PG-EXTRA (Shi, Ling, Wu & Yin, IEEE TSP 2015, Algorithm 1) with W~ = (I + W)/2.

    Each node i keeps its primal x_i and its pre-prox point x_i^{k+1/2}.

    * First iteration (k = 0, the paper's initialization step): node i mixes its
      neighbours' starting points, takes one gradient step and a prox,
      x_i^{1/2} = sum_j W[i, j] x_j^0 - alpha grad f_i(x_i^0), x_i^1 = prox_{alpha r}(x_i^{1/2}).
    * k = 1, 2, ...: x_i^{k+1/2} = sum_j W[i, j] x_j^k + x_i^{k-1/2} - sum_j W~[i, j] x_j^{k-1}
      - alpha (grad f_i(x_i^k) - grad f_i(x_i^{k-1})), then x_i^{k+1} = prox_{alpha r}(x_i^{k+1/2}).

    alpha multiplies the gradients and is the prox parameter. Each node evaluates one new
    gradient per iteration (the previous one is kept). Returns [x^0, ..., x^iterations],
    each (n, d), the post-prox iterates.
    """
    W = np.asarray(W, dtype=float)
    n = W.shape[0]
    w_tilde = 0.5 * (np.eye(n) + W)
    x = _rows(x0)
    history = [_stack(x)]
    if iterations <= 0:
        return history
    grads = [_grad(grad, i, x[i]) for i in range(n)]
    half = [_receive(W, x, i) - alpha * grads[i] for i in range(n)]
    previous, previous_grads = x, grads
    x = [_prox(prox, half[i], alpha) for i in range(n)]
    history.append(_stack(x))
    for _ in range(1, iterations):
        grads = [_grad(grad, i, x[i]) for i in range(n)]
        half = [
            _receive(W, x, i)
            + half[i]
            - _receive(w_tilde, previous, i)
            - alpha * (grads[i] - previous_grads[i])
            for i in range(n)
        ]
        previous, previous_grads = x, grads
        x = [_prox(prox, half[i], alpha) for i in range(n)]
        history.append(_stack(x))
    return history


# --------------------------------------------------------------------------- NIDS


def prox_nids(grad, prox, W, x0, alpha, iterations, c=None):
    """NIDS with the proximal term (Li, Shi & Yan, IEEE TSP 2019, Algorithm 1), one common
    step alpha at every node and W~ = I - c alpha (I - W); c=None means c = 1/(2 alpha),
    i.e. W~ = (I + W)/2.

    Each node i keeps z_i (the pre-prox variable) and its primal x_i.

    * First iteration (k = 0): no communication; z_i^1 = x_i^0 - alpha grad f_i(x_i^0),
      x_i^1 = prox_{alpha r}(z_i^1).
    * k = 1, 2, ...: node j sends v_j = 2 x_j^k - x_j^{k-1} - alpha grad f_j(x_j^k)
      + alpha grad f_j(x_j^{k-1}); node i sets z_i^{k+1} = z_i^k - x_i^k + sum_j W~[i, j] v_j
      and x_i^{k+1} = prox_{alpha r}(z_i^{k+1}).

    alpha multiplies the gradients (inside the mixed term) and is the prox parameter. With
    r = 0 this is the smooth NIDS, x^{k+1} = W~ (2 x^k - x^{k-1} - alpha g^k + alpha g^{k-1}).
    Returns [x^0, ..., x^iterations], each (n, d), the post-prox iterates.
    """
    W = np.asarray(W, dtype=float)
    n = W.shape[0]
    if c is None:
        c = 1.0 / (2.0 * alpha)
    w_tilde = np.eye(n) - c * alpha * (np.eye(n) - W)
    x = _rows(x0)
    history = [_stack(x)]
    if iterations <= 0:
        return history
    grads = [_grad(grad, i, x[i]) for i in range(n)]
    z = [x[i] - alpha * grads[i] for i in range(n)]
    previous, previous_grads = x, grads
    x = [_prox(prox, z[i], alpha) for i in range(n)]
    history.append(_stack(x))
    for _ in range(1, iterations):
        grads = [_grad(grad, i, x[i]) for i in range(n)]
        sent = [
            2.0 * x[j] - previous[j] - alpha * grads[j] + alpha * previous_grads[j]
            for j in range(n)
        ]
        z = [z[i] - x[i] + _receive(w_tilde, sent, i) for i in range(n)]
        previous, previous_grads = x, grads
        x = [_prox(prox, z[i], alpha) for i in range(n)]
        history.append(_stack(x))
    return history


# --------------------------------------------------------------------------- DLM


def dlm(grad, adjacency, x0, c, rho, iterations):
    """DLM (Ling, Shi, Wu & Ribeiro, IEEE TSP 2015), smooth f_i, no regularizer.

    The decentralized ADMM of Shi et al. (2014) with the local objective linearized at the
    current point plus the proximal term (rho/2) ||x - x_i^k||^2. Duals alpha_i^0 = 0.
    Iteration k = 0, 1, ... (every iteration identical, the first included):

        x_i^{k+1} = x_i^k - [c sum_{j in N_i} (x_i^k - x_j^k) + grad f_i(x_i^k) + alpha_i^k]
                            / (2 c d_i + rho)
        alpha_i^{k+1} = alpha_i^k + c sum_{j in N_i} (x_i^{k+1} - x_j^{k+1})

    (d_i = |N_i|; both updates use the neighbours' values of the same iteration, the dual
    one after every node has updated x). c is the ADMM penalty, rho the linearization
    parameter, one value for all nodes. Returns [x^0, ..., x^iterations], each (n, d).
    """
    adjacency = np.asarray(adjacency)
    n = adjacency.shape[0]
    neighbours = [_neighbours(adjacency, i) for i in range(n)]
    x = _rows(x0)
    duals = [np.zeros_like(x[i]) for i in range(n)]
    history = [_stack(x)]
    for _ in range(iterations):
        new = []
        for i in range(n):
            disagreement = np.zeros_like(x[i])
            for j in neighbours[i]:
                disagreement = disagreement + (x[i] - x[j])
            direction = c * disagreement + _grad(grad, i, x[i]) + duals[i]
            new.append(x[i] - direction / (2.0 * c * len(neighbours[i]) + rho))
        x = new
        for i in range(n):
            disagreement = np.zeros_like(x[i])
            for j in neighbours[i]:
                disagreement = disagreement + (x[i] - x[j])
            duals[i] = duals[i] + c * disagreement
        history.append(_stack(x))
    return history


# --------------------------------------------------------------------------- ADMM


def admm(hessians, linear, adjacency, x0, c, iterations):
    """Decentralized consensus ADMM, node-wise form of Shi, Ling, Yuan, Wu & Yin
    (IEEE TSP 2014, eq. (9)), for f_i(x) = x^T H_i x / 2 - b_i^T x (``hessians`` H_i,
    ``linear`` b_i). Duals alpha_i^0 = 0. Iteration k = 0, 1, ... (the first included):

        x_i^{k+1} solves
            grad f_i(x) + alpha_i^k + 2 c d_i x = c (d_i x_i^k + sum_{j in N_i} x_j^k),
        i.e.  (H_i + 2 c d_i I) x = b_i - alpha_i^k + c (d_i x_i^k + sum_{j in N_i} x_j^k)
        (exact, numpy.linalg.solve);
        alpha_i^{k+1} = alpha_i^k + c (d_i x_i^{k+1} - sum_{j in N_i} x_j^{k+1}).

    c > 0 is the penalty. Returns [x^0, ..., x^iterations], each (n, d).
    """
    hessians = np.asarray(hessians, dtype=float)
    linear = np.asarray(linear, dtype=float)
    adjacency = np.asarray(adjacency)
    n = adjacency.shape[0]
    neighbours = [_neighbours(adjacency, i) for i in range(n)]
    x = _rows(x0)
    dim = x[0].shape[0]
    duals = [np.zeros(dim) for _ in range(n)]
    history = [_stack(x)]
    for _ in range(iterations):
        new = []
        for i in range(n):
            degree = len(neighbours[i])
            received = np.zeros(dim)
            for j in neighbours[i]:
                received = received + x[j]
            rhs = linear[i] - duals[i] + c * (degree * x[i] + received)
            matrix = hessians[i] + 2.0 * c * degree * np.eye(dim)
            new.append(np.linalg.solve(matrix, rhs))
        x = new
        for i in range(n):
            degree = len(neighbours[i])
            received = np.zeros(dim)
            for j in neighbours[i]:
                received = received + x[j]
            duals[i] = duals[i] + c * (degree * x[i] - received)
        history.append(_stack(x))
    return history


# --------------------------------------------------------------------------- FedMid


def fedmid(grad, prox, x0, cohorts, local_steps, client_lr, server_lr):
    """FedMid, federated mirror descent (Yuan, Zaheer & Reddi, "Federated composite
    optimization", ICML 2021), mirror map h = ||x||^2 / 2.

    Round r = 0, 1, ..., R-1 with participants S_r = ``cohorts[r]`` (eta_c = ``client_lr``,
    eta_s = ``server_lr``, K = ``local_steps``):

    * every m in S_r starts from the server model, x^m_{r,0} = x_r, and takes K proximal
      (mirror-descent) steps x^m_{r,k+1} = prox_{eta_c r}(x^m_{r,k} - eta_c grad f_m(x^m_{r,k})),
      k = 0, ..., K-1;
    * the server averages the primal changes uniformly, Delta_r = (1/|S_r|) sum_{m in S_r}
      (x^m_{r,K} - x_r), and applies the server mirror step
      x_{r+1} = grad (h + eta_s eta_c r)^*(grad h(x_r) + eta_s Delta_r)
              = prox_{eta_s eta_c r}(x_r + eta_s Delta_r):
      eta_s scales the averaged change and the server's prox uses the step eta_s * eta_c.
      With eta_s = 1 the server applies one more prox_{eta_c r} to the average of the
      client models.
    * An empty cohort: nobody takes part and the server keeps its model, x_{r+1} = x_r (no
      server prox either).

    The cohort is iterated in the given order; a client listed twice is counted twice.
    Returns [x_0, ..., x_R].
    """
    x = np.array(x0, dtype=float)
    history = [x.copy()]
    for cohort in cohorts:
        members = [int(m) for m in np.asarray(cohort).reshape(-1)]
        if not members:
            history.append(x.copy())
            continue
        delta = np.zeros_like(x)
        for m in members:
            local = x.copy()
            for _ in range(local_steps):
                local = _prox(prox, local - client_lr * _grad(grad, m, local), client_lr)
            delta = delta + (local - x)
        delta = delta / len(members)
        x = _prox(prox, x + server_lr * delta, server_lr * client_lr)
        history.append(x.copy())
    return history


# --------------------------------------------------------------------------- FedDualAvg


def feddualavg(grad, prox, x0, cohorts, local_steps, client_lr, server_lr):
    """FedDualAvg, federated dual averaging (Yuan, Zaheer & Reddi, ICML 2021), mirror map
    h = ||x||^2 / 2, so the dual state lives in the same space and
    grad (h + t r)^*(z) = prox_{t r}(z).

    * Server dual initialization: z_0 = grad h(x_0) = x_0 (the reported x_0 is the given
      start).
    * Round r = 0, 1, ..., R-1 (r = the round's index in ``cohorts``), participants
      S_r = ``cohorts[r]``, eta_c = ``client_lr``, eta_s = ``server_lr``, K = ``local_steps``:
      every m in S_r starts from the server's dual state, z^m_{r,0} = z_r, and for
      k = 0, ..., K-1:
          eta~_{r,k} = eta_s eta_c r K + eta_c k        (the proximal step grows with the
                                                           round and the local step),
          x^m_{r,k} = prox_{eta~_{r,k} r}(z^m_{r,k})   (primal point; eta~_{0,0} = 0: the
                                                           identity, prox is not called),
          z^m_{r,k+1} = z^m_{r,k} - eta_c grad f_m(x^m_{r,k})   (client dual update).
    * Server: Delta_r = (1/|S_r|) sum_{m in S_r} (z^m_{r,K} - z_r) (uniform average of the
      dual changes), z_{r+1} = z_r + eta_s Delta_r (eta_s scales the averaged dual change),
      and the reported primal server model is
          x_{r+1} = prox_{eta_s eta_c (r+1) K r}(z_{r+1}).
    * An empty cohort: nobody takes part and the server keeps its state: z_{r+1} = z_r and
      x_{r+1} = x_r (the model is not re-proxed with the larger step). The round index
      still advances, so the next round r+1 uses eta~_{r+1,k} and x_{r+2} the step
      eta_s eta_c (r+2) K, exactly as the paper's formulas in r read.

    The cohort is iterated in the given order; a client listed twice is counted twice.
    Returns [x_0, ..., x_R], the primal server models.
    """
    x = np.array(x0, dtype=float)
    z = x.copy()
    history = [x.copy()]
    K = int(local_steps)
    for r, cohort in enumerate(cohorts):
        members = [int(m) for m in np.asarray(cohort).reshape(-1)]
        if not members:
            history.append(x.copy())
            continue
        delta = np.zeros_like(z)
        for m in members:
            local = z.copy()
            for k in range(K):
                step = server_lr * client_lr * r * K + client_lr * k
                primal = _prox(prox, local, step)
                local = local - client_lr * _grad(grad, m, primal)
            delta = delta + (local - z)
        delta = delta / len(members)
        z = z + server_lr * delta
        x = _prox(prox, z, server_lr * client_lr * (r + 1) * K)
        history.append(x.copy())
    return history


# --------------------------------------------------------------------------- self-check


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    n, d, samples, lam = 5, 4, 8, 0.1

    # Ring graph, Metropolis weights (symmetric, doubly stochastic).
    adjacency = np.zeros((n, n), dtype=int)
    for i in range(n):
        adjacency[i, (i + 1) % n] = adjacency[(i + 1) % n, i] = 1
    degrees = adjacency.sum(axis=1)
    W = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if adjacency[i, j]:
                W[i, j] = 1.0 / (1 + max(degrees[i], degrees[j]))
        W[i, i] = 1.0 - W[i].sum()

    A = rng.standard_normal((n, samples, d))
    y = rng.standard_normal((n, samples)) + A @ rng.standard_normal(d)

    def ls_grad(i, x):  # f_i(x) = ||A_i x - y_i||^2 / (2 samples)
        return A[i].T @ (A[i] @ x - y[i]) / samples

    def l1_prox(v, t):  # r = lam ||x||_1
        return np.sign(v) * np.maximum(np.abs(v) - lam * t, 0.0)

    smooth = max(np.linalg.eigvalsh(A[i].T @ A[i] / samples).max() for i in range(n))

    # Minimiser of (1/n) sum_i f_i + r by a long centralized proximal-gradient run.
    mean_smooth = np.linalg.eigvalsh(sum(A[i].T @ A[i] for i in range(n)) / (n * samples)).max()
    x_star = np.zeros(d)
    for _ in range(20000):
        g = sum(ls_grad(i, x_star) for i in range(n)) / n
        x_star = l1_prox(x_star - g / mean_smooth, 1.0 / mean_smooth)

    hessians = np.array([A[i].T @ A[i] / samples for i in range(n)])
    linear = np.array([A[i].T @ y[i] / samples for i in range(n)])
    x_quad = np.linalg.solve(hessians.sum(axis=0), linear.sum(axis=0))

    def quad_grad(i, x):
        return hessians[i] @ x - linear[i]

    def report(name, last, target):
        consensus = np.linalg.norm(last - last.mean(axis=0))
        distance = np.linalg.norm(last - target[None, :])
        print(
            f"{name:>12}: consensus distance {consensus:.2e}, distance to minimiser {distance:.2e}"
        )

    x0 = rng.standard_normal((n, d))
    step = 1.0 / smooth
    report("PG-EXTRA", pg_extra(ls_grad, l1_prox, W, x0, 0.5 * step, 600)[-1], x_star)
    report("NIDS", prox_nids(ls_grad, l1_prox, W, x0, step, 600)[-1], x_star)
    report("DLM", dlm(quad_grad, adjacency, x0, 1.0, 2.0 * smooth, 600)[-1], x_quad)
    report("ADMM", admm(hessians, linear, adjacency, x0, 1.0, 300)[-1], x_quad)

    # FedMid applies K client proxes and one server prox per round for K gradient steps, so
    # with full participation and eta_s = 1 its fixed point is (roughly) the minimiser with
    # the regularizer weighted (K + 1) / K: biased, as the paper's "curse of primal
    # averaging" discussion leads one to expect. FedDualAvg approaches x_star.
    x_double = np.zeros(d)
    for _ in range(20000):
        g = sum(ls_grad(i, x_double) for i in range(n)) / n
        x_double = l1_prox(x_double - g / mean_smooth, 2.0 / mean_smooth)
    print(
        f"{'':>12}  (minimiser with 2 lam: distance {np.linalg.norm(x_double - x_star):.2e} "
        "from x_star)"
    )

    server0 = rng.standard_normal(d)
    full = [np.arange(n) for _ in range(400)]
    partial = [
        rng.choice(n, size=2, replace=False) if t % 5 else np.array([], dtype=int)
        for t in range(400)
    ]
    for name, method in (("FedMid", fedmid), ("FedDualAvg", feddualavg)):
        for label, cohorts, local in (("K=1", full, 1), ("K=5", full, 5), ("partial", partial, 2)):
            models = method(ls_grad, l1_prox, server0, cohorts, local, 0.2 * step, 1.0)
            assert len(models) == len(cohorts) + 1
            distance = np.linalg.norm(models[-1] - x_star)
            extra = ""
            if name == "FedMid" and label == "K=1":
                extra = f" (to the 2 lam minimiser {np.linalg.norm(models[-1] - x_double):.2e})"
            print(f"{name:>12} {label:>7}: distance to minimiser {distance:.2e}{extra}")
