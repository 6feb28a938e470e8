"""Scaffnew (ProxSkip for federated learning, Mishchenko et al. 2022)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, grad, mean
from .decentralized_base import require_everyone

__all__ = [
    "Scaffnew",
]


class Scaffnew(Method):
    r"""Scaffnew: local gradient steps corrected by control variates h_i, communicating
    with probability p per iteration.

    Blocks: ``x`` (row 0 the averaged model of the last communication, row i+1 client
    i's model; all x0 at the start) and ``h`` (N rows: client i's control variate, zero at
    the start, so that sum_i h_i = 0 as the paper requires). The paper's iteration is

    .. math::

        \hat x_i &= x_i - \gamma\,(\nabla f_i(x_i) - h_i)\\
        x_i^+ &= \begin{cases} \tfrac1N \sum_j \big(\hat x_j - \tfrac{\gamma}{p} h_j\big)
            & \text{with probability } p \text{ (one coin for all clients)}\\
            \hat x_i & \text{otherwise}\end{cases}\\
        h_i^+ &= h_i + \tfrac{p}{\gamma}\,(x_i^+ - \hat x_i)

    (h changes only when they communicate). **One round here is one communication**:
    the iterations up to and including the next one that communicates. Their number L_r
    is geometric on {1, 2, ...} with parameter p (the coins' first success), drawn from a
    generator seeded by ``(seed, r)``: the same seed gives the same draws in every run,
    whatever the participation. A round is then

    .. math::

        x_i \leftarrow x_i - \gamma(\nabla f_i(x_i) - h_i) \quad (L_r \text{ times}),\qquad
        x_0 \leftarrow \tfrac1N \textstyle\sum_i (x_i - \tfrac{\gamma}{p} h_i),\qquad
        h_i \leftarrow h_i + \tfrac{p}{\gamma}(x_0 - x_i),\quad x_i \leftarrow x_0 ,

    the last two reading the new x_0. Rounds are thus comparable with FedAvg's: one
    exchange each, on average 1/p local steps. Every client takes part in every round (the
    paper's setting): a round whose participants are not all N clients is refused, so run
    it with ``participation.Full(n)``. With gamma <= 1/L it converges linearly to the
    exact minimiser; p = 1/sqrt(kappa) needs O(sqrt(kappa) log 1/eps) communications.

    Args:
        lr: step size gamma.
        p: probability of communicating after an iteration, in (0, 1].
        seed: seeds the numbers of local steps (an int >= 0).

    Shapes: ``x`` (N + 1, d), ``h`` (N, d).

    References:
        - K. Mishchenko, G. Malinovsky, S. Stich and P. Richtárik (2022), "ProxSkip: yes! Local
          gradient steps provably lead to communication acceleration! Finally!", ICML 2022
          (39th International Conference on Machine Learning), PMLR 162, Algorithms 1-2.
    """

    name = "Scaffnew"

    def __init__(self, lr, p=0.2, seed=0):
        self.lr = as_float(lr, "lr", positive=True)
        self.p = as_float(p, "p", positive=True, maximum=1.0)
        self.seed = as_int(seed, "seed", minimum=0)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("h", n_clients, first_node=1)]

    def local_steps(self, r: int) -> int:
        """L_r: the iterations of round r, geometric on {1, 2, ...} with parameter p."""
        if self.p == 1.0:
            return 1
        return int(np.random.default_rng((self.seed, int(r))).geometric(self.p))

    def check_participation(self, participation) -> None:
        """Refuse, before any work, a process (or a clock, or lost uploads) that does not
        run every client in every round (the paper's setting)."""
        require_everyone(participation, self.name, "every client runs in every round")

    def round_steps(self, r: int, participants: np.ndarray, ctx) -> int:
        """The local steps every client takes in round r (L_r; what a clock times)."""
        return self.local_steps(r)

    def phase_key(self, r: int, participants: np.ndarray):
        return (self.local_steps(r), participants.size)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        n, S = ctx.n_clients, participants
        if S.size != n:
            raise ValueError(
                f"{self.name} runs every client in every round (the paper's setting); use "
                f"participation Full(n) (got {S.size} of {n} clients in round {r})"
            )
        lr, p = self.lr, self.p
        eq = Equations(ctx)
        x, h = eq.blocks("x", "h")
        x[S] -= lr * (grad(S) - h[S])
        step = eq.build("corrected local step")
        x.server = mean(x[S] - lr / p * h[S])
        average = eq.build("average")
        h[S] += p / lr * (x.server - x[S])
        x[S] = x.server
        communicate = eq.build("controls and broadcast")
        return [step] * self.local_steps(r) + [average, communicate]
