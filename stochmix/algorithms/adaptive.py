"""Adaptive server optimizers: FedAdagrad, FedAdam and FedYogi (Reddi et al. 2021)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, choice
from ..engine import Block, Equations, Method, RunContext, dot
from .local_training import LocalTraining, pull_and_train

__all__ = [
    "FedAdagrad",
    "FedAdam",
    "FedAdaptive",
    "FedYogi",
    "KINDS",
]

KINDS = ("adam", "yogi", "adagrad")


class _SecondMoment:
    """v <- update(v, Delta) row-wise (the map of the "second moment" phase)."""

    def __init__(self, kind: str, beta2: float, initial: float):
        self.kind, self.beta2, self.initial = kind, beta2, initial
        self.name = f"{kind} second moment"
        #: the element-wise kernel the compiled programs apply in the run's tail
        #: (:mod:`stochmix.engine.model.kernels`): the same operations in the same order
        scalars = (initial,) if kind == "adagrad" else (beta2, initial)
        self.row_kernel = (f"{kind}_moment", scalars)

    def __call__(self, v, delta, *, info):
        v = v + self.initial  # v_{-1}: added once, in the first update (initial = 0 after)
        sq = delta * delta
        if self.kind == "adam":
            return self.beta2 * v + (1.0 - self.beta2) * sq
        if self.kind == "yogi":
            return v - (1.0 - self.beta2) * sq * np.sign(v - sq)
        return v + sq


class _ServerStep:
    """x_0 <- x_0 + eta m / (sqrt(v) + tau)."""

    name = "adaptive server step"

    def __init__(self, server_lr: float, tau: float):
        self.server_lr, self.tau = server_lr, tau
        self.row_kernel = ("adaptive_step", (server_lr, tau))  # (as the second moment's)

    def __call__(self, x0, m, v, *, info):
        return x0 + self.server_lr * m / (np.sqrt(v) + self.tau)


class FedAdaptive(LocalTraining, Method):
    r"""FedAdagrad, FedAdam or FedYogi (``kind``): FedAvg's local training with an adaptive
    server optimizer (Reddi et al. 2021, Algorithm 2), over blocks ``x`` (row 0 server,
    row i+1 client i), ``m``, ``v`` and ``delta`` (one row each, zero at the start).

    One round with participants S (after the pull ``x_i <- x_0`` and K local steps
    ``x_i <- x_i - gamma grad F_i(x_i)``):

    .. math::

        \Delta &= \tfrac{1}{|S|}\textstyle\sum_{i\in S} (x_i - x_0),\qquad
        m \leftarrow \beta_1 m + (1-\beta_1)\Delta\\
        v &\leftarrow v + \Delta^2 \ \text{(adagrad)}\ \big|\
            \beta_2 v + (1-\beta_2)\Delta^2 \ \text{(adam)}\ \big|\
            v - (1-\beta_2)\,\Delta^2\,\mathrm{sign}(v - \Delta^2) \ \text{(yogi)}\\
        x_0 &\leftarrow x_0 + \eta\, m / (\sqrt{v} + \tau)

    (squares, roots, signs and the division entry by entry). The pseudo-gradient and m
    are one linear phase (``delta`` keeps Delta); the v update and the server step are
    nonlinear row maps (:class:`~stochmix.engine.RowMap`), so the exact-operator analysis
    refuses the method. Both are element-wise kernels of
    :mod:`stochmix.engine.model.kernels` (``adam_moment``, ``yogi_moment``,
    ``adagrad_moment``, ``adaptive_step``), which the compiled programs apply in the tail
    of the round's run: a round is one program. v starts from ``initial_v`` (the paper's
    v_{-1} >= tau^2; default tau^2): the first update adds it. No bias correction, as in
    the paper. A round nobody joins changes nothing.

    Args:
        lr: local step size gamma.
        local_steps: K, the local steps each participant takes in a round.
        server_lr: eta.
        kind: "adam", "yogi" or "adagrad".
        beta1: in [0, 1).
        beta2: in [0, 1) (unused by adagrad).
        tau: the adaptivity tau > 0.
        initial_v: v_{-1} >= 0 (None: tau^2).

    Shapes: ``x`` (N + 1, d), ``m``, ``v``, ``delta`` (1, d).

    References:
        - S. J. Reddi, Z. Charles, M. Zaheer, Z. Garrett, K. Rush, J. Konečný, S. Kumar and
          H. B. McMahan (2021), "Adaptive federated optimization", ICLR 2021
          (arXiv:2003.00295), Algorithm 2.
    """

    name = "FedAdaptive"

    def __init__(
        self,
        lr,
        local_steps=1,
        server_lr=0.1,
        kind="adam",
        beta1=0.9,
        beta2=0.99,
        tau=1e-3,
        initial_v=None,
    ):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)
        self.kind = choice(kind, "kind", KINDS)
        self.name = {"adam": "FedAdam", "yogi": "FedYogi", "adagrad": "FedAdagrad"}[self.kind]
        self.beta1 = as_float(beta1, "beta1", nonnegative=True)
        self.beta2 = as_float(beta2, "beta2", nonnegative=True)
        for name, beta in (("beta1", self.beta1), ("beta2", self.beta2)):
            if beta >= 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {beta!r}")
        self.tau = as_float(tau, "tau", positive=True)
        self.initial_v = (
            self.tau**2 if initial_v is None else as_float(initial_v, "initial_v", nonnegative=True)
        )

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("m", 1), Block("v", 1), Block("delta", 1)]

    def start(self, ctx: RunContext) -> None:
        ctx.memory["server_updates"] = 0

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        local = pull_and_train(S, ctx, self.lr, self.round_steps(r, S, ctx))
        S, _ = self.uploads(S, ctx)  # the server sees the uploads that arrived
        if S.size == 0:
            return local
        local = local + self.sent(S, ctx)
        q = np.full(S.size, 1.0 / S.size)
        eq = Equations(ctx)
        x, m, delta = eq.blocks("x", "m", "delta")
        pseudo = dot(q, x[S] - x.server)
        delta.server = pseudo
        m.server = self.beta1 * m.server + (1.0 - self.beta1) * pseudo
        first = ctx.memory.get("server_updates", 0) == 0
        ctx.memory["server_updates"] = ctx.memory.get("server_updates", 0) + 1
        second = _SecondMoment(self.kind, self.beta2, self.initial_v if first else 0.0)
        return [
            *local,
            eq.build("pseudo-gradient"),
            ctx.map("v", [0], second, "v", "delta", round=r, label="second moment"),
            ctx.map(
                "x",
                [0],
                _ServerStep(self.server_lr, self.tau),
                "x",
                "m",
                "v",
                round=r,
                label="server step",
            ),
        ]


class FedAdam(FedAdaptive):
    """:class:`FedAdaptive` with ``kind="adam"``."""

    def __init__(self, lr, local_steps=1, server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3,
                 initial_v=None):  # fmt: skip
        super().__init__(lr, local_steps, server_lr, "adam", beta1, beta2, tau, initial_v)


class FedYogi(FedAdaptive):
    """:class:`FedAdaptive` with ``kind="yogi"``."""

    def __init__(self, lr, local_steps=1, server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3,
                 initial_v=None):  # fmt: skip
        super().__init__(lr, local_steps, server_lr, "yogi", beta1, beta2, tau, initial_v)


class FedAdagrad(FedAdaptive):
    """:class:`FedAdaptive` with ``kind="adagrad"`` (beta2 unused)."""

    def __init__(self, lr, local_steps=1, server_lr=0.1, beta1=0.9, tau=1e-3, initial_v=None):
        super().__init__(lr, local_steps, server_lr, "adagrad", beta1, 0.0, tau, initial_v)
