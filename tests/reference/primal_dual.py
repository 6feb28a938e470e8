"""Two primal-dual methods with local steps, written per client / per node with plain loops:
FedPD (federated, server + clients) and LED (decentralized, nodes + mixing matrix W).

Both take ``grad(i, x)``: the gradient of f_i at the 1-d array x for client / node i, and
minimise f(x) = 1/n sum_i f_i(x). Everything is NumPy float64.

FedPD
-----
X. Zhang, M. Hong, S. Dhople, W. Yin, Y. Liu, "FedPD: a federated learning framework with
adaptivity to non-IID data", IEEE Transactions on Signal Processing 69, 2021
(arXiv:2005.11418), Algorithm 1 (FedPD) with the gradient-descent local oracle.

Source of the update rules: only the paper's abstract could be reached here, not its
algorithm box, so the rules are written from my knowledge of the paper and checked against
(a) the authors' public code, github.com/564612540/FedPD, ``Python/src/optimizer.py``
(class ``FedPD_SGD``) with ``Python/src/agent.py``, and (b) a third-party LaTeX transcription
of the box, wenh06/fl-sim ``fl_sim/algorithms/fedpd/fedpd.tex``. (a) and (b) agree with
each other and with the rules below. The authors' older MATLAB script
(``Matlab/FedPD_v2/Fed_PD.m``) and fl-sim's Python code instead form the local copy as
x_{0,i} + eta * lambda_i^{new} (= x_i^{new} + eta * lambda_i^{old}); that variant is NOT
the one written here.

Client i keeps a local model x_i, a dual variable lambda_i and its own copy x_{0,i} of the
global model. Its augmented Lagrangian is

    L_i(x, x_{0,i}, lambda_i) = f_i(x) + <lambda_i, x - x_{0,i}> + 1/(2 eta) ||x - x_{0,i}||^2.

Start: x_i = x_{0,i} = x0 and lambda_i = 0 for every i; the server model is x0.
One round r (every client takes part in every round):

    1. local primal solve, warm-started at the client's own previous local model x_i^r
       (x0 in round 0), not at x_{0,i}^r: K = ``local_steps`` steps of
           x <- x - client_lr * (grad f_i(x) + lambda_i^r + (x - x_{0,i}^r) / eta)
       (gradient descent on L_i itself, not on eta * L_i); x_i^{r+1} = the last iterate;
    2. dual update        lambda_i^{r+1} = lambda_i^r + (x_i^{r+1} - x_{0,i}^r) / eta;
    3. local aggregation  x_{0,i}^+ = x_i^{r+1} + eta * lambda_i^{r+1};
    4. if coins[r] is True (the round communicates; the paper's event of probability p):
           x_0^{r+1} = 1/n sum_i x_{0,i}^+   and every client sets x_{0,i}^{r+1} = x_0^{r+1};
       if False: every client keeps x_{0,i}^{r+1} = x_{0,i}^+ and the server model is
       unchanged, x_0^{r+1} = x_0^r.

eta enters in exactly three places: the penalty 1/(2 eta) ||x - x_{0,i}||^2 of L_i (so the
term (x - x_{0,i}) / eta of the local gradient), the dual step size 1/eta, and the local
aggregation x_i + eta * lambda_i. The "server model" x_0 is the average of the clients'
x_{0,i}^+ taken at the last communicating round (x0 before the first one); right after a
communicating round every client's x_{0,i} equals it.

Behaviour worth knowing (seen in the self-check): with all coins True the server model
converges to the minimiser of f; with heterogeneous f_i and some coins False it does not
converge exactly (the minimiser is not a fixed point of a round without communication: a
client then moves towards its own f_i), while with identical f_i it still does. This fits
the paper's claim that communication can be saved in proportion to how similar the local
data are, not that a fixed p < 1 gives exact convergence under heterogeneity.

LED
---
S. A. Alghunaim, "Local exact-diffusion for decentralized optimization and learning",
IEEE Transactions on Automatic Control, 2024 (arXiv:2302.00620), the LED recursion.

Source of the update rules: again only the abstract could be reached, so the recursion is
from my knowledge of the paper, checked against two public implementations that agree with
it: team-decent/decent-bench ``decent_bench/algorithms/p2p/_led.py`` (which points to the
paper's Algorithm 1 and eqs. (2a)-(2c)) and a PyTorch optimizer ``LED`` in a ``pcode`` code
base (which uses beta = 1 / local_steps).

Node i keeps x_i and a correction (dual) variable y_i. With tau = ``local_steps`` and
alpha = ``lr``, one iteration r is tau local steps followed by one communication:

    phi_i <- x_i^r;  tau times:  phi_i <- phi_i - alpha * grad f_i(phi_i) - beta * y_i^r
    x_i^{r+1} = sum_j W[i, j] phi_j
    y_i^{r+1} = y_i^r + phi_i - x_i^{r+1}

(y_i^r is frozen during the local steps; phi_i above is the last local iterate).
Start: x^0 = the given (n, d) points, y_i^0 = 0 for every node. (Any start with
sum_i y_i^0 = 0 has the same fixed point: the y update keeps sum_i y_i constant for doubly
stochastic W, and at a fixed point y_i = -(alpha / beta) grad f_i(x*), which sums to 0
exactly at the minimiser.) The iterates returned are x^0, x^1, ..., one per communication.

beta defaults to 1 / tau. Then the correction applied over a round is tau * beta * y = y;
tau = 1 is exact diffusion with combination matrix W (x^{r+1} = W (x^r - alpha grad f(x^r)
- y^r)); and for W = 11^T / n, LED is Scaffnew with p = 1 / tau and a coin that comes up
every tau-th step (h_i = -beta y_i / alpha). This default comes from that correspondence
and the pcode implementation; I could not read the paper's own recommended value, so it is
an assumption. As for exact diffusion, tau * beta ~ 1 needs W without eigenvalues near -1
(pass e.g. (I + W) / 2 for a W with negative eigenvalues).
"""

import numpy as np


def fedpd(grad, x0, n_clients, local_steps, client_lr, eta, coins):
    """FedPD (Algorithm 1, local GD oracle), all clients in every round.

    Returns the list [x_0^0, x_0^1, ..., x_0^R] of server models (R = len(coins)),
    x_0^0 = x0; after a round whose coin is False the server model is repeated unchanged.
    Duals start at 0, local solves are warm-started at each client's previous local model,
    eta is the penalty / dual parameter (see the module docstring).
    """
    n = int(n_clients)
    start = np.array(x0, dtype=float)
    local = [start.copy() for _ in range(n)]  # x_i^r
    anchor = [start.copy() for _ in range(n)]  # x_{0,i}^r
    dual = [np.zeros_like(start) for _ in range(n)]  # lambda_i^r
    server = start.copy()
    history = [server.copy()]
    for coin in coins:
        proposals = []  # x_{0,i}^+
        for i in range(n):
            x = local[i].copy()
            for _ in range(local_steps):
                g = np.asarray(grad(i, x), dtype=float)
                x = x - client_lr * (g + dual[i] + (x - anchor[i]) / eta)
            local[i] = x
            dual[i] = dual[i] + (x - anchor[i]) / eta
            proposals.append(x + eta * dual[i])
        if coin:
            server = sum(proposals) / n
            anchor = [server.copy() for _ in range(n)]
        else:
            anchor = proposals
        history.append(server.copy())
    return history


def led(grad, W, x0, local_steps, lr, iterations, beta=None):
    """LED: tau = ``local_steps`` corrected local steps of size ``lr``, then one mixing with
    ``W`` (dense symmetric doubly stochastic, (n, n)) and the correction update.

    ``x0`` (n, d) the nodes' starting points; ``beta`` the correction weight (default
    1 / local_steps). y starts at 0. Returns the list [x^0, x^1, ..., x^iterations] of
    (n, d) arrays, one per communication round (see the module docstring).
    """
    W = np.asarray(W, dtype=float)
    x = np.array(x0, dtype=float)
    n = x.shape[0]
    if beta is None:
        beta = 1.0 / local_steps
    y = [np.zeros_like(x[i]) for i in range(n)]
    history = [x.copy()]
    for _ in range(iterations):
        phi = []
        for i in range(n):
            p = x[i].copy()
            for _ in range(local_steps):
                p = p - lr * np.asarray(grad(i, p), dtype=float) - beta * y[i]
            phi.append(p)
        new_x = np.zeros_like(x)
        for i in range(n):
            for j in range(n):
                if W[i, j] != 0.0:
                    new_x[i] = new_x[i] + W[i, j] * phi[j]
        for i in range(n):
            y[i] = y[i] + phi[i] - new_x[i]
        x = new_x
        history.append(x.copy())
    return history


def _quadratics(n, d, rng, spread=3.0, identical=False):
    """f_i(x) = 0.5 (x - c_i)^T H_i (x - c_i), H_i SPD with spectrum in [1, 4]; returns
    (grad, minimiser of the average)."""
    hessians, centers = [], []
    for _ in range(n):
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        hessians.append(q @ np.diag(rng.uniform(1.0, 4.0, d)) @ q.T)
        centers.append(spread * rng.standard_normal(d))
    if identical:
        hessians = [hessians[0]] * n
        centers = [centers[0]] * n
    x_star = np.linalg.solve(
        sum(hessians), sum(h @ c for h, c in zip(hessians, centers, strict=True))
    )
    return (lambda i, x: hessians[i] @ (x - centers[i])), x_star


def _ring(n):
    """Lazy Metropolis ring: (I + M) / 2 with M the ring, weight 1/3 per edge (eigenvalues
    of the result in [0, 1])."""
    m = np.zeros((n, n))
    for i in range(n):
        for j in ((i - 1) % n, (i + 1) % n):
            m[i, j] = 1.0 / 3.0
        m[i, i] = 1.0 - m[i].sum()
    return 0.5 * (np.eye(n) + m)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    n, d = 6, 4
    grad, x_star = _quadratics(n, d, rng)
    x_init = np.zeros(d)
    print("||x0 - x*||:", np.linalg.norm(x_init - x_star))

    rounds = 400
    out = fedpd(grad, x_init, n, 10, 0.1, 0.5, [True] * rounds)
    print(
        f"FedPD, all coins True, {rounds} rounds: ||x_0 - x*|| =", np.linalg.norm(out[-1] - x_star)
    )
    coins = list(rng.random(4 * rounds) < 0.3)
    out = fedpd(grad, x_init, n, 10, 0.1, 0.5, coins)
    tail = [np.linalg.norm(o - x_star) for o in out[-400:]]
    print(
        f"FedPD, coins with p = 0.3, {len(coins)} rounds ({sum(coins)} communications): "
        f"||x_0 - x*|| = {tail[-1]:.3g} (last 400 rounds: min {min(tail):.3g}, max {max(tail):.3g})"
    )
    same_grad, same_star = _quadratics(n, d, np.random.default_rng(1), identical=True)
    out = fedpd(same_grad, x_init, n, 10, 0.1, 0.5, coins)
    print("FedPD, same coins, identical f_i: ||x_0 - x*|| =", np.linalg.norm(out[-1] - same_star))

    W = _ring(n)
    starts = rng.standard_normal((n, d))
    for tau in (1, 5):
        out = led(grad, W, starts, tau, 0.05, 600)
        err = max(np.linalg.norm(out[-1][i] - x_star) for i in range(n))
        print(f"LED, local_steps = {tau}, 600 iterations: max_i ||x_i - x*|| =", err)
