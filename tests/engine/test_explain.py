"""No silent slow paths: methods written naturally in the equation form take the fast path,
the engine says (once) why a phase does not, and ``stochmix.explain`` prints a round's plan.

Nothing here measures time: whether a phase is on the fast path is read from the plan
(``explain``'s structured output), and the fast path's numbers are compared with the
general path's and with other forms of the same method.
"""

import warnings
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.engine import grad, mean
from stochmix.engine.model.layout import Layout
from stochmix.engine.model.round_scalars import RoundArray
from stochmix.engine.plan import gradients, round_plan
from stochmix.engine.plan.slowpath import SLOW_PATH_MIN_ROUNDS
from stochmix.engine.plan.template import RoundTemplate
from tests._backends import SparseOnly

N, D = 24, 3


class FedLin(sm.Method):
    """FedAvg with a gradient correction (Mitra et al. 2021), written as a user would from
    the README: the participants pull the server model, keep their gradient there
    (``c``) and the server their mean (``gbar``), then take corrected local steps
    ``x_i -= lr (grad_i(x_i) - c_i + gbar)`` and the server averages. ``split`` writes the
    corrections in two phases, the mean reading the kept gradients."""

    name = "FedLin"

    def __init__(self, lr, local_steps, split=False):
        self.lr, self.local_steps, self.split = lr, local_steps, split

    def blocks(self, n):
        return [sm.Block("x", n + 1, "model"), sm.Block("c", n + 1), sm.Block("gbar", 1)]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = sm.Equations(ctx)
        x, c, gbar = eq.blocks("x", "c", "gbar")
        x[S] = x.server
        pull = eq.build("pull")
        c[S] = grad(S)
        if self.split:
            first = eq.build("corrections")
            gbar.server = mean(c[S])
            corrections = [first, eq.build("mean gradient")]
        else:
            gbar.server = mean(grad(S))  # the same gradients, in the same phase
            corrections = [eq.build("corrections")]
        x[S] -= self.lr * (grad(S) - c[S] + gbar.server)
        step = eq.build("corrected step")
        x.server = mean(x[S])
        return [pull, *corrections, *[step] * self.local_steps, eq.build("average")]


class FedSGD(sm.Method):
    """The server steps along the mean of the participants' gradients at its model: a
    gradient sum with no per-client row in its phase."""

    name = "FedSGD"

    def __init__(self, lr):
        self.lr = lr

    def blocks(self, n):
        return [sm.Block("x", n + 1, "model")]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = sm.Equations(ctx)
        (x,) = eq.blocks("x")
        x[S] = x.server
        pull = eq.build("pull")
        x.server -= self.lr * mean(grad(S))
        return [pull, eq.build("server step")]


class Gossiping(FedSGD):
    """Participants average their model with the next client's: not node-local (a node's
    rows from another node's), so the general path, whatever the engine does."""

    name = "gossiping"
    template_key = FedSGD.template_key  # (its own claim: a subclass's hooks void an inherited key)

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        gossip = ctx.phase("gossip").keep("x", S + 1, 0.5)
        gossip.combine("x", S + 1, "x", (S + 1) % ctx.n_clients + 1, 0.5)
        return [*super().round_phases(r, participants, ctx), gossip.build()]


class Weighted(FedSGD):
    """Server weights that differ from client to client, under a template_key that claims
    the rounds are the same up to who participates: the template is refused."""

    name = "weighted"
    template_key = FedSGD.template_key

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = sm.Equations(ctx)
        (x,) = eq.blocks("x")
        x[S] = x.server
        pull = eq.build("pull")
        x[S] -= self.lr * grad(S)
        step = eq.build("step")
        w = (S + 1.0) / (S + 1.0).sum()
        x.server = sm.engine.dot(w, x[S])
        return [pull, step, eq.build("weighted average")]


@pytest.fixture(scope="module")
def problem():
    return sm.problems.LeastSquares.random(N, D, seed=0)


def some(k=6):
    return sm.participation.UniformSample(N, k)


def final(method, problem, participation, rounds=30, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.SlowPathWarning)
        return sm.run(method, problem, participation, rounds, metrics=(), **options).server


# ------------------------------------------------------------------ the fast path


def test_one_phase_fedlin_runs_on_the_fast_path(problem):
    lr = 0.1 / problem.smoothness
    found = sm.explain(FedLin(lr, 3), problem, some(), rounds=3)
    assert found.fast and found.slow_paths == ()
    assert [s.kind for s in found.segments] == ["node-local", "node-local"]
    assert found.segments[0].phases == ("pull", "corrections")
    assert found.segments[1].phases == ("corrected step",) * 3 + ("average",)
    assert found.templating.startswith("on")
    assert [plan.source for plan in found.rounds] == ["built", "built", "template"]


def test_the_corrections_take_each_gradient_once():
    """The phase ``c[S] = grad(S); gbar.server = mean(grad(S))`` is node-local: one
    gradient per client, kept in c and summed onto gbar's row."""
    method, n = FedLin(0.1, 1), 6
    ctx = sm.RunContext(Layout(method.blocks(n)), n, 2)
    corrections = method.round_phases(0, np.array([1, 3, 4]), ctx)[1]
    assert corrections.local is not None and corrections.local_why is None
    assert corrections.local.takes_gradients
    plan = round_plan.plan_round([corrections], sm.engine.NumpyBackend(), method, ctx)
    steps = plan[0].structure.schedule.describe().splitlines()
    assert sum(line.strip().startswith("gradient") for line in steps) == 1
    assert any(line.strip().startswith("reduce 14 g") for line in steps)  # gbar is row 14


@pytest.mark.parametrize(
    "options",
    [{}, {"compiled": True}, {"compiled": True, "dtype": np.float32}, {"backend": "torch"}],
    ids=["numpy", "compiled", "compiled-float32", "torch"],
)
@pytest.mark.parametrize("k", [1, 6])
def test_one_phase_fedlin_equals_the_two_phase_form(problem, options, k):
    if options.get("compiled") and not gradients.numba_available():
        pytest.skip("Numba is not installed")
    if options.get("backend") == "torch":
        pytest.importorskip("torch")
    lr = 0.1 / problem.smoothness
    one = final(FedLin(lr, 3), problem, some(k), **options)
    two = final(FedLin(lr, 3, split=True), problem, some(k), **options)
    np.testing.assert_array_equal(one, two)  # the same arithmetic: bit for bit


def test_both_forms_stop_at_the_same_round_when_they_diverge(problem):
    """A kept gradient that only the sum onto gbar reads is checked through that sum:
    a NaN or Inf stops both forms after the same round."""
    lr = 50.0 / problem.smoothness
    stops = []
    for split in (False, True):
        with pytest.warns(sm.engine.DivergenceWarning):
            result = sm.run(FedLin(lr, 3, split), problem, some(), 200, metrics=())
        stops.append(result.diverged_at)
    assert stops[0] is not None and stops[0] == stops[1]


@pytest.mark.parametrize("method", [FedLin(0.02, 3), FedSGD(0.02)], ids=["FedLin", "FedSGD"])
def test_gradient_sums_equal_the_general_path(problem, method):
    participation = sm.participation.Bernoulli.heterogeneous(N, 0.05, 0.4, seed=1)
    fast = final(method, problem, participation, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.SlowPathWarning)  # a declared choice: quiet
        slow = sm.run(method, problem, participation, 60, backend=SparseOnly(), metrics=())
    np.testing.assert_allclose(fast, slow.server[:41], rtol=1e-12, atol=1e-12 * np.abs(fast).max())
    found = sm.explain(method, problem, participation)
    assert found.fast and {s.kind for s in found.segments} == {"node-local"}


def test_fedavgm_uniform_weights_are_templated(problem):
    """FedAvgM's server momentum sums with per-client weights 1/|S|, all equal: its
    template_key is used, and the numbers are a full build's."""

    class Untemplated(sm.algorithms.FedAvgM):
        def template_key(self, r, participants):
            return None

    found = sm.explain(sm.algorithms.FedAvgM(0.01, 2), problem, some(), rounds=3)
    assert found.fast and found.rounds[-1].source == "template"
    templated = final(sm.algorithms.FedAvgM(0.01, 2), problem, some(), 60)
    np.testing.assert_array_equal(templated, final(Untemplated(0.01, 2), problem, some(), 60))


def test_a_template_keeps_arrays_of_one_value_or_with_their_rule_only():
    method, n, S = (
        sm.algorithms.FedAvg(0.1, weights="unbiased", probabilities=np.linspace(0.2, 1, 8)),
        8,
        np.array([1, 3, 4]),
    )
    ctx = sm.RunContext(Layout(method.blocks(n)), n, 2)
    method.start(ctx)
    (step,) = round_plan.plan_round(
        method.round_phases(0, S, ctx), sm.engine.NumpyBackend(), method, ctx
    )
    arrays = [k for k, c in enumerate(step.coefs) if isinstance(c, np.ndarray)]
    # 1/(N p_i): several values, bound by their rule (a RoundArray) for each instance
    ruled = RoundTemplate.from_plan([step], S)
    later = np.array([0, 2, 5, 7])
    (bound,) = ruled.instantiate(later, r=1)
    for k in arrays:
        assert isinstance(step.coefs[k], RoundArray)
        np.testing.assert_array_equal(bound.coefs[k], step.coefs[k].at(1, later))
    assert ruled.instantiate(later) is None  # no round: the arrays cannot be bound
    # the same values without their rule depend on who participates: no template
    plain_coefs = tuple(np.asarray(c) if k in arrays else c for k, c in enumerate(step.coefs))
    assert arrays and RoundTemplate.from_plan([replace(step, coefs=plain_coefs)], S) is None
    coefs = list(step.coefs)
    for k in arrays:
        coefs[k] = np.full(S.size, 0.25)
    template = RoundTemplate.from_plan([replace(step, coefs=tuple(coefs))], S)
    (again,) = template.instantiate(np.array([0, 2, 5, 7]))
    for k in arrays:
        np.testing.assert_array_equal(again.coefs[k], np.full(4, 0.25))
    np.testing.assert_array_equal(again.nodes, [1, 3, 6, 8])


# ------------------------------------------------------------------ saying why, once


def test_a_slow_phase_warns_once_naming_it(problem):
    rounds = SLOW_PATH_MIN_ROUNDS + 10
    with pytest.warns(sm.SlowPathWarning) as caught:
        sm.run(Gossiping(0.01), problem, some(), rounds, metrics=())
    slow = [w for w in caught if issubclass(w.category, sm.SlowPathWarning)]
    assert len(slow) == 1  # one reason, one warning, not one per round
    message = str(slow[0].message)
    assert "'gossip'" in message and "another node's" in message
    assert slow[0].filename == __file__  # it points at the run() call


def test_short_runs_and_explain_do_not_warn(problem):
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.SlowPathWarning)
        sm.run(Gossiping(0.01), problem, some(), SLOW_PATH_MIN_ROUNDS, metrics=())
        found = sm.explain(Gossiping(0.01), problem, some())
    assert not found.fast
    gossip = found.segments[-1]
    assert gossip.kind == "general" and gossip.phases == ("gossip",)
    assert "another node's" in gossip.why
    assert found.templating == "off (phase 'gossip' takes the general path)"
    (note,) = found.slow_paths
    assert note.phase == "gossip" and note.what.startswith("general path")
    assert "gossip" in str(found) and "why:" in str(found)


def test_a_refused_template_warns_once_naming_the_phase(problem):
    with pytest.warns(sm.SlowPathWarning) as caught:
        sm.run(Weighted(0.01), problem, some(), SLOW_PATH_MIN_ROUNDS + 1, metrics=())
    (warning,) = [w for w in caught if issubclass(w.category, sm.SlowPathWarning)]
    assert "'weighted average'" in str(warning.message)
    assert "template_key" in str(warning.message)
    found = sm.explain(Weighted(0.01), problem, some())
    assert {s.kind for s in found.segments} == {"node-local"}  # fast, but not templated
    assert found.templating.startswith("off (phase 'weighted average'")


def test_a_phase_that_reads_other_points_says_why(problem):
    class Elsewhere(FedSGD):
        name = "elsewhere"

        def points(self, z, ctx, clients):
            return 2.0 * super().points(z, ctx, clients)

    found = sm.explain(Elsewhere(0.01), problem, some())
    kinds = [s.kind for s in found.segments]
    assert kinds == ["node-local", "general"]
    assert "Elsewhere.points" in found.segments[1].why


# ------------------------------------------------------------------ explain


def test_explain_fedavg(problem):
    found = sm.explain(sm.algorithms.FedAvg(0.01, 2), problem, some())
    assert found.method == "FedAvg" and found.backend == "numpy" and found.fast
    (segment,) = found.segments
    assert segment.kind == "node-local" and segment.nodes == 6
    assert segment.phases == ("assign", "local step", "local step", "average")
    assert segment.runs == "NumPy program" and segment.fast
    assert found.programs.startswith("NumPy programs (compiled='auto'")
    assert "node-local segment, 6 nodes, NumPy program: assign, local step x2, average" in str(
        found
    )
    rows = found.table
    assert [(row["round"], row["kind"]) for row in rows] == [(0, "node-local"), (1, "node-local")]
    assert "fast path" in repr(found)


def test_explain_compiled_fedavg(problem):
    if not gradients.numba_available():
        pytest.skip("Numba is not installed")
    found = sm.explain(sm.algorithms.FedAvg(0.01, 2), problem, some(), compiled=True)
    assert found.segments[0].runs == "compiled loop (Numba)"


def test_explain_gradient_tracking(problem):
    ring = sm.mixing.StaticSequence(nx.cycle_graph(N))
    method = sm.algorithms.GradientTracking(0.01, ring)
    found = sm.explain(method, problem, sm.participation.Full(N))
    first, then = found.rounds
    # NumPy programs (a short run): the mixing phases keep the whole-block path
    assert [(s.kind, s.phases) for s in first.segments] == [
        ("node-local", ("initial gradients",)),
        ("whole-block", ("mix and descend",)),
        ("whole-block", ("track",)),
    ]
    assert [(s.kind, s.runs) for s in then.segments] == [("whole-block", "block products")] * 2
    assert found.fast and found.templating.startswith("off (the method gives no template_key")
    assert not any(s.waits for s in then.segments)
    if not gradients.numba_available():
        return
    # the compiled loop: the products inside the runs (the start's gradients and the first
    # step, then the track, whose product reads y, which the start wrote); then one program
    found = sm.explain(method, problem, sm.participation.Full(N), compiled=True)
    first, then = found.rounds
    assert [(s.kind, s.phases, s.products, s.waits) for s in first.segments] == [
        ("node-local", ("initial gradients", "mix and descend"), 1, False),
        ("node-local", ("track",), 1, True),
    ]
    assert [(s.kind, s.phases, s.products) for s in then.segments] == [
        ("node-local", ("mix and descend", "track"), 2)
    ]
    assert "2 mixing products at its start" in str(found)


def test_builtin_methods_take_no_slow_path(problem):
    lr = 0.05 / problem.smoothness
    ring = sm.mixing.StaticSequence(nx.cycle_graph(N))
    graphs = sm.mixing.sequences.RandomSequence(N, "random_directed", seed=1)
    a = sm.algorithms
    p = np.linspace(0.1, 0.9, N)
    federated = [
        a.FedAvg(lr, 2), a.FedAvg(lr, 2, weights="unbiased", probabilities=p), a.FOCUS(lr, 2),
        a.SCAFFOLD(lr, 2), a.FedProx(lr, 0.1, 2), a.FedDyn(lr, 2), a.FedAvgM(lr, 2),
        a.FedAdam(lr, 2), a.FedStale(lr, 2, beta=0.5, probabilities=p), a.MIFA(lr, 2),
        a.AmplifiedFedAvg(lr, 2, amplification=2.0, period=3),
    ]  # fmt: skip
    decentralized = [
        a.DGD(lr, ring), a.GradientTracking(lr, ring), a.PushPull(lr, graphs),
        a.PushSum(lr, graphs), a.EXTRA(lr, ring), a.KGT(lr, ring, 2), a.CHOCO(lr, ring),
        a.PushDIGing(lr, graphs), a.Scaffnew(lr, 0.3),
    ]  # fmt: skip
    for method in federated + decentralized:
        everyone = method in decentralized
        participation = sm.participation.Full(N) if everyone else some()
        found = sm.explain(method, problem, participation, rounds=3)
        assert found.slow_paths == (), (method.name, found.slow_paths)
        assert all(plan.segments for plan in found.rounds), method.name


def test_explain_refuses_what_run_refuses(problem):
    fedavg = sm.algorithms.FedAvg(0.01)
    with pytest.raises(TypeError, match="colour"):
        sm.explain(fedavg, problem, some(), colour="red")
    with pytest.raises(ValueError, match="compiled"):
        sm.explain(fedavg, problem, some(), compiled="yes")
    with pytest.raises(ValueError, match="rounds"):
        sm.explain(fedavg, problem, some(), rounds=0)


def test_an_unlabelled_slow_phase_is_named_by_its_place(problem):
    class Unnamed(Gossiping):
        def round_phases(self, r, participants, ctx):
            phases = super().round_phases(r, participants, ctx)
            if phases:
                phases[-1].label = ""
            return phases

    found = sm.explain(Unnamed(0.01), problem, some())
    (note,) = found.slow_paths
    assert note.phase == "#2"  # pull, server step, then this one
    assert found.segments[-1].phases == ("",) and "another node's" in found.segments[-1].why
    assert "(unlabelled)" in str(found)


def test_activated_phases_are_labelled_where_the_backend_runs_them(problem):
    """Under node activation a mixing phase is a whole-block form on the active rows: the
    NumPy backend applies it as such (one compiled pass per target), a backend without
    row subsets (Torch) through the active nodes' sparse rows; explain says which."""
    kinds = {}
    for backend in ("numpy", "torch"):
        if backend == "torch":
            pytest.importorskip("torch")
        method = sm.algorithms.DGD(
            0.05 / problem.smoothness, sm.mixing.StaticSequence(nx.cycle_graph(N))
        )
        found = sm.explain(method, problem, sm.participation.Bernoulli(0.5, n_clients=N), 3,
                           backend=backend)  # fmt: skip
        kinds[backend] = {s.kind for s in found.segments}
        assert found.slow_paths == ()
    assert kinds == {"numpy": {"whole-block"}, "torch": {"active rows"}}


def test_an_activated_push_is_a_slow_path_where_it_takes_sparse_rows(problem):
    """Node activation pushes the active nodes' columns of W: the NumPy backend scatters
    them in one compiled pass (no note); a backend without row subsets builds the push's
    sparse rows every round (noted, shown as the general path); edge activation's push is
    the edge itself, and every node active is a whole-block product."""

    class NoRowSubsets(sm.engine.NumpyBackend):
        applies_row_subsets = False

    ring = sm.mixing.StaticSequence(nx.cycle_graph(N))
    process = sm.participation.Bernoulli(0.5, n_clients=N)
    found = sm.explain(sm.algorithms.PushSum(0.01, ring), problem, process, 3)
    assert not found.slow_paths
    pushes = [s for s in found.segments if s.phases == ("push",)]
    assert pushes and all(s.kind == "whole-block" for s in pushes)
    found = sm.explain(sm.algorithms.PushSum(0.01, ring), problem, process, 3,
                       backend=NoRowSubsets())  # fmt: skip
    assert [s.phase for s in found.slow_paths] == ["push"]
    assert "columns of W at the active nodes" in found.slow_paths[0].why
    pushes = [s for s in found.segments if s.phases == ("push",)]
    assert pushes and all(s.kind == "general" for s in pushes)
    for participation in (sm.participation.Full(N), sm.participation.RandomEdge(nx.cycle_graph(N))):
        found = sm.explain(sm.algorithms.PushSum(0.01, ring), problem, participation, 3)
        assert not any("columns of W" in s.why for s in found.slow_paths)
    with pytest.warns(sm.engine.SlowPathWarning, match="columns of W at the active nodes"):
        sm.run(sm.algorithms.PushSum(0.01, ring), problem, process, 60, progress=False,
               backend=NoRowSubsets())  # fmt: skip
