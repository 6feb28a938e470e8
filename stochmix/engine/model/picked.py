"""Operands of a node-local form other than its nodes' own rows of a block: rows picked by
index (``x.at[...]``, see :mod:`stochmix.engine.model.expressions`) and the nodes' rows of
a mixing product (``W @ x``, see :mod:`stochmix.engine.model.product_form`): what a form
records of them."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "PRODUCT", "ProductTerm", "ViewTerm", "is_product", "product_index", "product_name",
    "view_name",
]  # fmt: skip


class ViewTerm(NamedTuple):
    """Rows of ``block`` picked by index (``x.at[...]``), one per node of the form: node
    ``nodes[k]`` reads and writes row ``rows[k]`` of the block (block-local) as its own.
    Terms name them ``name`` (the block's name and ``.at``) as they name a block. The
    rows are bound per round, as coefficient values are."""

    name: str
    block: str
    rows: np.ndarray


def view_name(block: str) -> str:
    """The name terms give the rows of ``block`` picked by index."""
    return f"{block}.at"


#: How the names of products begin (``@0``, ``@1``, ...): never a block's name.
PRODUCT = "@"


class ProductTerm(NamedTuple):
    """A mixing product in a node-local form: node ``nodes[t]`` of the form reads row t of
    ``matrix @ Z[rows]`` (``W @ x``), which terms name ``name`` as they name a block.
    ``source`` is the block whose rows of Z ``rows`` (a slice) are mixed, read whole as
    the run that holds the form starts: a run takes the form only where none of its
    earlier phases writes ``source``. ``matrix`` (SciPy CSR, one row per node of the
    form) and ``rows`` are bound per round, as coefficient values are."""

    name: str
    source: str
    matrix: object
    rows: slice


def product_name(k: int) -> str:
    """The name of a run's ``k``-th product."""
    return f"{PRODUCT}{k}"


def product_index(name: str) -> int:
    """The number ``k`` of the product named ``@k``."""
    return int(name[len(PRODUCT) :])


def is_product(name) -> bool:
    """Whether a name in a form or a schedule is a product's (not a block's)."""
    return isinstance(name, str) and name.startswith(PRODUCT)


def _distinct(values: np.ndarray) -> bool:
    """Whether ``values`` holds no value twice (increasing: one pass, no sort)."""
    return bool((np.diff(values) > 0).all()) or np.unique(values).size == values.size
