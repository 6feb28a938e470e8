"""Expected mixing matrices under random participation: the Monte Carlo mean
``E[builder(mask)]`` over a participation process's masks (with its standard error), and
the closed forms of ``E[A_S]``, ``E[C_S]``, ``E[D_S]`` and ``E[average(S, q, eta)]`` from
the participation marginals.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import numpy as np
import scipy.sparse as sp
from jaxtyping import Real

from ..._validate import (
    _show,
    as_bool,
    as_bool_array,
    as_float,
    as_int,
    as_nonnegative,
    as_real_array,
    as_seed,
)
from ._matrices import _dense, _matrix

__all__ = [
    "expected_assign",
    "expected_average",
    "expected_collect",
    "expected_local_diagonal",
    "expected_matrix",
]


def _mask_stream(process_or_masks, rounds, seed) -> tuple[Iterable, int]:
    if callable(getattr(process_or_masks, "masks", None)) or callable(
        getattr(process_or_masks, "sample", None)
    ):
        if rounds is None:
            raise ValueError("rounds is required when process_or_masks is a process")
        rounds = as_int(rounds, "rounds", minimum=1)
        if callable(getattr(process_or_masks, "masks", None)):
            return itertools.islice(process_or_masks.masks(seed), rounds), rounds
        return process_or_masks.sample(rounds, seed), rounds
    try:
        masks = as_bool_array(process_or_masks, "process_or_masks")
    except TypeError:
        raise TypeError(
            "process_or_masks must be a participation process (with .masks(seed)) or a"
            f" boolean (rounds, N) array, got {type(process_or_masks).__name__}"
            f" {_show(process_or_masks)} (dtype {np.asarray(process_or_masks).dtype})"
        ) from None
    if masks.ndim != 2 or masks.shape[0] == 0:
        raise ValueError(
            f"process_or_masks must have shape (rounds, N) with rounds >= 1, got {masks.shape}"
        )
    if rounds is not None:
        rounds = as_int(rounds, "rounds", minimum=1)
        if rounds > masks.shape[0]:
            raise ValueError(f"rounds must be <= {masks.shape[0]} (masks given), got {rounds}")
        masks = masks[:rounds]
    return masks, masks.shape[0]


def expected_matrix(
    builder: Callable,
    process_or_masks,
    rounds: int | None = None,
    seed=None,
    *,
    std_error: bool = False,
):
    """Monte Carlo estimate of ``E[builder(mask)]`` over participation masks.

    ``(1/R) sum_{t<R} builder(mask_t)``, e.g. ``expected_matrix(assign, Bernoulli(p),
    rounds=10_000, seed=0)`` estimates ``E[A_S]`` (compare :func:`expected_assign`).

    Args:
        builder: maps a bool mask of shape ``(N,)`` to a square matrix (dense or sparse),
            e.g. :func:`~stochmix.mixing.federated.assign`, or
            ``lambda m: average(m, q, eta)``.
        process_or_masks: a participation process (any object with ``.masks(seed)``, an
            iterator of masks, or ``.sample(rounds, seed)``) or a bool array of shape
            ``(rounds, N)`` (its rows are the masks; ``seed`` is then unused).
        rounds: number of masks R; required for a process, at most the number of rows for
            an array (default all of them).
        seed: seed of the process's stream.
        std_error: also return the standard error of the mean of every entry,
            ``sqrt(s^2 / R)`` with ``s^2`` the unbiased sample variance (needs R >= 2).

    Returns:
        the mean, a CSR array when ``builder`` returns sparse matrices, else a dense array;
        with ``std_error=True`` the pair ``(mean, standard_error)`` in the same format.
    """
    if not callable(builder):
        raise TypeError(f"builder must be callable, got {_show(builder)}")
    seed = as_seed(seed)
    std_error = as_bool(std_error, "std_error")
    masks, count = _mask_stream(process_or_masks, rounds, seed)
    if std_error and count < 2:
        raise ValueError(f"std_error needs at least 2 rounds, got {count}")
    total = total_sq = None
    shape = None
    sparse = None
    batch: list = []

    def flush() -> None:
        nonlocal total, total_sq
        if not batch:
            return
        rows = np.concatenate([b.row for b in batch])
        cols = np.concatenate([b.col for b in batch])
        vals = np.concatenate([b.data for b in batch])
        part = sp.csr_array((vals, (rows, cols)), shape=shape)
        part_sq = sp.csr_array((vals * vals, (rows, cols)), shape=shape)
        total = part if total is None else total + part
        total_sq = part_sq if total_sq is None else total_sq + part_sq
        batch.clear()

    for t, mask in enumerate(masks):
        M = _matrix(builder(np.asarray(mask, dtype=bool)), f"builder(mask {t})")
        if shape is None:
            shape, sparse = M.shape, sp.issparse(M)
        elif M.shape != shape:
            raise ValueError(f"builder(mask {t}) has shape {M.shape}, expected {shape}")
        if sparse:
            batch.append(sp.coo_array(M))
            if len(batch) >= 1024:
                flush()
        else:
            M = _dense(M)
            total = M.copy() if total is None else total + M
            total_sq = M * M if total_sq is None else total_sq + M * M
    if sparse:
        flush()
    if total is None or total_sq is None:
        raise ValueError(f"process_or_masks gave no masks (expected {count})")
    if sparse:
        mean = sp.csr_array(total / count)
        if not std_error:
            return mean
        var = sp.csr_array((total_sq - total.multiply(total) / count) / (count - 1))
        var.data = np.sqrt(np.maximum(var.data, 0.0) / count)
        return mean, var
    mean = total / count
    if not std_error:
        return mean
    var = (total_sq - total * total / count) / (count - 1)
    return mean, np.sqrt(np.maximum(var, 0.0) / count)


def _marginals(p, name: str = "p") -> np.ndarray:
    arr = as_real_array(p, name, finite=False)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {arr.shape}")
    bad = ~((arr >= 0) & (arr <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must lie in [0, 1]; entry {i} is {arr[i]!r}")
    return arr


def _csr(rows, cols, vals, n: int) -> sp.csr_array:
    matrix = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def expected_assign(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[A_S]`` for participation marginals ``p`` (client i takes part w.p. ``p_i``).

    Row 0 is ``e_0``; row ``i + 1`` is ``p_i e_0 + (1 - p_i) e_{i+1}``. Row-stochastic.
    ``A_S`` is affine in the mask's indicators, so this holds for any process with these
    marginals, independent across clients or not (uniform sampling of a fixed size,
    Markov, ...).

    Args:
        p: shape ``(N,)``, entries in [0, 1].

    Returns:
        ``(N+1, N+1)`` CSR array.
    """
    p = _marginals(p)
    n, nodes = p.size, np.arange(1, p.size + 1)
    rows = np.concatenate([[0], nodes, nodes])
    cols = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    return _csr(rows, cols, np.concatenate([[1.0], p, 1.0 - p]), n + 1)


def expected_collect(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[C_S]`` for participation marginals ``p``.

    Row 0 is ``e_0 + sum_i p_i e_{i+1}``; row ``i + 1`` is ``(1 - p_i) e_{i+1}``.
    Column-stochastic. Valid for any process with these marginals (``C_S`` is affine in
    the mask).

    Returns:
        ``(N+1, N+1)`` CSR array.
    """
    p = _marginals(p)
    n, nodes = p.size, np.arange(1, p.size + 1)
    rows = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    cols = np.concatenate([[0], nodes, nodes])
    return _csr(rows, cols, np.concatenate([[1.0], p, 1.0 - p]), n + 1)


def expected_local_diagonal(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[D_S] = diag(0, p_1, ..., p_N)`` for participation marginals ``p`` (any
    process). Returns an ``(N+1, N+1)`` CSR array."""
    p = _marginals(p)
    nodes = np.arange(1, p.size + 1)
    return _csr(nodes, nodes, p, p.size + 1)


def expected_average(
    p: Real[np.ndarray, " n"], weights: Real[np.ndarray, " n"], server_lr: float = 1.0
) -> sp.csr_array:
    """``E[average(S, q, eta)]`` for marginals ``p`` and *fixed* per-client weights ``q``.

    Row 0 is ``(1 - eta sum_i p_i q_i) e_0 + eta sum_i p_i q_i e_{i+1}``; the other rows
    are those of the identity. Exact for any process with these marginals when ``q`` does
    not depend on S (``"unbiased"`` weights ``q_i = 1/(N p_i)`` give row 0 ``=
    (1 - eta) e_0 + (eta/N) sum_i e_{i+1}``); not for ``"uniform"`` weights
    ``1/|S|``, which depend on the draw: use :func:`expected_matrix` for those.

    Returns:
        ``(N+1, N+1)`` CSR array whose rows sum to one.
    """
    p = _marginals(p)
    q = as_nonnegative(weights, "weights")
    if q.shape != p.shape:
        raise ValueError(f"weights must have the shape of p {p.shape}, got {q.shape}")
    eta = as_float(server_lr, "server_lr", positive=True)
    n, nodes = p.size, np.arange(1, p.size + 1)
    pull = eta * p * q
    rows = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    cols = np.concatenate([[0], nodes, nodes])
    vals = np.concatenate([[1.0 - pull.sum()], pull, np.ones(n)])
    return _csr(rows, cols, vals, n + 1)
