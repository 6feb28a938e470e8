"""Phases shared by the federated methods: pull the server model, then train locally."""

from __future__ import annotations

import numpy as np

from ..engine import Phase, RunContext
from ..engine.equations import Equations, grad

__all__ = [
    "pull_and_train",
]


def pull_and_train(
    participants: np.ndarray, ctx: RunContext, lr: float, local_steps: int, block: str = "x"
) -> list[Phase]:
    r"""``x_i <- x_0`` (the pull, ``x <- A_S x``) then ``local_steps`` times ``x_i <- x_i -
    lr grad F_i(x_i)``, i in S."""
    S = participants
    eq = Equations(ctx)
    (x,) = eq.blocks(block)
    x[S] = x.server
    pull = eq.build("assign")
    x[S] -= lr * grad(S)
    return [pull] + [eq.build("local step")] * local_steps
