"""Participation statistics learned online, for methods that do not know p_i."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int

from .._validate import as_client_indices, as_int, choice

__all__ = [
    "FEDAU_TIMINGS",
    "FedAUEstimator",
]

#: When a participant's omega_i is read, relative to the interval its participation closes.
FEDAU_TIMINGS = ("authors", "inclusive")


class FedAUEstimator:
    """FedAU's estimate omega_i of 1 / p_i from the intervals between participations.

    Every client counts the rounds since its last recorded interval. When it takes part,
    the count is recorded as one interval; when the count reaches ``cutoff`` without a
    participation, ``cutoff`` is recorded instead and the count restarts (the cutoff keeps
    a client that vanished from dragging its estimate up forever). omega_i, the mean of
    the intervals recorded for client i, approaches 1/p for a client taking part with
    probability p (for ``cutoff`` >> 1/p).

    ``timing`` says which intervals weigh a participation of round r:

    * ``"authors"`` (the default; the FedAU authors' code): only those recorded *before*
      round r (cut-off intervals included), and 1 while none is recorded; the interval
      that this participation closes counts from the next participation on. The weight
      is thus fixed before the round's update is seen.
    * ``"inclusive"``: those recorded up to and including the interval this
      participation closes (never undefined: a participant has recorded one).

    Both record the same intervals; only the weight of each participation differs. The
    default cutoff, 100 000, is the authors' code default (``-k-adaptive``): in runs of
    fewer rounds no interval is cut.

    The counting is lazy: nothing is done for absent clients, and when client i takes part
    at round r after g rounds, the ``(g - 1) // cutoff`` intervals cut off in between and
    the closing one are recorded at once. A round costs ``O(|S|)``.

    Args:
        n_clients: N, the number of clients.
        cutoff: the longest interval recorded (FedAU's K).
        timing: ``"authors"`` or ``"inclusive"`` (above).

    References:
        - S. Wang and M. Ji (2024), "A lightweight method for tackling unknown participation
          statistics in federated averaging", ICLR 2024 (arXiv:2306.03401), and the authors'
          code (github.com/IBM/fedau): the "authors" timing and cutoff.
    """

    def __init__(self, n_clients: int, cutoff: int = 100_000, timing: str = "authors"):
        self.n_clients = as_int(n_clients, "n_clients", minimum=1)
        self.cutoff = as_int(cutoff, "cutoff", minimum=1)
        self.timing = choice(timing, "timing", FEDAU_TIMINGS)
        self.last = np.full(self.n_clients, -1, dtype=np.int64)
        self.records = np.zeros(self.n_clients, dtype=np.int64)
        self.omega = np.full(self.n_clients, np.nan)
        self._repeat: tuple | None = None  # (r, participants' bytes, omega) of the last call

    def checkpoint_state(self) -> dict:
        """What a checkpoint keeps: the per-client arrays (plain data)."""
        return {"last": self.last, "records": self.records, "omega": self.omega}

    def restore_state(self, state: dict) -> None:
        """Continue from :meth:`checkpoint_state`'s data (shapes are checked)."""
        for key in ("last", "records", "omega"):
            value = np.asarray(state[key])
            mine = getattr(self, key)
            if value.shape != mine.shape:
                raise ValueError(f"FedAU state {key} has shape {value.shape}, not {mine.shape}")
            setattr(self, key, value.astype(mine.dtype, copy=True))
        self._repeat = None

    def update(self, r: int, participants: Int[np.ndarray, " s"]) -> Float[np.ndarray, " s"]:
        """Record round ``r`` for its participants and return the omega_i that weigh
        their updates (see ``timing``), shape (s,).

        ``participants`` are sorted, distinct client indices in ``[0, N)``; ``r >= 0`` must
        grow from call to call, but for a call that repeats the last one (the same round
        and participants), which records nothing and returns the same omega_i: a round
        template binds a round's weights by calling it, and a round may also be built in
        full to check the template."""
        r = as_int(r, "r", minimum=0)
        participants = as_client_indices(
            participants, self.n_clients, "participants", increasing=True
        )
        key = participants.tobytes()
        if self._repeat is not None and self._repeat[:2] == (r, key):
            return self._repeat[2].copy()
        omega = self._record(r, participants)
        self._repeat = (r, key, omega.copy())
        return omega

    def _record(self, r: int, participants: np.ndarray) -> np.ndarray:
        gap = r - self.last[participants]
        if (gap <= 0).any():
            raise ValueError(f"r must increase from call to call; got round {r} again")
        cut = (gap - 1) // self.cutoff  # intervals cut off before round r
        closing = gap - cut * self.cutoff
        n_old = self.records[participants]
        before = np.where(n_old > 0, self.omega[participants] * n_old, 0.0) + cut * self.cutoff
        n_before = n_old + cut
        n_new = n_before + 1
        omega = (before + closing) / n_new
        self.omega[participants] = omega
        self.records[participants] = n_new
        self.last[participants] = r
        if self.timing == "inclusive":
            return omega
        return np.divide(before, n_before, out=np.ones(n_before.shape), where=n_before > 0)
