"""Aggregation weight rules over the participants of one round.

``participants`` is always the sorted int array of this round's clients (for example
``np.flatnonzero(mask)``); the weights come back aligned with it.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int

from .._validate import as_client_indices, as_int, as_probabilities

IntLike = int | np.integer


def _check_participants(participants, n_clients: int | None = None) -> np.ndarray:
    """Sorted, distinct client indices (in ``[0, n_clients)`` when it is given)."""
    return as_client_indices(participants, n_clients, "participants", increasing=True)


def uniform_weights(participants: Int[np.ndarray, " s"]) -> Float[np.ndarray, " s"]:
    """``1 / |S|`` for each participant, shape ``(s,)``; empty for an empty round."""
    arr = _check_participants(participants)
    if arr.size == 0:
        return np.zeros(0)
    return np.full(arr.size, 1.0 / arr.size)


def unbiased_weights(
    participants: Int[np.ndarray, " s"],
    probabilities: Float[np.ndarray, " n"],
    n_clients: IntLike,
) -> Float[np.ndarray, " s"]:
    """``1 / (N p_i)`` for each participant ``i``, shape ``(s,)``.

    With ``p_i = P(i participates)`` these weights make the aggregate an unbiased estimate
    of the average over all N clients: ``E[sum_{i in S} q_i x_i] = (1/N) sum_i x_i``.

    Args:
        participants: sorted distinct client indices in ``[0, N)``, shape ``(s,)``.
        probabilities: marginals ``p``, shape ``(N,)``, each in (0, 1].
        n_clients: N, the number of clients.
    """
    n = as_int(n_clients, "n_clients", minimum=1)
    p = as_probabilities(probabilities, "probabilities", n)
    arr = _check_participants(participants, n)
    return 1.0 / (n * p[arr])


__all__ = ["uniform_weights", "unbiased_weights"]
