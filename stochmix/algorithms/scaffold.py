"""SCAFFOLD: local steps corrected by control variates (Karimireddy et al. 2020)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, grad, mean, total
from .local_training import LocalTraining, train

__all__ = [
    "SCAFFOLD",
]


class SCAFFOLD(LocalTraining, Method):
    r"""SCAFFOLD with option II control variates.

    Blocks: ``x`` (server + clients) and ``c`` (row 0 the server control c, row i+1
    client i's control c_i), all controls zero at the start. One round:

    .. math::

        x &\leftarrow A_S\,x\\
        x_i &\leftarrow x_i - \gamma\,(\nabla F_i(x_i) - c_i + c) \quad (i\in S,\ K\text{ times})\\
        c_i^+ &= c_i - c + (x_0 - x_i)/(K\gamma),\qquad
        c^+ = c + \tfrac1N \textstyle\sum_{i\in S} (c_i^+ - c_i)\\
        x_0^+ &= x_0 + \tfrac{\eta}{|S|}\textstyle\sum_{i\in S} (x_i - x_0)

    the last line being one simultaneous phase. A round nobody joins changes nothing.

    Args:
        lr: local step size gamma. local_steps: K. server_lr: eta (global step size).

    References:
        - S. P. Karimireddy, S. Kale, M. Mohri, S. J. Reddi, S. U. Stich and A. T. Suresh (2020),
          "SCAFFOLD: stochastic controlled averaging for federated learning", ICML 2020
          (37th International Conference on Machine Learning), PMLR 119, Algorithm 1.
    """

    name = "SCAFFOLD"

    def __init__(self, lr, local_steps=1, server_lr=1.0):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("c", n_clients + 1)]

    def phase_key(self, r: int, participants: np.ndarray):
        return self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        # with uneven steps its controls scale by 1 / (K_i lr), per client: no template
        return None if self.uneven_steps else participants.size

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        if participants.size == 0:
            return []
        n, S = ctx.n_clients, participants
        lr, k, eta = self.lr, self.round_steps(r, S, ctx), self.server_lr
        eq = Equations(ctx)
        x, c = eq.blocks("x", "c")

        def step(G):  # y_i <- y_i - lr (g_i(y_i) - c_i + c), after the pull y_i = x
            x[G] -= lr * (grad(G) - c[G] + c.server)

        local = train(eq, S, k, step, "corrected local step")
        # c_i+ - c_i = -c + (x - y_i) / (K_i lr) (option II), for i in S
        scale = 1.0 / (k * lr)  # a number, or one per participant
        dc = -c.server + scale * (x.server - x[S])
        c[S] += dc  # each client's own control
        R, sent = self.uploads(S, ctx, k)  # the server sees the uploads that arrived
        if R.size == 0:
            return [*local, eq.build("controls")]
        if R.size != S.size:  # the clients' controls, then the server's from R's
            local.append(eq.build("controls"))
            dc = -c.server + 1.0 / (sent * lr) * (x.server - x[R])
        c.server += total(dc) / n  # c <- c + 1/N sum_R (c_i+ - c_i)
        x.server += eta * mean(x[R] - x.server)  # x <- x + eta/|R| sum_R (y_i - x)
        server = eq.build("controls and server step")
        return [*local, server]
