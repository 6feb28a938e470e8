"""Row maps that are affine row by row (``row_affine``: ADMM's exact local solves, the dual
methods' conjugate gradients of quadratics) in the compiled batches of the segment loop
(stochmix.engine.runner.slot_form, ``AFFINE_DIAGONAL`` and ``AFFINE_FULL``): the rounds
of every node of DecentralizedADMM, RelaxedADMM, SSDA and MSDA run batched and give the
run made round by round, to rounding, in every column of the Result (diagonal and full
Hessians; a periodic graph, whose positions are programs of their own, for the packing of
their tables); the tables are the maps' own; a map that declares nothing, or a table of
the wrong shape, keeps its rounds out; and these methods' plans are reused round by round.
"""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms, mixing, participation, problems
from stochmix.engine.model.rowmap import RowMap
from stochmix.engine.runner.slot_form import (
    AFFINE_DIAGONAL,
    AFFINE_FULL,
    _affine_triplets,
    pack,
    slot_program,
)
from tests._segments import assert_same_run, batch_sizes
from tests.engine.test_kernel_batches import _loop, _one_phase

pytest.importorskip("numba")

N = 12
ROUNDS = 50
GRAPH = mixing.StaticSequence(nx.random_regular_graph(3, N, seed=2))
PERIODIC = mixing.PeriodicSequence(
    [nx.random_regular_graph(3, N, seed=2), nx.cycle_graph(N), nx.path_graph(N)]
)
METHODS = {
    "admm": lambda g: algorithms.DecentralizedADMM(2.0, g),
    "relaxed_admm": lambda g: algorithms.RelaxedADMM(2.0, g, relaxation=0.4),
    "ssda": lambda g: algorithms.SSDA(None, g),
    "msda": lambda g: algorithms.MSDA(None, g),
}
PROBLEMS = {
    "least squares": lambda: problems.LeastSquares.random(N, 4, rows_per_client=6, seed=5),
    "diagonal quadratic": lambda: problems.Quadratic.random(N, 4, seed=5),
}


def _pair(make, problem, monkeypatch, graph=GRAPH):
    """The run round by round (``compiled=False``), the run in batches and the sizes of
    the batches the second ran."""
    plain = sm.run(make(graph), problem, participation.Full(N), ROUNDS, seed=3,
                   compiled=False, progress=False)  # fmt: skip
    sizes = batch_sizes(monkeypatch)
    fast = sm.run(make(graph), problem, participation.Full(N), ROUNDS, seed=3,
                  compiled=True, progress=False)  # fmt: skip
    return plain, fast, sizes


@pytest.mark.parametrize(
    "name, kind",
    [
        ("admm", "least squares"),
        ("relaxed_admm", "diagonal quadratic"),
        ("ssda", "least squares"),
        ("msda", "diagonal quadratic"),
    ]
    + [
        pytest.param(name, kind, marks=pytest.mark.slow)
        for name, kind in [
            ("admm", "diagonal quadratic"),
            ("relaxed_admm", "least squares"),
            ("ssda", "diagonal quadratic"),
            ("msda", "least squares"),
        ]
    ],
)
def test_affine_maps_run_in_batches_and_give_the_rounds_run_one_by_one(name, kind, monkeypatch):
    plain, fast, sizes = _pair(METHODS[name], PROBLEMS[kind](), monkeypatch)
    assert sum(sizes) == ROUNDS - 3  # round 0, then the two rounds that learn the key
    assert_same_run(plain, fast, consensus=True)


def test_the_tables_of_a_periodic_graphs_programs_are_packed_apart(monkeypatch):
    """Three positions of the period: three programs, each with its own solves' tables
    (the degrees differ), stacked in one batch."""
    plain, fast, sizes = _pair(METHODS["admm"], PROBLEMS["least squares"](), monkeypatch,
                               PERIODIC)  # fmt: skip
    assert sum(sizes) == ROUNDS - 7
    assert_same_run(plain, fast, consensus=True)


def _solve_phase(kind: str):
    """Round 1's exact-solve map of DecentralizedADMM on ``kind``, the problem as the maps
    see it, and the run's layout."""
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.model.method import RunContext

    problem = PROBLEMS[kind]()
    method = METHODS["admm"](GRAPH)
    layout = Layout(method.blocks(N))
    ctx = RunContext(layout, N, problem.dim)
    method.check_participation(participation.Full(N))
    method.start(ctx)
    phases = method.round_phases(1, np.arange(N), ctx)
    maps = [p for p in phases if isinstance(p, RowMap)]
    assert len(maps) == 1
    return maps[0], problem, layout, phases


@pytest.mark.parametrize("kind", list(PROBLEMS))
def test_the_slot_form_holds_the_maps_own_matrices(kind):
    phase, problem, layout, phases = _solve_phase(kind)
    kind_code, params, triplets, (matrices, offsets) = _affine_triplets(phase, problem)
    assert kind_code == (AFFINE_FULL if kind == "least squares" else AFFINE_DIAGONAL)
    assert params == (0.0, 0.0)  # M (v + b): the solve adds the linear terms first
    v = np.random.default_rng(1).standard_normal((N, problem.dim))

    class Info:
        pass

    info = Info()
    info.problem, info.rows = problem, np.arange(N)
    want = phase.function(v, info=info)
    if matrices.ndim == 2:
        got = matrices * (v + offsets)
        np.testing.assert_array_equal(got, want)  # the same operations
    else:
        got = np.einsum("kij,kj->ki", matrices, v + offsets)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(triplets[0], phase.z_rows)
    np.testing.assert_array_equal(triplets[1], phase.sources[0][2])
    program = slot_program(phases, layout, np.arange(N), 0, problem)
    assert program is not None
    assert sorted(program.k_kind.tolist()) == sorted([0] * (len(phases) - 1) + [kind_code])
    # without the problem (a map of another run), no slot form
    assert slot_program(phases, layout, np.arange(N), 0, None) is None


def test_pack_moves_each_programs_table_offsets():
    phase, problem, layout, phases = _solve_phase("least squares")
    one = slot_program(phases, layout, np.arange(N), 0, problem)
    quad_phase, quad, quad_layout, quad_phases = _solve_phase("diagonal quadratic")
    two = slot_program(quad_phases, quad_layout, np.arange(N), 0, quad)
    _, packed = pack([one, two, one])
    q = np.flatnonzero(packed["k_tab"] >= 0)
    assert packed["k_tab"][q].tolist() == [0, N, 2 * N]
    # full matrices of the first and third programs, the diagonal ones of the second
    assert packed["k_mat"][q].tolist() == [0, 0, N]
    assert packed["a_mat"].shape == (2 * N, 4, 4) and packed["a_diag"].shape == (N, 4)
    np.testing.assert_array_equal(packed["a_mat"][N:], one.a_mat)
    np.testing.assert_array_equal(packed["a_diag"], two.a_diag)


class _Declared:
    """A map that declares itself affine with tables of the wrong shape."""

    name = "declared"

    def __init__(self, shape):
        self.shape = shape

    def __call__(self, v, *, info):
        return 2.0 * v

    def row_affine(self, problem, rows):
        return np.full(self.shape, 2.0), np.zeros((rows.size, 4)), True


@pytest.mark.parametrize("shape", [(N, 3), (N, 4, 3), (N - 1, 4)])
def test_a_table_of_the_wrong_shape_has_no_slot_form(shape):
    phase, problem, layout, _ = _solve_phase("least squares")
    odd = RowMap(layout, "x", np.arange(N), _Declared(shape), "u", round=1)
    assert _affine_triplets(odd, problem) is None
    right = RowMap(layout, "x", np.arange(N), _Declared((N, 4)), "u", round=1)
    assert _affine_triplets(right, problem)[0] == AFFINE_DIAGONAL


def test_a_map_without_a_declaration_keeps_the_rounds_out(monkeypatch):
    """ADMM's solve with ``row_affine`` taken away: round by round, as before."""
    from stochmix.algorithms import admm

    monkeypatch.delattr(admm._AffineSolve, "row_affine")
    plain, fast, sizes = _pair(METHODS["admm"], PROBLEMS["least squares"](), monkeypatch)
    assert sizes == []
    np.testing.assert_array_equal(fast.server, plain.server)


@pytest.mark.parametrize("name", list(METHODS))
def test_the_plans_of_these_methods_are_reused_round_by_round(name):
    """Their participation checks record that every node takes part (SSDA and MSDA did
    not), and ADMM's iterations say that they repeat: round by round, each round after
    the first two comes from the plan cache."""
    plan = sm.explain(METHODS[name](GRAPH), PROBLEMS["least squares"](),
                      participation.Full(N), rounds=5, compiled=False)  # fmt: skip
    assert [r.source for r in plan.rounds[2:]] == ["cache"] * 3


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("kind", [AFFINE_DIAGONAL, AFFINE_FULL])
def test_the_loop_applies_each_rows_matrix(kind, after):
    """One phase writing row 0 of a two-row state from row 1 through the table's row:
    M (v + b) or M v + b, the diagonal kind with the map's operations (the same bits)."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal((2, 3))
    b = rng.standard_normal((1, 3))
    arrays = _one_phase(kind, (1.0 if after else 0.0, 0.0))
    arrays.update(k_tab=np.array([0]), k_mat=np.array([0]), a_off=b)
    if kind == AFFINE_DIAGONAL:
        m = rng.standard_normal((1, 3))
        arrays["a_diag"] = m
        want = m[0] * z[1] + b[0] if after else m[0] * (z[1] + b[0])
    else:
        m = rng.standard_normal((1, 3, 3))
        arrays["a_mat"] = m
        want = m[0] @ z[1] + b[0] if after else m[0] @ (z[1] + b[0])
    row = z[1].copy()
    assert _loop(z, arrays) == 1
    np.testing.assert_array_equal(z[1], row)  # the source is read, not written
    if kind == AFFINE_DIAGONAL:
        np.testing.assert_array_equal(z[0], want)
    else:
        np.testing.assert_allclose(z[0], want, rtol=1e-14, atol=1e-15)
