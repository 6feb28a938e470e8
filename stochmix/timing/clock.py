r"""The virtual clock of a synchronous run: each round takes the time its cohort needs,
optionally cut at a deadline.

``run(..., clock=Clock(time_model, deadline=...))``. Each round the participation process
draws a cohort S and the method its local steps K_i; client i of S needs d_i seconds
(:class:`~stochmix.timing.TimeModel`). Then

* without a deadline, every client of S participates and the round lasts max_S d_i;
* with a deadline T, the server waits until T or until every client has reported,
  whichever comes first: the round lasts min(T, max_S d_i). Clients with d_i <= T
  participate; the others are dropped. With ``partial_work=True`` a late client instead
  contributes the steps it completed by T, ``floor((T - latency_i) / per_step_i)``
  (capped at K_i), FedNova-style, and is dropped only if it completed none.

The round's record (:class:`~stochmix.participation.Activation`) holds the participants,
their steps (where they differ from the method's K) and the time at the round's end; the
Result's ``time`` column holds it. The draws of round r come from the run's seed and r
alone (label ``"clock"``), so a resumed run draws the same times.

A deadline below :meth:`TimeModel.fastest` can never be met: :class:`Clock` refuses it.
A deadline that the delays make merely unlikely to meet is allowed; a run whose rounds
were all empty says so with a warning.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._validate import as_bool, as_float, show
from ..engine.model.rowmap import map_generator
from ..participation._record import Activation
from .arrivals import arrival_records
from .availability import OnOff
from .model import TimeModel

__all__ = [
    "Clock",
]

CLOCK_LABEL = "clock"
AVAILABILITY_LABEL = "availability"


class Clock:
    """A seeded virtual clock for :func:`stochmix.run`.

    Args:
        time_model: the clients' delays (a :class:`~stochmix.timing.TimeModel`).
        deadline: seconds the server waits for a cohort (None: it waits for everyone).
        partial_work: whether a late client contributes the local steps it completed
            (with a ``deadline`` only).
        availability: an :class:`~stochmix.timing.OnOff` law: of each cohort, only the
            clients on when the round starts take part (None: the participation process
            alone says who is available).
    """

    def __init__(
        self, time_model: TimeModel, deadline=None, partial_work: bool = False,
        availability=None,
    ):  # fmt: skip
        if not isinstance(time_model, TimeModel):
            raise TypeError(f"time_model must be a TimeModel, got {show(time_model)}")
        self.time_model = time_model
        self.deadline = None if deadline is None else as_float(deadline, "deadline", positive=True)
        self.partial_work = as_bool(partial_work, "partial_work")
        if self.partial_work and self.deadline is None:
            raise ValueError(
                "partial_work=True needs a deadline (the steps a late client completed are "
                "counted at the deadline), got deadline=None"
            )
        if availability is not None and not isinstance(availability, OnOff):
            raise TypeError(f"availability must be an OnOff law or None, got {show(availability)}")
        self.availability = availability
        if self.deadline is not None and self.deadline < time_model.fastest():
            raise ValueError(
                f"deadline={self.deadline!r} is below the fastest possible round "
                f"({time_model.fastest()!r} s: one local step and the transfers at their "
                "smallest delays): no client could ever meet it"
            )

    def check_clients(self, n_clients: int) -> None:
        """Raise a ValueError naming the argument that cannot serve N clients."""
        self.time_model.check_clients(n_clients)

    def round(self, r: int, cohort: np.ndarray, steps, seed, start: float) -> Activation:
        """The record of round ``r`` for ``cohort`` (sorted clients) taking ``steps`` local
        steps (an int or one per client of the cohort), starting at ``start`` seconds."""
        rng = map_generator(seed, r, CLOCK_LABEL)
        latency, per_step = self.time_model.parts(rng, cohort)
        k = np.broadcast_to(np.asarray(steps, dtype=np.int64), cohort.shape)
        needed = latency + k * per_step
        longest = float(needed.max()) if cohort.size else 0.0
        explicit = not isinstance(steps, (int, np.integer))
        if self.deadline is None:
            return Activation(cohort, time=start + longest, steps=k if explicit else None)
        T = self.deadline
        if not self.partial_work:
            kept = needed <= T
            return Activation(
                cohort[kept],
                time=start + min(T, longest),
                steps=k[kept] if explicit else None,
            )
        with np.errstate(divide="ignore", invalid="ignore"):
            done = np.floor((T - latency) / per_step)
        done = np.where(np.isfinite(done), done, k)
        done = np.where(latency > T, 0, done).clip(0, k).astype(np.int64)
        kept = done >= 1
        return Activation(cohort[kept], time=start + min(T, longest), steps=done[kept])

    def stream(self, draws, method, ctx, seed):
        """The run's round records: each cohort of ``draws`` (participant indices or
        records) with the method's local steps (``method.round_steps``, 1 for a method
        without local training) through :meth:`round`, the time running on."""
        if getattr(method, "asynchronous", False):  # rounds from the arrival schedule
            yield from arrival_records(
                ctx.n_clients, method.concurrency, method.buffer, self.time_model,
                method.local_steps, seed,
            )  # fmt: skip
            return
        steps_of = getattr(method, "round_steps", None)
        start, r = 0.0, 0
        tracker = None if self.availability is None else self.availability.tracker(ctx.n_clients)
        for drawn in draws:
            if getattr(drawn, "edges", None) is not None:
                raise ValueError(
                    "clock applies to node participation; an edge-activation process keeps "
                    "its own time (PoissonClocks): run it without a clock"
                )
            cohort = getattr(drawn, "nodes", None)
            cohort = np.asarray(drawn if cohort is None else cohort, dtype=np.int64)
            if tracker is not None:  # the cohort's clients that are on at the round's start
                rng = map_generator(seed, r, AVAILABILITY_LABEL)
                cohort = cohort[tracker.available(cohort, start, rng)]
            ctx.activation = None
            steps = 1 if steps_of is None else steps_of(r, cohort, ctx)
            record = self.round(r, cohort, steps, seed, start)
            received = getattr(drawn, "received", None)
            if received is not None:  # uploads lost after the work (UplinkDrops)
                record = replace(record, received=np.intersect1d(record.nodes, received))
            start, r = record.time, r + 1
            yield record

    def __repr__(self) -> str:
        return (
            f"Clock({self.time_model!r}, deadline={self.deadline!r}, "
            f"partial_work={self.partial_work!r}, availability={self.availability!r})"
        )
