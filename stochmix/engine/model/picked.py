"""Rows picked by index in a node-local form (``x.at[...]``, see
:mod:`stochmix.engine.model.expressions`): what a form records of them."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ViewTerm", "view_name"]


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


def _distinct(values: np.ndarray) -> bool:
    """Whether ``values`` holds no value twice (increasing: one pass, no sort)."""
    return bool((np.diff(values) > 0).all()) or np.unique(values).size == values.size
