r"""LED, local exact diffusion: decentralized local steps that converge exactly."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int, choice
from ..engine import Block, RunContext, grad
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod

__all__ = ["LED"]


class LED(DecentralizedMethod):
    r"""Local exact diffusion over blocks ``x`` (the nodes' iterates) and ``y`` (the
    corrections, zero at the start), n rows each. Iteration k, with K local steps:

    .. math::

        \phi_i &\leftarrow x_i^k;\quad K \text{ times }\ \phi_i \leftarrow \phi_i
            - \alpha \nabla F_i(\phi_i) - \beta\, y_i^k,\\
        x^{k+1} &= W_k \phi,\qquad y^{k+1} = y^k + \phi - W_k \phi.

    One iteration is K local steps and one communication (of phi). ``lr`` = alpha is the
    local step; ``beta`` defaults to 1/K (with K = 1 LED is Exact Diffusion with W; with
    W = 11^T/n it is Scaffnew with a communication every K steps). The corrections keep
    the exact minimiser a fixed point whatever the clients' data, so LED converges to it
    with a fixed step and any K (linearly on strongly convex problems), where local DGD
    stalls at a distance that grows with K. State: ``x`` holds phi during the local steps
    (they are node-local phases), then "communicate" rewrites x and y with one sparse
    product.

    **Mixing.** W symmetric doubly stochastic with lambda_min(W) > -1/3. As lr -> 0 (the
    default beta = 1/K), each eigenvalue lambda of W gives the consensus errors the
    modes z = lambda +- sqrt(lambda^2 - lambda), inside the unit circle only for
    -1/3 < lambda <= 1: below -1/3 LED diverges for every small step. Metropolis weights
    (the default ``rule``) can fall there: lambda_min = -1/2 on the 3-cube, -0.38 on
    the ladder of 4 rungs, where LED with lr = 0.01 / L diverges, while a cycle (-1/3 at
    worst) and a path converge. The lazy (I + W)/2 (lambda_min >= 0) is always safe:
    give the graph those weights (half of W's off-diagonal entries, the rest on the
    diagonal) and ``rule="natural"``.

    Activation: as :class:`~stochmix.algorithms.EXTRA` (doubly stochastic mixing: edge
    gossip keeps it, node activation is refused unless ``check_mixing=False``).

    References:
        - S. A. Alghunaim, "Local exact-diffusion for decentralized optimization and
          learning", IEEE Transactions on Automatic Control, 2024 (arXiv:2302.00620).
    """

    name = "LED"
    needs = {"rule": "doubly"}
    rounds_repeat = True

    def __init__(
        self, lr, graphs: GraphSequence, local_steps=1, beta=None, rule="metropolis",
        check_mixing=True,
    ):  # fmt: skip
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self.beta = (
            1.0 / self.local_steps if beta is None else as_float(beta, "beta", positive=True)
        )
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("y", n_clients)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, y = eq.blocks("x", "y")
        x[:] -= self.lr * grad() + self.beta * y
        local = eq.build("local step")
        w = self.mixing(r, self.rule)
        x[:] = w @ x
        y[:] += x - w @ x
        return [*[local] * self.local_steps, eq.build("communicate")]
