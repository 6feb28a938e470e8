"""Whole-block forms on some rows (an activated round's active nodes).

Under node activation a decentralized iteration rewrites the active rows A of its blocks
from the rows A of W (``D W + I - D``), rows A of other blocks and the gradients of the
active nodes. The NumPy backend applies such a phase as a whole-block form restricted to
A (``BlockwiseForm.subset``) instead of building its sparse rows every round. What must
hold: the same numbers as the general path (a backend that does not apply row subsets)
to rounding, for every method that runs under node activation, with the cost columns
equal; a phase that is not of that shape (a push, a clear, rows of different nodes) has
no such form.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, EXTRA, NIDS, GradientTracking, PushSum
from stochmix.engine.backends.numpy_backend import NumpyBackend
from stochmix.mixing import StaticSequence

N = 12


class GeneralPath(NumpyBackend):
    """The NumPy backend without row subsets: activated phases take the general path."""

    applies_row_subsets = False


def _runs(make, participation, rounds=25, seed=3):
    problem = sm.problems.LeastSquares.random(N, 3, rows_per_client=4, seed=1)
    got = sm.run(make(), problem, participation, rounds, seed=seed)
    want = sm.run(make(), problem, participation, rounds, seed=seed, backend=GeneralPath())
    return got, want


GRAPH = StaticSequence(nx.random_regular_graph(4, N, seed=2))


@pytest.mark.parametrize(
    "make",
    [
        lambda: GradientTracking(0.05, GRAPH, check_mixing=False),
        lambda: DGD(0.05, GRAPH),
        lambda: EXTRA(0.05, GRAPH, check_mixing=False),
        lambda: NIDS(0.05, GRAPH, check_mixing=False),
        lambda: PushSum(0.05, GRAPH),
    ],
    ids=["gradient tracking", "DGD", "EXTRA", "NIDS", "push-sum"],
)
@pytest.mark.parametrize("p", [0.3, 0.6])
def test_activated_rounds_equal_the_general_path(make, p):
    got, want = _runs(make, sm.participation.Bernoulli(p, N))
    scale = 1.0 + float(np.abs(want.server).max())
    assert float(np.abs(got.server - want.server).max()) <= 1e-12 * scale
    for column in ("gradients", "messages", "floats", "sample_gradients"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


def test_the_form_is_used_and_only_on_the_numpy_backend(monkeypatch):
    from stochmix.engine.model import whole_block

    applied = []
    real = whole_block.apply_blockwise_numpy

    def counted(z, form, *args, **kwargs):
        applied.append(form.subset)
        return real(z, form, *args, **kwargs)

    monkeypatch.setattr("stochmix.engine.backends.numpy_backend.apply_blockwise_numpy", counted)
    _runs(lambda: GradientTracking(0.05, GRAPH, check_mixing=False),
          sm.participation.Bernoulli(0.4, N), rounds=5)  # fmt: skip
    assert any(applied)  # the activated rounds (NumPy backend); none on GeneralPath


def test_only_pull_phases_of_one_row_set_have_the_form():
    from stochmix.engine.model.blockwise import blockwise_form
    from stochmix.engine.model.layout import Block, Layout
    from stochmix.mixing.rowsparse import RowSparse

    layout = Layout([Block("x", 4), Block("y", 4)])
    w = GRAPH.matrix(0, "metropolis")[:4, :4]
    rows = np.array([1, 3])
    op = RowSparse(4, rows, w[rows])
    form = blockwise_form(
        layout, [("apply", "x", "x", op, 1.0), ("combine", "x", rows, "y", rows, -0.5)]
    )
    assert form is not None and form.subset
    assert np.array_equal(form.targets[0].rows, layout.rows("x", rows))
    # another set of rows for the second term: no form
    other = np.array([0, 3])
    assert (
        blockwise_form(
            layout, [("apply", "x", "x", op, 1.0), ("combine", "x", other, "y", other, 1.0)]
        )
        is None
    )
    # a clear of some rows: no form
    assert blockwise_form(layout, [("apply", "x", "x", op, 1.0), ("clear", "y", rows)]) is None


def test_a_large_activated_round_is_computed_in_halves_with_the_same_bits(monkeypatch):
    """At least SPLIT_ROWS active rows: each target in two halves of its rows on two
    threads, the same bits as one pass (each row is computed alone)."""
    from stochmix.engine.backends import numpy_backend
    from stochmix.engine.model.block_pass import SPLIT_ROWS

    n = 2 * SPLIT_ROWS + 500
    graph = StaticSequence(nx.random_regular_graph(4, n, seed=1))
    problem = sm.problems.Quadratic.random(n, 3, seed=2)
    process = sm.participation.Bernoulli(0.7, n)

    def run():
        return sm.run(GradientTracking(0.01, graph, check_mixing=False), problem, process, 4,
                      seed=5, progress=False, metrics=())  # fmt: skip

    split = []
    real = numpy_backend.on_threads

    def counted(calls):
        split.append(len(calls))
        return real(calls)

    monkeypatch.setattr(numpy_backend, "CORES", 2)  # (two threads on any machine)
    monkeypatch.setattr(numpy_backend, "on_threads", counted)
    got = run()
    assert split and set(split) == {2}
    monkeypatch.setattr(numpy_backend, "CORES", 1)
    count = len(split)
    want = run()
    assert len(split) == count  # (one pass a target)
    np.testing.assert_array_equal(got.node_models, want.node_models)
