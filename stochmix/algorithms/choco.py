"""CHOCO-SGD: decentralized SGD with compressed communication (Koloskova et al. 2019)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float
from ..engine import Block, RunContext, grad
from ..mixing.compression import Compressor, NoCompression, TopK, compressor
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod

__all__ = [
    "CHOCO",
]


class _Compress:
    """x^_i <- x^_i + Q(x_i - x^_i) (+ sigma * N(0, I): channel noise), every node at once;
    the compression draws come first from the map's generator, then the noise."""

    def __init__(self, q: Compressor, noise: float):
        self.q, self.noise = q, noise
        self.name = f"{q.name} compression"

    def row_top_k(self) -> float | None:
        """k where the map is ``xhat + TopK_k(x - xhat)`` (top-k; no compression: k =
        inf, every entry) and draws nothing (no channel noise), else None: the compiled
        batches then apply it themselves
        (:func:`stochmix.engine.runner.slot_form._top_k_triplets`)."""
        if self.noise:
            return None
        if type(self.q) is NoCompression:
            return float("inf")
        return float(self.q.k) if type(self.q) is TopK else None

    def __call__(self, x, xhat, *, info):
        out = xhat + self.q(x - xhat, info.rng)
        if self.noise:
            out = out + self.noise * info.rng.standard_normal(out.shape)
        return out


class CHOCO(DecentralizedMethod):
    r"""CHOCO-SGD over blocks ``x`` (the nodes' models) and ``xhat`` (the public copies
    x^, zero at the start), n rows each; round k (Koloskova et al. 2019, Algorithm 2):

    .. math::

        x_i &\leftarrow x_i - \eta\,\nabla F_i(x_i)\\
        \hat x_i &\leftarrow \hat x_i + Q(x_i - \hat x_i)\\
        x_i &\leftarrow x_i + \gamma \textstyle\sum_j w^{(k)}_{ij} (\hat x_j - \hat x_i)

    Q a compressor of :mod:`stochmix.mixing.compression` (top-k, rand-k, QSGD, ...),
    applied to every node's row at once with its draws from the round's map generator
    (label ``"compress"``; see :mod:`stochmix.engine.model.rowmap`). ``lr = 0`` is
    CHOCO-Gossip, which drives the nodes to the average of their starting points at a
    linear rate (the average is kept exactly with doubly stochastic W). The local step and
    the gossip step are linear phases (the gossip one whole-block); the compression is a
    nonlinear row map, so the exact-operator analysis refuses the method.

    ``channel_noise`` = sigma > 0 adds N(0, sigma^2) noise to every transmitted entry
    (the q_i every neighbour receives, hence x^: a noisy channel that all receivers see
    alike), drawn after the compression draws.

    Args:
        lr: eta >= 0 (0: CHOCO-Gossip).
        graphs: the graph sequence.
        gamma: the consensus step gamma in (0, 1].
        compression: a :class:`~stochmix.mixing.compression.Compressor` or a spec string
            (``"top_k:K"``, ``"rand_k:K"``, ``"qsgd:S"``, ... ; ``"none"``).
        rule: the weight rule (doubly stochastic).
        channel_noise: sigma >= 0.

    Shapes: ``x``, ``xhat`` (n, d).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - A. Koloskova, S. U. Stich and M. Jaggi (2019), "Decentralized stochastic optimization
          and gossip algorithms with compressed communication", ICML 2019, PMLR 97
          (arXiv:1902.00340).
    """

    name = "CHOCO-SGD"
    needs = {"rule": "doubly"}

    @property
    def rounds_repeat(self) -> bool:  # type: ignore[override]
        """Whether the iterations repeat: a compressor without draws (top-k, none) and no
        channel noise, unless set otherwise on the instance. Then plans are reused, a
        small graph's iterations run in compiled batches and gossip ticks in compiled
        segments; a compressor that draws (rand-k, QSGD) or channel noise draws anew
        every round, and every round is built."""
        found = self.__dict__.get("_rounds_repeat")
        if found is not None:
            return found
        return bool(self.compression.deterministic) and not self.channel_noise

    @rounds_repeat.setter
    def rounds_repeat(self, value) -> None:
        self.__dict__["_rounds_repeat"] = bool(value)

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        gamma=0.5,
        compression="top_k:1",
        rule="metropolis",
        channel_noise=0.0,
        check_mixing=True,
    ):
        super().__init__(1.0, graphs, check_mixing=check_mixing)
        self.lr = as_float(lr, "lr", nonnegative=True)
        self.gamma = as_float(gamma, "gamma", positive=True)
        if self.gamma > 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma!r}")
        self.compression = compressor(compression)
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        self.rule = rule
        self.channel_noise = as_float(channel_noise, "channel_noise", nonnegative=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("xhat", n_clients)]

    def sent_floats(self, block: str, dim: int) -> int:
        """A node sends its compressed change q_i, not x^_i: what the compressor costs
        (:meth:`~stochmix.mixing.compression.Compressor.floats`)."""
        return self.compression.floats(dim) if block == "xhat" else dim

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, xhat = eq.blocks("x", "xhat")
        phases = []
        if self.lr:
            x[:] -= self.lr * grad()
            phases.append(eq.build("local step"))
        compress = _Compress(self.compression, self.channel_noise)
        rows = eq.active if eq.active is not None else np.arange(ctx.n_clients)
        phases.append(ctx.map("xhat", rows, compress, "x", "xhat", round=r, label="compress"))
        w = self.mixing(r, self.rule)
        x[:] += self.gamma * (w @ xhat - xhat)  # x + gamma (W_k - I) x^
        return [*phases, eq.build("gossip")]
