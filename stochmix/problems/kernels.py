"""One client's gradient at one point, compiled with Numba (the ``fast`` extra).

The engine's row-wise programs (:mod:`stochmix.engine.codegen.rowwise`) call these as
``kernel(data, c, x, out)``: write grad F_c(x) into ``out`` (shape (d,)), reading client
``c``'s rows of the problem's arrays in ``data`` (a tuple). A companion ``fetch(data, c)``
starts loading client c's rows into the cache; the programs call it a few nodes ahead, so
that the memory latencies of scattered clients overlap.

Each kernel is the one-row case of its problem's vectorized ``gradient_formula``:
elementwise formulas round as that one does; sums over rows and columns may be added in
another order. Importing this module imports Numba; problems reach it through
:meth:`Problem.row_gradient <stochmix.problems.Problem.row_gradient>`, which documents the
contract (a problem of your own may return its own kernel, with :func:`fetch_none` or a
prefetching ``fetch`` like :func:`fetch_two`).
"""

from __future__ import annotations

from typing import no_type_check

import numpy as np

from .._compiled import njit as _compiled
from .._compiled import prefetch_read

__all__ = [
    "fetch_none",
    "fetch_sample",
    "fetch_two",
    "hessian_rows",
    "least_squares_gram",
    "least_squares_padded",
    "least_squares_sampled",
    "logistic_binary",
    "logistic_binary_sampled",
    "logistic_softmax",
    "logistic_softmax_sampled",
    "quadratic_diagonal",
    "quadratic_full",
]


@_compiled
@no_type_check  # plain Python for Numba: no runtime type checks wrapped around it
def _add_ridge(out, x, reg):
    """out += reg x, as the vectorized formulas add it (nothing when reg is 0)."""
    if reg != 0.0:
        for j in range(x.shape[0]):
            out[j] = out[j] + reg * x[j]


@_compiled
@no_type_check
def fetch_two(data, c):
    """Prefetch row ``c`` of the first two arrays of ``data``."""
    prefetch_read(data[0], c)
    prefetch_read(data[1], c)


@_compiled
@no_type_check
def fetch_none(data, c):
    """Prefetch nothing (for kernels whose data is small or not indexed by client)."""


@_compiled
@no_type_check
def quadratic_diagonal(data, c, x, out):
    """H_c (x - z_c) with H_c diagonal: ``data = (h (N, d), z (N, d))``."""
    h, z = data
    for j in range(x.shape[0]):
        out[j] = (x[j] - z[c, j]) * h[c, j]


@_compiled
@no_type_check
def quadratic_full(data, c, x, out):
    """H_c (x - z_c): ``data = (H (N, d, d), z (N, d))``."""
    hess, z = data
    d = x.shape[0]
    diff = x - z[c]
    for i in range(d):
        s = 0.0
        for j in range(d):
            s += hess[c, i, j] * diff[j]
        out[i] = s


@_compiled
@no_type_check
def least_squares_padded(data, c, x, out):
    """A_c^T (A_c x - b_c) + reg x from zero-padded rows: ``data = (a (N, n, d), b (N, n),
    reg)``."""
    a, b, reg = data
    d = x.shape[0]
    for j in range(d):
        out[j] = 0.0
    for k in range(a.shape[1]):
        r = 0.0
        for j in range(d):
            r += a[c, k, j] * x[j]
        r -= b[c, k]
        for j in range(d):
            out[j] += a[c, k, j] * r
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def least_squares_gram(data, c, x, out):
    """A_c^T A_c x - A_c^T b_c + reg x: ``data = (gram (N, d, d), atb (N, d), reg)``."""
    gram, atb, reg = data
    d = x.shape[0]
    for i in range(d):
        s = 0.0
        for j in range(d):
            s += gram[c, i, j] * x[j]
        out[i] = s - atb[c, i]
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def hessian_rows(hess, vec, rows, x, after, out):
    """Many rows at once, ``out[t] = H_c x_t - v_c`` (``after``: least squares' gram form,
    as :func:`least_squares_gram` without the ridge) or ``out[t] = H_c (x_t - v_c)`` (a full
    quadratic, as :func:`quadratic_full`) with ``c = rows[t]``: ``hess`` (N, d, d), ``vec``
    (N, d), ``x`` and ``out`` (m, d). The batched form of the two kernels for the
    vectorized formulas on NumPy arrays: each row's sum in the order of the one-row kernel
    (``einsum`` may add in another order), read once, without a gathered copy of the
    Hessians."""
    m, d = x.shape
    diff = np.empty(d)
    for t in range(m):
        c = rows[t]
        if after:
            for j in range(d):
                diff[j] = x[t, j]
        else:
            for j in range(d):
                diff[j] = x[t, j] - vec[c, j]
        for i in range(d):
            s = 0.0
            for j in range(d):
                s += hess[c, i, j] * diff[j]
            out[t, i] = s - vec[c, i] if after else s


@_compiled
@no_type_check
def logistic_binary(data, c, x, out):
    """sum_k w_ck (sigmoid(a_ck . x) - y_ck) a_ck + reg x over client c's padded rows:
    ``data = (a (N, n, d), y (N, n), w (N, n), reg)``; padding has weight zero."""
    a, y, w, reg = data
    d = x.shape[0]
    for j in range(d):
        out[j] = 0.0
    for k in range(a.shape[1]):
        if w[c, k] == 0.0:
            continue
        z = 0.0
        for j in range(d):
            z += a[c, k, j] * x[j]
        e = np.exp(-abs(z))
        s = 1.0 / (1.0 + e) if z >= 0 else e / (1.0 + e)
        r = (s - y[c, k]) * w[c, k]
        for j in range(d):
            out[j] += a[c, k, j] * r
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def logistic_softmax(data, c, x, out):
    """sum_k w_ck a_ck (softmax(a_ck W) - onehot_ck) + reg W with W = x as (p, C) row-major:
    ``data = (a (N, n, p), t (N, n, C), w (N, n), reg)``; padding has weight zero."""
    a, t, w, reg = data
    classes = t.shape[2]
    for j in range(x.shape[0]):
        out[j] = 0.0
    logits = np.empty(classes)
    for k in range(a.shape[1]):
        if w[c, k] != 0.0:
            _add_softmax_sample(a[c, k], t[c, k], w[c, k], x, out, logits)
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def _add_softmax_sample(a, t, w, x, out, logits):
    """out += w a (softmax(a W) - t) for one sample (features ``a`` (p,), one-hot ``t``
    (C,)), W = x as (p, C) row-major; ``logits`` (C,) is scratch."""
    p, classes = a.shape[0], t.shape[0]
    for q in range(classes):
        s = 0.0
        for i in range(p):
            s += a[i] * x[i * classes + q]
        logits[q] = s
    top = logits.max()
    total = 0.0
    for q in range(classes):
        logits[q] = np.exp(logits[q] - top)
        total += logits[q]
    for q in range(classes):
        logits[q] = (logits[q] / total - t[q]) * w
    for i in range(p):
        for q in range(classes):
            out[i * classes + q] += a[i] * logits[q]


# ---------------------------------------------------------------------- sampled gradients
# Sampled kernels (``Problem.sampled_row_gradient``) take ``data`` as the problem's arrays
# followed by the round's draw ``(clients (s,), picks (s, b), scale (s,))`` and ``t``, the
# node's place in the run: its client is ``clients[t]``, its samples the rows ``picks[t]``
# among that client's, the sum is scaled by ``scale[t]`` (see
# ``FiniteSumProblem.sampled_gradients``).


@_compiled
@no_type_check
def fetch_sample(data, t):
    """Prefetch the first sample row of node ``t`` (``data = (rows, ..., offsets, ...,
    clients, picks, scale)``, the samples' rows first and their offsets third)."""
    rows, offsets, clients, picks = data[0], data[2], data[-3], data[-2]
    if picks.shape[1]:
        prefetch_read(rows, offsets[clients[t]] + picks[t, 0])


@_compiled
@no_type_check
def least_squares_sampled(data, t, x, out):
    """``scale_t sum_k a_r (a_r . x - b_r) + reg x`` over the rows ``r = offsets[c] +
    picks[t, k]`` of client ``c = clients[t]``: ``data = (rows (M, d), rhs (M,), offsets
    (N,), reg, clients (s,), picks (s, b), scale (s,))``."""
    rows, rhs, offsets, reg, clients, picks, scale = data
    d = x.shape[0]
    for j in range(d):
        out[j] = 0.0
    first = offsets[clients[t]]
    for k in range(picks.shape[1]):
        r = first + picks[t, k]
        e = 0.0
        for j in range(d):
            e += rows[r, j] * x[j]
        e -= rhs[r]
        for j in range(d):
            out[j] += rows[r, j] * e
    s = scale[t]
    for j in range(d):
        out[j] = s * out[j]
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def logistic_binary_sampled(data, t, x, out):
    """``sum_k w (sigmoid(a_r . x) - y_r) a_r + reg x`` over the rows ``r = offsets[c] +
    picks[t, k]`` of client ``c = clients[t]``, ``w = scale_t / n_c``: ``data = (rows (M,
    p), y (M,), offsets (N,), inv_counts (N,), reg, clients (s,), picks (s, b), scale
    (s,))``."""
    rows, y, offsets, inv_counts, reg, clients, picks, scale = data
    d = x.shape[0]
    for j in range(d):
        out[j] = 0.0
    c = clients[t]
    first = offsets[c]
    w = scale[t] * inv_counts[c]
    for k in range(picks.shape[1]):
        r = first + picks[t, k]
        z = 0.0
        for j in range(d):
            z += rows[r, j] * x[j]
        e = np.exp(-abs(z))
        s = 1.0 / (1.0 + e) if z >= 0 else e / (1.0 + e)
        v = (s - y[r]) * w
        for j in range(d):
            out[j] += rows[r, j] * v
    _add_ridge(out, x, reg)


@_compiled
@no_type_check
def logistic_softmax_sampled(data, t, x, out):
    """``sum_k w a_r (softmax(a_r W) - onehot_r) + reg W`` with ``W = x`` as (p, C)
    row-major, over the rows ``r = offsets[c] + picks[t, k]`` of client ``c = clients[t]``,
    ``w = scale_t / n_c``: ``data = (rows (M, p), targets (M, C), offsets (N,), inv_counts
    (N,), reg, clients (s,), picks (s, b), scale (s,))``."""
    rows, targets, offsets, inv_counts, reg, clients, picks, scale = data
    classes = targets.shape[1]
    for j in range(x.shape[0]):
        out[j] = 0.0
    c = clients[t]
    first = offsets[c]
    w = scale[t] * inv_counts[c]
    logits = np.empty(classes)
    for k in range(picks.shape[1]):
        r = first + picks[t, k]
        _add_softmax_sample(rows[r], targets[r], w, x, out, logits)
    _add_ridge(out, x, reg)
