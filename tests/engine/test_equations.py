"""Phases written as equations (stochmix.engine.model.equations) are the phases written by hand.

The hand-written ``round_phases`` of the methods rewritten with equations are kept below as
the reference: for random masks (empty and one-participant rounds included) both give the
same matrices M and B, the same node-local form (signature and coefficient values) and,
run for 30 rounds, the same numbers to the last bit.
"""

import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import FOCUS, MIFA, SCAFFOLD, FedAvg, FedStale, FedVARP
from stochmix.engine import Block, Equations, Layout, PhaseBuilder, RunContext
from stochmix.engine.model.equations import dot, grad, mean, total
from stochmix.engine.model.round_scalars import RoundScalar
from stochmix.mixing.federated import assign_rows, collect_rows
from stochmix.participation import Trace
from stochmix.problems import LeastSquares, Quadratic

# -- the hand-written phases, as they were before the equations ---------------------------


def old_pull_and_train(participants, ctx, lr, local_steps, block="x"):
    nodes = participants + 1
    pull = ctx.phase("assign").apply(block, block, assign_rows(participants, ctx.n_clients))
    step = ctx.phase("local step").keep(block, nodes).gradient(block, nodes, participants, -lr)
    return [pull.build()] + [step.build()] * local_steps


def old_fedstale_phases(self, r, participants, ctx):
    n, nodes = ctx.n_clients, participants + 1
    eta, beta = self.server_lr, self.beta
    phases = old_pull_and_train(participants, ctx, self.lr, self.local_steps) if nodes.size else []
    w = eta / n * self.inverse_probabilities(r, participants, ctx)
    update = (
        ctx.phase("stale update")
        .keep("x", 0, 1.0 - w.sum())
        .combine("x", 0, "x", nodes, w)
        .combine("x", 0, "h", participants, beta * w)
        .combine("x", 0, "hsum", 0, -eta * beta / n)
        .combine("h", participants, "x", 0, 1.0)
        .combine("h", participants, "x", nodes, -1.0)
        .keep("hsum", 0)
        .combine("hsum", 0, "x", 0, float(nodes.size))
        .combine("hsum", 0, "x", nodes, -1.0)
        .combine("hsum", 0, "h", participants, -1.0)
    )
    return phases + [update.build()]


def old_scaffold_phases(self, r, participants, ctx):
    if participants.size == 0:
        return []
    n, s, nodes = ctx.n_clients, participants.size, participants + 1
    lr, k = self.lr, self.local_steps
    pull = ctx.phase("assign").apply("x", "x", assign_rows(participants, n))
    step = (
        ctx.phase("corrected local step")
        .keep("x", nodes)
        .gradient("x", nodes, participants, -lr)
        .combine("x", nodes, "c", nodes, lr)
        .combine("x", nodes, "c", 0, -lr)
    )
    inv = 1.0 / (k * lr)
    server = (
        ctx.phase("controls and server step")
        .keep("c", nodes)
        .combine("c", nodes, "c", 0, -1.0)
        .combine("c", nodes, "x", 0, inv)
        .combine("c", nodes, "x", nodes, -inv)
        .keep("c", 0, 1.0 - s / n)
        .combine("c", 0, "x", 0, s * inv / n)
        .combine("c", 0, "x", nodes, -inv / n)
        .keep("x", 0, 1.0 - self.server_lr)
        .combine("x", 0, "x", nodes, self.server_lr / s)
    )
    return [pull.build()] + [step.build()] * k + [server.build()]


def old_focus_phases(self, r, participants, ctx):
    n, nodes = ctx.n_clients, participants + 1
    phases = []
    if participants.size:
        phases.append(ctx.phase("assign").apply("x", "x", assign_rows(participants, n)).build())
        move = ctx.phase("local step").keep("x", nodes).combine("x", nodes, "y", nodes, -self.lr)
        track = (
            ctx.phase("track")
            .keep("y", nodes)
            .combine("y", nodes, "g", nodes, -1.0)
            .gradient("y", nodes, participants, 1.0)
            .gradient("g", nodes, participants, 1.0)
        )
        move, track = move.build(), track.build()
        phases.append(track)
        phases += [move, track] * (self.local_steps - 1)
        phases.append(ctx.phase("collect").apply("y", "y", collect_rows(participants, n)).build())
    server = ctx.phase("server step").keep("x", 0).combine("x", 0, "y", 0, -self.lr)
    return phases + [server.build()]


def old_fedavg_phases(self, r, participants, ctx):
    if participants.size == 0:
        return []
    return old_pull_and_train(participants, ctx, self.lr, self.local_steps) + [
        self.aggregate(r, participants, ctx)
    ]


class OldFedAvg(FedAvg):
    round_phases = old_fedavg_phases


class OldFedStale(FedStale):
    round_phases = old_fedstale_phases


class OldFedVARP(FedVARP):
    round_phases = old_fedstale_phases


class OldMIFA(MIFA):
    round_phases = old_fedstale_phases


class OldSCAFFOLD(SCAFFOLD):
    round_phases = old_scaffold_phases


class OldFOCUS(FOCUS):
    round_phases = old_focus_phases


def pairs(n, rng):
    """(new, old) method pairs with the same parameters."""
    lr, k = float(rng.uniform(0.01, 0.2)), int(rng.integers(1, 4))
    eta, beta = float(rng.choice([1.0, 0.7, 1.3])), float(rng.uniform(0, 1))
    p = rng.uniform(0.2, 1.0, n)
    cutoff = int(rng.integers(1, 6))
    # the hand-written phases apply the map in a round nobody joins (skip_empty_rounds=False)
    stale = dict(skip_empty_rounds=False)
    return [
        (FedStale(lr, k, beta, eta, p, **stale), OldFedStale(lr, k, beta, eta, p, **stale)),
        (
            FedStale(lr, k, beta, eta, "fedau", cutoff, **stale),
            OldFedStale(lr, k, beta, eta, "fedau", cutoff, **stale),
        ),
        (FedVARP(lr, k, eta, p, **stale), OldFedVARP(lr, k, eta, p, **stale)),
        (MIFA(lr, k, eta), OldMIFA(lr, k, eta)),
        (SCAFFOLD(lr, k, eta), OldSCAFFOLD(lr, k, eta)),
        (FOCUS(lr, k, **stale), OldFOCUS(lr, k, **stale)),
        (FedAvg(lr, k, eta), OldFedAvg(lr, k, eta)),
        (FedAvg(lr, k, eta, "unbiased", p), OldFedAvg(lr, k, eta, "unbiased", p)),
    ]


def masks_with_edge_rounds(rng, rounds, n):
    masks = rng.random((rounds, n)) < rng.uniform(0.1, 0.9)
    masks[0] = False  # nobody
    masks[1] = False
    masks[1, rng.integers(n)] = True  # one participant
    masks[2] = True  # everybody
    return masks


def context(method, n, d=3, p=None):
    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, d, p)
    method.start(ctx)
    return ctx


def _as_scalars(signature):
    """A signature with the kinds "one" and "minus_one" read as "scalar"."""
    if isinstance(signature, tuple):
        if hasattr(signature, "_replace") and getattr(signature, "coef", None) in (
            "one", "minus_one"
        ):  # fmt: skip
            return signature._replace(coef="scalar")
        return tuple(_as_scalars(part) for part in signature)
    return signature


def assert_same_phase(new, old, n, one_client=False):
    assert new.label == old.label
    assert new.is_identity == old.is_identity
    assert new.size == old.size
    np.testing.assert_array_equal(new.matrix().toarray(), old.matrix().toarray())
    np.testing.assert_array_equal(
        new.gradient_matrix(n).toarray(), old.gradient_matrix(n).toarray()
    )
    np.testing.assert_array_equal(new.rows, old.rows)
    np.testing.assert_array_equal(new.clients, old.clients)
    differs = old.local is None or new.local is None
    differs = differs or new.local.signature != old.local.signature
    if one_client and differs and new.local is not None and new.local.nodes.size:
        # a per-client equation over one client is node-local over that client's node,
        # where hand-written calls on its one row read as single (outer) rows
        assert new.local.nodes.size == 1
        return
    assert (new.local is None) == (old.local is None)
    if new.local is not None:
        if any(isinstance(c, RoundScalar) for c in new.local.coefficients):
            # a round scalar is read from its slot whatever its value (a hand-written 1.0
            # is "one"): the same numbers, compared below bit for bit
            assert _as_scalars(new.local.signature) == _as_scalars(old.local.signature)
        else:
            assert new.local.signature == old.local.signature
        np.testing.assert_array_equal(new.local.nodes, old.local.nodes)
        if old.local.clients is None:
            assert new.local.clients is None
        else:
            np.testing.assert_array_equal(new.local.clients, old.local.clients)
        got, want = new.local.coefficients, old.local.coefficients
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert np.ndim(a) == np.ndim(b)
            np.testing.assert_array_equal(a, b)  # bit for bit: no tolerance


@pytest.mark.parametrize("seed", range(6))
def test_equation_phases_equal_the_hand_written_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    masks = masks_with_edge_rounds(rng, 12, n)
    for new, old in pairs(n, rng):
        p = rng.uniform(0.2, 1.0, n)
        ctx_new, ctx_old = context(new, n, p=p), context(old, n, p=p)
        for r, mask in enumerate(masks):
            participants = np.flatnonzero(mask)
            got = new.round_phases(r, participants, ctx_new)
            want = old.round_phases(r, participants, ctx_old)
            assert len(got) == len(want), (new.name, r)
            for a, b in zip(got, want, strict=True):
                assert_same_phase(a, b, n, one_client=participants.size == 1)


@pytest.mark.parametrize("kind", ["quadratic", "least_squares"])
def test_rewritten_methods_run_bit_identical(kind):
    rng = np.random.default_rng(7)
    n, d, rounds = 9, 4, 30
    if kind == "quadratic":
        problem = Quadratic.random(n, d, seed=3)
    else:
        problem = LeastSquares.random(n, d, rows_per_client=(2, 6), reg=0.1, seed=3)
    masks = masks_with_edge_rounds(rng, rounds, n)
    x0 = rng.normal(size=d)
    for new, old in pairs(n, rng):
        got = run(new, problem, Trace(masks), rounds, x0=x0, progress=False)
        want = run(old, problem, Trace(masks), rounds, x0=x0, progress=False)
        np.testing.assert_array_equal(got.server, want.server, err_msg=new.name)
        assert np.isfinite(got.server).all()


# -- the layer itself ---------------------------------------------------------------------


def federated(n=4):
    layout = Layout([Block("x", n + 1, "model"), Block("h", n, first_node=1), Block("a", 1)])
    return RunContext(layout, n, 2)


def test_clients_index_every_block_alike():
    ctx = federated()
    S = np.array([0, 2])
    eq = Equations(ctx, "memory")
    x, h, a = eq.blocks("x", "h", "a")
    h[S] = x.server - x[S]
    a.server += 0.5 * mean(h[S])
    got = eq.build()
    want = (
        PhaseBuilder(ctx.layout, "memory")
        .combine("h", S, "x", 0, 1.0)
        .combine("h", S, "x", S + 1, -1.0)
        .keep("a", 0)
        .combine("a", 0, "h", S, 0.5 / 2)
        .build()
    )
    assert_same_phase(got, want, 4)
    m = got.matrix().toarray()
    # h (rows 5..8): client 0 at row 5 reads x_0 - x_1; client 2 at row 7 reads x_0 - x_3
    assert m[5, 0] == 1 and m[5, 1] == -1 and m[7, 0] == 1 and m[7, 3] == -1
    assert m[9, 9] == 1 and m[9, 5] == 0.25 and m[9, 7] == 0.25


def test_equations_read_the_old_state_and_fold_the_target_into_keep():
    ctx = federated()
    S = np.array([1, 3])
    eq = Equations(ctx)
    (x,) = eq.blocks("x")
    x.server += 0.7 * mean(x[S] - x.server)  # (1 - 0.7) x_0 + 0.35 (x_2 + x_4)
    x[S] = x.server  # the old server row
    m = eq.build().matrix().toarray()
    np.testing.assert_array_equal(m[0], [1 - 0.7, 0, 0.7 / 2, 0, 0.7 / 2, 0, 0, 0, 0, 0])
    assert m[2, 0] == 1 and m[4, 0] == 1 and m[2, 2] == 0


def test_gradients_per_client_and_summed():
    ctx = federated()
    S = np.array([0, 3])
    eq = Equations(ctx)
    x, a = eq.blocks("x", "a")
    x[S] -= 0.1 * grad(S)
    a.server = total(grad(S)) / 4
    phase = eq.build()
    b = phase.gradient_matrix(4).toarray()
    assert b[1, 0] == -0.1 and b[4, 3] == -0.1 and b[9, 0] == 0.25 and b[9, 3] == 0.25
    assert np.count_nonzero(b) == 4


def test_per_client_coefficients_and_dot():
    ctx = federated()
    S = np.array([0, 1, 2])
    w = np.array([0.1, 0.2, 0.3])
    eq = Equations(ctx)
    x, h = eq.blocks("x", "h")
    h[S] = w * (x[S] - x.server)
    x.server = dot(w, x[S])
    m = eq.build().matrix().toarray()
    np.testing.assert_array_equal(m[5:8, 1:4], np.diag(w))
    np.testing.assert_array_equal(m[5:8, 0], -w)
    np.testing.assert_array_equal(m[0, :5], [0, 0.1, 0.2, 0.3, 0])


def test_single_client_rows_and_clearing():
    ctx = federated()
    eq = Equations(ctx)
    x, h = eq.blocks("x", "h")
    x[2] = h[2]  # x_3 <- h_2
    h[np.array([0, 1])] = 0
    m = eq.build().matrix().toarray()
    assert m[3, 7] == 1 and m[3, 3] == 0
    assert not m[5].any() and not m[6].any()


def test_decentralized_numbering_has_no_server():
    layout = Layout([Block("x", 3, "model")])
    eq = Equations(layout, n_clients=3, client_node=0)
    (x,) = eq.blocks("x")
    S = np.arange(3)
    x[S] = x[S] * 0.5 + x[0] * 0.5
    m = eq.build().matrix().toarray()
    np.testing.assert_array_equal(m[:, 0], [1.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="no server row"):
        x.server  # noqa: B018


def test_errors_name_the_problem():
    ctx = federated()
    eq = Equations(ctx)
    x, h = eq.blocks("x", "h")
    S = np.array([0, 2])
    with pytest.raises(ValueError, match="block must be one of"):
        eq.blocks("nope")
    with pytest.raises(ValueError, match="client index 4 is out of range"):
        x[np.array([1, 4])]
    with pytest.raises(ValueError, match="client index -1"):
        h[-1]
    with pytest.raises(ValueError, match="has no server row"):
        h.server  # noqa: B018
    with pytest.raises(ValueError, match=r"shape \(2,\).*got shape \(3,\)"):
        np.ones(3) * x[S]
    with pytest.raises(ValueError, match=r"dot\(\) weights must have shape"):
        dot(np.ones(3), x[S])
    with pytest.raises(ValueError, match="reduce it with total"):
        x.server = x[S]
    with pytest.raises(ValueError, match="other clients"):
        x[S] = h[np.array([0, 1])]
    with pytest.raises(ValueError, match="different clients"):
        x[S] + x[np.array([1, 3])]
    with pytest.raises(ValueError, match="cannot be added"):
        x[S] + total(h[S])
    with pytest.raises(TypeError, match="only a block's rows can be assigned"):
        (x[S] - h[S])[0] = x.server
    with pytest.raises(TypeError):  # "a boolean mask: use np.flatnonzero" (or the annotation)
        x[np.array([True, False, True, False])]
    with pytest.raises(TypeError, match="linear"):
        x[S] * x[S]
    with pytest.raises(TypeError, match="needs an expression"):
        x[S] = 2.0
    with pytest.raises(ValueError, match="over no client"):
        mean(x[np.zeros(0, dtype=np.int64)])
    with pytest.raises(ValueError, match="client index 9"):
        x.server = total(grad(np.array([0, 9])))
    x[S] = x.server
    with pytest.raises(ValueError, match="assigned twice"):
        x[np.array([2, 3])] += h[np.array([2, 3])]
    kept = h[S]
    kept += x[S]  # an update of a selection in a variable writes nothing: refused at build
    with pytest.raises(ValueError, match="never written"):
        eq.build()


def test_method_classes_cite_their_papers():
    # every method class has a References section (Google style, read by the docs' napoleon)
    import inspect

    import stochmix as sm
    import stochmix.algorithms as algorithms

    # the base class and the channel-noise wrapper (a model of the link, not a method) cite none
    for name in sorted(set(algorithms.__all__) - {"DecentralizedMethod", "ChannelNoise"}):
        obj = getattr(algorithms, name)
        if inspect.isclass(obj) and issubclass(obj, sm.Method):
            # FedAdam and its siblings are FedAdaptive with one argument fixed: its section
            docs = [
                inspect.getdoc(c) or ""
                for c in obj.__mro__
                if c.__module__.startswith("stochmix.algorithms")
            ]
            assert any("\nReferences:\n    - " in d for d in docs), name


def test_build_closes_a_phase_and_the_handles_write_the_next():
    ctx = federated()
    S = np.array([1, 2])
    eq = Equations(ctx, "default")
    x, a = eq.blocks("x", "a")
    x[S] -= 0.5 * grad(S)
    step = eq.build("local step")
    x[S] += a.server  # the same rows again: a new phase
    second = eq.build()
    assert step.label == "local step" and second.label == "default"
    assert step.gradient_matrix(4).toarray()[2, 1] == -0.5
    assert second.gradient_matrix(4).nnz == 0 and second.matrix().toarray()[2, 9] == 1
    assert step.local is not None and second.local is not None
