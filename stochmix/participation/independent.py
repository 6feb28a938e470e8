"""Participation processes independent across rounds: every round is a fresh draw.

- :class:`Full`: every client, every round.
- :class:`UniformSample`: ``size`` clients uniformly without replacement.
- :class:`WeightedSample`: ``size`` clients without replacement, with probability ∝ weights.
- :class:`Bernoulli`: each client independently with its own probability ``p_i``.

The fast draws of :class:`UniformSample` and :class:`Bernoulli` use the kernels of
:mod:`stochmix.participation._draws`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from jaxtyping import Float, Real

from .._validate import as_float, as_int, as_nonnegative, as_probabilities, is_scalar, make_rng
from ._draws import _check_draws, _skips, _uniform_subset
from .base import (
    FloatLike,
    IntLike,
    ParticipationProcess,
    SeedLike,
    _check_size,
    _mask_from,
    _show_vector,
)

# Below this participation rate a homogeneous Bernoulli round is drawn as a binomial count
# plus a uniform subset (same law, cost proportional to the participants, not to N).
_SPARSE_BERNOULLI = 0.1

# Above this many candidates per client, a sparse round (geometric skips) costs more than
# one uniform per client, so the fast draws compare N uniforms instead (the same law).
_DENSE_CANDIDATES = 0.25


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


__all__ = ["Full", "UniformSample", "WeightedSample", "Bernoulli"]
