"""Participation processes: who takes part in each round.

A process yields one boolean mask over the ``n_clients`` clients per round, forever, from a
generator seeded by the caller. The same seed gives the identical stream, so every algorithm
in a comparison can be fed the same participants; every call to :meth:`masks` starts a new
stream. Masks are drawn vectorized over clients (a round costs a few NumPy calls, never a
Python loop over clients).

Where the per-round marginal ``P(client i participates)`` has a closed form it is exposed as
:attr:`ParticipationProcess.probabilities`; otherwise that is ``None`` and
:meth:`ParticipationProcess.estimate_probabilities` gives a Monte Carlo estimate.

This module holds the base class, :class:`ParticipationProcess`, and the helpers its
subclasses share; the processes themselves are in :mod:`stochmix.participation.independent`
(independent across rounds), :mod:`stochmix.participation.correlated` (correlated across
rounds) and :mod:`stochmix.participation.traces` (recorded traces).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np
from jaxtyping import Bool, Float, Int

from .._validate import as_int, make_rng
from ._record import Activation

IntLike = int | np.integer
FloatLike = float | np.floating
SeedLike = int | np.integer | np.random.SeedSequence | np.random.Generator | None


def _check_size(size, n_clients: int, name: str = "size") -> int:
    size = as_int(size, name, minimum=1)
    if size > n_clients:
        raise ValueError(f"{name} must be <= n_clients = {n_clients}, got {size}")
    return size


def _check_rounds(rounds) -> int:
    return as_int(rounds, "rounds", minimum=1)


def _mask_from(indices: np.ndarray, n_clients: int) -> np.ndarray:
    mask = np.zeros(n_clients, dtype=bool)
    mask[indices] = True
    return mask


def _show_vector(values: np.ndarray) -> str:
    if values.size and np.all(values == values[0]):
        return f"{float(values[0]):g}"
    return f"<{values.size} values in [{float(values.min()):g}, {float(values.max()):g}]>"


class ParticipationProcess(ABC):
    """A random sequence of participation masks over ``n_clients`` clients.

    Attributes:
        n_clients: number of clients N; every mask has shape ``(N,)`` and dtype bool.

    Subclasses implement :meth:`_stream` (an infinite generator of masks from a NumPy
    generator) and, where known, :attr:`probabilities`.
    """

    n_clients: int

    @property
    def probabilities(self) -> Float[np.ndarray, " n"] | None:
        """Per-round marginals ``P(client i participates)``, shape ``(N,)``, or ``None``.

        ``None`` when the process has no closed form; use :meth:`estimate_probabilities`.
        """
        return None

    @abstractmethod
    def _stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """Infinite generator of fresh bool masks of shape ``(N,)`` drawn from ``rng``."""

    def masks(self, seed: SeedLike = None) -> Iterator[Bool[np.ndarray, " n"]]:
        """An endless stream of masks, one bool array of shape ``(N,)`` per round.

        Args:
            seed: an int, a ``SeedSequence``, a ``Generator`` (used and advanced as is) or
                ``None`` (fresh entropy). The same int or ``SeedSequence`` gives the
                identical stream; each call starts a new stream.

        Yields:
            ``Bool[np.ndarray, " n"]``: the participants of the round; each mask is a new
            array that the caller may keep or modify.
        """
        return self._stream(make_rng(seed))

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """Infinite generator of the participants' sorted indices, round by round; the same
        rounds as :meth:`_stream` (processes that draw indices override both)."""
        for mask in self._stream(rng):
            yield np.flatnonzero(mask)

    def participants(self, seed: SeedLike = None) -> Iterator[Int[np.ndarray, " s"]]:
        """The stream of :meth:`masks` as sorted int64 participant indices.

        Processes that draw a few clients out of many (``UniformSample``) produce them
        without ever building an N-long mask, so a round costs what its participants cost.
        """
        return self._index_stream(make_rng(seed))

    def activations(self, seed: SeedLike = None) -> Iterator[Activation]:
        """An endless stream of :class:`~stochmix.participation.Activation` records, one per
        round: the round's active nodes and, for gossip processes, its links and clock time.

        Args:
            seed: as for :meth:`masks`; the same int or ``SeedSequence`` gives the identical
                stream.

        Yields:
            ``Activation``: ``nodes`` are the round's :meth:`participants`; ``edges`` and
            ``time`` are ``None`` unless the process draws links or runs a clock.
        """
        return self._activation_stream(make_rng(seed))

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        """Infinite generator of the rounds as records; by default the rounds of
        :meth:`_index_stream` as plain node activations (no edges, no time)."""
        for nodes in self._index_stream(rng):
            yield Activation(nodes, None, None)

    def sample(self, rounds: IntLike, seed: SeedLike = None) -> Bool[np.ndarray, "rounds n"]:
        """The first ``rounds`` masks of ``masks(seed)`` stacked, shape ``(rounds, N)``."""
        rounds = _check_rounds(rounds)
        out = np.empty((rounds, self.n_clients), dtype=bool)
        stream = self.masks(seed)
        for t in range(rounds):
            out[t] = next(stream)
        return out

    def estimate_probabilities(
        self, rounds: IntLike, seed: SeedLike = None
    ) -> Float[np.ndarray, " n"]:
        """Empirical participation frequency of each client over ``rounds`` rounds.

        A Monte Carlo estimate of the marginals for any process, shape ``(N,)``; it does not
        store the masks. Its standard error is about ``sqrt(p (1 - p) / rounds)`` for
        processes that are independent across rounds (larger for correlated ones).
        """
        rounds = _check_rounds(rounds)
        counts = np.zeros(self.n_clients, dtype=np.int64)
        stream = self.masks(seed)
        for _ in range(rounds):
            counts += next(stream)
        return counts / rounds

    def _fields(self) -> dict:
        return {"n_clients": self.n_clients}

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value}" for key, value in self._fields().items())
        return f"{type(self).__name__}({args})"


__all__ = ["ParticipationProcess"]
