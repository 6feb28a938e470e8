"""The gradients of some clients at rows of the state, in one compiled pass (importing it
imports Numba).

``out[t] = grad F_{clients[t]}(z[at[t]])`` for t = 0..m-1, by the problem's compiled
one-client gradient (:meth:`~stochmix.problems.Problem.row_gradient`), reading each
point and each client's data where they lie. The pass asks the memory for the rows
:data:`AHEAD` clients on early (the problem's ``fetch`` and a prefetch of the point),
which a gather by NumPy (``take`` of the points and of each data array, then the formula
on the copies) cannot: the active nodes of an activated round are scattered over the
state and the problem's data, so each row read is a miss of the caches (gradient tracking
with 10^4 of 10^5 nodes active, d = 10: 0.53 ms a round for the gather and formula,
against the pass's figure in the performance page).

The source is compiled once per gradient kernel, through the row-wise programs' disk
cache where the kernel can be imported by name (so a machine compiles it once), else in
memory. Each row is computed alone, so any split of the rows over threads gives the same
bits.
"""

from __future__ import annotations

from functools import cache

from .disk_cache import compiled_rows

__all__ = ["AHEAD", "SOURCE", "gathered_function"]

#: how many clients ahead the pass prefetches a point and the client's data
AHEAD = 16

#: ``rows(data, clients, z, at, out)``: the pass (``grad`` and ``fetch``: the problem's
#: compiled gradient and prefetch, inlined).
SOURCE = f"""
def rows(data, clients, z, at, out):
    m = clients.shape[0]
    for t in range(m):
        if t + {AHEAD} < m:
            fetch(data, clients[t + {AHEAD}])
            prefetch_read(z, at[t + {AHEAD}])
        grad(data, clients[t], z[at[t]], out[t])
    return True
"""


@cache
def gathered_function(kernel, fetch):
    """The compiled pass of :data:`SOURCE` calling ``kernel`` (a problem's one-client
    gradient) as ``grad`` and ``fetch`` (its prefetch) as ``fetch``."""
    return compiled_rows(SOURCE, (kernel, fetch), "<stochmix gathered gradients>")
