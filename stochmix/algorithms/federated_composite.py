r"""Federated composite optimization: FedMid and FedDualAvg (Yuan, Zaheer and Reddi 2021).

Both minimise f + r, f = (1/N) sum_i F_i, on a :class:`~stochmix.problems.Composite`
problem, with the mirror map h = ||x||^2 / 2 (so every mirror step is a prox of r, a row
map over the participants' rows: :class:`~stochmix.algorithms.proximal.ProxStep`). On a
smooth problem both are FedAvg (the proxes are the identity and are left out).

The paper's point ("the curse of primal averaging"): FedMid averages the clients' primal
models, each of them sparse after its prox, but their average is not (the supports
differ), and only the server's prox makes it sparse again; FedDualAvg averages the dual
states and maps the average to the primal space with one prox whose threshold grows
with the rounds, so its server model is sparse.
"""

from __future__ import annotations

from functools import partial
from typing import cast

import numpy as np

from .._validate import as_float
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, grad
from ..engine.model.round_scalars import RoundScalar
from ..participation import uniform_weights
from .aggregation import averaged
from .local_training import LocalTraining, repeated, tagged
from .proximal import prox_rows

__all__ = ["FedDualAvg", "FedMid"]


class _Composite(LocalTraining, Method):
    proximal = True

    def __init__(self, lr, local_steps=1, server_lr=1.0):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)

    @staticmethod
    def _average(x, received: np.ndarray, eta: float) -> None:
        """x_0 <- x_0 + eta / |R| sum_{i in R} (x_i - x_0), R the received uploads."""
        x.server = averaged(x, received, uniform_weights(received), eta, uniform_weights)


class FedMid(_Composite):
    r"""FedMid, federated mirror descent with a prox, over one model block ``x`` (row 0
    the server, row i+1 client i). Round r with participants S:

    .. math::

        x_i &\leftarrow x_0,\qquad K_i \text{ times } x_i \leftarrow
            \operatorname{prox}_{\gamma r}\big(x_i - \gamma \nabla F_i(x_i)\big)
            \quad (i \in S),\\
        x_0 &\leftarrow \operatorname{prox}_{\eta\gamma r}\Big(x_0 + \eta\,\tfrac{1}{|S|}
            \textstyle\sum_{i\in S} (x_i - x_0)\Big).

    gamma = ``lr`` (the client step, also the clients' prox step), eta = ``server_lr``
    (it scales the averaged change, and eta gamma is the server's prox step). A round
    nobody joins (or whose uploads were all lost) changes nothing. Each local step is a
    node-local phase and a prox over the group's rows; the average is one phase and the
    server's prox a map of row 0. Local steps may differ between clients
    (:mod:`stochmix.algorithms.local_steps`).

    References:
        - H. Yuan, M. Zaheer and S. Reddi, "Federated composite optimization", ICML 2021,
          PMLR 139:12253-12266.
    """

    name = "FedMid"

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def phase_key(self, r: int, participants: np.ndarray):
        return self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        # the same phases up to who participates (1/|S| a round scalar that reads them;
        # uneven local steps: with the round's trip counts, LocalTraining.round_trips); a
        # subclass keeps the key by |S| (its hooks may read |S| without a rule)
        return True if type(self) is FedMid else participants.size

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        steps = self.round_steps(r, S, ctx)
        received, _ = self.uploads(S, ctx, steps)
        eq = Equations(ctx)
        (x,) = eq.blocks("x")
        x[S] = x.server
        phases = [eq.build("assign")]

        def step(G):
            x[G] -= self.lr * grad(G)

        for j, G, phase in repeated(eq, S, steps, step):
            phases.append(phase)
            if ctx.regularizer is not None:  # a prox after each step, tagged as the step is
                trips = phase.trips[0] if phase.trips is not None else None
                phases.append(tagged(prox_rows(ctx, x[G], x[G], self.lr, r), trips, j))
        if received.size == 0:
            return phases
        self._average(x, received, self.server_lr)
        phases += [*self.sent(received, ctx), eq.build("average")]
        if ctx.regularizer is not None:
            phases.append(prox_rows(ctx, x.server, x.server, self.server_lr * self.lr, r))
        return phases


class FedDualAvg(_Composite):
    r"""FedDualAvg, federated dual averaging, over blocks ``x`` (primal points) and ``z``
    (dual states), row 0 the server and row i+1 client i; z starts at x^0. Round r with
    participants S, each taking K local steps (t = 0..K-1):

    .. math::

        z_i &\leftarrow z_0,\quad x_i \leftarrow
            \operatorname{prox}_{\tilde\eta_{r,0} r}(z_0) \quad (i \in S),\\
        z_i &\leftarrow z_i - \gamma \nabla F_i(x_i),\qquad
        x_i \leftarrow \operatorname{prox}_{\tilde\eta_{r,t+1} r}(z_i),\qquad
        \tilde\eta_{r,t} = \eta\gamma r K + \gamma t,\\
        z_0 &\leftarrow z_0 + \eta\,\tfrac{1}{|S|}\textstyle\sum_{i\in S}(z_i - z_0),\qquad
        x_0 \leftarrow \operatorname{prox}_{\eta\gamma (r+1) K\, r}(z_0).

    The prox thresholds grow with the round index r (the run's round, counting rounds
    nobody joined, which change nothing but r). The clients' first point is the prox of
    the server's dual state with the round's threshold, which is the server's model
    unless the round before was empty. Gradients are taken at the
    primal points ``x``; the reported model is the server's x_0. K is one int (the
    thresholds count the steps of every client alike); uneven local steps are refused.

    References:
        - H. Yuan, M. Zaheer and S. Reddi, "Federated composite optimization", ICML 2021,
          PMLR 139:12253-12266.
    """

    name = "FedDualAvg"

    def __init__(self, lr, local_steps=1, server_lr=1.0):
        super().__init__(lr, local_steps, server_lr)
        if not isinstance(self.local_steps, int):
            raise ValueError(
                "local_steps must be one int for FedDualAvg (its prox thresholds count the "
                f"steps of every client alike), got {self.local_steps!r}"
            )

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("z", n_clients + 1, "model")]

    def template_key(self, r: int, participants: np.ndarray):
        # the same phases up to who participates, but for 1/|S| and the thresholds, which
        # follow the participants and r by rules (round scalars: a template binds each
        # round's); round 0 has no first prox; a subclass's own round keys by |S|
        if type(self) is FedDualAvg:
            return r == 0
        return participants.size, r == 0

    def threshold(self, r: int, t: int) -> float:
        """The prox threshold of local step ``t`` (0..K) in round ``r``,
        ``eta gamma r K + gamma t`` (t = K: the server's, ``eta gamma (r + 1) K`` when
        eta = 1)."""
        K, gamma, eta = cast(int, self.local_steps), self.lr, self.server_lr
        return eta * gamma * r * K + gamma * t

    def _threshold(self, r: int, t: int) -> RoundScalar:
        return RoundScalar(self.threshold(r, t), partial(self.threshold, t=t))

    def _server_threshold(self, r: int) -> float:
        return self.server_lr * self.lr * (r + 1) * cast(int, self.local_steps)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        received, _ = self.uploads(S, ctx)
        K, gamma, eta = cast(int, self.local_steps), self.lr, self.server_lr
        eq = Equations(ctx)
        x, z = eq.blocks("x", "z")
        z[S] = z.server
        first = self._threshold(r, 0)  # the clients' first threshold
        if ctx.regularizer is None or first == 0.0:
            phases = [eq.build("assign")]
            x[S] = z[S]  # z_0, just received: the first point costs no message of its own
            phases.append(eq.build("first point"))
        else:
            # prox of z[S], which the assignment just set to z_0: the clients' own rows
            # (an element-wise kernel runs inside the compiled run of the round)
            phases = [eq.build("assign"), prox_rows(ctx, x[S], z[S], first, r)]
        for t in range(K):
            z[S] -= gamma * grad(S)
            phases.append(eq.build("dual step"))
            if ctx.regularizer is None:
                x[S] = z[S]
                phases.append(eq.build("primal point"))
            elif t < K - 1:  # the last point is not used
                phases.append(prox_rows(ctx, x[S], z[S], self._threshold(r, t + 1), r))
        if received.size == 0:
            return phases
        self._average(z, received, eta)
        phases += [*self.sent(received, ctx), eq.build("average")]
        if ctx.regularizer is None:
            x.server = z.server
            return [*phases, eq.build("server point")]
        server = RoundScalar(self._server_threshold(r), self._server_threshold)
        return [*phases, prox_rows(ctx, x.server, z.server, server, r)]
