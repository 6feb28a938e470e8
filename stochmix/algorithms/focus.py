"""FOCUS: push-pull federated optimization, exact under arbitrary participation."""

from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_float
from ..engine import Block, Method, Phase, RunContext
from ..engine.model.equations import Equations, grad, total
from .local_training import LocalTraining, repetitions, tagged

__all__ = [
    "FOCUS",
]


class FOCUS(LocalTraining, Method):
    r"""Push-pull over blocks ``x`` (models), ``y`` (gradient trackers) and ``g`` (the
    gradient each client last computed); all zero at the start except ``x``.

    One round with participants S (R = A_S at its start, C = C_S at its end):

    .. math::

        x &\leftarrow A_S\,x\\
        &\text{for } \tau = 0..K-1:\quad (\tau > 0:\ x \leftarrow x - \gamma D_S y),\quad
          y \leftarrow y + D_S(\nabla F(x) - g),\quad g \leftarrow g + D_S(\nabla F(x) - g)\\
        y &\leftarrow C_S\,y, \qquad x_0 \leftarrow x_0 - \gamma\,y_0

    which is :math:`x^+ = R(x - \gamma D y)`, :math:`y^+ = C(y + \nabla F(x^+) - \nabla F(x))`
    with ``g`` holding the previous gradient so that it is never recomputed. The server
    row of ``y`` tracks the sum of the clients' latest gradients, so the server descends
    along the full gradient taken at stale points; with every p_i > 0 the iterates reach
    the exact minimiser at a linear rate. With minibatch gradients it is SG-FOCUS.

    A round nobody joins: the authors' server waits for a participant, so by default
    (``skip_empty_rounds=True``) such a round changes nothing; with False the server
    still steps along its tracker, x_0 <- x_0 - gamma y_0 (the recursion above with
    R = C = I).

    Args:
        lr: step size gamma, used by clients and server alike.
        local_steps: K, the local steps each participant takes in a round.
        skip_empty_rounds: whether a round nobody joins leaves the whole state as it was.

    References:
        - B. Ying, Z. Li and H. Yang (2025), "Exact and linear convergence for federated learning
          under arbitrary client participation is attainable", arXiv preprint.
        - S. Pu, W. Shi, J. Xu and A. Nedić (2021), "Push-pull gradient methods for distributed
          optimization in networks", IEEE Transactions on Automatic Control 66(1).
    """

    name = "FOCUS"

    def __init__(self, lr, local_steps=1, skip_empty_rounds=True):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.skip_empty_rounds = as_bool(skip_empty_rounds, "skip_empty_rounds")

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients + 1, "model"),
            Block("y", n_clients + 1),
            Block("g", n_clients + 1),
        ]

    def phase_key(self, r: int, participants: np.ndarray):
        return self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        return participants.size > 0

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S, lr = participants, self.lr
        if S.size == 0 and self.skip_empty_rounds:
            return []
        eq = Equations(ctx)
        x, y, g = eq.blocks("x", "y", "g")
        phases = []
        if S.size:
            x[S] = x.server  # the participants pull the server model
            phases.append(eq.build("assign"))
            trips, reps = repetitions(S, self.round_steps(r, S, ctx))
            move: Phase | None = None
            track: Phase | None = None
            for j, G in reps:
                if trips is not None or track is None:  # (an int K: built once, repeated)
                    if trips is None or j > 1:
                        x[G] -= lr * y[G]
                        move = tagged(eq.build("local step"), trips, j)
                    y[G] += grad(G) - g[G]  # the tracker takes the change of the gradient
                    g[G] = grad(G)
                    track = tagged(eq.build("track"), trips, j)
                assert track is not None
                if j > 1:
                    assert move is not None
                    phases.append(move)
                phases.append(track)
            R, _ = self.uploads(S, ctx)  # the trackers that reach the server
            phases += self.sent(R, ctx)
            if R.size:  # collect: the server adds the trackers, which restart from zero
                y.server += total(y[R])
                y[R] = 0
                phases.append(eq.build("collect"))
        x.server -= lr * y.server
        return phases + [eq.build("server step")]
