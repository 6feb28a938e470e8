r"""FedPD: a federated primal-dual method with communication skipping (Zhang et al. 2021)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, grad, mean
from ..engine.model.rowmap import map_generator
from .decentralized_base import require_everyone

__all__ = ["FedPD"]


class FedPD(Method):
    r"""FedPD with local gradient steps, over blocks ``x`` (row 0 the server model, row i+1
    client i's primal iterate), ``anchor`` (client i's local copy x0_i of the global
    model, x^0 at the start) and ``lam`` (client i's dual variable, zero at the start).
    Every client works in every round r:

    .. math::

        &K \text{ times } x_i \leftarrow x_i - \gamma\big(
            \nabla F_i(x_i) + \lambda_i + (x_i - x_{0,i})/\eta\big)
            \quad(\text{the augmented Lagrangian } F_i(x) + \langle \lambda_i, x - x_{0,i}
            \rangle + \lVert x - x_{0,i}\rVert^2 / (2\eta)),\\
        \lambda_i &\leftarrow \lambda_i + (x_i - x_{0,i}) / \eta,\qquad
        x_{0,i} \leftarrow x_i + \eta \lambda_i,\\
        &\text{with probability } p:\quad x_0 \leftarrow \tfrac1N \textstyle\sum_i x_{0,i},
            \quad x_{0,i} \leftarrow x_0 \ \text{(every client)}.

    The local solve is warm-started at the client's own last iterate x_i (x^0 in round 0;
    the authors' code). One round is one local solve of every client; it communicates
    with probability p (one
    coin for all, drawn from the run's seed and the round: :func:`~stochmix.engine.model.rowmap.
    map_generator` with the label ``"communicate"``), otherwise the clients keep their
    local copies and the server model (the reported one) is unchanged. With p = 1 the
    fixed point is exact whatever the clients' data: lambda_i = -grad F_i(x*) and x_{0,i}
    = x*. With p < 1 a round without communication moves each client towards its own
    minimiser, so on heterogeneous clients FedPD stays at a distance that shrinks as p
    grows (exact again when the clients are alike: the paper's point is that the
    communication saved grows with the clients' similarity).
    ``lr`` is the local step gamma; ``eta`` the penalty parameter (the proximal term's
    1/eta and the dual step 1/eta).

    Args:
        lr: gamma > 0.
        eta: eta > 0.
        local_steps: K >= 1.
        p: the probability that a round communicates, in (0, 1].

    Shapes: ``x`` (N + 1, d); ``anchor``, ``lam`` (N, d).

    References:
        - X. Zhang, M. Hong, S. Dhople, W. Yin and Y. Liu, "FedPD: a federated learning
          framework with adaptivity to non-IID data", IEEE Transactions on Signal
          Processing 69:6055-6070, 2021.
    """

    name = "FedPD"

    def __init__(self, lr, eta=1.0, local_steps=1, p=1.0):
        self.lr = as_float(lr, "lr", positive=True)
        self.eta = as_float(eta, "eta", positive=True)
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self.p = as_float(p, "p", positive=True)
        if self.p > 1.0:
            raise ValueError(f"p must be in (0, 1], got {p!r}")

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients + 1, "model"),
            Block("anchor", n_clients, "model", first_node=1),
            Block("lam", n_clients, first_node=1),
        ]

    def check_participation(self, participation) -> None:
        reason = (
            "every client solves its local problem in every round; p is the chance a round "
            "communicates"
        )
        require_everyone(participation, "FedPD", reason)

    def communicates(self, r: int, ctx: RunContext) -> bool:
        """Whether round r communicates (the same answer for the same seed and round)."""
        if self.p == 1.0:
            return True
        return bool(map_generator(ctx.seed, r, "communicate").random() < self.p)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        eq = Equations(ctx)
        x, anchor, lam = eq.blocks("x", "anchor", "lam")
        gamma, eta = self.lr, self.eta
        x[S] -= gamma * (grad(S) + lam[S] + (x[S] - anchor[S]) / eta)
        phases = [eq.build("local step")] * self.local_steps
        lam[S] += (x[S] - anchor[S]) / eta
        anchor[S] = 2.0 * x[S] - anchor[S] + eta * lam[S]  # x + eta * (the new lambda)
        phases.append(eq.build("dual step"))
        if self.communicates(r, ctx):
            x.server = mean(anchor[S])
            phases.append(eq.build("average"))
            anchor[S] = x.server
            phases.append(eq.build("broadcast"))
        return phases
