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
from stochmix.engine.codegen.combine_kernel import combine_kernel, kernel_source, rows_kernel
from stochmix.mixing import StaticSequence
from tests._backends import WholeBlocks

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


@pytest.mark.parametrize(
    ("scales", "kinds", "indexed"),
    [((1.0,), (), ()), ((0.5,), (1,), (True,)), ((1.0, -2.0), (2, 3), (True, False)),
     ((), (3, 0), (False, True)), ((-1.0,), (0, 1, 2), (False, True, True))],
)  # fmt: skip
def test_the_rows_kernel_computes_sliced_products_and_gathers_bit_for_bit(
    scales, kinds, indexed
):
    """Rows A of whole CSR matrices times their sources, scaled, plus terms read through
    row indices: the same bits as slicing W[A], SciPy's product and gathered copies."""
    import scipy.sparse as sp

    rng = np.random.default_rng(len(kinds) + 3 * len(scales))
    n, d = 40, 3
    select = np.sort(rng.choice(n, 17, replace=False))
    m = select.size
    z = rng.standard_normal((3 * n, d))
    matrices = [sp.random_array((n, n), density=0.2, rng=rng, format="csr") for _ in scales]
    sources = [z[u * n : (u + 1) * n] for u in range(len(scales))]
    args: list = []
    for w, x in zip(matrices, sources, strict=True):
        args += [w.indptr, w.indices, w.data, x]
    terms, index = [], []
    for flag in indexed:
        if flag:
            index.append(rng.choice(3 * n, m))
            args += [z, index[-1]]
            terms.append(z[index[-1]])
        else:
            terms.append(rng.standard_normal((m, d)))
            args.append(terms[-1])
    scalars = rng.standard_normal(len(kinds))
    per_row = rng.standard_normal((len(kinds), m))
    kernel = rows_kernel(tuple(c != 1.0 for c in scales), tuple(kinds), tuple(indexed))
    out = np.empty((m, d))
    assert kernel(out, select, *args, scalars, np.asarray(scales), per_row, True) is True
    start = None
    for w, x, c in zip(matrices, sources, scales, strict=True):
        product = sp.csr_array(w[select]) @ x
        if c != 1.0:
            product *= c
        start = product if start is None else start + product
    want = _numpy(kinds, start, terms, scalars, per_row)
    np.testing.assert_array_equal(out, want)
    # written straight into rows of the state (a target that nothing reads after it)
    direct = rows_kernel(tuple(c != 1.0 for c in scales), tuple(kinds), tuple(indexed), True)
    state, into = np.full((2 * m, d), 7.0), rng.permutation(2 * m)[:m]
    assert direct(state, into, select, *args, scalars, np.asarray(scales), per_row, False) is True
    np.testing.assert_array_equal(state[into], want)
    assert (np.delete(state, into, axis=0) == 7.0).all()
    z[:] = np.nan
    for term in terms:
        term[:] = np.nan
    assert kernel(out, select, *args, scalars, np.asarray(scales), per_row, True) is False


@pytest.mark.parametrize(
    ("scales", "kinds"), [((1.0,), ()), ((0.5,), (1,)), ((1.0, -2.0), (2, 3)), ((), (3, 0))]
)
def test_the_whole_block_kernel_computes_products_and_terms_bit_for_bit(scales, kinds):
    """Every row of whole CSR matrices times their sources, scaled, plus terms in place:
    the same bits as SciPy's products, their scaling and the terms added one by one."""
    import scipy.sparse as sp

    rng = np.random.default_rng(5 + len(kinds) + 3 * len(scales))
    n, d = 40, 3
    matrices = [sp.random_array((n, n), density=0.2, rng=rng, format="csr") for _ in scales]
    sources = [rng.standard_normal((n, d)) for _ in scales]
    terms = [rng.standard_normal((n, d)) for _ in kinds]
    args: list = []
    for w, x in zip(matrices, sources, strict=True):
        args += [w.indptr, w.indices, w.data, x]
    scalars = rng.standard_normal(len(kinds))
    per_row = rng.standard_normal((len(kinds), n))
    flags = tuple(c != 1.0 for c in scales)
    kernel = rows_kernel(flags, tuple(kinds), (False,) * len(kinds), False, True)
    out = np.empty((n, d))
    assert kernel(out, *args, *terms, scalars, np.asarray(scales), per_row, True) is True
    start = None
    for w, x, c in zip(matrices, sources, scales, strict=True):
        product = w @ x
        if c != 1.0:
            product *= c
        start = product if start is None else start + product
    np.testing.assert_array_equal(out, _numpy(kinds, start, terms, scalars, per_row))
    (sources or terms)[0][4, 1] = np.inf
    assert kernel(out, *args, *terms, scalars, np.asarray(scales), per_row, True) is False


def test_an_activated_round_never_slices_the_mixing_matrix(monkeypatch):
    """The active rows of W are read where they lie: no round makes the sliced CSR."""
    from stochmix.mixing.rowsparse import RowSparse

    sliced = []
    values = RowSparse.values

    def watched(self):
        if self.parent is not None and self._values is None:
            sliced.append(self.rows.size)
        return values.fget(self)

    monkeypatch.setattr(RowSparse, "values", property(watched))
    problem = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)
    process = sm.participation.Bernoulli(0.5, N)
    result = sm.run(METHODS["activated gradient tracking"](), problem, process, 20, seed=1,
                    progress=False)  # fmt: skip
    assert result.server.shape[0] == 21
    assert sliced == []


def test_the_source_names_each_term_once():
    source = kernel_source((2, 1, 3), True)
    assert source.startswith("def rows(out, start, s0, s1, s2, c, rc):")
    assert "((start[i, j] + c[0] * s0[i, j]) - s1[i, j]) + rc[2, i] * s2[i, j]" in source


class Unfused(WholeBlocks):
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


@pytest.mark.parametrize("large", [False, True], ids=["state in cache", "large state"])
@pytest.mark.parametrize("name", list(METHODS))
def test_runs_with_the_kernel_equal_runs_without_bit_for_bit(name, large, monkeypatch):
    """Runs through the compiled passes equal runs through SciPy's products and NumPy's
    statements bit for bit: whole blocks of a small state (SciPy's product, then the
    terms' pass), of a large one (here: any size counts as large; one pass per target,
    products included) and an activated round's active rows (one pass, always)."""
    from stochmix.engine.backends import numpy_backend
    from stochmix.engine.model import whole_block

    if large:
        monkeypatch.setattr(whole_block, "PREFETCH_BYTES", 0)

    asked = []

    def counted(kinds, start):
        asked.append(kinds)
        return combine_kernel(kinds, start)

    def counted_rows(scaled, kinds, indexed, direct=False, whole=False, width=0):
        asked.append(("rows", kinds))
        return rows_kernel(scaled, kinds, indexed, direct, whole, width)

    monkeypatch.setattr(numpy_backend, "combine_kernel", counted)
    monkeypatch.setattr(numpy_backend, "rows_kernel", counted_rows)
    problem = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)
    full = sm.participation.Full(N)
    process = sm.participation.Bernoulli(0.5, N) if name.startswith("activated") else full
    got = sm.run(METHODS[name](), problem, process, 30, seed=1, progress=False,
                 backend=WholeBlocks())  # fmt: skip
    want = sm.run(METHODS[name](), problem, process, 30, seed=1, progress=False,
                  backend=Unfused())  # fmt: skip
    assert asked  # the kernel ran (and the unfused backend never asks)
    one_pass = large or name.startswith("activated")
    assert all((kind[0] == "rows") == one_pass for kind in asked)
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
