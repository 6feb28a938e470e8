"""Configurations: every method and graph kind, defaults and seeds written out, the TOML
writer, and one-line errors that name the key."""

import copy
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import stochmix as sm
from stochmix import config
from stochmix.config import ConfigError, dumps, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FEDERATED = {
    "problem": {"kind": "quadratic", "n_clients": 6, "dim": 3},
    "participation": {"kind": "bernoulli", "low": 0.3, "high": 0.9},
    "methods": [{"kind": "fedavg", "lr": 0.05, "local_steps": 2}],
}

DECENTRALIZED = {
    "problem": {"kind": "quadratic", "n_clients": 8, "dim": 3},
    "graphs": {"kind": "one_peer_exponential"},
    "methods": [{"kind": "gradient_tracking", "lr": 0.05}],
}

METHOD_OPTIONS = {
    "amplified_fedavg": {"local_steps": 2, "amplification": 1.5, "period": 3},
    "fedstale": {"beta": 0.3},
    "fedavg": {"weights": "unbiased"},
    "fedbuff": {"buffer": 2, "concurrency": 3},
    "fedasync": {"concurrency": 3},
    "fedpd": {"p": 0.5},
    "acc_dngd": {"alpha": 0.2},
    "mudag": {"mix_rounds": 2, "momentum": 0.5},
    "dapg": {"mix_rounds": 2, "momentum": 0.5},
}

#: Decentralized methods whose papers run on one fixed graph (their tuning or their dual
#: or edge variables read its matrix): other sequences are refused, naming graphs.
FIXED_GRAPH = {"ssda", "msda", "apapc", "opapc", "relaxed_admm", "lt_admm"}
#: ... and those whose accelerated gossip needs a symmetric W (its eigenvalues real).
SYMMETRIC = {"ssda", "msda", "apapc", "opapc", "mudag", "dapg"}
#: ... and those that run under one-edge gossip only (AD-PSGD: one worker per iteration).
GOSSIP_ONLY = {"adpsgd"}


def _with(base: dict, **changes) -> dict:
    """``base`` changed: a table without ``kind`` is merged into the base's, one with a
    ``kind`` (or anything else) replaces it."""
    raw = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict) and "kind" not in value:
            raw[key].update(value)
        else:
            raw[key] = value
    return raw


def _round_trip(exp) -> dict:
    """The resolved configuration written as TOML, read back and resolved again."""
    text = dumps(exp.resolved())
    return parse(tomllib.loads(text)).resolved()


# ------------------------------------------------------------------------- TOML writer
def test_dumps_reads_back_equal():
    table = {
        "name": 'a "quoted"\nname \\ ü \x7f',
        "n": -3,
        "x": 0.1,
        "tiny": 5e-324,
        "third": 1 / 3,
        "big": 1e300,
        "flag": True,
        "grid": [1e-4, 3e-4, 0.001],
        "nested": [[1, 2], ["a"]],
        "empty": [],
        "inline": [{"a": 1}, 2],
        "dotted key": 1,
        "section": {"kind": "x", "deeper": {"y": False}, "list": [0.5]},
        "methods": [{"kind": "fedavg", "lr": 0.3}, {"kind": "focus", "lr": [1.0, 2.5]}],
    }
    text = dumps(table, comment="first line\nsecond")
    assert text.startswith("# first line\n# second\n")
    assert tomllib.loads(text) == table


def test_dumps_writes_special_floats_and_refuses_none():
    back = tomllib.loads(dumps({"a": float("nan"), "b": float("inf"), "c": -float("inf")}))
    assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
    assert tomllib.loads(dumps({"n": np.int64(3), "x": np.float32(0.5)})) == {"n": 3, "x": 0.5}
    with pytest.raises(TypeError, match="section.key"):
        dumps({"section": {"key": None}})


# --------------------------------------------------------------------- resolved configs
def test_default_resolves_with_every_seed_and_reads_back():
    exp = config.default()
    resolved = exp.resolved()
    assert resolved["problem"]["seed"] == 0 and resolved["participation"]["seed"] == 0
    assert resolved["seeds"] == [0] and resolved["rounds"] == 800
    assert resolved["methods"][0]["server_lr"] == 1.0  # defaults written out
    assert _round_trip(exp) == resolved


@pytest.mark.parametrize("name", ["decentralized.toml"])
def test_examples_resolve_and_read_back(name):
    exp = config.load(EXAMPLES / name)
    assert _round_trip(exp) == exp.resolved()


def test_unset_seeds_default_to_zero_and_give_the_same_draws():
    raw = {
        "problem": {"kind": "least_squares", "n_clients": 10, "dim": 3},
        "participation": {"kind": "bernoulli", "low": 0.2, "high": 0.8},
        "methods": [{"kind": "focus", "lr": 0.01}],
    }
    a, b = parse(copy.deepcopy(raw)), parse(copy.deepcopy(raw))
    np.testing.assert_array_equal(a.problem.x_star, b.problem.x_star)
    np.testing.assert_array_equal(a.participation.probabilities, b.participation.probabilities)
    seeded = _with(raw, problem={"seed": 0}, participation={"seed": 0})
    np.testing.assert_array_equal(parse(seeded).problem.x_star, a.problem.x_star)
    graphs = _with(DECENTRALIZED, graphs={"kind": "erdos_renyi"})
    one, two = parse(copy.deepcopy(graphs)), parse(copy.deepcopy(graphs))
    assert one.tables["graphs"]["seed"] == 0 and 0 < one.tables["graphs"]["p"] <= 1
    w1, w2 = (
        one.methods[0].graphs.matrix(3, "metropolis"),
        two.methods[0].graphs.matrix(3, "metropolis"),
    )
    assert (w1 != w2).nnz == 0


def test_overrides_show_in_the_resolved_config():
    exp = config.default()
    exp.rounds, exp.seeds = 5, [3]
    assert exp.resolved()["rounds"] == 5 and exp.resolved()["seeds"] == [3]


# ------------------------------------------------------------------ the whole library
@pytest.mark.parametrize("kind", sorted(config.FEDERATED))
def test_every_federated_method_runs_from_a_config(kind):
    method = {"kind": kind, "lr": 0.05, **METHOD_OPTIONS.get(kind, {})}
    raw = _with(FEDERATED, methods=[method])
    if kind in config.EVERY_CLIENT:  # its paper runs every client in every round
        raw["participation"] = {"kind": "full"}
    exp = parse(raw)
    assert _round_trip(exp) == exp.resolved()
    res = sm.run(exp.methods[0].build(0.05), exp.problem, exp.participation, 5, progress=False)
    assert res.rounds == 5 and np.isfinite(res.server).all()


@pytest.mark.parametrize("graph", sorted(config.GRAPHS))
@pytest.mark.parametrize("kind", sorted(config.DECENTRALIZED))
def test_every_decentralized_method_runs_on_every_graph_that_suits_it(kind, graph):
    method = {"kind": kind, "lr": 0.05, **METHOD_OPTIONS.get(kind, {})}
    raw = _with(DECENTRALIZED, graphs={"kind": graph}, methods=[method])
    if kind in ("gt_svrg", "gt_saga", "gt_sarah"):  # finite sums: clients that hold samples
        raw["problem"] = {"kind": "least_squares", "n_clients": 8, "dim": 3}
    if graph == "random_directed" and kind in config.AVERAGING:
        with pytest.raises(ConfigError, match=r"methods\[0\]\.rule: .*doubly stochastic"):
            parse(raw)
        return
    if kind in FIXED_GRAPH and graph in ("erdos_renyi", "one_peer_exponential", "random_directed"):
        refused = r"methods\[0\]: graphs must be (a fixed graph|static)"
        with pytest.raises(ConfigError, match=refused):
            parse(raw)
        return
    if kind in SYMMETRIC and graph in ("directed_ring", "one_peer_exponential"):
        exp = parse(raw)
        with pytest.raises(ValueError, match="symmetric"):
            sm.run(exp.methods[0].build(0.05), exp.problem, exp.participation, 5, progress=False)
        return
    if kind in GOSSIP_ONLY:
        with pytest.raises(ConfigError, match=r"participation.kind = 'full' cannot drive"):
            parse(raw)
        raw["activation"] = {"kind": "random_edge"}
    exp = parse(raw)
    process = sm.participation.RandomEdge if kind in GOSSIP_ONLY else sm.participation.Full
    assert isinstance(exp.participation, process)
    assert _round_trip(exp) == exp.resolved()
    res = sm.run(exp.methods[0].build(0.05), exp.problem, exp.participation, 5, progress=False)
    assert res.rounds == 5 and np.isfinite(res.server).all()


def test_default_rules_follow_the_graph():
    def rules(graph, kind):
        raw = _with(DECENTRALIZED, graphs={"kind": graph}, methods=[{"kind": kind, "lr": 0.1}])
        options = parse(raw).methods[0].options
        return {k: v for k, v in options.items() if k.endswith("rule")}

    assert rules("one_peer_exponential", "gradient_tracking") == {"rule": "natural"}
    assert rules("erdos_renyi", "dgd") == {"rule": "metropolis"}
    assert rules("random_directed", "push_pull") == {"row_rule": "row", "column_rule": "column"}
    assert rules("cycle", "push_sum") == {"rule": "column"}
    forced = _with(DECENTRALIZED, graphs={"kind": "random_directed", "rule": "row"})
    forced["methods"] = [{"kind": "push_pull", "lr": 0.1}, {"kind": "push_sum", "lr": 0.1}]
    with pytest.raises(ConfigError, match="graphs.rule = 'row' .*not column stochastic"):
        parse(forced)
    # DGD may take row-stochastic weights when asked (a weighted average's minimiser)
    forced["methods"] = [{"kind": "dgd", "lr": 0.1}]
    assert parse(forced).methods[0].options["rule"] == "row"
    # and check_mixing = false runs what the checks would refuse
    broken = _with(DECENTRALIZED, graphs={"kind": "erdos_renyi", "rule": "natural"})
    with pytest.raises(ConfigError, match="not doubly stochastic"):
        parse(broken)
    broken["methods"][0]["check_mixing"] = False
    assert parse(broken).methods[0].options["rule"] == "natural"


def test_rounds_zero_is_allowed():
    exp = parse(_with(FEDERATED, rounds=0))
    assert exp.rounds == 0


def test_participation_defaults_to_full():
    raw = _with(FEDERATED)
    del raw["participation"]
    exp = parse(raw)
    assert isinstance(exp.participation, sm.participation.Full)
    assert exp.resolved()["participation"] == {"kind": "full"}


# ------------------------------------------------------------------------------ errors
BAD = [
    (_with(FEDERATED, rounds=-1), "rounds must be a nonnegative integer, got -1"),
    (_with(FEDERATED, seeds=[0, -2]), "seeds must be"),
    (_with(FEDERATED, dtype="float16"), "dtype must be one of"),
    (_with(FEDERATED, metrics=["speed"]), "metrics must be a list"),
    (_with(FEDERATED, evaluate_every=0), "evaluate_every must be"),
    (_with(FEDERATED, participation={"p": 0.5}), "participation.p: give p, or low and high"),
    (
        _with(
            FEDERATED, participation={"kind": "weighted_sample", "weights": [1.0, 2.0], "size": 1}
        ),
        "participation.weights must be a list of n_clients = 6 numbers, got 2",
    ),
    (
        _with(FEDERATED, participation={"kind": "uniform_sample", "size": 9, "low": None}),
        "participation: unknown key 'low'",
    ),
    (_with(FEDERATED, methods=[{"kind": "fedavg", "lr": [0.1, 0.1]}]), "methods[0].lr lists"),
    (_with(FEDERATED, methods=[{"kind": "fedau", "lr": 0.1, "weights": "uniform"}]), "'weights'"),
    (_with(FEDERATED, methods=[{"kind": "dgd", "lr": 0.1}]), "needs a [graphs] table"),
    (
        _with(DECENTRALIZED, participation={"kind": "bernoulli", "p": 0.5}),
        "participation.kind = 'bernoulli' cannot drive",
    ),
    (_with(FEDERATED, graphs={"kind": "cycle"}), "graphs: no method uses a graph"),
    (_with(DECENTRALIZED, graphs={"kind": "x"}), "graphs.kind must be one of"),
    (_with(DECENTRALIZED, graphs={"nodes": 4}), "graphs.nodes must equal problem.n_clients = 8"),
    (_with(DECENTRALIZED, graphs={"rule": "fair"}), "graphs.rule must be one of"),
    (_with(DECENTRALIZED, graphs={"rule": "metropolis"}), "graphs.rule = 'metropolis' does not"),
    (_with(DECENTRALIZED, graphs={"kind": "cycle", "seed": 1}), "graphs: unknown key 'seed'"),
    (_with(DECENTRALIZED, graphs={"kind": "erdos_renyi", "p": 2.0}), "graphs.p must be <= 1"),
    (
        _with(
            DECENTRALIZED,
            graphs={"kind": "random_directed"},
            methods=[{"kind": "push_pull", "lr": 0.1, "row_rule": "column"}],
        ),
        "methods[0].row_rule = 'column'",
    ),
    (
        {k: v for k, v in DECENTRALIZED.items() if k != "graphs"},
        "gradient_tracking is decentralized and needs a [graphs] table",
    ),
]


@pytest.mark.parametrize(("raw", "needle"), BAD, ids=[needle for _, needle in BAD])
def test_config_errors_are_one_line_naming_the_key(raw, needle):
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    message = str(caught.value)
    assert needle in message and "\n" not in message


def test_old_participation_kinds_warn_and_resolve_to_the_class_names():
    from stochmix._names import RenamedWarning

    for old, new in (("uniform", "uniform_sample"), ("weighted", "weighted_sample")):
        table = {"kind": old, "size": 2}
        if old == "weighted":
            table["weights"] = [1.0] * 10
        raw = {
            "rounds": 2,
            "problem": {"kind": "quadratic", "n_clients": 10, "dim": 3},
            "participation": table,
            "methods": [{"kind": "fedavg", "lr": 0.01}],
        }
        with pytest.warns(RenamedWarning, match=f"write '{new}'"):
            exp = config.parse(raw)
        assert exp.resolved()["participation"]["kind"] == new
