"""SCAFFOLD: local steps corrected by control variates (Karimireddy et al. 2020)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Method, RunContext
from ..engine.equations import Equations, grad, mean, total

__all__ = [
    "SCAFFOLD",
]


class SCAFFOLD(Method):
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
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("c", n_clients + 1)]

    def phase_key(self, r: int, participants: np.ndarray):
        return participants.tobytes()

    def template_key(self, r: int, participants: np.ndarray):
        return participants.size

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        if participants.size == 0:
            return []
        n, S = ctx.n_clients, participants
        lr, k, eta = self.lr, self.local_steps, self.server_lr
        eq = Equations(ctx)
        x, c = eq.blocks("x", "c")
        x[S] = x.server  # the participants pull the server model
        pull = eq.build("assign")
        x[S] -= lr * (grad(S) - c[S] + c.server)  # y_i <- y_i - lr (g_i(y_i) - c_i + c)
        step = eq.build("corrected local step")
        # c_i+ - c_i = -c + (x - y_i) / (K lr) (option II), for i in S
        dc = -c.server + 1.0 / (k * lr) * (x.server - x[S])
        c[S] += dc
        c.server += total(dc) / n  # c <- c + 1/N sum_S (c_i+ - c_i)
        x.server += eta * mean(x[S] - x.server)  # x <- x + eta/|S| sum_S (y_i - x)
        server = eq.build("controls and server step")
        return [pull] + [step] * k + [server]
