r"""Lossy uplinks for federated methods: compression (with or without EF21 error feedback)
and additive noise on what each participant uploads.

:class:`CompressedUplink` wraps a federated method whose participants upload their model
change (FedAvg and its weighted variants, FedAvgM, FedStale/FedVARP/MIFA, FedAdam/FedYogi/
FedAdagrad, FedProx, FedNova: the update Delta_i = x_i - x_0). (FOCUS's trackers are
left out: the server's tracker is exact only if it receives the sum of the clients'
gradient changes, which a compressed upload, with or without EF21, breaks.) After the
local steps, a row map replaces each participant's upload u_i by what the
server receives:

.. math::

    \text{plain:}\quad \hat u_i = Q(u_i) + \sigma\,\xi_i, \qquad
    \text{EF21:}\quad e_i \leftarrow e_i + Q(u_i - e_i),\ \ \hat u_i = e_i + \sigma\,\xi_i

with Q a compressor of :mod:`stochmix.mixing.compression` (top-k, rand-k, QSGD) and
xi_i ~ N(0, I). EF21 (Richtárik, Sokolov and Fatkhullin, NeurIPS 2021) keeps, on each
client, e_i (zero at the start; a block ``uplink_memory`` of one row per client) as its
running estimate of its own upload and sends only the compressed correction; the server's
estimate is the same e_i. The server then aggregates the received uploads as the method
always does (the model rows become x_0 + \hat u_i). The maps'
draws come from the run's seed, the round and the label ``"uplink"``
(:mod:`stochmix.engine.model.rowmap`).

Lost uploads are a participation matter (:class:`~stochmix.participation.UplinkDrops`);
both combine.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_float
from ..engine import Block, Equations, Method, RunContext
from ..mixing.compression import Compressor, compressor
from .adaptive import FedAdaptive
from .fedavg import FedAvg
from .fedprox import FedProx
from .proximal import map_rows
from .stale import FedStale
from .wrapper import Wrapper

__all__ = [
    "CompressedUplink",
]

#: the methods whose participants upload their model change x_i - x_0 (with their
#: subclasses: FedNova, AmplifiedFedAvg, FedAvgM, FedVARP, MIFA, FedAdam, FedYogi, FedAdagrad)
UPLOADS = (FedAvg, FedStale, FedAdaptive, FedProx)


class _Send:
    """The row map of plain compression: x_i <- x_0 + Q(x_i - x_0) + sigma xi."""

    def __init__(self, q: Compressor, noise: float):
        self.q, self.noise = q, noise
        self.name = f"{q.name} uplink"

    def __call__(self, rows, server, *, info):
        sent = self.q(rows - server, info.rng)
        if self.noise:
            sent = sent + self.noise * info.rng.standard_normal(sent.shape)
        return server + sent


class _Feedback:
    """EF21's client memory: e_i <- e_i + Q(x_i - x_0 - e_i)."""

    def __init__(self, q: Compressor):
        self.q = q
        self.name = f"{q.name} EF21 memory"

    def __call__(self, memory, rows, server, *, info):
        return memory + self.q(rows - server - memory, info.rng)


class _Receive:
    """What the server reads after EF21: x_i <- x_0 + e_i + sigma xi."""

    def __init__(self, noise: float):
        self.noise = noise
        self.name = "EF21 upload"

    def __call__(self, memory, server, *, info):
        sent = memory
        if self.noise:
            sent = sent + self.noise * info.rng.standard_normal(sent.shape)
        return server + sent


class CompressedUplink(Wrapper):
    """``method`` whose participants' uploads are compressed (and noisy), with or without
    EF21 error feedback (see the module docstring).

    Everything else is ``method``'s: its blocks (plus ``uplink_memory`` with error
    feedback), local steps, aggregation and outputs.

    Args:
        method: a federated method of :data:`UPLOADS` (or a subclass).
        compression: a :class:`~stochmix.mixing.compression.Compressor` or a spec string
            (``"top_k:K"``, ``"rand_k:K"``, ``"qsgd:S"``, ``"none"``).
        error_feedback: EF21 (True) or plain compression (False).
        noise: sigma >= 0, the standard deviation of the additive noise per entry.

    References:
        - P. Richtárik, I. Sokolov and I. Fatkhullin (2021), "EF21: a new, simpler,
          theoretically better, and practically faster error feedback", NeurIPS 2021.
    """

    def __init__(self, method: Method, compression="none", error_feedback=False, noise=0.0):
        if not isinstance(method, UPLOADS):
            known = ", ".join(c.__name__ for c in UPLOADS)
            raise TypeError(
                f"method must be a federated method whose upload is known ({known} and their "
                f"variants), got {type(method).__name__}"
            )
        self.compression = compressor(compression)
        self.error_feedback = as_bool(error_feedback, "error_feedback")
        self.noise = as_float(noise, "noise", nonnegative=True)
        feedback = " + EF21" if self.error_feedback else ""
        super().__init__(method, f"{method.name} + {self.compression.name}{feedback} uplink")

    def blocks(self, n_clients: int) -> list[Block]:
        extra = [Block("uplink_memory", n_clients, first_node=1)] if self.error_feedback else []
        return self.method.blocks(n_clients) + extra

    def fingerprint(self) -> str:
        from .._fingerprint import digest

        return digest(type(self).__qualname__, repr(self.compression), self.error_feedback,
                      self.noise, self.method.fingerprint())  # fmt: skip

    def send(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        """The row maps that turn the participants' uploads into what the server reads."""
        S = participants
        eq = Equations(ctx)
        x = eq.block("x")
        if not self.error_feedback:
            send = _Send(self.compression, self.noise)
            return [map_rows(ctx, x[S], send, x[S], x.server, round=r, label="uplink")]
        memory = eq.block("uplink_memory")
        return [
            map_rows(ctx, memory[S], _Feedback(self.compression), memory[S], x[S], x.server,
                     round=r, label="uplink"),
            map_rows(ctx, x[S], _Receive(self.noise), memory[S], x.server, round=r,
                     label="uplink noise"),
        ]  # fmt: skip

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        ctx.uplink = lambda S: self.send(r, S, ctx)
        try:
            return self.method.round_phases(r, participants, ctx)
        finally:
            ctx.uplink = None

    def __repr__(self) -> str:
        return (
            f"CompressedUplink({self.method!r}, compression={self.compression.name!r}, "
            f"error_feedback={self.error_feedback!r}, noise={self.noise!r})"
        )
