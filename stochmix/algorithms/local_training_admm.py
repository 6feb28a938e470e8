r"""Local training in the ADMM family: LT-ADMM (decentralized, on a fixed graph) and
Fed-LT (federated, a server and N clients).

Both replace an ADMM / Peaceman-Rachford local solve by a few gradient steps warm-started
at the node's last model, so a round communicates once for several gradient steps, and
both keep the minimiser a fixed point (the local steps stop exactly where the local
problem is solved). LT-ADMM is :class:`~stochmix.algorithms.relaxed_admm.RelaxedADMM`
with alpha = 1/2 and the gradient solver; Fed-LT is Peaceman-Rachford splitting on the
consensus problem min sum_i f_i(x_i) s.t. x_i = y.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Equations, Method, RunContext, grad, mean
from ..mixing.sequences import GraphSequence
from .relaxed_admm import RelaxedADMM

__all__ = ["FedLT", "LTADMM"]


class LTADMM(RelaxedADMM):
    r"""LT-ADMM, local training ADMM (Ren, Bastianello, Johansson & Parisini 2025), with
    full local gradients, on a fixed undirected graph:

    .. math::

        \phi_i &\leftarrow \phi_i - \gamma \nabla f_i(\phi_i)
            - \beta\big(\rho d_i x_i^k - s_i^k\big)
            \quad (\tau \text{ times, from } \phi_i = x_i^k),
            \qquad x_i^{k+1} = \phi_i,\\
        z_{ij}^{k+1} &= (1 - \alpha) z_{ij}^k + \alpha\big(-z_{ji}^k + 2\rho x_j^{k+1}\big),
            \qquad s_i = \textstyle\sum_{j \in N_i} z_{ij},

    the gradient of the ADMM penalty (rho d_i x - s_i) frozen at the round's start x_i^k
    and scaled by its own step beta; run in the node sums s_i = sum_j z_ij, t_i = sum_j
    z_ji (see :mod:`~stochmix.algorithms.relaxed_admm`): s^{k+1} = (1 - alpha) s^k - alpha
    t^k + 2 alpha rho A x^{k+1}, t^{k+1} = (1 - alpha) t^k - alpha s^k + 2 alpha rho D
    x^{k+1}; z_ij^0 = 0. The minimiser is a fixed point for every tau, gamma and beta (a
    local step stops at x* where gamma grad f_i(x*) = -beta (rho d_i x* - s_i), and these
    s_i sum to rho sum_i d_i x*, as the z update needs), and with full gradients the
    iterates converge
    linearly to it for small enough steps (the paper's theorem for its stochastic and
    variance-reduced estimates, exact here); more local steps tau make each round go
    further. With tau = 1 and beta = gamma it is
    :class:`~stochmix.algorithms.relaxed_admm.RelaxedADMM` with ``solver="gradient"``.

    **Peer implementation.** decent-bench (github.com/team-decent/decent-bench, commit
    ad39310, ``decent_bench/algorithms/p2p/_lt_admm.py``, class ``LT_ADMM``, written with
    the paper's second author and attributed to its Algorithm 1) runs this recursion.
    Mapping: ``step_size`` = ``lr`` = gamma, ``aux_step_size`` = ``aux_lr`` = beta,
    ``penalty`` = rho, ``alpha`` = ``relaxation``, ``num_local_steps`` = tau; it starts
    z_ij^0 = x_i^0 where this class starts z_ij^0 = 0 (the same at x^0 = 0; either start
    converges to the same minimiser). Measured for the earlier form of this class (the
    peer's recursion re-implemented from its code in a throwaway script; heterogeneous
    quadratics, n = 6, d = 3, a ring with two chords, tau = 1): the iterates agree to
    1.3e-14 over 200 iterations; an earlier version of this class evaluated rho d_i phi at
    the current local iterate, which differs for tau > 1, and was changed to the peer's
    form.

    One iteration: tau gradients per node and one exchange (one vector per neighbour).
    State: blocks ``x``, ``s``, ``t`` and ``c`` (the frozen penalty step), each (n, d); a
    round is "frozen penalty", tau "local step" phases (node-local) and "edge variables"
    (one sparse product). Every node works in every iteration (``participation.Full(n)``;
    others are refused).

    Args:
        lr: gamma > 0, the local gradient step; gamma = 1 / (L + rho d_max) is safe.
        graphs: a static graph (``period == 1``; undirected: symmetrised).
        penalty: rho > 0, the ADMM penalty; default 1.
        local_steps: tau >= 1, local gradient steps per round; default 5 (a choice of
            this library).
        aux_lr: beta > 0, the step of the frozen penalty term; default ``lr``. tau beta rho
            d_max below 1 keeps a round's move bounded.
        relaxation: alpha in (0, 1); default 1/2 (ADMM).

    References:
        - X. Ren, N. Bastianello, K. H. Johansson and T. Parisini, "Communication-efficient
          stochastic distributed learning", arXiv:2501.13516, 2025 (LT-ADMM, Algorithm 1,
          with full gradients instead of its stochastic or variance-reduced estimates).
    """

    name = "LTADMM"
    rounds_repeat = True

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        penalty=1.0,
        local_steps=5,
        check_mixing=True,
        aux_lr=None,
        relaxation=0.5,
    ):
        gamma = as_float(lr, "lr", positive=True)
        rho = as_float(penalty, "penalty", positive=True)
        super().__init__(
            1.0 / rho, graphs, relaxation, "gradient", gamma, local_steps, check_mixing
        )
        self.lr = gamma  # the local step; the penalty is self.penalty
        self.aux_lr = gamma if aux_lr is None else as_float(aux_lr, "aux_lr", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [*super().blocks(n_clients), Block("c", n_clients)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        neighbours, own, shift, _ = self._operators(r, self._build)
        eq = self.round_equations(participants, ctx)
        x, s, t, c = eq.blocks("x", "s", "t", "c")
        beta = self.aux_lr
        c[:] = (beta * shift) * x - beta * s  # beta (rho d_i x_i^k - s_i^k)
        frozen = eq.build("frozen penalty")
        x[:] = x - self.lr * grad() - c
        steps = [eq.build("local step")] * self.local_steps
        a = self.relaxation
        s[:] = (1.0 - a) * s - a * t + neighbours @ x
        t[:] = (1.0 - a) * t - a * s + own * x
        return [frozen, *steps, eq.build("edge variables")]


class FedLT(Method):
    r"""Fed-LT, federated learning by Peaceman-Rachford splitting with local training,
    over blocks ``x`` (row 0 the server's y, row i+1 client i's model) and ``z`` (client
    i's auxiliary variable; both start at x^0). Round k with active clients S:

    .. math::

        y^{k+1} &= \tfrac1N \textstyle\sum_{i=1}^N z_i^k \quad (\text{every client's } z),\\
        x_i &\leftarrow x_i - \gamma\Big(\nabla f_i(x_i) + \frac{x_i - (2 y^{k+1} -
            z_i^k)}{\rho}\Big) \quad (K \text{ times from } x_i^k,\ i \in S),\\
        z_i^{k+1} &= z_i^k + 2 \alpha \big(x_i^{k+1} - y^{k+1}\big) \quad (i \in S),

    the K steps approximating x_i^{k+1} = prox_{rho f_i}(2 y^{k+1} - z_i^k); clients
    outside S keep x_i and z_i. alpha = 1 (default) is the Peaceman-Rachford step; alpha
    in (0, 1) relaxes it (alpha = 1/2: Douglas-Rachford). The minimiser is the fixed
    point: z_i = x* - rho grad f_i(x*), x_i = y = x*. The reported model is y.

    **Peer implementation.** decent-bench (github.com/team-decent/decent-bench, commit
    ad39310, ``decent_bench/algorithms/federated/_fed_lt.py``, class ``FedLT`` with
    ``local_solver="gd"`` and its default zero server cost, so that y is the plain average
    of the z_i) runs this recursion with alpha = 1 (it has no relaxation argument).
    Mapping: ``step_size`` = ``lr`` = gamma, ``penalty`` = rho, ``num_local_steps`` = K;
    its default ``z0=None`` starts z_i^0 = x_i^0, as here. Measured (a throwaway script, the
    peer's recursion re-implemented from its code; heterogeneous quadratics, 6 clients,
    d = 3, all clients every round, gamma = 1 / (L + 1/rho), rho in {0.5, 2}, K in {1, 5}):
    y and every client's x_i agree to at most 4.0e-15 over 200 rounds.

    One round: K gradients per active client, one upload (z_i) per active client and one
    broadcast of y. Partial participation runs as the paper allows (the inactive keep
    their variables); y then averages stale z_i.

    Args:
        lr: gamma > 0, the local step; the local problem is (L_i + 1/rho)-smooth, so
            gamma = 1 / (L + 1/rho) is safe.
        local_steps: K >= 1; default 5 (a choice of this library).
        penalty: rho > 0, the proximal parameter; default 1.
        relaxation: alpha in (0, 1]; default 1.

    Shapes: ``x`` (N + 1, d); ``z`` (N, d).

    References:
        - N. Bastianello, C. Liu and K. H. Johansson, "Enhancing privacy in federated
          learning through local training", arXiv:2403.17572, 2024 (its Fed-PLT, without
          the privacy noise; see ``tests/reference/relaxed_admm.py`` for how the rules
          were obtained).
    """

    name = "FedLT"

    def __init__(self, lr, local_steps=5, penalty=1.0, relaxation=1.0):
        self.lr = as_float(lr, "lr", positive=True)
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self.penalty = as_float(penalty, "penalty", positive=True)
        self.relaxation = as_float(relaxation, "relaxation", positive=True)
        if self.relaxation > 1.0:
            raise ValueError(f"relaxation must be in (0, 1], got {relaxation!r}")

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("z", n_clients, "model", first_node=1)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        eq = Equations(ctx)
        x, z = eq.blocks("x", "z")
        x.server = mean(z[np.arange(ctx.n_clients)])
        phases = [eq.build("coordinator")]
        if S.size == 0:
            return phases
        gamma, rho = self.lr, self.penalty
        x[S] -= gamma * (grad(S) + (x[S] - 2.0 * x.server + z[S]) / rho)
        phases += [eq.build("local step")] * self.local_steps
        z[S] += 2.0 * self.relaxation * (x[S] - x.server)
        return [*phases, eq.build("auxiliary")]
