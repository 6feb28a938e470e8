r"""What the active nodes push under node activation: the columns A of a mixing operator.

An activated push (:mod:`~stochmix.engine.model.activated`) of the source ``m`` into the
target ``T`` with a column-stochastic ``C`` is

.. math::

    T^+ = (I - D)\,T + D\,L + C D\, m = T|_{A \leftarrow L} + \sum_{j \in A} C_{:, j}\, m_j

(``L`` the equation's other terms, rows A): the active rows take their other terms, and
then every active node j adds ``C[i, j] m_j`` to each row i its column reaches, reading
``m`` as the phase found it. :class:`PushedColumns` is that operator: the whole ``C``
and the senders A, nothing sliced when it is made. The engine applies it as that scatter
(:func:`~stochmix.engine.model.whole_block.push_rows`: one pass over the senders'
columns, O(|A| x degree)), or takes its entries for a phase's sparse rows (the general
path): the rows A and the rows the columns reach, those keeping their value.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp

from ...mixing.activation import column_rows
from ...mixing.rowsparse import RowSparse, rows_entries
from .traffic import pushed_cross

__all__ = ["PushedColumns"]


class PushedColumns:
    """The columns ``senders`` (sorted, distinct, block-local) of the whole operator
    ``op`` (an ``(n, n)`` :class:`~stochmix.mixing.rowsparse.RowSparse` that sets every
    row), as one term ``C D m`` of an activated equation; see the module docstring.

    Attributes:
        op: the operator C.
        senders: the active nodes A, shape (a,).
        size: n.
        rows: the rows the equation names (A); the scatter reaches others too.
    """

    reusable = False  # made for one round's senders

    def __init__(self, op: RowSparse, senders: np.ndarray):
        self.op, self.senders = op, senders
        self.size = op.size
        self.rows = senders

    @property
    def columns(self) -> sp.csr_array:
        """``C`` transposed, as CSR: row j holds column j of C (C's CSC arrays, made once
        per operator and kept on it)."""
        return column_rows(self.op)

    @cached_property
    def _entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        columns = self.columns
        at, counts = rows_entries(columns, self.senders)  # each sender's column in turn
        rows = columns.indices[at].astype(np.int64, copy=False)
        return rows, np.repeat(self.senders, counts), columns.data[at].astype(float, copy=False)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, vals)``: every entry ``C[i, j]`` of the senders' columns,
        sender after sender (block-local)."""
        return self._entries

    @cached_property
    def reached(self) -> np.ndarray:
        """The rows the senders' columns reach that are not senders, sorted."""
        marked = np.zeros(self.size, dtype=bool)
        marked[self._entries[0]] = True
        marked[self.senders] = False
        return np.flatnonzero(marked)

    def crossing(self, shift: int = 0) -> int:
        """The nonzero entries ``C[i, j]`` between two nodes (target row i at node ``i +
        shift`` relative to the source, ``i + shift != j``): the messages sent."""
        return pushed_cross(self.op, self.senders, shift)
