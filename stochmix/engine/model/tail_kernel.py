"""Kernel-only phases that join a run's tail: the server's prox after its average, a
projection of an aggregate, applied once the run's outer rows are set (see
:mod:`stochmix.engine.plan.round_plan`)."""

from __future__ import annotations

import numpy as np

from .layout import Layout
from .local_form import LocalForm

__all__ = ["tail_kernel"]


def tail_kernel(
    lf: LocalForm,
    layout: Layout,
    nodes: np.ndarray,
    written: set,
    following: bool,
    client_node: int = 1,
) -> LocalForm | None:
    """A kernel-only form on one node (the server's prox after its average, a projection
    of an aggregate) as the same kernels on rows of Z, with no nodes: a phase that a run
    over ``nodes`` takes into its tail (:mod:`stochmix.engine.plan.round_plan`), applied
    once the run's outer rows are set, as the next phase would be. It must lie on a node
    that is no client (below ``client_node``: the server; a client's row belongs to one
    process of the distributed backend, the server's to every one) and read or write a
    row the run sets (``written``), or follow a tail (``following``). None for any other
    form."""
    if not lf.kernels or lf.nodes.size != 1 or lf.terms or lf.external or lf.gradients or lf.views:
        return None
    if lf.outer or int(lf.nodes[0]) >= client_node or (nodes == lf.nodes[0]).any():
        return None
    node = int(lf.nodes[0])
    kernels = []
    for k in lf.kernels:
        rows = []
        for block in (str(k.target), *(str(b) for b in k.sources)):
            local = node - layout.first_node(block)
            if not 0 <= local < layout.block(block).rows:
                return None
            rows.append(layout.row(block, local))
        kernels.append(k._replace(target=rows[0], source=rows[1], more=tuple(rows[2:])))
    tail = LocalForm(np.zeros(0, dtype=np.int64), (), (), (), (), None, (), tuple(kernels))
    touched = (tail.single_reads | tail.outer_rows) & written
    return tail if following or touched else None
