r"""A time model: how long a client's round (or asynchronous task) takes in simulated
seconds.

Client i, given K_i local steps, takes

.. math::

    d_i = \text{download}_i + K_i\, s_i\, c_i + \text{upload}_i

with ``c_i`` its time per local step, ``s_i`` its fixed speed factor (``speeds``: slow
devices have s_i > 1; 1 by default) and download/upload its latencies; ``c_i``, download
and upload are drawn afresh for every round or task from their delays
(:mod:`stochmix.timing.delays`), independently across clients. A client's steps within
one round share one draw of c_i.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_real_array
from .delays import MAX_SECONDS, Delay, as_delay

__all__ = [
    "TimeModel",
]


class TimeModel:
    """Per-client compute and latency delays.

    Args:
        compute: seconds per local step (a delay, or a number).
        download: seconds to receive the server model (0 by default).
        upload: seconds to send the update (0 by default).
        speeds: optional N positive factors multiplying client i's compute time.

    Example:
        ``TimeModel(compute=Pareto(1.5, 0.1), upload=Exponential(0.5))``: heavy-tailed
        stragglers with exponential uplink latency.
    """

    def __init__(self, compute=1.0, download=0.0, upload=0.0, speeds=None):
        self.compute: Delay = as_delay(compute, "compute")
        self.download: Delay = as_delay(download, "download")
        self.upload: Delay = as_delay(upload, "upload")
        self.speeds = None
        if speeds is not None:
            arr = as_real_array(speeds, "speeds", ndim=1)
            if not (arr > 0).all():
                raise ValueError(f"speeds must be positive, got min {arr.min()!r}")
            self.speeds = np.asarray(arr, dtype=float)
        # the longest step and transfers must stay below MAX_SECONDS (a clock adds them up)
        step = getattr(self.compute, "_largest", 0.0)
        fastest = 1.0 if self.speeds is None else float(self.speeds.max())
        with np.errstate(over="ignore"):
            if step * fastest > MAX_SECONDS:
                raise ValueError(
                    f"speeds: a local step may last {step * fastest:g} s (compute up to "
                    f"{step:g} s x speed {fastest:g}), above MAX_SECONDS = {MAX_SECONDS:g} s: "
                    f"a run's clock would overflow; got speeds max {fastest!r}"
                )

    def check_clients(self, n_clients: int) -> None:
        """Raise a ValueError naming ``speeds`` unless it holds N factors."""
        if self.speeds is not None and self.speeds.size != n_clients:
            raise ValueError(
                f"speeds must hold one factor per client ({n_clients}), got {self.speeds.size}"
            )

    def draw(self, rng: np.random.Generator, count: int) -> tuple:
        """``(latency, per_step)`` of ``count`` rounds or tasks: download + upload, and the
        seconds one local step takes before any speed factor, float64 ``(count,)``."""
        per_step = self.compute.draw(rng, count)
        latency = self.download.draw(rng, count) + self.upload.draw(rng, count)
        return latency, per_step

    def parts(self, rng: np.random.Generator, clients: np.ndarray) -> tuple:
        """``(latency, per_step)`` of ``clients`` for one round (see :meth:`draw`), the
        speed factors applied."""
        latency, per_step = self.draw(rng, clients.size)
        if self.speeds is not None:
            per_step = per_step * self.speeds[clients]
        return latency, per_step

    def fastest(self) -> float:
        """A lower bound on any client's time for one local step and its transfers."""
        low = self.compute.lower * (1.0 if self.speeds is None else float(self.speeds.min()))
        return self.download.lower + low + self.upload.lower

    def __repr__(self) -> str:
        speeds = "" if self.speeds is None else f", speeds=<{self.speeds.size} factors>"
        return (
            f"TimeModel(compute={self.compute!r}, download={self.download!r}, "
            f"upload={self.upload!r}{speeds})"
        )
