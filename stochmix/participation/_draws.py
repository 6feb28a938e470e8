"""The draw kernels of the fast participation draws: sets of sorted client indices drawn
at a cost proportional to their size, never to the number of clients N.

- :func:`_skips`: each of ``n`` positions independently with probability ``q``, by
  geometric skips.
- :func:`_uniform_subset`: ``size`` distinct positions of ``n``, uniformly.

``DRAWS`` names the two draw modes of the processes (``"fast"``, these kernels; ``"legacy"``,
the streams of stochmix 0.1.0). The processes that use them are in
:mod:`stochmix.participation.independent`.
"""

from __future__ import annotations

import numpy as np

from .._validate import choice

DRAWS = ("fast", "legacy")


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
