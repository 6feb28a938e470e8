"""Message drops (issue 15): per-edge independent and Gilbert–Elliott losses turning any
graph sequence into a time-varying one, weights re-normalized by the rule on the surviving
graph. Reproducibility (any order of steps), drop and burst statistics, stochasticity per
rule and drop mode, p = 0 equal to the wrapped sequence, methods' checks failing or passing
as the maths says, gradient tracking converging linearly under drops, config keys."""

import copy
import importlib.util

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import stochmix as sm
from stochmix import mixing
from stochmix.algorithms import DGD, GradientTracking, PushPull
from stochmix.config import ConfigError, dumps, parse
from stochmix.mixing import (
    MessageDrops,
    OnePeerExponential,
    RandomSequence,
    StaticSequence,
    is_column_stochastic,
    is_doubly_stochastic,
    is_row_stochastic,
)
from stochmix.mixing import drops as drops_module
from stochmix.participation import Full
from stochmix.problems import Quadratic

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

#: Every weight rule that runs here ("fastest" and "fdla" solve an SDP with cvxpy).
RULES_HERE = [
    rule
    for rule in mixing.RULES
    if rule not in ("fastest", "fdla") or importlib.util.find_spec("cvxpy") is not None
]

CYCLE = StaticSequence(nx.cycle_graph(8))
COMPLETE = StaticSequence(nx.complete_graph(10))


def _ge(graphs, **options):
    base = dict(model="gilbert_elliott", p_good_to_bad=0.05, p_bad_to_good=0.25, seed=3)
    return MessageDrops(graphs, **{**base, **options})


def _same(a, b) -> bool:
    """Bitwise equal sparse matrices (pattern and values)."""
    a, b = a.tocsr(), b.tocsr()
    a.sort_indices()
    b.sort_indices()
    return (
        a.shape == b.shape
        and np.array_equal(a.indptr, b.indptr)
        and np.array_equal(a.indices, b.indices)
        and np.array_equal(a.data, b.data)
    )


def _drop_indicator(seq, steps):
    """(steps, links) booleans: edge e of the (static) wrapped graph dropped at step k."""
    src, dst = seq._edges(0)
    keys = dst * seq.n_nodes + src
    out = np.zeros((steps, keys.size), bool)
    for k in range(steps):
        s, d = seq.dropped(k)
        out[k] = np.isin(keys, d * seq.n_nodes + s)
    return out


# ------------------------------------------------------------------- reproducibility
@pytest.mark.parametrize(
    "make", [lambda: MessageDrops(COMPLETE, 0.3, seed=1), lambda: _ge(COMPLETE)]
)
def test_same_seed_same_matrices_and_steps_differ(make):
    a, b = make(), make()
    matrices = [a.matrix(k, "row") for k in range(6)]
    for k in range(6):
        assert _same(matrices[k], b.matrix(k, "row"))
    distinct = {tuple(a.dropped(k)[0]) + tuple(a.dropped(k)[1]) for k in range(6)}
    assert len(distinct) >= 5  # the drops change from step to step
    other = (
        MessageDrops(COMPLETE, 0.3, seed=2) if a.model == "independent" else _ge(COMPLETE, seed=4)
    )
    assert any(not _same(a.matrix(k, "row"), other.matrix(k, "row")) for k in range(6))


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("model", ["independent", "gilbert_elliott"])
def test_steps_asked_out_of_order_give_the_same_matrices(model, symmetric, monkeypatch):
    """The chain is a function of (seed, k): going back restarts from a checkpoint (one
    every 1024 steps, a bounded number kept) or from step 0, and gives the same drops."""
    monkeypatch.setattr(drops_module, "_CHECKPOINTS", 2)  # evictions within a short test

    def make():
        if model == "independent":
            return MessageDrops(CYCLE, 0.3, symmetric=symmetric, seed=5)
        return _ge(CYCLE, symmetric=symmetric, seed=5)

    forward = make()
    steps = [5000, 3, 2100, 4097, 1024, 0, 5000, 1023, 3100, 2]
    expected = {}
    for k in range(max(steps) + 1):
        if k in steps:
            expected[k] = forward.matrix(k, "column")
        else:
            forward._drops(k)  # move the chain on (independent: nothing to keep)
    shuffled = make()
    for k in steps:
        assert _same(shuffled.matrix(k, "column"), expected[k]), k
    if model == "gilbert_elliott":
        assert len(shuffled._checkpoints) <= 3  # step 0 and the 2 latest


# ------------------------------------------------------------------------ statistics
def test_independent_drop_frequency_is_p_within_five_sigma():
    p, steps = 0.2, 200
    seq = MessageDrops(StaticSequence(nx.complete_graph(20)), p, seed=11)
    dropped = _drop_indicator(seq, steps)
    trials = dropped.size  # 200 steps x 380 directed edges
    rate = dropped.mean()
    assert abs(rate - p) < 5 * np.sqrt(p * (1 - p) / trials), rate
    # independent across edges and steps: lag-1 correlation of a link's drops near 0
    x = dropped[1:].ravel().astype(float)
    y = dropped[:-1].ravel().astype(float)
    assert abs(np.corrcoef(x, y)[0, 1]) < 5 / np.sqrt(x.size)
    assert seq.drop_rate == p and seq.mean_burst_length == pytest.approx(1 / (1 - p))


def test_symmetric_drops_take_both_directions_together_at_rate_p():
    p = 0.3
    seq = MessageDrops(StaticSequence(nx.complete_graph(12)), p, symmetric=True, seed=2)
    pairs = 0
    dropped_pairs = 0
    for k in range(100):
        src, dst = seq.dropped(k)
        forward = set(zip(src.tolist(), dst.tolist(), strict=True))
        assert forward == {(d, s) for s, d in forward}  # i -> j dropped iff j -> i
        dropped_pairs += len(forward) // 2
        pairs += 66
    rate = dropped_pairs / pairs
    assert abs(rate - p) < 5 * np.sqrt(p * (1 - p) / pairs), rate


def test_gilbert_elliott_burst_length_and_stationary_rate():
    """Bursts of drops of one link last 1 / p_bad_to_good steps on average (geometric),
    and the long-run drop rate is pi = p_gb / (p_gb + p_bg)."""
    p_gb, p_bg, steps = 0.05, 0.25, 2000
    seq = _ge(COMPLETE, p_good_to_bad=p_gb, p_bad_to_good=p_bg, seed=7)
    dropped = _drop_indicator(seq, steps)  # 2000 x 90 links
    pi = p_gb / (p_gb + p_bg)
    assert seq.drop_rate == pytest.approx(pi) and seq.mean_burst_length == 1 / p_bg
    assert abs(dropped.mean() - pi) < 0.1 * pi  # correlated draws: a looser band
    # run lengths of drops, runs touching either end of the window left out
    padded = np.zeros((steps + 2, dropped.shape[1]), np.int8)
    padded[1:-1] = dropped
    change = np.diff(padded, axis=0)
    starts = np.argwhere(change.T == 1)  # (link, step)
    ends = np.argwhere(change.T == -1)
    lengths = ends[:, 1] - starts[:, 1]
    inside = (starts[:, 1] > 0) & (ends[:, 1] < steps)
    lengths = lengths[inside]
    sigma = np.sqrt(1 - p_bg) / p_bg / np.sqrt(lengths.size)  # sd of a geometric mean
    assert lengths.size > 5000
    assert abs(lengths.mean() - 1 / p_bg) < 5 * sigma, (lengths.mean(), sigma)
    # bursty: a drop is followed by a drop with probability 1 - p_bg, far above pi
    follow = (dropped[1:] & dropped[:-1]).sum() / dropped[:-1].sum()
    assert abs(follow - (1 - p_bg)) < 0.03


def test_gilbert_elliott_on_a_non_periodic_sequence_and_its_size_limit():
    seq = _ge(RandomSequence(12, seed=0), drop_in_good=0.1, drop_in_bad=0.9)
    assert seq.period is None and seq._links is None  # one chain per node pair
    for k in range(5):
        assert is_row_stochastic(seq.matrix(k, "row"))
    with pytest.raises(ValueError, match="gilbert_elliott.*non-periodic.*independent"):
        _ge(RandomSequence(3000, seed=0))


# ----------------------------------------------------------------- stochasticity
def _nonregular():
    graph = nx.cycle_graph(9)
    graph.add_edges_from([(0, 4), (0, 5), (2, 7)])
    return StaticSequence(graph)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("model", ["independent", "gilbert_elliott"])
def test_row_and_column_rules_keep_their_sums_under_any_drops(model, symmetric):
    for inner in (_nonregular(), RandomSequence(10, "random_directed", seed=1)):
        if model == "independent":
            seq = MessageDrops(inner, 0.4, symmetric=symmetric, seed=0)
        else:
            seq = _ge(inner, p_good_to_bad=0.3, p_bad_to_good=0.3, symmetric=symmetric)
        changed = 0
        for k in range(20):
            row, column = seq.matrix(k, "row"), seq.matrix(k, "column")
            assert is_row_stochastic(row) and is_column_stochastic(column)
            changed += not _same(row, inner.matrix(k, "row"))
        assert changed >= 10


def test_metropolis_is_doubly_stochastic_under_symmetric_drops_and_refused_otherwise():
    seq = MessageDrops(_nonregular(), 0.4, symmetric=True, seed=0)
    for k in range(20):
        w = seq.matrix(k, "metropolis")
        assert is_doubly_stochastic(w) and abs(w - w.T).max() == 0
    bursty = _ge(_nonregular(), symmetric=True)
    assert all(is_doubly_stochastic(bursty.matrix(k, "metropolis")) for k in range(20))
    one_way = MessageDrops(_nonregular(), 0.4, seed=0)
    with pytest.raises(ValueError, match=r"step 3, rule='metropolis'.*symmetric=True"):
        one_way.matrix(3, "metropolis")


def test_natural_weights_move_the_lost_weight_to_a_diagonal():
    """Receiver: rows keep their sums; sender: columns. A symmetric doubly stochastic W
    stays doubly stochastic under symmetric drops; the directed one-peer graph's doubly
    stochastic W keeps one of its sums only."""
    one_peer = OnePeerExponential(8)
    receiver = MessageDrops(one_peer, 0.5, seed=0)
    sender = MessageDrops(one_peer, 0.5, lost_weight="sender", seed=0)
    broken_columns = broken_rows = 0
    for k in range(12):
        w, c = receiver.matrix(k, "natural"), sender.matrix(k, "natural")
        assert is_row_stochastic(w) and is_column_stochastic(c)
        broken_columns += not is_column_stochastic(w)
        broken_rows += not is_row_stochastic(c)
        assert (w.diagonal() >= one_peer.matrix(k, "natural").diagonal()).all()
    assert broken_columns >= 8 and broken_rows >= 8
    symmetric_w = mixing.metropolis_hastings(nx.cycle_graph(9))
    weighted = StaticSequence(mixing.matrix_to_graph(symmetric_w))
    both = MessageDrops(weighted, 0.4, symmetric=True, seed=1)
    one_way = MessageDrops(weighted, 0.4, seed=1)
    assert all(is_doubly_stochastic(both.matrix(k, "natural")) for k in range(20))
    assert not all(is_column_stochastic(one_way.matrix(k, "natural")) for k in range(20))
    assert all(is_row_stochastic(one_way.matrix(k, "natural")) for k in range(20))


# --------------------------------------------------- p = 0, self-loops, period, fingerprint
@pytest.mark.parametrize(
    "inner",
    [CYCLE, OnePeerExponential(8), RandomSequence(8, seed=2), _nonregular()],
    ids=["static", "one_peer", "random", "nonregular"],
)
def test_no_drops_is_the_wrapped_sequence_exactly(inner):
    for seq in (
        MessageDrops(inner, 0.0, seed=0),
        _ge(inner, drop_in_good=0.0, drop_in_bad=0.0),
        _ge(inner, p_good_to_bad=0.0),
    ):
        assert seq.period == inner.period
        for k in range(6):
            for rule in RULES_HERE:
                try:
                    expected = inner.matrix(k, rule)
                except ValueError:
                    with pytest.raises(ValueError):
                        seq.matrix(k, rule)
                    continue
                assert _same(seq.matrix(k, rule), expected), (k, rule)
            assert _same(seq.adjacency(k), inner.adjacency(k))
            assert nx.utils.graphs_equal(
                seq.graph(k), nx.DiGraph(mixing.matrix_to_graph(inner.matrix(k, "natural")))
            )


def test_self_loops_are_never_dropped_and_p_one_leaves_them_alone():
    one_peer = OnePeerExponential(8)
    seq = MessageDrops(one_peer, 0.7, seed=0)
    total = 0
    for k in range(20):
        src, dst = seq.dropped(k)
        assert (src != dst).all()
        total += src.size
        natural, inner = seq.matrix(k, "natural"), one_peer.matrix(k, "natural")
        lost = np.bincount(dst, minlength=8) * 0.5  # each dropped edge carried 1/2
        np.testing.assert_array_equal(natural.diagonal(), inner.diagonal() + lost)
    assert 0.6 * 160 < total < 0.8 * 160
    everything = MessageDrops(CYCLE, 1.0, seed=0)
    assert everything.period == 1
    identity = sp.eye_array(8, format="csr")
    for rule in ("row", "column", "metropolis"):
        assert _same(everything.matrix(4, rule), identity)
    assert everything.graph(4).edges == {(i, i) for i in range(8)}


def test_period_and_fingerprint():
    assert MessageDrops(CYCLE, 0.1, seed=0).period is None
    assert MessageDrops(OnePeerExponential(8), 0.0, seed=0).period == 3
    assert _ge(CYCLE).period is None
    base = MessageDrops(CYCLE, 0.1, seed=0).fingerprint()
    assert MessageDrops(CYCLE, 0.1, seed=0).fingerprint() == base
    others = [
        MessageDrops(CYCLE, 0.1, seed=1),
        MessageDrops(CYCLE, 0.2, seed=0),
        MessageDrops(CYCLE, 0.1, symmetric=True, seed=0),
        MessageDrops(CYCLE, 0.1, lost_weight="sender", seed=0),
        MessageDrops(StaticSequence(nx.path_graph(8)), 0.1, seed=0),
        _ge(CYCLE, seed=0),
        _ge(CYCLE, seed=0, p_bad_to_good=0.5),
        _ge(CYCLE, seed=0, drop_in_good=0.01),
    ]
    prints = {s.fingerprint() for s in others}
    assert base not in prints and len(prints) == len(others)
    # a method's fingerprint (checkpoints) tells the drops apart
    a = GradientTracking(0.1, MessageDrops(CYCLE, 0.1, seed=0)).fingerprint()
    b = GradientTracking(0.1, MessageDrops(CYCLE, 0.1, seed=1)).fingerprint()
    assert a != b


# ------------------------------------------------------------------ methods and checks
PROBLEM = Quadratic.random(10, 3, seed=0)


def _run(method, rounds, problem=PROBLEM):
    return sm.run(method, problem, Full(problem.n_clients), rounds, progress=False)


def test_methods_checks_fail_or_pass_as_the_maths_says():
    ring = StaticSequence(nx.cycle_graph(10))
    # metropolis on one-way drops: no undirected graph, the matrix itself is refused
    with pytest.raises(ValueError, match=r"step 0, rule='metropolis'.*symmetric"):
        _run(GradientTracking(0.05, MessageDrops(ring, 0.1, seed=0)), 3)
    # uniform in-neighbour weights are row- but not doubly stochastic on a surviving
    # graph with unequal degrees: gradient tracking (needs doubly) names the step
    dense = StaticSequence(nx.complete_graph(10))
    lossy = MessageDrops(dense, 0.2, symmetric=True, seed=0)
    with pytest.raises(ValueError, match=r"W_0 under rule='row' is not doubly stochastic"):
        _run(GradientTracking(0.05, lossy, rule="row"), 3)
    # ... which is all DGD needs; push-pull takes row and column on one-way drops
    assert np.isfinite(_run(DGD(0.05, lossy, rule="row"), 20).distance).all()
    one_way = MessageDrops(dense, 0.2, seed=0)
    assert np.isfinite(_run(PushPull(0.05, one_way), 20).distance).all()
    # a ring loses strong connectivity at some step: the error names the step
    with pytest.raises(ValueError, match=r"graph of step \d+ is not strongly connected"):
        _run(GradientTracking(0.05, MessageDrops(ring, 0.2, symmetric=True, seed=0)), 50)


@pytest.mark.slow
def test_gradient_tracking_converges_linearly_under_symmetric_drops(unchecked):
    """Claim: gradient tracking is robust to time-varying graphs that are connected jointly
    over windows. Metropolis weights on a ring whose links drop (both directions together)
    with probability 0.2: single steps are often disconnected (the per-step check is off),
    the union of a few steps is connected, and the error still falls linearly, below 1e-11
    in 800 steps (as on the static ring at this step size)."""
    ring = StaticSequence(nx.cycle_graph(10))
    lossy = MessageDrops(ring, 0.2, symmetric=True, seed=0)
    assert not all(mixing.is_strongly_connected_union(lossy, k, 1) for k in range(50))
    assert all(mixing.is_strongly_connected_union(lossy, k, 10) for k in range(0, 600, 10))
    rounds = 800
    res = _run(GradientTracking(0.02, lossy, check_mixing=False), rounds)
    assert res.relative_error[-1] < 1e-11, res.relative_error[-1]
    rate = res.rate(floor=1e-13)
    assert rate < 0.99, rate
    # the bursty model too
    bursty = _ge(ring, p_good_to_bad=0.05, p_bad_to_good=0.3, symmetric=True, seed=1)
    res = _run(GradientTracking(0.02, bursty, check_mixing=False), rounds)
    assert res.relative_error[-1] < 1e-11, res.relative_error[-1]
    # checks on: a dense graph stays connected at every step and converges the same way
    dense = MessageDrops(StaticSequence(nx.complete_graph(10)), 0.3, symmetric=True, seed=0)
    res = _run(GradientTracking(0.02, dense), 400)
    assert res.relative_error[-1] < 1e-11, res.relative_error[-1]


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        (dict(probability=1.5), ValueError, r"probability must be <= 1.0, got 1.5"),
        (dict(probability=-0.1), ValueError, r"probability must be >= 0"),
        (dict(probability=None), TypeError, r"probability must be a real number, got None"),
        (dict(probability="0.1"), TypeError, r"probability.*'0.1'"),
        (dict(probability=0.1, model="bursty"), ValueError, r"model.*'bursty'"),
        (dict(probability=0.1, p_good_to_bad=0.1), ValueError, r"p_good_to_bad is a parameter"),
        (dict(probability=0.1, drop_in_bad=0.5), ValueError, r"drop_in_bad is a parameter"),
        (dict(probability=0.1, symmetric=1), TypeError, r"symmetric must be True or False"),
        (dict(probability=0.1, lost_weight="both"), ValueError, r"lost_weight.*'both'"),
        (dict(probability=0.1, seed=-1), ValueError, r"seed must be >= 0"),
        (
            dict(model="gilbert_elliott", probability=0.1, p_good_to_bad=0.1, p_bad_to_good=0.5),
            ValueError,
            r"probability is the parameter of model='independent'",
        ),
        (
            dict(model="gilbert_elliott", p_good_to_bad=0.1, p_bad_to_good=0.0),
            ValueError,
            r"p_bad_to_good must be > 0",
        ),
        (
            dict(model="gilbert_elliott", p_good_to_bad=1.2, p_bad_to_good=0.5),
            ValueError,
            r"p_good_to_bad must be <= 1.0, got 1.2",
        ),
        (
            dict(model="gilbert_elliott", p_bad_to_good=0.5),
            TypeError,
            r"p_good_to_bad must be a real number, got None",
        ),
        (
            dict(model="gilbert_elliott", p_good_to_bad=0.1, p_bad_to_good=0.5, drop_in_bad=2.0),
            ValueError,
            r"drop_in_bad must be <= 1.0",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, error, needle, unchecked):
    with pytest.raises(error, match=needle):
        MessageDrops(CYCLE, **kwargs)


def test_graphs_must_be_a_sequence(unchecked):
    with pytest.raises(TypeError, match="graphs must be a GraphSequence"):
        MessageDrops(nx.cycle_graph(4), 0.1)
    with pytest.raises(ValueError, match="k must be >= 0"):
        MessageDrops(CYCLE, 0.1, seed=0).dropped(-1)


# --------------------------------------------------------------------------- config
def _config(**graphs):
    return {
        "problem": {"kind": "quadratic", "n_clients": 8, "dim": 3},
        "graphs": {"kind": "cycle", **graphs},
        "methods": [{"kind": "gradient_tracking", "lr": 0.05, "check_mixing": False}],
    }


def test_config_drop_keys_build_message_drops_and_resolve():
    exp = parse(_config(drops=0.1, drop_symmetric=True))
    graphs = exp.methods[0].graphs
    assert isinstance(graphs, MessageDrops) and graphs.probability == 0.1 and graphs.symmetric
    table = exp.resolved()["graphs"]
    assert table["drops"] == 0.1 and table["drop_model"] == "independent"
    assert table["drop_seed"] == 0 and table["drop_symmetric"] is True
    back = parse(tomllib.loads(dumps(exp.resolved())))
    assert back.resolved() == exp.resolved()
    assert back.methods[0].graphs.fingerprint() == graphs.fingerprint()
    bursty = parse(
        _config(
            drop_model="gilbert_elliott",
            drop_p_good_to_bad=0.1,
            drop_p_bad_to_good=0.5,
            drop_symmetric=True,
            drop_seed=4,
        )
    )
    table = bursty.resolved()["graphs"]
    assert table["drop_p_bad_to_good"] == 0.5 and table["drop_in_bad"] == 1.0
    assert "drops" not in table and bursty.methods[0].graphs.seed == 4
    res = sm.run(
        bursty.methods[0].build(0.05), bursty.problem, bursty.participation, 5, progress=False
    )
    assert np.isfinite(res.server).all()
    # without drop keys the resolved table is what it was
    assert not any(k.startswith("drop") for k in parse(_config()).resolved()["graphs"])


@pytest.mark.parametrize(
    ("graphs", "needle"),
    [
        (dict(drops=1.5), r"graphs\.drops must be <= 1\.0, got 1\.5"),
        (dict(drops="a lot"), r"graphs\.drops must be a real number"),
        (dict(drops=0.1, drop_model="bursty"), r"graphs\.drop_model .*'bursty'"),
        (dict(drop_model="gilbert_elliott", drop_p_bad_to_good=0.5), r"graphs\.drop_p_good_to_bad"),
        (dict(drops=0.1, drop_p_bad_to_good=0.5), r"graphs\.drop_p_bad_to_good is a parameter"),
        (dict(drops=0.1, drop_symmetric="yes"), r"graphs\.drop_symmetric must be True or False"),
        (dict(drops=0.1, drop_seed=-2), r"graphs\.drop_seed must be >= 0"),
        (dict(drops=0.1), r"metropolis.*graphs\.drop_symmetric = true"),
        (dict(drops=0.1, dropz=1), r"unknown key 'dropz'.*drop_model"),
    ],
)
def test_config_drop_errors_name_the_key(graphs, needle, unchecked):
    """(Without the suite's runtime type checker: the messages a user gets.)"""
    raw = _config(**graphs)
    if "metropolis" in needle:
        raw["methods"][0].pop("check_mixing")  # the default rule (metropolis) is checked
    with pytest.raises(ConfigError, match=needle):
        parse(copy.deepcopy(raw))


def test_message_drops_init_documents_every_argument():
    import inspect

    from tests import documented_arguments

    sections, names = documented_arguments(MessageDrops.__init__)
    assert {"Args", "Raises"} <= sections
    assert names == set(inspect.signature(MessageDrops.__init__).parameters) - {"self"}
