"""A whole-block target's terms in one compiled pass (issue 42a).

The whole-block path adds a target's terms other than its products (rows of blocks, the
gradients, times numbers or per-row coefficients) and checks them for NaN and Inf; with
Numba it does so in one compiled pass (:mod:`stochmix.engine.codegen.combine_kernel`).
What must hold: the kernel computes what the NumPy statements compute, bit for bit, for
every kind of term and start; runs with and without it are bit for bit the same for the
decentralized methods, under full participation and node activation; a NaN is caught.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine.backends.numpy_backend import NumpyBackend
from stochmix.engine.codegen.combine_kernel import combine_kernel, kernel_source
from stochmix.mixing import StaticSequence

pytest.importorskip("numba")


def _numpy(kinds, start, sources, scalars, rows):
    """The NumPy statements of the whole-block path, term after term."""
    if start is not None:
        v = start.copy()
        terms = range(len(kinds))
    else:
        s, k = sources[0], kinds[0]
        firsts = (s.copy(), -s, scalars[0] * s, rows[0][:, None] * s)
        v = firsts[k]
        terms = range(1, len(kinds))
    for t in terms:
        s, k = sources[t], kinds[t]
        if k == 0:
            v = v + s
        elif k == 1:
            v = v - s
        elif k == 2:
            v = v + scalars[t] * s
        else:
            v = v + rows[t][:, None] * s
    return v


@pytest.mark.parametrize("start", [True, False])
@pytest.mark.parametrize("kinds", [(0,), (1,), (2,), (3,), (2, 1), (1, 3, 0), (3, 2, 2, 1)])
def test_the_kernel_computes_the_numpy_statements_bit_for_bit(kinds, start):
    rng = np.random.default_rng(len(kinds) + 7 * start)
    m, d = 37, 5
    sources = [rng.standard_normal((m, d)) for _ in kinds]
    scalars = rng.standard_normal(len(kinds))
    rows = rng.standard_normal((len(kinds), m))
    first = rng.standard_normal((m, d)) if start else None
    out = np.empty((m, d))
    kernel = combine_kernel(tuple(kinds), start)
    ok = kernel(out, *((first,) if start else ()), *sources, scalars, rows)
    assert ok is True
    np.testing.assert_array_equal(out, _numpy(kinds, first, sources, scalars, rows))
    sources[-1][3, 2] = np.nan
    assert kernel(out, *((first,) if start else ()), *sources, scalars, rows) is False


def test_the_source_names_each_term_once():
    source = kernel_source((2, 1, 3), True)
    assert source.startswith("def rows(out, start, s0, s1, s2, c, rc):")
    assert "((start[i, j] + c[0] * s0[i, j]) - s1[i, j]) + rc[2, i] * s2[i, j]" in source


class Unfused(NumpyBackend):
    fused_combine = False


N = 24
GRAPH = StaticSequence(nx.random_regular_graph(4, N, seed=2))
METHODS = {
    "gradient tracking": lambda: A.GradientTracking(0.05, GRAPH),
    "DGD": lambda: A.DGD(0.05, GRAPH),
    "EXTRA": lambda: A.EXTRA(0.05, GRAPH),
    "NIDS": lambda: A.NIDS(0.05, GRAPH),
    "exact diffusion": lambda: A.ExactDiffusion(0.05, GRAPH),
    "Mudag": lambda: A.Mudag(0.05, GRAPH, 2, momentum=0.5),
    "activated gradient tracking": lambda: A.GradientTracking(0.05, GRAPH, check_mixing=False),
    "activated DGD": lambda: A.DGD(0.05, GRAPH),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_runs_with_the_kernel_equal_runs_without_bit_for_bit(name, monkeypatch):
    from stochmix.engine.backends import numpy_backend

    asked = []

    def counted(kinds, start):
        asked.append(kinds)
        return combine_kernel(kinds, start)

    monkeypatch.setattr(numpy_backend, "combine_kernel", counted)
    problem = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)
    full = sm.participation.Full(N)
    process = sm.participation.Bernoulli(0.5, N) if name.startswith("activated") else full
    got = sm.run(METHODS[name](), problem, process, 30, seed=1, progress=False)
    want = sm.run(METHODS[name](), problem, process, 30, seed=1, progress=False,
                  backend=Unfused())  # fmt: skip
    assert asked  # the kernel ran (and the unfused backend never asks)
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.final, want.final)


def test_a_diverging_run_is_caught_with_the_kernel():
    problem = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)
    with pytest.warns(sm.engine.DivergenceWarning):
        result = sm.run(A.GradientTracking(50.0, GRAPH), problem, sm.participation.Full(N),
                        2000, seed=1, progress=False)  # fmt: skip
    assert result.server.shape[0] < 2001


def test_the_old_import_of_the_whole_block_application_still_works():
    from stochmix.engine.model import whole_block

    with pytest.warns(DeprecationWarning, match="moved to stochmix.engine.model.whole_block"):
        from stochmix.engine.model.blockwise import apply_blockwise_numpy
    assert apply_blockwise_numpy is whole_block.apply_blockwise_numpy
