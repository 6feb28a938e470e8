"""Mixing inside a node-local run: the node-local form of a whole-block phase whose terms
are node-local but for its mixing products.

A decentralized iteration such as gradient tracking's

    x <- W x - alpha y;    y <- W y + grad F(x) - g,  g <- grad F(x)

is, at node i, ``x_i <- (W x)_i - alpha y_i`` and so on: once the products ``W x`` and
``W y`` are known, every other term reads the node's own rows. Both products read their
block as it is when the round starts (no phase before writes x or y), so they can be
computed first and the two phases run as one program over the nodes, the gradients
taken inside it, each node's rows streamed once (``sm.explain``: one segment).

:func:`product_form` gives that form (:class:`~stochmix.engine.model.local_form.LocalForm`
with :attr:`~stochmix.engine.model.local_form.LocalForm.products`): each product becomes
a block the terms read (named ``@k``, :class:`~stochmix.engine.model.picked.ProductTerm`),
whose rows the backend computes when the run starts (``matrix @ Z[rows]``) and the
program gathers as it gathers a block's. A run takes such a form only where none of its
earlier phases writes a product's source (:mod:`stochmix.engine.plan.runs`), so the
product is the one the phase would compute. A phase that is one product alone (``x <- W
x``) keeps the whole-block path, which writes the product straight into the state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .blockwise import BlockwiseForm
from .layout import Layout
from .local_form import GradientTerm, LocalForm, NodeTerm
from .picked import ProductTerm, is_product, product_name

__all__ = ["product_form", "renamed"]


def product_form(form: BlockwiseForm | None, layout: Layout) -> LocalForm | None:
    """The node-local form with products of the whole-block ``form`` (see the module
    docstring), or None when it has none: a form on some rows (activation), one without
    a product, one that is a single product alone, or one whose targets and node terms
    are not the same nodes' rows."""
    if form is None or form.subset or form.hand_off or form.take:
        return None
    terms = [t for target in form.targets for t in target.terms]
    mixes = [t for t in terms if t.kind == "mix"]
    if not mixes or (len(terms) == 1 and len(form.targets) == 1):
        return None
    nodes = None
    for target in form.targets:
        found = _nodes(layout, target.block, target.rows)
        if found is None or (nodes is not None and not np.array_equal(found, nodes)):
            return None
        nodes = found if nodes is None else nodes
    assert nodes is not None  # (a form with a product has a target)
    node_terms: list = []
    gradients: list = []
    products: list = []
    for target in form.targets:
        for term in target.terms:
            if term.kind == "grad":
                gradients.append(GradientTerm(target.block, term.coef))
                continue
            assert term.source is not None and isinstance(term.rows, slice)
            if term.kind == "block":
                found = _nodes(layout, term.source, term.rows)
                if found is None or not np.array_equal(found, nodes):
                    return None
                node_terms.append(NodeTerm(target.block, term.source, term.coef))
                continue
            name = product_name(len(products))
            products.append(ProductTerm(name, term.source, term.matrix, term.rows))
            node_terms.append(NodeTerm(target.block, name, term.coef))
    return LocalForm(
        nodes,
        tuple(t.block for t in form.targets),
        tuple(node_terms),
        (),
        tuple(gradients),
        form.clients if gradients else None,
        products=tuple(products),
    )


def _nodes(layout: Layout, block: str, rows) -> np.ndarray | None:
    """The nodes whose rows of ``block`` are the rows of Z ``rows`` (a slice), or None."""
    if not isinstance(rows, slice) or rows.step not in (None, 1):
        return None
    if not layout.contiguous(block):
        return None
    start = layout.start(block)
    first = layout.first_node(block)
    return np.arange(rows.start - start + first, rows.stop - start + first, dtype=np.int64)


def renamed(lf: LocalForm, start: int) -> LocalForm:
    """``lf`` with its products numbered from ``start`` (``@start``, ...): the names a run
    gives them after the products of its earlier phases."""
    if not start or not lf.products:
        return lf
    names = {p.name: product_name(start + k) for k, p in enumerate(lf.products)}
    return replace(
        lf,
        terms=tuple(
            t._replace(source=names[t.source]) if is_product(t.source) else t for t in lf.terms
        ),
        products=tuple(p._replace(name=names[p.name]) for p in lf.products),
    )
