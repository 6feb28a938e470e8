"""Rows picked by index (``x.at[...]``): a per-sample table read and written by each node
as its own row. A phase that does so is node-local (its rows bound per round), joins a
segment under the rules that keep its chunks exact, and gives the general path's numbers
on the NumPy programs, the compiled loop and Torch. GT-SAGA's sampled component, estimate,
average and table update are one such phase (they were four nonlinear row maps)."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import GTSAGA
from stochmix.engine import Block, Equations, Method, grad, mean
from stochmix.mixing import StaticSequence
from stochmix.participation import Bernoulli, Full, UniformSample
from stochmix.problems import LeastSquares
from tests._backends import PATHS, SparseOnly, path_options

N, D, SLOTS = 12, 3, 4
COLUMNS = ("server", "distance", "gradients", "messages", "floats", "sample_gradients")


class SlotMemory(Method):
    """A test method with a table of ``SLOTS`` rows per client past the nodes: in round r
    each participant i reads its slot ``(r + i) % SLOTS`` by index, steps from a mix of the
    server model and that slot, and stores its old model in the slot, all in one phase;
    the server then averages. ``keyed``: it gives a template key (which rows by index
    must refuse)."""

    name = "SlotMemory"
    model_block = "x"

    def __init__(self, lr: float, keyed: bool = False, first_node=None):
        self.lr, self.keyed, self.first_node = lr, keyed, first_node

    def blocks(self, n_clients: int) -> list[Block]:
        first = n_clients + 1 if self.first_node is None else self.first_node
        memory = Block("memory", n_clients * SLOTS, first_node=first)
        return [Block("x", n_clients + 1, "model"), memory]

    def template_key(self, r, participants):
        return "slots" if self.keyed else None

    def round_phases(self, r, participants, ctx):
        if participants.size == 0:
            return []
        s = participants
        eq = Equations(ctx)
        x, memory = eq.blocks("x", "memory")
        slot = memory.at[s, s * SLOTS + (r + s) % SLOTS]
        weights = 0.25 + 0.5 * (s % 2)  # one per client
        x[s] = 0.5 * x.server + weights * slot - self.lr * grad(s)
        memory.at[s, slot.rows] = x[s]
        local = eq.build("local")
        x.server = mean(x[s])
        return [local, eq.build("average")]


def _problem():
    return LeastSquares.random(N, D, rows_per_client=(2, 6), seed=1)


def _run(method, problem, process, rounds=15, **options):
    return sm.run(method, problem, process, rounds, seed=4, progress=False, **options)


@pytest.mark.parametrize("path", PATHS)
def test_a_phase_reading_and_writing_by_index_gives_the_general_paths_numbers(path):
    problem = _problem()
    lr = 0.2 / problem.smoothness
    process = Bernoulli(0.5, N)
    text = str(sm.explain(SlotMemory(lr), problem, UniformSample(N, 5), rounds=2, compiled=True))
    assert "node-local segment, 5 nodes" in text and "general path" not in text, text
    want = _run(SlotMemory(lr), problem, process, backend=SparseOnly())
    got = _run(SlotMemory(lr), problem, process, **path_options(path))
    for column in COLUMNS:
        np.testing.assert_allclose(getattr(got, column), getattr(want, column), 1e-12, 1e-14)
    assert want.messages[1:].sum() > 0  # the pull and push of the model; the memory sends none


@pytest.mark.parametrize("path", PATHS)
def test_a_table_on_node_rows_is_kept_whole_by_compact_storage(path):
    """A block read and written by index is kept whole (its rows are any of its rows),
    also where it lies on the clients' node rows."""
    problem = _problem()
    lr, process = 0.2 / problem.smoothness, Bernoulli(0.5, N)
    want = _run(SlotMemory(lr, first_node=1), problem, process, backend=SparseOnly())
    got = _run(SlotMemory(lr, first_node=1), problem, process, storage="compact",
               **path_options(path))  # fmt: skip
    np.testing.assert_allclose(got.server, want.server, 1e-12, 1e-14)


class ThroughTable(SlotMemory):
    """A round whose pull goes through each participant's table row (then a step from it,
    with the gradient at the client's previous model, and the average): the table row is
    the client's, so the messages are FedAvg's, a pull and a push."""

    def round_phases(self, r, participants, ctx):
        s = participants
        if s.size == 0:
            return []
        eq = Equations(ctx)
        x, memory = eq.blocks("x", "memory")
        rows = s * SLOTS + r % SLOTS
        memory.at[s, rows] = x.server
        pulled = eq.build("pull")
        x[s] = memory.at[s, rows] - self.lr * grad(s)
        step = eq.build("step")
        x.server = mean(x[s])
        return [pulled, step, eq.build("average")]


@pytest.mark.parametrize("path", [*PATHS, "general path"])
def test_messages_through_a_table_are_the_clients(path):
    problem = _problem()
    options = {"backend": SparseOnly()} if path == "general path" else path_options(path)
    got = _run(ThroughTable(0.1), problem, UniformSample(N, 5), **options)
    plain = _run(sm.algorithms.FedAvg(0.1, 1), problem, UniformSample(N, 5), **options)
    for column in ("messages", "floats", "gradients"):
        np.testing.assert_array_equal(getattr(got, column), getattr(plain, column), column)


def test_a_row_written_twice_by_index_has_no_node_local_form():
    """The builder's view may name a row twice; the general path adds the two writes, so
    the phase has no node-local form (which would keep one)."""
    from stochmix.engine import PhaseBuilder

    layout = sm.engine.Layout([Block("h", N, first_node=1), Block("t", N, first_node=N + 1)])
    twice = np.zeros(N, dtype=np.int64)
    nodes = np.arange(N) + 1
    ph = (PhaseBuilder(layout, "p").view("t", twice, nodes).per_node("t", twice)
          .combine("t", twice, "h", np.arange(N)).build())  # fmt: skip
    assert ph.local is None and "twice" in ph.local_why


def test_templates_refuse_rows_by_index_and_keep_the_numbers():
    problem = _problem()
    lr = 0.2 / problem.smoothness
    text = str(sm.explain(SlotMemory(lr, keyed=True), problem, UniformSample(N, 5), rounds=3))
    assert "picked by index" in text, text
    keyed = _run(SlotMemory(lr, keyed=True), problem, UniformSample(N, 5), compiled=True)
    plain = _run(SlotMemory(lr), problem, UniformSample(N, 5), compiled=True)
    np.testing.assert_array_equal(keyed.server, plain.server)


def _phase(write):
    layout = sm.engine.Layout([Block("h", N, first_node=1), Block("t", N * 2, first_node=N + 1)])
    eq = Equations(layout, n_clients=N)
    h, t = eq.blocks("h", "t")
    write(h, t)
    return eq.build("p")


def test_what_keeps_a_phase_by_index_off_the_node_local_form():
    s = np.arange(N)
    one, other = 2 * s, 2 * s + 1

    def two_indices(h, t):
        h[s] = t.at[one] + t.at[other]

    def with_node_rows(h, t):
        h[s] = h[s] + h.at[(s + 1) % N]

    def read_and_write(h, t):
        h[s] = t.at[one]
        t.at[one] = h[s]

    ph = _phase(two_indices)
    assert ph.local is None and "two different indices" in ph.local_why
    ph = _phase(with_node_rows)
    assert ph.local is None and "both by index and at node rows" in ph.local_why
    ph = _phase(read_and_write)
    assert ph.local is not None and [(v.name, v.block) for v in ph.local.views] == [("t.at", "t")]


def test_bad_indices_get_one_error_naming_them():
    def write(rows):
        return lambda h, t: h.__setitem__(slice(None), t.at[rows])

    with pytest.raises(ValueError, match=r"t\.at\[\.\.\.\]: row 24 is out of range"):
        _phase(write(np.full(N, 24)))
    with pytest.raises(ValueError, match="one row per client, 12, got 3"):
        _phase(write(np.arange(3)))
    with pytest.raises(TypeError, match="1-d integer array"):
        _phase(write(np.zeros(N)))
    def twice(h, t):
        t.at[np.zeros(N, dtype=np.int64)] = h[:]

    with pytest.raises(ValueError, match="rows picked by index must be distinct"):
        _phase(twice)

    def one_client(h, t):
        h[np.array([3])] = t.at[3, 5]  # one client and its row, as ints

    def every_client(h, t):
        h[:] = t.at[:, 2 * np.arange(N)]

    for write in (one_client, every_client):
        assert _phase(write).local.views[0].block == "t"


def test_rows_by_index_are_refused_under_node_activation():
    layout = sm.engine.Layout([Block("h", N), Block("t", N, first_node=N)])
    eq = Equations(layout, n_clients=N, client_node=0).activate(np.arange(3))
    h, t = eq.blocks("h", "t")
    with pytest.raises(ValueError, match="not written under node activation"):
        h[:] = t.at[np.arange(N)]


# --------------------------------------------------------------------------------- GT-SAGA
@pytest.mark.parametrize("path", PATHS)
def test_gt_saga_is_one_linear_phase_between_its_mixings_and_matches_its_reference(path):
    from stochmix.algorithms.variance_reduced import draw_samples
    from tests.algorithms.test_composite import _components
    from tests.reference.variance_reduced import gt_saga

    n, seed, iters = 6, 2, 12
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 7), reg=0.1, seed=seed)
    graphs = StaticSequence(nx.cycle_graph(n))
    lr = 0.05 / problem.smoothness
    text = str(sm.explain(GTSAGA(lr, graphs), problem, Full(n), rounds=2))
    round_one = text.split("round 1")[1]
    assert "node-local segment, 6 nodes" in round_one and "estimate" in round_one, text
    assert "row map" not in round_one and round_one.count("whole-block") == 2, text
    x0 = np.random.default_rng(seed).normal(size=(n, 3))
    rows = []
    sm.run(
        GTSAGA(lr, graphs), problem, Full(n), iters, x0=x0, seed=seed, progress=False,
        callback=lambda r, z, ctx: rows.append(np.array(z[ctx.layout.slice("x")].tolist())),
        **path_options(path),
    )  # fmt: skip
    component, counts = _components(problem)
    picks = [draw_samples(seed, k, counts, 1) for k in range(iters)]
    for got, want in zip(rows, gt_saga(component, counts, graphs.matrix(0, "metropolis")
                                       .toarray(), x0, lr, picks)[1:], strict=True):  # fmt: skip
        np.testing.assert_allclose(got, want, 1e-10, 1e-12)


def test_messages_of_rows_by_index_do_not_depend_on_the_order_of_the_terms():
    """A table row picked by index is its client's in the messages, also in a phase that
    is not node-local (a failed form forgot the rows' clients before); a row of a node
    block picked by index is the node's that holds it."""
    from stochmix.engine import PhaseBuilder

    layout = sm.engine.Layout(
        [Block("x", N + 1, "model"), Block("h", N, first_node=1), Block("g", N, first_node=1),
         Block("t", N, first_node=N + 1)]
    )  # fmt: skip
    s = np.arange(N)
    rows = (3 * s) % N

    def neighbours(b):  # each client's row from its neighbour's: N messages
        b.per_node("h", s).combine("h", s, "h", (s + 1) % N)

    def server_into_table(b):  # the server's row into each client's table row: N messages
        b.view("t", rows, s + 1).per_node("t", rows).combine("t", rows, "x", 0)

    def picked_neighbours(b):  # h's rows picked by index: the neighbours' rows, N messages
        picked = (s + 1) % N
        b.view("h", picked, s + 1).per_node("g", s).combine("g", s, "h", picked)

    counts = []
    for order in ((neighbours, server_into_table), (server_into_table, neighbours),
                  (picked_neighbours,)):  # fmt: skip
        builder = PhaseBuilder(layout, "p")
        for write in order:
            write(builder)
        counts.append(builder.build().traffic.messages)
    assert counts == [2 * N, 2 * N, N]
