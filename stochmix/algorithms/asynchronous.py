r"""Asynchronous aggregation: FedBuff and FedAsync, as recursions over the stacked state.

Each client row of ``x`` holds the model its client pulled; the server applies updates as
they arrive (the schedule of :mod:`stochmix.timing.arrivals`: who arrives in round r,
with which staleness, and who pulls after it). One round r, with arrivals S (staleness
tau_i, local steps K_i) and launched clients L:

.. math::

    x &\leftarrow x - \gamma\,D_{S_t}\,\nabla F(x) \quad (t = 0..K-1,\ S_t = \{i\in S:
        K_i > t\}) &&\text{(local steps from the pulled models)}\\
    x_0 &\leftarrow x_0 + \textstyle\sum_{i\in S} w_i\,(\cdot) &&\text{(the server applies
        the arrivals)}\\
    x &\leftarrow A_L\,x &&\text{(an assign after the average: L pulls the new model)}

Training is computed when an update arrives, from the model its client pulled, which is
what the client computed in between (its rows change nowhere else while it trains).
"""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int, choice, show
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, dot, grad
from .local_training import LocalTraining, repeated

__all__ = [
    "FedAsync",
    "FedBuff",
    "Staleness",
]

STALENESS_KINDS = ("constant", "polynomial", "hinge")


class Staleness:
    r"""A staleness function s(tau) in (0, 1] (C. Xie, S. Koyejo and I. Gupta, 2019):

    * ``constant``: s = 1;
    * ``polynomial``: s(tau) = (tau + 1)^(-a);
    * ``hinge``: s(tau) = 1 for tau <= b, 1 / (a (tau - b) + 1) beyond.

    tau counts the server updates since the client pulled (0: it trained on the latest
    model).

    Args:
        kind: one of the three.
        a: the exponent (polynomial) or slope (hinge), > 0.
        b: the hinge's free staleness, >= 0.
    """

    def __init__(self, kind: str = "constant", a: float = 0.5, b: float = 4.0):
        self.kind = choice(kind, "staleness", STALENESS_KINDS)
        self.a = as_float(a, "a", positive=True)
        self.b = as_float(b, "b", nonnegative=True)

    def __call__(self, tau) -> np.ndarray:
        tau = np.asarray(tau, dtype=float)
        if self.kind == "constant":
            return np.ones_like(tau)
        if self.kind == "polynomial":
            return np.asarray((tau + 1.0) ** (-self.a))
        return np.where(tau <= self.b, 1.0, 1.0 / (self.a * (tau - self.b) + 1.0))

    def __repr__(self) -> str:
        return f"Staleness({self.kind!r}, a={self.a!r}, b={self.b!r})"


def as_staleness(value, name: str = "staleness"):
    """A staleness function from a :class:`Staleness`, a kind's name or a callable whose
    values on tau = 0..1000 lie in (0, 1]; one error naming ``name`` otherwise."""
    if isinstance(value, str):
        return Staleness(value)
    if not callable(value):
        raise TypeError(f"{name} must be one of {STALENESS_KINDS} or a function, got {show(value)}")
    try:
        values = staleness_weights(value, np.arange(1001))
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{name} must take an array of staleness values tau (vectorized), got an error: {error}"
        ) from None
    if not ((values > 0) & (values <= 1)).all():
        raise ValueError(
            f"{name} must map every staleness tau >= 0 into (0, 1], got {show(values)}"
        )
    return value


def staleness_weights(function, tau: np.ndarray) -> np.ndarray:
    """``function(tau)`` as one float per entry of ``tau`` (a function that returns one
    number for every tau is broadcast)."""
    tau = np.asarray(tau)
    return np.array(np.broadcast_to(np.asarray(function(tau), dtype=float), tau.shape))


class _Asynchronous(LocalTraining, Method):
    """What FedBuff and FedAsync share: the arrival schedule's parameters, local steps from
    the pulled rows, the pull of the launched clients after the server's update."""

    asynchronous = True  #: rounds come from the clock's arrival schedule
    reads_uploads = False  #: its rounds are arrivals: no lost uploads

    def __init__(self, lr, local_steps, buffer, concurrency, staleness):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        rule = self.local_steps
        if not isinstance(rule, int) and not hasattr(rule, "steps") and not hasattr(rule, "draw"):
            raise TypeError(
                "local_steps of an asynchronous method must be an int, an array of one int "
                f"per client or a RandomSteps (drawn per task), got {show(rule)}"
            )
        self.concurrency = as_int(concurrency, "concurrency", minimum=1)
        self.buffer = as_int(buffer, "buffer", minimum=1)
        if self.buffer > self.concurrency:
            raise ValueError(
                f"buffer must be <= concurrency = {self.concurrency} (the updates of one "
                f"round come from the clients in training), got buffer={self.buffer}"
            )
        self.staleness = as_staleness(staleness)

    def check_participation(self, participation) -> None:
        super().check_participation(participation)
        n = int(participation.n_clients)
        probabilities = participation.probabilities
        if probabilities is None or not np.all(np.asarray(probabilities) == 1.0):
            raise ValueError(
                f"participation must make every client available (Full({n})) for "
                f"{type(self).__name__}: its rounds come from the clock's arrival schedule, "
                f"got {show(participation)}"
            )
        if self.concurrency + self.buffer > n + 1:
            raise ValueError(
                f"concurrency + buffer must be <= n_clients + 1 = {n + 1} (clients training "
                f"and waiting in the buffer are not drawn again), got {self.concurrency} + "
                f"{self.buffer}"
            )

    def phase_key(self, r: int, participants: np.ndarray):
        return None

    def _record(self, ctx: RunContext, participants: np.ndarray):
        record = ctx.activation
        if getattr(record, "staleness", None) is None:
            raise ValueError(
                f"{self.name} runs on the clock's arrival schedule; run it through "
                "stochmix.run (a clock is made when none is given)"
            )
        return record

    def _train(self, eq: Equations, record, participants: np.ndarray) -> list:
        """The arrivals' local steps from the models they pulled (their rows)."""
        x = eq.block("x")
        steps = record.steps
        if steps.size and (steps == steps[0]).all():
            steps = int(steps[0])

        def step(G):
            x[G] -= self.lr * grad(G)

        return [phase for _, _, phase in repeated(eq, participants, steps, step)]

    def _pull(self, eq: Equations, launched: np.ndarray, blocks=("x",)) -> list:
        if launched.size == 0:
            return []
        for name in blocks:
            eq.block(name)[launched] = eq.block("x").server
        return [eq.build("assign")]


class FedBuff(_Asynchronous):
    r"""Buffered asynchronous aggregation: the server waits for ``buffer`` = M updates,
    then applies their mean, each weighted by its staleness. Blocks ``x`` (server and the
    models the clients pulled) and ``p`` (a copy of each pulled model).

    .. math::

        x_0 \leftarrow x_0 + \frac{\eta}{M} \sum_{i \in S} s(\tau_i)\,(x_i - p_i),
        \qquad x_L \leftarrow x_0,\ p_L \leftarrow x_0

    with x_i the client's model after its K_i local steps from p_i. ``concurrency`` = C
    clients train at once; each arrival frees a slot for a newly drawn client (see
    :mod:`stochmix.timing.arrivals`). With M = C and every client equally fast it is
    synchronous FedAvg (server step eta) on the cohorts of C clients.

    Args:
        lr: the clients' step size gamma.
        local_steps: K (an int, K_i per client or a RandomSteps drawn per task).
        server_lr: eta.
        buffer: M.
        concurrency: C (M <= C, C + M <= N).
        staleness: s, ``"polynomial"`` (default: (1 + tau)^(-1/2), the paper's choice),
            ``"constant"``, ``"hinge"``, a :class:`Staleness` or a function into (0, 1].

    References:
        - J. Nguyen, K. Malik, H. Zhan, A. Yousefpour, M. Rabbat, M. Malek and D. Huba
          (2022), "Federated learning with buffered asynchronous aggregation", AISTATS
          2022, PMLR 151.
    """

    name = "FedBuff"

    def __init__(self, lr, local_steps=1, server_lr=1.0, buffer=10, concurrency=100,
                 staleness="polynomial"):  # fmt: skip
        super().__init__(lr, local_steps, buffer, concurrency, staleness)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("p", n_clients, "model", first_node=1)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        record = self._record(ctx, participants)
        S = participants
        eq = Equations(ctx)
        x, p = eq.blocks("x", "p")
        phases = self._train(eq, record, S)
        w = self.server_lr / self.buffer * staleness_weights(self.staleness, record.staleness)
        x.server += dot(w, x[S] - p[S])
        phases.append(eq.build("buffered update"))
        return phases + self._pull(eq, record.launched, ("x", "p"))


class FedAsync(_Asynchronous):
    r"""Asynchronous federated optimization: the server mixes each arriving model in as it
    comes (a buffer of one),

    .. math::

        x_0 \leftarrow (1 - \alpha\,s(\tau))\,x_0 + \alpha\,s(\tau)\,x_i,
        \qquad x_i \leftarrow x_0 \text{ for the clients launched next}

    with x_i the client's model after its local steps from the model it pulled tau server
    updates ago. One round is one arrival.

    Args:
        lr: the clients' step size gamma.
        local_steps: K.
        alpha: the mixing weight alpha in (0, 1].
        concurrency: the clients training at once.
        staleness: s (``"constant"`` by default, ``"polynomial"``, ``"hinge"``, a
            :class:`Staleness` or a function into (0, 1]).

    References:
        - C. Xie, S. Koyejo and I. Gupta (2019), "Asynchronous federated optimization",
          arXiv:1903.03934 (without the proximal term of its local problem: plain local
          steps).
    """

    name = "FedAsync"

    def __init__(self, lr, local_steps=1, alpha=0.5, concurrency=10, staleness="constant"):
        super().__init__(lr, local_steps, 1, concurrency, staleness)
        self.alpha = as_float(alpha, "alpha", positive=True, maximum=1.0)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        record = self._record(ctx, participants)
        S = participants
        eq = Equations(ctx)
        x = eq.block("x")
        phases = self._train(eq, record, S)
        w = self.alpha * staleness_weights(self.staleness, record.staleness)
        x.server += dot(w, x[S] - x.server)
        phases.append(eq.build("asynchronous update"))
        return phases + self._pull(eq, record.launched)
