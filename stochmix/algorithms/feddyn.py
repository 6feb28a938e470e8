"""FedDyn: federated learning with dynamic regularization (Acar et al. 2021)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, grad, mean, total
from .local_training import LocalTraining, train

__all__ = [
    "FedDyn",
]


class FedDyn(LocalTraining, Method):
    r"""FedDyn over blocks ``x`` (row 0 the server model theta, row i+1 client i's model
    theta_i), ``g`` (N rows: client i's linear-term memory, the paper's
    :math:`\nabla L_i(\theta_i^{t-1})`, zero at the start) and ``h`` (one row: the
    server's state, zero at the start).

    Client i of S minimises the dynamically regularised problem

    .. math::

        \theta_i \leftarrow \arg\min_\theta\; f_i(\theta) - \langle g_i, \theta\rangle
            + \tfrac{\alpha}{2}\,\|\theta - \theta_0\|^2 ,

    which this class solves inexactly, by K gradient steps of size gamma from the server
    model (the authors' code also runs local SGD epochs on this objective):

    .. math::

        \theta_i &\leftarrow \theta_0, \qquad
        \theta_i \leftarrow \theta_i - \gamma\,\big(\nabla f_i(\theta_i) - g_i
            + \alpha(\theta_i - \theta_0)\big) \quad (K\text{ times})\\
        g_i &\leftarrow g_i - \alpha\,(\theta_i - \theta_0), \qquad
        h \leftarrow h - \tfrac{\alpha}{N} \textstyle\sum_{i\in S} (\theta_i - \theta_0)\\
        \theta_0 &\leftarrow \tfrac{1}{|S|} \textstyle\sum_{i\in S} \theta_i - h/\alpha

    (the last line reads the new h). Every coefficient is a number, so each phase is
    linear in the state. Since h = (1/N) sum_i g_i throughout, a fixed point has every
    theta_i = theta_0, g_i = grad f_i(theta_0) and sum_i g_i = 0: the exact minimiser,
    also with inexact local solves. A round nobody joins changes nothing (the mean over
    S is undefined there).

    Args:
        lr: local step size gamma (stable for gamma < 2 / (L + alpha)).
        local_steps: K, the local steps each participant takes in a round.
        alpha: the regularisation weight alpha > 0.

    Shapes: ``x`` (N + 1, d), ``g`` (N, d), ``h`` (1, d).

    References:
        - D. A. E. Acar, Y. Zhao, R. Matas, M. Mattina, P. Whatmough and V. Saligrama (2021),
          "Federated learning based on dynamic regularization", ICLR 2021 (9th International
          Conference on Learning Representations), Algorithm 1.
    """

    name = "FedDyn"

    def __init__(self, lr, local_steps=1, alpha=0.1):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.alpha = as_float(alpha, "alpha", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients + 1, "model"),
            Block("g", n_clients, first_node=1),
            Block("h", 1),
        ]

    def phase_key(self, r: int, participants: np.ndarray):
        return self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        return participants.size

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        lr, alpha, n = self.lr, self.alpha, ctx.n_clients
        eq = Equations(ctx)
        x, g, h = eq.blocks("x", "g", "h")

        def step(G):  # a gradient step on f_i(t) - <g_i, t> + alpha/2 ||t - theta_0||^2
            x[G] -= lr * (grad(G) - g[G] + alpha * (x[G] - x.server))

        local = train(eq, S, self.round_steps(r, S, ctx), step, "regularised local step")
        g[S] -= alpha * (x[S] - x.server)  # each client's own state
        R, _ = self.uploads(S, ctx)  # the server sees the uploads that arrived
        if R.size != S.size:  # the clients' states, then the server's from R's
            local.append(eq.build("client memory"))
        if R.size == 0:
            return local
        h.server -= alpha / n * total(x[R] - x.server)
        memory = eq.build("memory")
        x.server = mean(x[R]) - h.server / alpha
        server = eq.build("server model")
        return [*local, memory, server]
