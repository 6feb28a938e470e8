"""Decentralized methods under activation, written per node (plain loops over nodes).

Iteration k reads the k-th record of ``process.activations(seed)`` (``records[k]``): its
active nodes A = ``record.nodes`` and, for gossip, its pairs ``record.edges`` (sender j,
receiver i). W_k = graphs.matrix(k, rule) (W[i, j]: the weight node i gives to node j).

The rules every function follows (each phase of an iteration reads the state the previous
phase left):

* a **pull** term sum_j W[i, j] m_j (row- or doubly stochastic W) is computed by an active
  node i from all its neighbours, active or not;
* a **push** term (column-stochastic C) is sent only by active nodes: an active node i gets
  sum_{j in A} C[i, j] m_j, an inactive node i keeps its value and adds
  sum_{j in A} C[i, j] m_j, what active nodes push to it;
* local terms and gradients are computed by active nodes only; an inactive node keeps its
  value otherwise;
* under edge activation (gossip) W_k is replaced by W_E over the activated pairs:
  W_E[i, j] = 1/2 on each pair (j -> i) and W_E[i, i] = 1 - (pairs received by i) / 2
  ("pairwise", S. Boyd, A. Ghosh, B. Prabhakar, D. Shah, "Randomized gossip algorithms",
  IEEE TIT 52(6), 2006, Sec. II-B: x_i, x_j <- (x_i + x_j) / 2 on the woken edge), or
  ``mixing="weights"``: W_E[i, j] = W_k[i, j] on the pairs and the rest on the diagonal;
* gradient-tracking methods start y = g = grad F(x^0) at every node (not an iteration).

Every function takes ``(problem, graphs, records, x0, lr, ...)`` and returns the mean over
nodes of the node models after each iteration, shape (len(records) + 1, dim), row 0 the
start. With every node active in every record they are the plain references of
``tests/reference/decentralized.py`` and ``decentralized_zoo.py``.
"""

import numpy as np

from tests.reference.decentralized import _grad, _mean, start


class _Round:
    """The matrices and the rules of one iteration (record k)."""

    def __init__(self, graphs, k, record, n, mixing="pairwise"):
        self.k, self.graphs, self.n = k, graphs, n
        self.active = set(int(i) for i in record.nodes)
        self.edges = None if record.edges is None else [tuple(map(int, e)) for e in record.edges]
        self.mixing = mixing

    def matrix(self, rule):
        """W_k, or W_E over the record's pairs under edge activation (dense, for loops)."""
        n = self.n
        if self.edges is None:
            return self.graphs.matrix(self.k, rule).toarray()
        base = self.graphs.matrix(self.k, rule).toarray() if self.mixing == "weights" else None
        w = np.eye(n)
        for sender, receiver in self.edges:
            weight = 0.5 if base is None else base[receiver, sender]
            w[receiver, sender] += weight
            w[receiver, receiver] -= weight
        return w

    def is_active(self, i):
        return i in self.active

    def pull(self, w, values, i):
        """What node i reads: sum_j W[i, j] values_j over every j."""
        total = np.zeros_like(np.asarray(values[0], dtype=float))
        for j in range(self.n):
            if w[i, j] != 0.0:
                total = total + w[i, j] * values[j]
        return total

    def pushed(self, c, values, i):
        """What node i receives from the active senders: sum_{j in A} C[i, j] values_j."""
        total = np.zeros_like(np.asarray(values[0], dtype=float))
        for j in sorted(self.active):
            if c[i, j] != 0.0:
                total = total + c[i, j] * values[j]
        return total

    def push(self, c, values, i, local=None):
        """The push rule for ``T = local + C m``: an active node gets local_i +
        sum_{j in A} C[i, j] m_j, an inactive node keeps ``old`` (its value before the
        phase, ``local`` holds it for inactive nodes) plus what it receives."""
        received = self.pushed(c, values, i)
        return received if local is None else local[i] + received


def dgd(
    problem, graphs, records, x0, lr, rule="metropolis", decay=0.0, form="atc", mixing="pairwise"
):
    """DGD under activation.

    atc (diffusion): active i: x_i <- x_i - a_k grad F_i(x_i) (local step); then active i:
    x_i <- sum_j W[i, j] x_j (combine, pull). cta (Nedic & Ozdaglar 2009; the asynchronous
    form of X. Lian, W. Zhang, C. Zhang, J. Liu, "Asynchronous decentralized parallel
    stochastic gradient descent", ICML 2018, Algorithm 1: a worker takes its gradient at
    the model it read, averages with its peer, then applies the gradient, lines 3-6):
    active i: x_i <- sum_j W[i, j] x_j - a_k grad F_i(x_i) (gradient at the point before
    mixing). Inactive nodes keep x_i. a_k = lr / (k + 1)^decay.
    """
    n = problem.n_clients
    x = start(x0, n)
    history = [_mean(x)]
    for k, record in enumerate(records):
        rnd = _Round(graphs, k, record, n, mixing)
        w = rnd.matrix(rule)
        step = lr / (k + 1) ** decay
        if form == "atc":
            x = [
                x[i] - step * _grad(problem, i, x[i]) if rnd.is_active(i) else x[i]
                for i in range(n)
            ]
            x = [rnd.pull(w, x, i) if rnd.is_active(i) else x[i] for i in range(n)]
        else:
            x = [
                rnd.pull(w, x, i) - step * _grad(problem, i, x[i]) if rnd.is_active(i) else x[i]
                for i in range(n)
            ]
        history.append(_mean(x))
    return np.array(history)


def gossip_average(x0, records, n):
    """Randomized pairwise gossip (Boyd et al. 2006, Sec. II-B, the asynchronous
    algorithm): when the edge {i, j} is woken, x_i, x_j <- (x_i + x_j) / 2; the other nodes
    keep their values. Records of one edge each (``RandomEdge``) or of disjoint edges
    (``RandomMatching``). Returns every node's value after each tick, (ticks + 1, n, dim)."""
    x = start(x0, n)
    out = [np.array(x)]
    for record in records:
        pairs = {(min(a, b), max(a, b)) for a, b in map(lambda e: tuple(map(int, e)), record.edges)}
        for i, j in sorted(pairs):
            mid = 0.5 * (x[i] + x[j])
            x[i], x[j] = mid.copy(), mid.copy()
        out.append(np.array(x))
    return np.array(out)


def gradient_tracking(
    problem, graphs, records, x0, lr, rule="metropolis", form="cta", mixing="pairwise"
):
    """Gradient tracking under activation, y_i = g_i = grad F_i(x_i^0) at every node first.

    cta (DIGing, Nedic, Olshevsky & Shi 2017, eqs. (3a)-(3b), per node): active i:
    x_i <- sum_j W[i, j] x_j - lr y_i (pull); then active i: y_i <- sum_j W[i, j] y_j +
    grad F_i(x_i) - g_i, g_i <- grad F_i(x_i) (pull, at the new x). atc (Xu et al. 2015):
    active i: x_i <- sum_j W[i, j] (x_j - lr y_j); active i: y_i <- y_i + grad F_i(x_i) -
    g_i, g_i <- grad F_i(x_i); active i: y_i <- sum_j W[i, j] y_j. W pulls in both.
    """
    if form == "atc":
        return _pull_push_tracking(problem, graphs, records, x0, lr, rule, rule, False, mixing)
    n = problem.n_clients
    x = start(x0, n)
    g = [_grad(problem, i, x[i]) for i in range(n)]
    y = [gi.copy() for gi in g]
    history = [_mean(x)]
    for k, record in enumerate(records):
        rnd = _Round(graphs, k, record, n, mixing)
        w = rnd.matrix(rule)
        x = [rnd.pull(w, x, i) - lr * y[i] if rnd.is_active(i) else x[i] for i in range(n)]
        new_y, new_g = list(y), list(g)
        for i in sorted(rnd.active):
            grad_i = _grad(problem, i, x[i])
            new_y[i] = rnd.pull(w, y, i) + grad_i - g[i]
            new_g[i] = grad_i
        y, g = new_y, new_g
        history.append(_mean(x))
    return np.array(history)


def _pull_push_tracking(
    problem, graphs, records, x0, lr, row_rule, column_rule, pushes, mixing, state=None
):
    """x pulled with R, tracker y (pushed with C when ``pushes``, else pulled); ``state``
    (a dict) receives the final x, y and g."""
    n = problem.n_clients
    x = start(x0, n)
    g = [_grad(problem, i, x[i]) for i in range(n)]
    y = [gi.copy() for gi in g]
    history = [_mean(x)]
    for k, record in enumerate(records):
        rnd = _Round(graphs, k, record, n, mixing)
        r, c = rnd.matrix(row_rule), rnd.matrix(column_rule)
        half = [x[j] - lr * y[j] for j in range(n)]
        x = [rnd.pull(r, half, i) if rnd.is_active(i) else x[i] for i in range(n)]
        y, g = list(y), list(g)
        for i in sorted(rnd.active):
            grad_i = _grad(problem, i, x[i])
            y[i] = y[i] + grad_i - g[i]
            g[i] = grad_i
        if pushes:
            y = [rnd.push(c, y, i, None if rnd.is_active(i) else y) for i in range(n)]
        else:
            y = [rnd.pull(c, y, i) if rnd.is_active(i) else y[i] for i in range(n)]
        history.append(_mean(x))
    if state is not None:
        state.update(x=np.array(x), y=np.array(y), g=np.array(g))
    return np.array(history)


def push_pull(
    problem,
    graphs,
    records,
    x0,
    lr,
    row_rule="row",
    column_rule="column",
    mixing="pairwise",
    state=None,
):
    """Push-pull (Pu et al. 2021, eqs. (4a)-(4b)) under activation; its asynchronous form is
    that of Y. Tian, Y. Sun, G. Scutari, "Achieving linear convergence in distributed
    asynchronous multiagent optimization", IEEE TAC 65(12), 2020 (ASY-SONATA, Algorithm 1:
    the waking agent updates its local copy from its in-neighbours' values, step (S.2),
    and pushes shares of its tracker, step (S.3), the mass others hold being kept).

    y_i = g_i = grad F_i(x_i^0) at every node; then per iteration: active i:
    x_i <- sum_j R[i, j] (x_j - lr y_j) (pull); active i: y_i <- y_i + grad F_i(x_i) - g_i,
    g_i <- grad F_i(x_i); y <- C y pushed: active i: y_i <- sum_{j in A} C[i, j] y_j,
    inactive i: y_i <- y_i + sum_{j in A} C[i, j] y_j. Sum of y = sum of g throughout.
    """
    return _pull_push_tracking(
        problem, graphs, records, x0, lr, row_rule, column_rule, True, mixing, state
    )


def push_sum(
    problem, graphs, records, x0, lr, decay=0.0, rule="column", mixing="pairwise", state=None
):
    """Subgradient-push under activation (asynchronous gradient push: M. Assran, M. Rabbat,
    "Asynchronous gradient push", IEEE TAC 66(1), 2021, Algorithm 1: a waking agent takes a
    local gradient step on its numerator at its de-biased z_i = x_i / w_i, line 4, then
    sends the shares C[j, i] x_i, C[j, i] w_i to its out-neighbours and keeps C[i, i] of
    them, lines 5-7; receivers add what they receive, line 8). With lr = 0 it is the
    push-sum gossip of D. Kempe, A. Dobra, J. Gehrke, "Gossip-based computation of
    aggregate information", FOCS 2003 (Protocol Push-Sum: s_i, w_i halved and shared;
    s_i / w_i -> the average).

    w_i = 1, x_i = x0 at start. Iteration k: from k = 1 on, active i:
    x_i <- x_i - a_{k-1} grad F_i(x_i / w_i); then push with C_k: active i:
    x_i <- sum_{j in A} C[i, j] x_j, w_i likewise; inactive i adds what it receives.
    Reported: z_i = x_i / w_i.
    """
    n = problem.n_clients
    x = start(x0, n)
    w = [1.0] * n
    history = [_mean([x[i] / w[i] for i in range(n)])]
    for k, record in enumerate(records):
        rnd = _Round(graphs, k, record, n, mixing)
        c = rnd.matrix(rule)
        if k > 0:
            step = lr / k**decay
            x = [
                x[i] - step * _grad(problem, i, x[i] / w[i]) if rnd.is_active(i) else x[i]
                for i in range(n)
            ]
        x = [rnd.push(c, x, i, None if rnd.is_active(i) else x) for i in range(n)]
        weights = [np.array([wi]) for wi in w]
        w = [
            float(rnd.push(c, weights, i, None if rnd.is_active(i) else weights)[0])
            for i in range(n)
        ]
        history.append(_mean([x[i] / w[i] for i in range(n)]))
    if state is not None:
        state.update(x=np.array(x), w=np.array(w))
    return np.array(history)


def extra(problem, graphs, records, x0, lr, rule="metropolis", mixing="pairwise"):
    """EXTRA (Shi et al. 2015, eq. (2.13), W~ = (I + W)/2) under activation, one phase per
    iteration with memories xp (previous iterate) and g (its gradient), both zero at start.

    Iteration 0, every node i (the first step starts the memory, whatever the
    activation), with the graph's W_0: x_i <- sum_j W_0[i, j] x_j - lr grad F_i(x_i);
    iteration k >= 1, active i: x_i <- x_i + sum_j W[i, j] x_j - 1/2 (xp_i + sum_j W[i, j]
    xp_j) - lr (grad F_i(x_i) - g_i); and in both, xp_i <- x_i (before the update),
    g_i <- grad F_i(x_i). W pulls. Inactive nodes keep x, xp and g.
    """
    n = problem.n_clients
    x = start(x0, n)
    xp = [np.zeros_like(xi) for xi in x]
    g = [np.zeros_like(xi) for xi in x]
    history = [_mean(x)]
    for k, record in enumerate(records):
        rnd = _Round(graphs, k, record, n, mixing)
        w = rnd.matrix(rule)
        new_x, new_xp, new_g = list(x), list(xp), list(g)
        if k == 0:
            w0 = graphs.matrix(0, rule).toarray()
        for i in range(n) if k == 0 else sorted(rnd.active):
            grad_i = _grad(problem, i, x[i])
            if k == 0:
                new_x[i] = sum(w0[i, j] * x[j] for j in range(n)) - lr * grad_i
            else:
                new_x[i] = (
                    x[i]
                    + rnd.pull(w, x, i)
                    - 0.5 * (xp[i] + rnd.pull(w, xp, i))
                    - lr * (grad_i - g[i])
                )
            new_xp[i] = x[i]
            new_g[i] = grad_i
        x, xp, g = new_x, new_xp, new_g
        history.append(_mean(x))
    return np.array(history)
