"""SCAFFOLD: local steps corrected by control variates (Karimireddy et al. 2020)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Method, RunContext
from ..mixing.federated import assign_rows


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
        n, s, nodes = ctx.n_clients, participants.size, participants + 1
        lr, k = self.lr, self.local_steps
        pull = ctx.phase("assign").apply("x", "x", assign_rows(participants, n))
        step = (
            ctx.phase("corrected local step")
            .keep("x", nodes)
            .gradient("x", nodes, participants, -lr)
            .combine("x", nodes, "c", nodes, lr)
            .combine("x", nodes, "c", 0, -lr)
        )
        inv = 1.0 / (k * lr)
        server = (
            ctx.phase("controls and server step")
            # c_i <- c_i - c + (x_0 - x_i) / (K lr)
            .keep("c", nodes)
            .combine("c", nodes, "c", 0, -1.0)
            .combine("c", nodes, "x", 0, inv)
            .combine("c", nodes, "x", nodes, -inv)
            # c <- c + (1/N) sum_S (-c + (x_0 - x_i) / (K lr))
            .keep("c", 0, 1.0 - s / n)
            .combine("c", 0, "x", 0, s * inv / n)
            .combine("c", 0, "x", nodes, -inv / n)
            # x_0 <- x_0 + eta/|S| sum_S (x_i - x_0)
            .keep("x", 0, 1.0 - self.server_lr)
            .combine("x", 0, "x", nodes, self.server_lr / s)
        )
        return [pull.build()] + [step.build()] * k + [server.build()]
