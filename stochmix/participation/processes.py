"""Participation processes: who takes part in each round.

A process yields one boolean mask over the ``n_clients`` clients per round, forever, from a
generator seeded by the caller. The same seed gives the identical stream, so every algorithm
in a comparison can be fed the same participants; every call to :meth:`masks` starts a new
stream. Masks are drawn vectorized over clients (a round costs a few NumPy calls, never a
Python loop over clients).

Where the per-round marginal ``P(client i participates)`` has a closed form it is exposed as
:attr:`ParticipationProcess.probabilities`; otherwise that is ``None`` and
:meth:`ParticipationProcess.estimate_probabilities` gives a Monte Carlo estimate.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import numpy as np
from jaxtyping import Bool, Float, Int, Real

from .._validate import (
    as_bool,
    as_float,
    as_int,
    as_int_array,
    as_nonnegative,
    as_probabilities,
    as_real_array,
    choice,
    is_scalar,
    make_rng,
)
from ._record import Activation
from .statistics import _check_masks

IntLike = int | np.integer
FloatLike = float | np.floating
SeedLike = int | np.integer | np.random.SeedSequence | np.random.Generator | None

# Below this participation rate a homogeneous Bernoulli round is drawn as a binomial count
# plus a uniform subset (same law, cost proportional to the participants, not to N).
_SPARSE_BERNOULLI = 0.1


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


DRAWS = ("fast", "legacy")

# Above this many candidates per client, a sparse round (geometric skips) costs more than
# one uniform per client, so the fast draws compare N uniforms instead (the same law).
_DENSE_CANDIDATES = 0.25


# Below this many participants, a uniform subset is drawn by NumPy (and sorted).
_FLOYD_SIZE = 2000


def _check_draws(draws) -> str:
    return choice(draws, "draws", DRAWS)


# any standard exponential drawn from doubles is below this (-log 2^-1074 < 745)
_EXPONENTIAL_BOUND = 1000.0


def _skips(rng: np.random.Generator, n: int, q: float, work: dict | None = None) -> np.ndarray:
    """Sorted int64 positions in ``[0, n)``, each present independently with probability
    ``q`` in (0, 1], drawn by geometric skips: O(n q) expected, no pass over the n positions.

    A gap ``floor(E / -log(1 - q)) + 1`` with ``E ~ Exp(1)`` is exactly Geometric(q) on
    {1, 2, ...}; positions are the cumulative sums of gaps, minus one, below ``n``.

    ``work``: a dict kept between calls whose buffers the draw reuses (fresh pages for
    every round's temporaries cost as much as the draw itself in a new process); the
    result is then a view of them, valid until the next call with the same ``work``.
    """
    if q >= 1.0:
        return np.arange(n, dtype=np.int64)
    scale = -1.0 / np.log1p(-q)
    mean = n * q
    batch = int(mean + 4.0 * np.sqrt(mean) + 16)
    if work is None or work.get("size") != batch:
        work = {} if work is None else work
        work.update(size=batch, skips=np.empty(batch), positions=np.empty(batch, np.int64))
    skips, positions = work["skips"], work["positions"]
    chunks = []
    last = -1
    while True:
        rng.standard_exponential(batch, out=skips)
        skips *= scale
        if scale * _EXPONENTIAL_BOUND >= n:  # a skip past the end ends it: no overflow
            np.minimum(skips, n, out=skips)
        np.copyto(positions, skips, casting="unsafe")  # floor: the skips are >= 0
        positions += 1
        positions[0] += last  # then the cumulative sums start after the last position
        np.cumsum(positions, out=positions)
        if positions[-1] >= n:
            chunks.append(positions[: np.searchsorted(positions, n)])
            break
        chunks.append(positions.copy())
        last = int(positions[-1])
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _uniform_subset(
    rng: np.random.Generator, n: int, size: int, work: dict | None = None
) -> np.ndarray:
    """``size`` distinct indices of ``[0, n)``, uniformly, sorted int64, in O(size) expected.

    Draws a Bernoulli(q) set by geometric skips with ``n q`` four standard deviations above
    ``size``; given its count K, that set is a uniform K-subset, so removing K - size of its
    members uniformly at random leaves a uniform size-subset (a round with K < size, about
    one in 30000, is drawn again). Above n / 2 the excluded clients are drawn instead.
    Small sets come from ``Generator.choice``, sorted (faster there).
    """
    if size < _FLOYD_SIZE and (n <= 10_000 or 50 * size <= n):
        # NumPy's own draw costs O(size) here (Floyd's algorithm, or a shuffle of at most
        # 10^4), and its sort beats the geometric skips below about 2000 participants.
        return np.sort(rng.choice(n, size, replace=False, shuffle=False))
    if 2 * size > n:
        excluded = _uniform_subset(rng, n, n - size, work) if size < n else None
        if excluded is None:
            return np.arange(n, dtype=np.int64)
        keep = np.ones(n, dtype=bool)
        keep[excluded] = False
        return np.flatnonzero(keep)
    q = min(1.0, (size + 4.0 * np.sqrt(size) + 8.0) / n)
    while True:
        found = _skips(rng, n, q, work)
        extra = found.size - size
        if extra >= 0:
            break
    if extra == 0:
        return found.copy()  # (found may be a view of ``work``)
    keep = np.ones(found.size, dtype=bool)
    keep[rng.choice(found.size, extra, replace=False, shuffle=False)] = False
    return np.compress(keep, found)  # compress: much faster than found[keep]


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


class Full(ParticipationProcess):
    """Every client takes part in every round; probabilities are all one."""

    def __init__(self, n_clients: IntLike):
        self.n_clients = as_int(n_clients, "n_clients", minimum=1)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """All ones, shape ``(N,)``."""
        return np.ones(self.n_clients)

    def _stream(self, rng):
        while True:
            yield np.ones(self.n_clients, dtype=bool)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        everyone = np.arange(self.n_clients, dtype=np.int64)
        everyone.flags.writeable = False  # the same array every round: nobody may change it
        while True:
            yield everyone


class UniformSample(ParticipationProcess):
    """``size`` distinct clients drawn uniformly without replacement, independently each round.

    Probabilities are ``size / N``.

    Args:
        n_clients: N, the number of clients.
        size: clients per round, in ``[1, N]``.
        draws: ``"fast"`` (default) draws a round in O(size) expected and never touches
            all N clients (:meth:`participants` builds no N-long array): a Bernoulli set a
            little larger than ``size`` by geometric skips, thinned to exactly ``size``
            uniformly. Below 2000 clients a round, when ``size <= N / 50`` or
            ``N <= 10^4``, it keeps the legacy draw, which costs O(size log size) there and
            is faster. ``"legacy"`` replays the streams of stochmix 0.1.0 bit for bit
            (``Generator.choice(N, size, replace=False)``, sorted, whose cost grows with N
            once ``size > N / 50``). Both have the same law; from 2000 clients a round the
            same seed gives different participants under each.
    """

    def __init__(self, n_clients: IntLike, size: IntLike, draws: str = "fast"):
        self.n_clients = as_int(n_clients, "n_clients", minimum=1)
        self.size = _check_size(size, self.n_clients)
        self.draws = _check_draws(draws)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``size / N`` for every client, shape ``(N,)``."""
        return np.full(self.n_clients, self.size / self.n_clients)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        n, size = self.n_clients, self.size
        if self.draws == "legacy":
            while True:
                yield np.sort(rng.choice(n, size, replace=False, shuffle=False))
        work: dict = {}  # the draw's buffers, reused round after round
        while True:
            yield _uniform_subset(rng, n, size, work)

    def _stream(self, rng):
        for chosen in self._index_stream(rng):
            yield _mask_from(chosen, self.n_clients)

    def _fields(self):
        fields = {"n_clients": self.n_clients, "size": self.size}
        if self.draws != "fast":
            fields["draws"] = repr(self.draws)
        return fields


class WeightedSample(ParticipationProcess):
    """``size`` distinct clients drawn without replacement with probability ∝ ``weights``.

    The law is that of ``Generator.choice(N, size, replace=False, p=weights / sum)``:
    successive draws, each proportional to the weights of the clients not yet drawn. When
    ``size`` is small next to N it is sampled as the first ``size`` distinct clients of
    i.i.d. weighted draws (O(size log N) a round); otherwise, or when the weights are too
    concentrated for that to finish quickly, as the ``size`` clients with the smallest keys
    ``Exp(1) / w_i`` (O(N)). Both have exactly this law. Clients of weight zero never take
    part.

    Probabilities are exact when ``size == 1`` (``w / sum w``) or when ``size`` equals the
    number of positive weights (one on them, zero elsewhere); otherwise ``None`` (no closed
    form; see :meth:`estimate_probabilities`).
    """

    def __init__(self, weights: Real[np.ndarray, " n"] | Sequence[float], size: IntLike):
        w = as_nonnegative(weights, "weights")
        if w.size == 0:
            raise ValueError("weights must not be empty, got shape (0,)")
        positive = int(np.count_nonzero(w))
        if positive == 0:
            raise ValueError("weights must have a positive entry, got all zeros")
        self.n_clients = int(w.size)
        self.weights = w
        self.size = as_int(size, "size", minimum=1)
        if self.size > positive:
            raise ValueError(
                f"size must be <= the number of clients with positive weight ({positive}), "
                f"got {self.size}"
            )
        self._positive = positive
        with np.errstate(divide="ignore"):
            self._inverse_weights = 1.0 / w  # inf for weight zero: never among the smallest
        self._cumulative = np.cumsum(w)
        self._total = float(self._cumulative[-1])
        self._last_positive = int(np.flatnonzero(w)[-1])

    @property
    def probabilities(self) -> Float[np.ndarray, " n"] | None:
        """``w / sum w`` when ``size == 1``; ``1[w > 0]`` when every weighted client is drawn;
        else ``None``."""
        if self.size == 1:
            return self.weights / self.weights.sum()
        if self.size == self._positive:
            return (self.weights > 0).astype(float)
        return None

    def _by_keys(self, rng: np.random.Generator) -> np.ndarray:
        """O(N): the ``size`` clients with the smallest keys ``Exp(1) / w_i``."""
        keys = rng.standard_exponential(self.n_clients) * self._inverse_weights
        return np.argpartition(keys, self.size - 1)[: self.size]

    def _by_draws(self, rng: np.random.Generator, batches: int = 3) -> np.ndarray | None:
        """O(size log N): the first ``size`` distinct clients of i.i.d. draws ∝ w, or ``None``.

        Keeping the first occurrences of i.i.d. weighted draws is exactly successive
        sampling. Gives up (``None``) when ``batches`` batches of ``2 size + 16`` draws hold
        too few distinct clients (weights concentrated on a few clients).
        """
        batch = 2 * self.size + 16
        draws = np.empty(0, dtype=np.int64)
        for _ in range(batches):
            u = rng.random(batch) * self._total
            new = np.searchsorted(self._cumulative, u, side="right")
            draws = np.concatenate([draws, np.minimum(new, self._last_positive)])
            distinct, first = np.unique(draws, return_index=True)
            if distinct.size >= self.size:
                return distinct[np.argsort(first, kind="stable")[: self.size]]
        return None

    def _chosen(self, rng):
        """The clients of each round, unsorted."""
        n, size = self.n_clients, self.size
        if size == self._positive:
            everyone = np.flatnonzero(self.weights)
            while True:
                yield everyone.copy()
        sparse = 16 * size <= n
        while True:
            chosen = self._by_draws(rng) if sparse else None
            if chosen is None:
                chosen = self._by_keys(rng)
            yield chosen

    def _stream(self, rng):
        for chosen in self._chosen(rng):
            yield _mask_from(chosen, self.n_clients)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        for chosen in self._chosen(rng):
            yield np.sort(chosen).astype(np.int64, copy=False)

    def _fields(self):
        return {"weights": _show_vector(self.weights), "size": self.size}


class Bernoulli(ParticipationProcess):
    """Each client independently with probability ``p_i`` in (0, 1], independently each round.

    ``p`` is a vector of length N, or a scalar together with ``n_clients``. Probabilities are
    ``p``.

    Args:
        p: the probabilities, one number or one per client.
        n_clients: N, required when ``p`` is a scalar.
        draws: ``"fast"`` (default) draws a round at a cost proportional to its expected
            participants, where that beats one uniform per client: the candidates of a
            Bernoulli(``max p``) process come by geometric skips (clients grouped by ``p_i``
            within a factor of two when that is cheaper), and each candidate is kept with
            probability ``p_i / max p``; a round costs O(N max p) expected, at most about
            twice the participants when grouped (plus their sort). When most clients would
            be candidates, it compares one uniform per client with ``p``.
            ``"legacy"`` replays the streams of stochmix 0.1.0 bit for bit (one uniform per
            client; for a homogeneous ``p <= 0.1``, a binomial count and a uniform subset).
            Both have exactly the same law; the same seed gives different participants
            under each.
    """

    def __init__(
        self,
        p: FloatLike | Real[np.ndarray, " n"] | Sequence[float],
        n_clients: IntLike | None = None,
        draws: str = "fast",
    ):
        if is_scalar(p):
            value = as_float(p, "p")
            if not 0 < value <= 1:
                raise ValueError(f"p must lie in (0, 1], got {value!r}")
            if n_clients is None:
                raise ValueError("n_clients is required when p is a scalar")
            n = as_int(n_clients, "n_clients", minimum=1)
            self.p = np.full(n, value)
        else:
            self.p = as_probabilities(p, "p")
            if self.p.size == 0:
                raise ValueError("p must not be empty, got shape (0,)")
            if n_clients is not None:
                n = as_int(n_clients, "n_clients", minimum=1)
                if n != self.p.size:
                    raise ValueError(f"n_clients = {n} does not match len(p) = {self.p.size}")
        self.draws = _check_draws(draws)
        self.n_clients = int(self.p.size)
        self._homogeneous = bool(np.all(self.p == self.p[0]))
        self._plan = self._sparse_plan() if self.draws == "fast" else None

    @classmethod
    def heterogeneous(
        cls,
        n_clients: IntLike,
        low: FloatLike,
        high: FloatLike,
        seed: SeedLike = None,
        draws: str = "fast",
    ) -> Bernoulli:
        """A Bernoulli process with ``p_i`` drawn uniformly in ``[low, high]``.

        Requires ``0 < low <= high <= 1``. The ``p_i`` come from ``seed`` (a generator of
        their own, not the mask stream's). ``draws`` as in the class.
        """
        n = as_int(n_clients, "n_clients", minimum=1)
        low = as_float(low, "low", positive=True, maximum=1.0)
        high = as_float(high, "high", positive=True, maximum=1.0)
        if high < low:
            raise ValueError(f"high must be >= low = {low}, got {high}")
        draws = _check_draws(draws)
        return cls(make_rng(seed).uniform(low, high, n), draws=draws)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``p``, shape ``(N,)``: a read-only view (no copy of N numbers per call)."""
        view = self.p.view()
        view.flags.writeable = False
        return view

    def _sparse_plan(self) -> list[tuple] | None:
        """The groups of the fast draws, computed once: ``(members, q)`` per group, where
        ``members`` are its clients, sorted (``None``: all of them), and ``q`` its largest
        probability; or ``None`` when one uniform per client is cheaper. Unless ``p`` is
        homogeneous, each round thins a group's candidates, keeping each with probability
        ``p_i / q`` (computed for those candidates only: no N-long array of them)."""
        p, n = self.p, self.n_clients
        top = float(p.max())
        total = float(p.sum())
        plan: list[tuple[np.ndarray | None, float]]
        if self._homogeneous:
            plan = [(None, top)]
            cost = n * top
        else:
            plan = [(None, top)]
            cost = n * top
            # Groups of p within a factor of two: at most 2 sum(p) candidates, plus a sort.
            level = p / top  # in place from here: no N-long temporaries at 10^7 clients
            np.log2(level, out=level)
            np.negative(level, out=level)
            np.floor(level, out=level)
            np.minimum(level, 60, out=level)
            group = level.astype(np.int8)
            counts = np.bincount(group)
            present = np.flatnonzero(counts)
            if present.size > 1:
                tops = np.zeros(counts.size)
                np.maximum.at(tops, group, p)
                grouped = float(counts[present] @ tops[present]) + total
                if grouped < cost:
                    index = np.int32 if n < 2**31 else np.int64
                    order = np.argsort(group, kind="stable").astype(index)
                    bounds = np.concatenate([[0], np.cumsum(counts)])
                    plan = []
                    for g in present:
                        members = order[bounds[g] : bounds[g + 1]]
                        plan.append((members, float(tops[g])))
                    cost = grouped
        return None if cost > _DENSE_CANDIDATES * n else plan

    def _sparse_round(
        self, rng: np.random.Generator, plan: list[tuple], work: list[dict]
    ) -> np.ndarray:
        """One round by thinning: per group of the plan (:meth:`_sparse_plan`), candidates
        at the group's top rate q by geometric skips, each kept with probability p_i / q.
        ``work``: one dict of reusable buffers per group (see :func:`_skips`)."""
        found = []
        for (members, q), buffers in zip(plan, work, strict=True):
            size = self.n_clients if members is None else members.size
            candidates = _skips(rng, size, q, buffers)  # a view of the buffers
            clients = candidates if members is None else members[candidates]
            if not self._homogeneous:
                m = candidates.size
                if "draws" not in buffers or buffers["draws"].size < m:
                    room = max(m, buffers.get("size", 0))  # (no skips drawn at q = 1)
                    buffers["draws"], buffers["ratio"] = np.empty(room), np.empty(room)
                # p[clients] / q: the same numbers as dividing all of p once, taken per round
                ratio = np.take(self.p, clients, out=buffers["ratio"][:m])
                np.divide(ratio, q, out=ratio)
                draws = rng.random(out=buffers["draws"][:m])
                clients = np.compress(draws < ratio, clients)  # faster than clients[kept]
            elif members is None:
                clients = clients.copy()
            found.append(clients)
        if len(found) == 1:
            return found[0]
        return np.sort(np.concatenate(found).astype(np.int64))

    def _legacy_stream(self, rng):
        n, p = self.n_clients, self.p
        if self._homogeneous and p[0] <= _SPARSE_BERNOULLI:
            p0 = float(p[0])
            while True:
                count = int(rng.binomial(n, p0))
                yield _mask_from(rng.choice(n, count, replace=False, shuffle=False), n)
        elif self._homogeneous and p[0] == 1.0:
            while True:
                yield np.ones(n, dtype=bool)
        else:
            while True:
                yield rng.random(n) < p

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        if self.draws == "legacy":
            yield from super()._index_stream(rng)
        elif self._plan is not None:
            plan = self._plan
            work: list[dict] = [{} for _ in plan]  # buffers reused round after round
            while True:
                yield self._sparse_round(rng, plan, work)
        elif self._homogeneous and self.p[0] == 1.0:
            while True:
                yield np.arange(self.n_clients, dtype=np.int64)
        else:
            while True:
                yield np.flatnonzero(rng.random(self.n_clients) < self.p)

    def _stream(self, rng):
        if self.draws == "legacy":
            yield from self._legacy_stream(rng)
        for chosen in self._index_stream(rng):
            yield _mask_from(chosen, self.n_clients)

    def _fields(self):
        fields = {"p": _show_vector(self.p), "n_clients": self.n_clients}
        if self.draws != "fast":
            fields["draws"] = repr(self.draws)
        return fields


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


class Trace(ParticipationProcess):
    """Replay of a recorded ``(rounds, N)`` boolean array, or of a ``.npy`` file holding one.

    A file is read with ``allow_pickle=False``, so loading a trace never runs code; a file
    that cannot be read, holds pickled objects, an ``.npz`` archive or anything but a
    ``(rounds, N)`` boolean array is refused with one error naming the file.

    Every stream starts at row 0 (the seed is ignored). Past the last row the stream raises
    ``ValueError`` naming the trace length, unless ``repeat=True``, in which case it starts
    again from row 0. Probabilities are ``None``; the trace's own frequencies are
    :func:`stochmix.participation.empirical_probabilities` of :attr:`masks_array`.
    """

    def __init__(
        self,
        masks: Bool[np.ndarray, "rounds n"] | str | os.PathLike,
        repeat: bool = False,
    ):
        self.source: str | None  # the file the masks were read from
        if isinstance(masks, (str, bytes, os.PathLike)):
            self.source = os.fsdecode(masks)
            masks = _load_trace(self.source)
            name = f"masks (from {self.source!r})"
        else:
            self.source = None
            name = "masks"
        arr = _check_masks(masks, name)
        if arr.shape[1] < 1:
            raise ValueError(
                f"{name} must have shape (rounds, n_clients) with both >= 1, got {arr.shape}"
            )
        self.repeat = as_bool(repeat, "repeat")
        self.masks_array = np.array(arr, dtype=bool, copy=True)
        self.masks_array.flags.writeable = False
        self.n_clients = int(arr.shape[1])

    @property
    def rounds(self) -> int:
        """Number of recorded rounds."""
        return int(self.masks_array.shape[0])

    def _stream(self, rng):
        rows = self.masks_array
        while True:
            for row in rows:
                yield row.copy()
            if not self.repeat:
                raise ValueError(
                    f"the trace has only {rows.shape[0]} rounds (trace length "
                    f"{rows.shape[0]}); more were requested. Pass repeat=True to cycle it."
                )

    def _fields(self):
        fields = {"rounds": self.rounds, "n_clients": self.n_clients}
        if self.source is not None:
            fields["source"] = repr(self.source)
        if self.repeat:
            fields["repeat"] = True
        return fields


def _load_trace(path: str) -> np.ndarray:
    """The array of a ``.npy`` file, read without ever unpickling (``allow_pickle=False``);
    any failure is one error naming the file."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:  # OSError, ValueError (pickled data), EOFError, ...
        reason = str(error) or type(error).__name__
        raise ValueError(f"masks: cannot load a trace from {path!r}: {reason}") from error
    if not isinstance(loaded, np.ndarray):
        if hasattr(loaded, "close"):
            loaded.close()
        raise TypeError(
            f"masks: {path!r} must hold a single .npy array, got a {type(loaded).__name__}"
        )
    return loaded


__all__ = [
    "ParticipationProcess",
    "Full",
    "UniformSample",
    "WeightedSample",
    "Bernoulli",
    "Regularized",
    "Periodic",
    "Markov",
    "Trace",
]
