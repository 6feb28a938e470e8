"""Acc-DNGD-SC (Qu & Li, "Accelerated distributed Nesterov gradient descent", IEEE TAC
2020, arXiv:1705.07176) written per node from the paper's recursion. Iteration k = 0, 1,
... uses W_k = graphs.matrix(k, rule) where the paper writes W; W_k[i, j] is the weight
node i gives to what it receives from node j. Each node i keeps four vectors, started at
x_i^0 = v_i^0 = y_i^0 = x0 (row i of a per-node x0) and s_i^0 = grad F_i(y_i^0):

  x_i^{k+1} = sum_j W[i, j] y_j^k - eta s_i^k
  v_i^{k+1} = (1 - alpha) sum_j W[i, j] v_j^k + alpha sum_j W[i, j] y_j^k - (eta / alpha) s_i^k
  y_i^{k+1} = (x_i^{k+1} + alpha v_i^{k+1}) / (1 + alpha)
  s_i^{k+1} = sum_j W[i, j] s_j^k + grad F_i(y_i^{k+1}) - grad F_i(y_i^k)

with alpha = sqrt(mu eta) in the paper's strongly convex tuning. Returns the mean over
nodes of x after each iteration, shape (iterations + 1, dim), row 0 the start.

Source (issue 43): the stored LaTeX source of the paper gives its abstract only, so the
updates are written from knowledge of the paper. Checked: the x and s lines (and the order
"mix s, then add the gradient difference") are those of a public third-party
implementation of the paper's non-strongly-convex variant, which shares them; with W = I
the recursion is Nesterov's constant-momentum method for strongly convex f.
"""

import numpy as np

from tests.reference.decentralized import _grad, _mean, _mix, start


def acc_dngd(problem, graphs, iterations, x0, lr, alpha, rule="metropolis"):
    n = problem.n_clients
    x = start(x0, n)
    v = [xi.copy() for xi in x]
    y = [xi.copy() for xi in x]
    grads = [_grad(problem, i, y[i]) for i in range(n)]
    s = [gi.copy() for gi in grads]
    history = [_mean(x)]
    for k in range(iterations):
        w = graphs.matrix(k, rule).toarray()
        wy, wv, ws = _mix(w, y), _mix(w, v), _mix(w, s)
        x = [wy[i] - lr * s[i] for i in range(n)]
        v = [(1.0 - alpha) * wv[i] + alpha * wy[i] - (lr / alpha) * s[i] for i in range(n)]
        y = [(x[i] + alpha * v[i]) / (1.0 + alpha) for i in range(n)]
        new_grads = [_grad(problem, i, y[i]) for i in range(n)]
        s = [ws[i] + new_grads[i] - grads[i] for i in range(n)]
        grads = new_grads
        history.append(_mean(x))
    return np.array(history)
