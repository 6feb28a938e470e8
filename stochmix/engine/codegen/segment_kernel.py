"""The compiled loop of :mod:`stochmix.engine.runner.segments` (importing it imports Numba).

The loop calls the problem's one-client gradient as the module global ``grad``: its
source (:data:`SOURCE`) is compiled once per gradient kernel, through the row-wise
programs' disk cache where the kernel can be imported by name (so a machine compiles it
once), else in memory.
"""

from __future__ import annotations

from functools import cache
from typing import no_type_check

import numba
import numpy as np

from ... import _compiled
from ...problems.kernels import fetch_none
from .disk_cache import HELPERS, cached_function

__all__ = ["SOURCE", "batch_function", "no_gradient"]


@numba.njit(nogil=True, boundscheck=False, cache=True)
@no_type_check  # plain Python for Numba
def no_gradient(data, client, x, out):
    """The gradient kernel of rounds that take no gradient (never called)."""
    out[0] = np.nan


#: ``rows(...)``: apply rounds ``0..B-1`` in order (round r: program
#: ``round_program[r]`` with the nodes ``round_nodes[r]``), each phase from the state
#: before it, keeping ``sums`` (the sum of the model block's rows) and writing ``sums /
#: n_average`` into ``server[r]``. Returns the number of rounds done: B, or the round in
#: which a phase wrote a value that is not finite (its rows are written, its model row not),
#: or ``-(r + 1)`` when round r's model has an entry above ``too_large`` in absolute value
#: (round r done: the run's divergence threshold, checked where a round-by-round run
#: checks it). The model is the average of the rows of the block that starts (node 0) at
#: row ``report_base``: a running sum of the values stored, or (``fresh``, rounds of every
#: node) their sum afresh every round; where ``consensus`` is not empty (with ``fresh``),
#: ``consensus[r]`` gets the mean squared distance of those rows from their mean (gossip
#: ticks, not ``fresh``: from a running sum of squares about a centre, updated by the
#: rows each tick writes and taken afresh every ``n`` ticks or after a 1000-fold fall). A round
#: whose phase writes a value that is not finite has all its phases applied first. A phase
#: with a kernel (``k_kind[q]`` > 0: :data:`~stochmix.engine.runner.slot_form.SLOT_KERNELS`)
#: sets each target row to the kernel of its source row, entry by entry, with the round
#: scalars ``k_par[2q:2q+2]``. Where ``ratio_base`` >= 0 (rounds of every node of push-sum
#: methods, ``fresh``) the gradients are taken at, and the reported model and consensus
#: read, the ratios of the model and reported rows to the rows of the block that starts
#: at ``ratio_base`` (``pbuf``: one point, the state's dtype); in gossip ticks (not
#: ``fresh``) the running sum is of those ratios, each node whose reported or divisor
#: row a round writes taken out of it before the round and put back after. A per-row affine phase
#: (``k_kind[q]`` 4: diagonal matrices, 5: full ones) sets its k-th target to ``M_k (v +
#: b_k)`` (``k_par[2q]`` 0) or ``M_k v + b_k`` (1), ``v`` its source row, ``b_k`` row
#: ``k_tab[q] + k`` of ``a_off``, ``M_k`` row ``k_mat[q] + k`` of ``a_diag`` or ``a_mat``
#: (``vbuf``: one float64 row). A compression step (``k_kind[q]`` 6) sums its terms (a - b)
#: as a linear phase, keeps the ``k_par[2q]`` entries of largest magnitude (ties to the
#: lowest index; all where k >= d) and adds the target's own row b.
SOURCE = """def rows(
    z, round_nodes, round_program, P0, T0, t_base, t_slot, M0, m_target, m_base, m_slot,
    m_coef, G0, g_target, g_client, g_coef, C0, c_slot, k_kind, k_par, data, model_base,
    client_node,
    n_average, sums, server, tbuf, gbuf, too_large, report_base, consensus, fresh,
    ratio_base, pbuf, k_tab, k_mat, a_off, a_diag, a_mat, vbuf,
):
    d = z.shape[1]
    rounds = round_program.shape[0]
    pick = np.zeros(d, dtype=np.bool_)
    mean = np.zeros(d)
    first = report_base + client_node  # the reported row of the first node
    divisor = ratio_base + client_node  # (ratio_base >= 0) the first node's divisor row
    n_nodes = int(n_average)
    ratios = ratio_base >= 0 and not fresh  # a running sum of ratios: the nodes' changes
    # gossip ticks recording consensus: a running sum of squares about a centre, taken
    # afresh (about the mean) every n ticks and wherever it fell 1000-fold since
    spreads = consensus.shape[0] > 0 and not fresh
    touched = np.zeros(round_nodes.shape[1], dtype=np.bool_)
    centre = np.zeros(d)
    squares = 0.0
    reference = 0.0
    since = n_nodes  # (taken afresh at the end of the first round)
    for r in range(rounds):
        p = round_program[r]
        nodes = round_nodes[r]
        finite = True
        if ratios or spreads:  # the slots whose reported (or divisor) rows the round writes
            for i in range(touched.shape[0]):
                touched[i] = False
            for q in range(P0[p], P0[p + 1]):
                for t in range(T0[q], T0[q + 1]):
                    if t_base[t] == report_base or t_base[t] == ratio_base:
                        touched[t_slot[t]] = True
            for i in range(touched.shape[0]):  # out of the sums before the round
                if touched[i]:
                    for j in range(d):
                        value = z[report_base + nodes[i], j]
                        if ratio_base >= 0:
                            value = value / z[ratio_base + nodes[i], j]
                        if ratios:
                            sums[j] -= value
                        if spreads:
                            squares -= (value - centre[j]) * (value - centre[j])
        for q in range(P0[p], P0[p + 1]):
            c_lo = C0[q]
            for c in range(c_lo, C0[q + 1]):
                node = nodes[c_slot[c]]
                if ratio_base < 0:
                    grad(data, node - client_node, z[model_base + node], gbuf[c - c_lo])
                else:  # at the ratio of the node's rows (push-sum's x / w)
                    for j in range(d):
                        pbuf[j] = z[model_base + node, j] / z[ratio_base + node, j]
                    grad(data, node - client_node, pbuf, gbuf[c - c_lo])
            t_lo = T0[q]
            targets = T0[q + 1] - t_lo
            for t in range(targets):
                for j in range(d):
                    tbuf[t, j] = 0.0
            kind = k_kind[q]
            a = k_par[2 * q]
            b = k_par[2 * q + 1]
            for e in range(M0[q], M0[q + 1]):
                slot = m_slot[e]
                row = m_base[e] + nodes[slot] if slot >= 0 else m_base[e]
                t = m_target[e]
                coef = m_coef[e]
                if kind == 0 or kind == 6:
                    for j in range(d):
                        tbuf[t, j] += coef * z[row, j]
                elif kind == 1:
                    for j in range(d):
                        tbuf[t, j] = shrink(z[row, j], a)
                elif kind == 2:
                    for j in range(d):
                        tbuf[t, j] = shrink_scaled(z[row, j], a, b)
                elif kind == 3:
                    for j in range(d):
                        tbuf[t, j] = clip_entry(z[row, j], a, b)
                elif kind == 4:  # M_k diagonal: the same operations as the map's
                    off = k_tab[q] + e - M0[q]
                    mat = k_mat[q] + e - M0[q]
                    for j in range(d):
                        if a == 0.0:
                            tbuf[t, j] = a_diag[mat, j] * (z[row, j] + a_off[off, j])
                        else:
                            tbuf[t, j] = a_diag[mat, j] * z[row, j] + a_off[off, j]
                else:  # M_k full: each entry a sum in column order
                    off = k_tab[q] + e - M0[q]
                    mat = k_mat[q] + e - M0[q]
                    for j in range(d):
                        vbuf[j] = z[row, j] + a_off[off, j] if a == 0.0 else z[row, j]
                    for i in range(d):
                        total = 0.0
                        for j in range(d):
                            total += a_mat[mat, i, j] * vbuf[j]
                        tbuf[t, i] = total if a == 0.0 else total + a_off[off, i]
            for e in range(G0[q], G0[q + 1]):
                t = g_target[e]
                gi = g_client[e]
                coef = g_coef[e]
                for j in range(d):
                    tbuf[t, j] += coef * gbuf[gi, j]
            if kind == 6:  # b + TopK_k(a - b): keep k entries of a - b, add b (the target)
                for t in range(targets):
                    row = t_base[t_lo + t] + nodes[t_slot[t_lo + t]]
                    for j in range(d):
                        pick[j] = a >= d
                    if a < d:
                        for _ in range(int(a)):  # the largest left, ties to the lowest index
                            best = -1
                            top = -1.0
                            for j in range(d):
                                if not pick[j] and abs(tbuf[t, j]) > top:
                                    top = abs(tbuf[t, j])
                                    best = j
                            if best >= 0:
                                pick[best] = True
                    for j in range(d):
                        tbuf[t, j] = z[row, j] + (tbuf[t, j] if pick[j] else 0.0)
            for t in range(targets):
                base = t_base[t_lo + t]
                row = base + nodes[t_slot[t_lo + t]]
                model = base == report_base and not fresh and not ratios
                for j in range(d):
                    old = z[row, j]
                    z[row, j] = tbuf[t, j]
                    if model:  # (the value stored: the state's dtype)
                        sums[j] += z[row, j] - old
                    if not np.isfinite(z[row, j]):  # (as stored: float32 may overflow)
                        finite = False
        if ratios or spreads:  # and back in with their new values
            for i in range(touched.shape[0]):
                if touched[i]:
                    for j in range(d):
                        value = z[report_base + nodes[i], j]
                        if ratio_base >= 0:
                            value = value / z[ratio_base + nodes[i], j]
                        if ratios:
                            sums[j] += value
                        if spreads:
                            squares += (value - centre[j]) * (value - centre[j])
        if not finite:  # (the round's phases all applied, as a round run as planned)
            return r
        if fresh:  # the sum of the reported rows afresh (no running sum to drift)
            for j in range(d):
                sums[j] = 0.0
            for i in range(n_nodes):
                for j in range(d):
                    if ratio_base < 0:
                        sums[j] += z[first + i, j]
                    else:
                        sums[j] += z[first + i, j] / z[divisor + i, j]
        large = False
        for j in range(d):
            value = sums[j] / n_average
            server[r, j] = value
            if abs(value) > too_large:
                large = True
        if consensus.shape[0] > 0:  # the spread of the reported rows about their mean
            for j in range(d):
                mean[j] = sums[j] / n_average
            since += 1
            if fresh or since >= n_nodes or squares < 1e-3 * reference:
                spread = 0.0  # afresh, about the mean
                for i in range(n_nodes):
                    for j in range(d):
                        if ratio_base < 0:
                            gap = z[first + i, j] - mean[j]
                        else:
                            gap = z[first + i, j] / z[divisor + i, j] - mean[j]
                        spread += gap * gap
                consensus[r] = spread / n_average
                for j in range(d):  # the running sum's new centre
                    centre[j] = mean[j]
                squares = spread
                reference = spread
                since = 0
            else:  # (1/n) sum |v - mean|^2 = (1/n) sum |v - c|^2 - |mean - c|^2
                shift = 0.0
                for j in range(d):
                    shift += (mean[j] - centre[j]) * (mean[j] - centre[j])
                consensus[r] = max(squares / n_average - shift, 0.0)
        if large:
            return -(r + 1)
    return rounds
"""


@cache
def batch_function(kernel=None, fetch=None):
    """The compiled loop calling ``kernel`` (a problem's one-client gradient; None: no
    gradient) as ``grad``."""
    gradient = (no_gradient, fetch_none) if kernel is None else (kernel, fetch)
    found = cached_function(SOURCE, gradient)
    if found is not None:
        return found
    namespace = {"np": np, "grad": gradient[0]}
    namespace.update({name: getattr(_compiled, name) for name in HELPERS})
    exec(compile(SOURCE, "<stochmix segment loop>", "exec"), namespace)
    return numba.njit(nogil=True, boundscheck=False)(namespace["rows"])
