"""Statistics of recorded participation: frequencies, intervals, averaged weights.

Every function takes the masks of ``rounds`` rounds stacked as a ``(rounds, N)`` bool array
(as :meth:`ParticipationProcess.sample` returns) and is vectorized over clients.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Bool, Float, Int

from .._validate import as_bool_array, as_float, as_int, as_real_array

IntLike = int | np.integer
FloatLike = float | np.floating


def _check_masks(masks, name: str = "masks") -> np.ndarray:
    """A ``(rounds, n_clients)`` boolean array with at least one round."""
    arr = as_bool_array(masks, name)
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(
            f"{name} must have shape (rounds, n_clients) with rounds >= 1, got {arr.shape}"
        )
    return arr


def empirical_probabilities(masks: Bool[np.ndarray, "rounds n"]) -> Float[np.ndarray, " n"]:
    """Fraction of the rounds in which each client took part, shape ``(N,)``."""
    arr = _check_masks(masks)
    return arr.mean(axis=0)


def participation_intervals(masks: Bool[np.ndarray, "rounds n"]) -> list[Int[np.ndarray, " k"]]:
    """Gaps between consecutive participations of each client.

    Returns a list of N int64 arrays; entry ``i`` holds ``t_{j+1} - t_j`` over the rounds
    ``t_0 < t_1 < ...`` in which client ``i`` took part (empty when it took part at most
    once). A client taking part every round has gaps of 1.
    """
    arr = _check_masks(masks)
    n = arr.shape[1]
    clients, rounds = np.nonzero(arr.T)  # sorted by client, then by round
    same = clients[1:] == clients[:-1]
    gaps = np.diff(rounds)[same].astype(np.int64)
    owners = clients[1:][same]
    counts = np.bincount(owners, minlength=n)
    return np.split(gaps, np.cumsum(counts)[:-1])


def mean_intervals(masks: Bool[np.ndarray, "rounds n"]) -> Float[np.ndarray, " n"]:
    """Mean gap between consecutive participations of each client, shape ``(N,)``.

    Equal to ``(last - first) / (count - 1)``; ``nan`` for a client seen fewer than twice.
    """
    arr = _check_masks(masks)
    rounds = arr.shape[0]
    count = arr.sum(axis=0)
    first = np.argmax(arr, axis=0)
    last = rounds - 1 - np.argmax(arr[::-1], axis=0)
    out = np.full(arr.shape[1], np.nan)
    seen = count >= 2
    out[seen] = (last[seen] - first[seen]) / (count[seen] - 1)
    return out


def period_averaged_weights(
    weights_per_round: Float[np.ndarray, "rounds n"], period: IntLike
) -> Float[np.ndarray, "periods n"]:
    """Aggregation weights averaged over consecutive blocks of ``period`` rounds.

    Row ``b`` is ``(1/P) sum_{t = bP}^{bP+P-1} q_t``; only complete blocks count, so the
    shape is ``(rounds // period, N)``.
    """
    q = as_real_array(weights_per_round, "weights_per_round")
    if q.ndim != 2:
        raise ValueError(f"weights_per_round must have shape (rounds, n_clients), got {q.shape}")
    period = as_int(period, "period", minimum=1)
    blocks = q.shape[0] // period
    if blocks == 0:
        raise ValueError(f"period must be <= the number of rounds {q.shape[0]}, got {period}")
    return q[: blocks * period].reshape(blocks, period, q.shape[1]).mean(axis=1)


def weight_variance(
    weights_per_round: Float[np.ndarray, "rounds n"],
    period: IntLike,
    center: FloatLike | None = None,
) -> float:
    """Spread of the ``period``-round averaged aggregation weights across clients.

    With ``qbar[b, i]`` the weight of client ``i`` averaged over block ``b`` of ``period``
    rounds (complete blocks only, see :func:`period_averaged_weights`), returns the mean
    over blocks and clients of ``(qbar[b, i] - mu_b)^2``, where ``mu_b`` is ``center`` if
    given (e.g. ``1/N``, the mean weight under unbiased aggregation) or else the block's mean
    over clients. It is zero for regularized participation whose cycle divides ``period``
    with equal weights, and shrinks like ``1/period`` for independent participation: the
    quantity that drives Wang & Ji's ``delta^2(P)``.

    Args:
        weights_per_round: ``(rounds, N)`` weights ``q_t^i``, zero for absent clients.
        period: P, the block length, 1 <= P <= rounds.
        center: the reference weight, or ``None`` for the per-block mean.
    """
    qbar = period_averaged_weights(weights_per_round, period)
    if center is None:
        mu = qbar.mean(axis=1, keepdims=True)
    else:
        mu = as_float(center, "center")
    return float(np.mean((qbar - mu) ** 2))


__all__ = [
    "empirical_probabilities",
    "participation_intervals",
    "mean_intervals",
    "period_averaged_weights",
    "weight_variance",
]
