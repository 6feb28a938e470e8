"""Participation processes correlated across rounds: who takes part depends on the past.

- :class:`Regularized`: a random permutation per cycle, one group of clients per round
  (every client exactly once per cycle).
- :class:`Periodic`: groups of clients available in turn (Wang & Ji 2022).
- :class:`Markov`: each client an independent two-state Markov chain.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from jaxtyping import Float, Int, Real

from .._validate import as_float, as_int, as_int_array, as_real_array, choice, is_scalar
from .base import FloatLike, IntLike, ParticipationProcess, _check_size, _mask_from, _show_vector


class Regularized(ParticipationProcess):
    """Each cycle a fresh random permutation of the clients, cut into groups of ``size``.

    One group per round, in order, so every client takes part exactly once per cycle of
    ``ceil(N / size)`` rounds; the last group of a cycle is smaller when ``size`` does not
    divide N. Cycles start at round 0.

    Probabilities are the per-cycle frequency ``1 / ceil(N / size)``; this is the per-round
    marginal when ``size`` divides N (otherwise the round-wise marginal is ``size / N`` on
    full groups and smaller on the last one).
    """

    def __init__(self, n_clients: IntLike, size: IntLike):
        self.n_clients = as_int(n_clients, "n_clients", minimum=1)
        self.size = _check_size(size, self.n_clients)

    @property
    def cycle_length(self) -> int:
        """Rounds per cycle, ``ceil(N / size)``."""
        return -(-self.n_clients // self.size)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``1 / ceil(N / size)`` for every client, shape ``(N,)``."""
        return np.full(self.n_clients, 1.0 / self.cycle_length)

    def _chosen(self, rng):
        n, size = self.n_clients, self.size
        while True:
            order = rng.permutation(n)
            for start in range(0, n, size):
                yield order[start : start + size]

    def _stream(self, rng):
        for chosen in self._chosen(rng):
            yield _mask_from(chosen, self.n_clients)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        for chosen in self._chosen(rng):
            yield np.sort(chosen).astype(np.int64, copy=False)

    def _fields(self):
        return {"n_clients": self.n_clients, "size": self.size}


class Periodic(ParticipationProcess):
    """Periodic group availability (Wang & Ji 2022, Sec. 6 and App. D).

    The clients are split into ``G`` groups. The groups become available in turn, group 0
    first, each for ``active_rounds`` consecutive rounds, so a full cycle lasts
    ``L = G * active_rounds`` rounds; round ``t`` sits at position ``(offset + t) mod L`` of
    the cycle. ``offset`` is drawn uniformly in ``[0, L)`` from the stream's generator at the
    start of every stream unless given, so the first window may be cut short, as in the
    paper (the FL process may start at any time of the day).

    Within its window, the available group takes part as follows:

    * ``size=None`` (default): every available client, each independently with
      probability ``p_available`` (default 1: the whole group).
    * ``size=S``: ``min(S, n_g)`` of the ``n_g`` available clients. ``selection="regularized"``
      (default, the paper's choice) walks through a random permutation of the group, S
      clients per round, drawing a new permutation when the group is used up and at the
      start of every window; ``selection="uniform"`` draws S uniformly each round.
      Each selected client then takes part with probability ``p_available``.

    The paper's setup, :meth:`wang_ji`, is N = 250 clients whose data have one majority
    label out of 10; clients with majority labels {0, 1} form group 0, {2, 3} group 1, ...,
    so G = 5; ``active_rounds = 100`` (cycle of 500 rounds); a random offset; S = 10 clients
    per round, regularized.

    Args:
        groups: the number of groups G (then ``n_clients`` is required and client ``i`` is in
            group ``floor(i * G / N)``: contiguous groups whose sizes differ by at most one),
            or an integer label per client (shape ``(N,)``); groups are ordered by label.
        active_rounds: rounds each group stays available, >= 1.
        offset: position of round 0 in the cycle, in ``[0, L)``; ``None`` draws it per stream.
        n_clients: N, required when ``groups`` is an int.
        p_available: probability in (0, 1] that an available (or selected) client takes part.
        size: clients selected per round among the available group, or ``None`` for all;
            at most the largest group's size (a smaller group gives all its clients).
        selection: ``"regularized"`` or ``"uniform"``, used when ``size`` is given.

    Probabilities are the marginals under a uniformly random offset (equivalently the
    frequencies over a whole cycle): ``p_available / G`` when ``size`` is None; with ``size``
    they are ``p_available / G`` times the fraction of its window in which a client of group
    g is selected: ``min(S, n_g) / n_g`` for uniform selection, and
    ``(A // c + (A % c) * S / n_g) / A`` for regularized selection, where ``A =
    active_rounds`` and ``c = ceil(n_g / S)`` (``1 / c`` when c divides A).
    """

    def __init__(
        self,
        groups: IntLike | Int[np.ndarray, " n"] | Sequence[int],
        active_rounds: IntLike,
        offset: IntLike | None = None,
        *,
        n_clients: IntLike | None = None,
        p_available: FloatLike = 1.0,
        size: IntLike | None = None,
        selection: str = "regularized",
    ):
        if is_scalar(groups):
            g = as_int(groups, "groups", minimum=1)
            if n_clients is None:
                raise ValueError("n_clients is required when groups is a number of groups")
            n = as_int(n_clients, "n_clients", minimum=1)
            if g > n:
                raise ValueError(f"groups must be <= n_clients = {n}, got {g}")
            labels = (np.arange(n, dtype=np.int64) * g) // n
        else:
            raw = as_int_array(groups, "groups", ndim=1)
            if raw.size == 0:
                raise ValueError(
                    f"groups must be a non-empty 1-d array of labels, got shape {raw.shape}"
                )
            if n_clients is not None:
                n = as_int(n_clients, "n_clients", minimum=1)
                if n != raw.size:
                    raise ValueError(f"n_clients = {n} does not match len(groups) = {raw.size}")
            _, labels = np.unique(raw, return_inverse=True)
            labels = labels.reshape(-1).astype(np.int64)
        self.n_clients = int(labels.size)
        self.labels = labels
        self.n_groups = int(labels.max()) + 1
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(self.n_groups + 1))
        self._members = [order[bounds[k] : bounds[k + 1]] for k in range(self.n_groups)]
        self.active_rounds = as_int(active_rounds, "active_rounds", minimum=1)
        if offset is not None:
            offset = as_int(offset, "offset", minimum=0)
            if offset >= self.cycle_length:
                raise ValueError(
                    f"offset must be < the cycle length {self.cycle_length}, got {offset}"
                )
        self.offset = offset
        self.p_available = as_float(p_available, "p_available")
        if not 0 < self.p_available <= 1:
            raise ValueError(f"p_available must lie in (0, 1], got {self.p_available!r}")
        self.size = None if size is None else as_int(size, "size", minimum=1)
        largest = max(member.size for member in self._members)
        if self.size is not None and self.size > largest:
            raise ValueError(
                f"size must be <= {largest}, the largest group's size, got {self.size}"
            )
        self.selection = choice(selection, "selection", {"regularized", "uniform"})

    @classmethod
    def wang_ji(
        cls,
        majority_labels: Int[np.ndarray, " n"] | None = None,
        *,
        n_clients: IntLike = 250,
        labels_per_group: IntLike = 2,
        active_rounds: IntLike = 100,
        size: IntLike = 10,
        offset: IntLike | None = None,
    ) -> Periodic:
        """The periodic availability of Wang & Ji (2022): N = 250, 5 groups, 100-round
        windows, 10 clients per round chosen regularized, random offset.

        ``majority_labels`` (shape ``(N,)``, values 0..9) groups the clients by majority
        label, ``labels_per_group`` labels per group (``n_clients`` is then their number and
        is not used); without it the ``n_clients`` clients are split into 5 contiguous groups
        (10 labels / 2), as if sorted by label.
        """
        n_clients = as_int(n_clients, "n_clients", minimum=1)
        per = as_int(labels_per_group, "labels_per_group", minimum=1)
        size = as_int(size, "size", minimum=1)
        if majority_labels is None:
            n_groups = -(-10 // per)
            return cls(n_groups, active_rounds, offset, n_clients=n_clients, size=size)
        labels = as_int_array(majority_labels, "majority_labels", ndim=1)
        if labels.size == 0:
            raise ValueError("majority_labels must not be empty, got shape (0,)")
        if labels.min() < 0:
            raise ValueError(f"majority_labels must be >= 0, got {int(labels.min())}")
        return cls(labels // per, active_rounds, offset, size=size)

    @property
    def cycle_length(self) -> int:
        """Rounds in a full cycle, ``n_groups * active_rounds``."""
        return self.n_groups * self.active_rounds

    @property
    def group_sizes(self) -> Int[np.ndarray, " g"]:
        """Number of clients in each group, shape ``(G,)``."""
        return np.bincount(self.labels, minlength=self.n_groups)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """Marginals under a uniformly random offset, shape ``(N,)`` (see the class notes)."""
        sizes = self.group_sizes.astype(float)
        if self.size is None:
            within = np.ones(self.n_groups)
        else:
            chosen = np.minimum(self.size, sizes)
            if self.selection == "uniform":
                within = chosen / sizes
            else:
                a = self.active_rounds
                c = np.ceil(sizes / chosen)
                within = (a // c + (a % c) * chosen / sizes) / a
        return (within * self.p_available / self.n_groups)[self.labels]

    def _stream(self, rng):
        for chosen in self._chosen(rng):
            yield _mask_from(chosen, self.n_clients)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        for chosen in self._chosen(rng):
            yield np.sort(chosen).astype(np.int64, copy=False)

    def _chosen(self, rng):
        """The clients of each round, unsorted."""
        a, length = self.active_rounds, self.cycle_length
        position = int(rng.integers(length)) if self.offset is None else self.offset
        p_avail = self.p_available
        order = None  # current permutation of the available group (regularized selection)
        while True:
            group, within = divmod(position, a)
            members = self._members[group]
            if self.size is None:
                chosen = members
            else:
                s = min(self.size, members.size)
                if self.selection == "uniform":
                    chosen = members[rng.choice(members.size, s, replace=False, shuffle=False)]
                else:
                    chunks = -(-members.size // s)
                    k = within % chunks
                    # A new permutation at each sub-cycle start, at the window start and at
                    # the stream start (the earlier chunks of a permutation are unobserved,
                    # so this keeps the stationary law).
                    if order is None or k == 0 or within == 0:
                        order = rng.permutation(members)
                    chosen = order[k * s : (k + 1) * s]
            if p_avail < 1.0:
                chosen = chosen[rng.random(chosen.size) < p_avail]
            yield chosen
            position = (position + 1) % length

    def _fields(self):
        fields = {
            "n_clients": self.n_clients,
            "groups": self.n_groups,
            "active_rounds": self.active_rounds,
            "offset": self.offset if self.offset is not None else "random",
        }
        if self.p_available != 1.0:
            fields["p_available"] = self.p_available
        if self.size is not None:
            fields["size"] = self.size
            fields["selection"] = repr(self.selection)
        return fields


class Markov(ParticipationProcess):
    """Each client an independent two-state (off/on) Markov chain, started from its stationary law.

    ``P(off -> on) = p_on`` in (0, 1] and ``P(on -> off) = p_off`` in [0, 1], scalars or
    per-client vectors (``n_clients`` is required when both are scalars). The stationary
    probability of being on, and the marginal of every round, is ``p_on / (p_on + p_off)``.
    The lag-one autocorrelation of a client's indicator is ``1 - p_on - p_off``.
    """

    def __init__(
        self,
        p_on: FloatLike | Real[np.ndarray, " n"] | Sequence[float],
        p_off: FloatLike | Real[np.ndarray, " n"] | Sequence[float],
        n_clients: IntLike | None = None,
    ):
        rates: dict[str, float | np.ndarray] = {}
        for name, values in (("p_on", p_on), ("p_off", p_off)):
            if is_scalar(values):
                rates[name] = as_float(values, name)
            else:
                rates[name] = as_real_array(values, name, ndim=1, finite=False)
        sizes = [v.size for v in rates.values() if isinstance(v, np.ndarray)]
        if n_clients is not None:
            n = as_int(n_clients, "n_clients", minimum=1)
        elif sizes:
            n = sizes[0]
        else:
            raise ValueError("n_clients is required when p_on and p_off are both scalars")
        self.n_clients = int(n)
        self.p_on = self._rates(rates["p_on"], "p_on", n, allow_zero=False)
        self.p_off = self._rates(rates["p_off"], "p_off", n, allow_zero=True)

    @staticmethod
    def _rates(values, name: str, n: int, allow_zero: bool) -> np.ndarray:
        arr = np.full(n, values) if isinstance(values, float) else values
        if arr.shape != (n,):
            raise ValueError(f"{name} must be a scalar or have shape ({n},), got {arr.shape}")
        low_ok = arr >= 0 if allow_zero else arr > 0
        bad = ~(low_ok & (arr <= 1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            interval = "[0, 1]" if allow_zero else "(0, 1]"
            raise ValueError(f"{name} must lie in {interval}; entry {i} is {arr[i]!r}")
        return arr

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """Stationary ``p_on / (p_on + p_off)``, shape ``(N,)``."""
        return self.p_on / (self.p_on + self.p_off)

    def _stream(self, rng):
        n, p_on, p_off = self.n_clients, self.p_on, self.p_off
        state = rng.random(n) < self.probabilities
        while True:
            yield state  # never modified in place: the next state is a new array
            u = rng.random(n)
            state = np.where(state, u >= p_off, u < p_on)

    def _fields(self):
        return {
            "p_on": _show_vector(self.p_on),
            "p_off": _show_vector(self.p_off),
            "n_clients": self.n_clients,
        }


__all__ = ["Regularized", "Periodic", "Markov"]
