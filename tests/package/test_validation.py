"""Bad input at every public entry gets one clear error naming the argument.

``BAD_INPUTS`` is the table the README shows a selection of (section "Bad input"); every
row is tested: the call raises the row's exception type, and its message matches the row's
regular expression, which names the argument (and, for the audit rows, the bad value).
Random configurations either run or fail with a one-line error, never a crash.
"""

import atexit
import functools
import re
import shutil
import tempfile
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import config as jaxtyping_config

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import analysis, mixing, participation, problems, timing
from stochmix.cli import build_parser, main
from stochmix.config import ConfigError, parse
from stochmix.mixing.checks import stochasticity_problem
from tests import examples

Q = problems.Quadratic.random(4, 2, seed=0)
FULL = participation.Full(4)


SPECTRUM_NODES = re.escape(
    "--nodes must be <= 1000 with --graph, got 100000: a product of steps is a dense n x n"
    " matrix (80 GB here) whose summary costs O(n^3)"
)


@functools.cache
def _small_result():
    return sm.run(alg.FedAvg(0.1), Q, FULL, 3, progress=False)


SPECTRUM_CONFIG = b"""
[problem]
kind = "quadratic"
n_clients = 6
dim = 2

[graphs]
kind = "cycle"

[[methods]]
kind = "dgd"
lr = 0.1
"""


def _spectrum(*argv):
    """``stochmix spectrum argv`` as the command runs it, raising its error (``main``
    prints it as one line and exits 2)."""
    args = build_parser().parse_args(["spectrum", *argv])
    return args.func(args)


BAD_INPUTS = [
    # (what, call, error, message contains)
    (
        "weights of the wrong length",
        lambda: mixing.average(np.ones(3, bool), np.ones(4)),
        (ValueError, TypeError),
        "weights",
    ),
    (
        "a mask that is not a vector",
        lambda: mixing.collect(np.ones((2, 2), bool)),
        (ValueError, TypeError),
        "mask",
    ),
    ("mask that is not boolean", lambda: mixing.assign(np.array([1, 0, 1])), TypeError, "mask"),
    (
        "negative averaging weights",
        lambda: mixing.average(np.ones(3, bool), np.array([0.5, -0.1, 0.6])),
        ValueError,
        "weights",
    ),
    (
        "server_lr <= 0",
        lambda: mixing.average(np.ones(2, bool), np.ones(2), 0.0),
        ValueError,
        "server_lr",
    ),
    (
        "matrix claimed row-stochastic that is not",
        lambda: mixing.check_row_stochastic(np.array([[0.5, 0.2], [0.0, 1.0]]), name="R"),
        ValueError,
        "R",
    ),
    (
        "probabilities outside (0, 1]",
        lambda: participation.Bernoulli(np.array([0.5, 1.5])),
        ValueError,
        "1.5",
    ),
    ("sample size larger than N", lambda: participation.UniformSample(4, 9), ValueError, "size"),
    (
        "an unknown way to draw participants",
        lambda: participation.Bernoulli(0.5, n_clients=4, draws="exact"),
        ValueError,
        "draws.*'exact'",
    ),
    ("trace of the wrong dtype", lambda: participation.Trace(np.ones((3, 4))), TypeError, "masks"),
    (
        "centers and Hessians that disagree",
        lambda: problems.Quadratic(np.zeros((3, 2)), np.ones((4, 2))),
        (ValueError, TypeError),
        "hessians",
    ),
    (
        "a Hessian that is not PSD",
        lambda: problems.Quadratic(np.zeros((1, 2)), np.array([[[1.0, 0], [0, -1.0]]])),
        ValueError,
        "hessians",
    ),
    ("negative ridge", lambda: problems.LeastSquares.random(3, 2, reg=-1.0), ValueError, "reg"),
    ("step size <= 0", lambda: alg.FedAvg(0.0), ValueError, "lr"),
    ("unknown weight rule", lambda: alg.FedAvg(0.1, weights="fair"), ValueError, "weights"),
    ("beta outside [0, 1]", lambda: alg.FedStale(0.1, beta=2.0), ValueError, "beta"),
    ("non-integer local_steps", lambda: alg.FOCUS(0.1, 2.5), TypeError, "local_steps"),
    (
        "unbiased weights, marginals unknown",
        lambda: sm.run(
            alg.FedAvg(0.1, weights="unbiased"), Q, participation.Trace(np.ones((2, 4), bool)), 2
        ),
        ValueError,
        "probabilities",
    ),
    (
        "participation over the wrong N",
        lambda: sm.run(alg.FedAvg(0.1), Q, participation.Full(5), 2),
        ValueError,
        "participation",
    ),
    (
        "x0 of the wrong shape",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, x0=np.ones(3)),
        ValueError,
        "x0",
    ),
    (
        "complex x0",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, x0=np.ones(2) * 1j),
        TypeError,
        "x0 must hold real numbers",
    ),
    (
        "backend=None",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, backend=None),
        TypeError,
        "backend must be",
    ),
    (
        "problem and participation swapped",
        lambda: sm.run(alg.FedAvg(0.1), FULL, Q, 2),
        TypeError,
        "problem must be a stochmix problem",
    ),
    (
        "progress that is not a flag",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, progress=1),
        ValueError,
        "progress must be",
    ),
    (
        "NaN in x0",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, x0=np.array([0.0, np.nan])),
        ValueError,
        "x0",
    ),
    (
        "unknown backend",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, backend="jax"),
        ValueError,
        "backend",
    ),
    (
        "unknown metric",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, metrics=("speed",)),
        ValueError,
        "metrics",
    ),
    (
        "a decentralized method under an activation that breaks its mixing",
        lambda: sm.run(
            alg.GradientTracking(0.1, mixing.OnePeerExponential(4), rule="natural"),
            Q,
            participation.Bernoulli(np.full(4, 0.5)),
            3,
        ),
        ValueError,
        "participation: GradientTracking needs doubly stochastic mixing",
    ),
    (
        'compiled that is not True, False or "auto"',
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, compiled="yes"),
        ValueError,
        "compiled",
    ),
    (
        "compiled=True for a problem without a compiled gradient",
        lambda: sm.run(alg.FedAvg(0.1), Q.noisy(0.1), FULL, 2, compiled=True),
        ValueError,
        "compiled=True",
    ),
    (
        "options with a backend object",
        lambda: sm.run(
            alg.FedAvg(0.1), Q, FULL, 2, backend=sm.engine.NumpyBackend(), compiled=True
        ),
        ValueError,
        "compiled",
    ),
    (
        "compiled = true in a config with the torch backend",
        lambda: parse(
            {
                "backend": "torch",
                "compiled": True,
                "problem": {"kind": "quadratic", "n_clients": 3, "dim": 2},
                "participation": {"kind": "full"},
                "methods": [{"kind": "fedavg", "lr": 0.1}],
            }
        ),
        ConfigError,
        "compiled",
    ),
    (
        "a config with an unknown key",
        lambda: parse({"rounds": 3, "colour": 1}),
        ConfigError,
        "colour",
    ),
    # the rows the README adds for the audit (each message as the README shows it)
    (
        "a string where a number goes",
        lambda: participation.Bernoulli.heterogeneous(20, "0.1", 0.9),
        TypeError,
        re.escape("low must be a real number, got '0.1'"),
    ),
    (
        "a bool where a number goes",
        lambda: participation.UniformSample(True, 2),
        TypeError,
        re.escape("n_clients must be an integer, got True"),
    ),
    (
        "booleans where probabilities go",
        lambda: participation.Bernoulli(p=[True, True]),
        TypeError,
        re.escape("p must hold real numbers, got dtype bool: [True, True]"),
    ),
    (
        "complex probabilities",
        lambda: participation.Bernoulli(np.array([0.5 + 1j, 0.5])),
        TypeError,
        re.escape("p must hold real numbers, got dtype complex128: array([0.5+1.j, 0.5+0.j])"),
    ),
    (
        "a ragged list",
        lambda: participation.Bernoulli([[0.5], [0.5, 0.5]]),
        ValueError,
        re.escape("p must be a rectangular array, got a ragged list: [[0.5], [0.5, 0.5]]"),
    ),
    (
        "a negative seed",
        lambda: problems.Quadratic.random(4, 2, seed=-1),
        ValueError,
        re.escape("seed must be >= 0, got -1"),
    ),
    (
        "a float seed",
        lambda: FULL.sample(3, seed=2.5),
        TypeError,
        re.escape("seed must be an integer >= 0, a SeedSequence, a Generator or None, got 2.5"),
    ),
    (
        "float client indices",
        lambda: mixing.assign_rows([0.7], 4),
        TypeError,
        re.escape("participants must hold integers, got dtype float64: [0.7]"),
    ),
    (
        "a client index out of range",
        lambda: mixing.assign_rows([0, 5], 4),
        ValueError,
        re.escape("participants must lie in [0, 4); got entry 1 = 5"),
    ),
    (
        "a repeated client index",
        lambda: mixing.collect_rows([1, 1], 4),
        ValueError,
        re.escape("participants must be sorted and distinct; entry 1 = 1 follows 1"),
    ),
    (
        "a repeated participant",
        lambda: analysis.round_operator(alg.FOCUS(0.1), Q, [2, 2]),
        ValueError,
        re.escape("participants must be distinct; 2 appears more than once"),
    ),
    (
        "a truthy flag",
        lambda: problems.Logistic.random(4, 2, intercept="yes"),
        TypeError,
        re.escape("intercept must be True or False, got 'yes'"),
    ),
    (
        "a name of the wrong type",
        lambda: alg.DGD(0.1, mixing.OnePeerExponential(4), rule=3),
        TypeError,
        re.escape(
            "rule must be one of ['column', 'fastest', 'fdla', 'metropolis', 'natural', 'row'],"
            " got 3"
        ),
    ),
    (
        "NaN in the data",
        lambda: problems.Quadratic(np.array([[0.0, np.nan]]), np.ones((1, 2))),
        ValueError,
        re.escape("centers must be finite; entry (0, 1) is nan"),
    ),
    (
        "boolean class labels",
        lambda: problems.Logistic(np.ones((2, 3, 2)), np.ones((2, 3), bool), 0.1),
        TypeError,
        re.escape("labels must hold integer class labels, got dtype bool"),
    ),
    (
        "a matrix with complex entries",
        lambda: mixing.spectral_radius(np.eye(2) * 1j),
        TypeError,
        re.escape("W must have real entries, got dtype complex128"),
    ),
    (
        "a NaN entry for a graph",
        lambda: mixing.matrix_to_graph(np.array([[np.nan, 0.0], [0.0, 1.0]])),
        ValueError,
        re.escape("W must be finite; entry [0, 0] is nan"),
    ),
    (
        "a method's probabilities above 1",
        lambda: alg.FedStale(0.1, probabilities=[0.5, 1.5]),
        ValueError,
        re.escape("probabilities must lie in (0, 1]; entry 1 is 1.5"),
    ),
    (
        "shifts that are not a sequence",
        lambda: mixing.DirectedRingSequence(8, shifts=3),
        TypeError,
        re.escape("shifts must be a sequence of integer shifts, got 3"),
    ),
    (
        "partition parts that overlap",
        lambda: problems.label_swap(np.arange(6) % 2, [np.arange(4), np.arange(3, 6)], [0], 0.5),
        ValueError,
        re.escape("clients_partition must not share samples; sample 3 is in 2 parts"),
    ),
    # issue 24's residue: each input once silent or unclear, now one error naming the
    # argument and the value
    (
        "a negative number of groups",
        lambda: participation.Periodic(-2, 3, n_clients=4),
        ValueError,
        re.escape("groups must be >= 1, got -2"),
    ),
    (
        "a Periodic size larger than every group",
        lambda: participation.Periodic(2, 3, n_clients=4, size=5),
        ValueError,
        re.escape("size must be <= 2, the largest group's size, got 5"),
    ),
    (
        "a Periodic size larger than every group of the labels",
        lambda: participation.Periodic([7, 7, 7, 3, 3], 2, size=4),
        ValueError,
        re.escape("size must be <= 3, the largest group's size, got 4"),
    ),
    (
        "spectrum --graph over more nodes than it can handle",
        lambda: _spectrum("--graph", "one_peer_exponential", "--nodes", "100000"),
        ValueError,
        SPECTRUM_NODES,
    ),
    (
        "spectrum --p on a graph without an edge probability",
        lambda: _spectrum("--graph", "cycle", "--p", "0.3"),
        ValueError,
        re.escape(
            "--p applies to random graphs (erdos_renyi, random_directed), not --graph cycle"
            ", got --p 0.3"
        ),
    ),  # fmt: skip
    (
        "spectrum --p out of [0, 1]",
        lambda: _spectrum("--graph", "erdos_renyi", "--p", "1.5"),
        ValueError,
        re.escape("--p must be") + r".*1\.5",
    ),
    (
        "spectrum --drops out of [0, 1]",
        lambda: _spectrum("--graph", "cycle", "--drops", "-0.1"),
        ValueError,
        re.escape("--drops") + r".*-0\.1",
    ),
    (
        "spectrum of a configuration with --nodes",
        lambda: _spectrum(str(_file("graphs.toml", SPECTRUM_CONFIG)), "--nodes", "8"),
        ValueError,
        re.escape("--nodes is set by the configuration") + r".*graphs\.toml, got --nodes 8",
    ),
    (
        "spectrum of a configuration with a bad graphs.kind",
        lambda: _spectrum(str(_file("ring.toml", SPECTRUM_CONFIG.replace(b"cycle", b"ring")))),
        ValueError,
        re.escape(
            "graphs.kind must be one of ['complete', 'cycle', 'directed_ring', "
            "'erdos_renyi', 'one_peer_exponential', 'random_directed'], got 'ring'"
        ),
    ),  # fmt: skip
    (
        "a configuration naming a method kind nobody declares",
        lambda: parse(
            {
                "problem": {"kind": "quadratic", "n_clients": 2, "dim": 1},
                "methods": [{"kind": "my.module:Method", "lr": 0.1}],
            }
        ),
        ConfigError,
        re.escape("methods[0].kind must be one of ['acc_dngd', 'admm', 'adpsgd', ")
        + r".*"
        + re.escape("got 'my.module:Method'"),
    ),  # fmt: skip
    (
        "rounds_to a string",
        lambda: _small_result().rounds_to("x"),
        TypeError,
        re.escape("eps must be a real number, got 'x'"),
    ),
    (
        "rounds_to NaN",
        lambda: _small_result().rounds_to(NAN),
        ValueError,
        re.escape("eps must be finite, got nan"),
    ),
    (
        "rounds_to a negative target",
        lambda: _small_result().rounds_to(-1e-8),
        ValueError,
        re.escape("eps must be > 0, got -1e-08"),
    ),
    (
        "an unknown dtype to run",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, dtype="floaty"),
        TypeError,
        re.escape("dtype must be float32 or float64 (a NumPy dtype, type or name), got 'floaty'"),
    ),
    (
        "an integer dtype to run",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, dtype=np.int32),
        ValueError,
        re.escape("dtype must be float32 or float64, got int32"),
    ),
    (
        "an unknown dtype to the NumPy backend",
        lambda: sm.engine.NumpyBackend(dtype="floaty"),
        TypeError,
        re.escape("dtype must be float32 or float64 (a NumPy dtype, type or name), got 'floaty'"),
    ),
    (
        "compiled=1 to run",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, compiled=1),
        TypeError,
        re.escape('compiled must be True, False or "auto", got 1'),
    ),
    (
        "compiled=0 to run with the torch backend",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, compiled=0, backend="torch"),
        TypeError,
        re.escape('compiled must be True, False or "auto", got 0'),
    ),
    (
        "compiled=1 to the NumPy backend",
        lambda: sm.engine.NumpyBackend(compiled=1),
        TypeError,
        re.escape('compiled must be True, False or "auto", got 1'),
    ),
    (
        "a burn-in longer than the measured rounds",
        lambda: analysis.lyapunov_rate(
            _method(), Q, participation.Bernoulli(P4), rounds=20, burn_in=50, batches=2
        ),
        ValueError,
        re.escape("burn_in must be <= rounds (20, the rounds measured after the burn-in), got 50"),
    ),
    (
        "a fixed point under masks in which nobody participates",
        lambda: analysis.fixed_point_under_pattern(_method(), Q, np.zeros((3, 4), bool)),
        ValueError,
        re.escape(
            "masks must let at least one client participate, got all-empty masks of shape"
            " (3, 4): no client ever participates"
        ),
    ),
    (
        "a periodic rate under masks in which nobody participates",
        lambda: analysis.periodic_rate(_method(), Q, np.zeros((2, 4), bool)),
        ValueError,
        re.escape("masks must let at least one client participate, got all-empty masks of shape"),
    ),
]


# --------------------------------------------------------------------------------- audit
# Every public constructor and function of participation/, mixing/, problems/, analysis/,
# the algorithms' constructors and Result.load, fed the same kinds of bad value: a wrong
# type (a string, a bool, a complex number, None), a wrong shape, a value out of range, a
# non-finite one and, for indices, negative / too large / float / repeated ones. A row
# expects one TypeError or ValueError whose message names the argument and shows the bad
# value. ``SPECS`` (entry, callable, valid keyword arguments, {argument: cases}) also drives
# the hypothesis test in test_bad_input_fuzz.py.

NAN, INF = float("nan"), float("inf")
TMP = Path(tempfile.mkdtemp(prefix="stochmix-bad-input-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def _case(label, value, error, shows=""):
    return (label, value, error, shows)


STRING = _case("a string", "abc", TypeError, "'abc'")
BOOL = _case("a bool", True, TypeError, "True")
COMPLEX = _case("a complex number", 1 + 2j, TypeError, r"1\+2j")
NONE = _case("None", None, TypeError, "None")
NAN_CASE = _case("NaN", NAN, ValueError, "nan")
INF_CASE = _case("inf", INF, ValueError, "inf")


def INT(minimum=1, optional=False, too_large=None):
    """An integer argument: refused as a string, bool, float, complex or below minimum."""
    cases = [
        STRING,
        BOOL,
        _case("a float", 2.5, TypeError, "2.5"),
        _case("an integral float", 2.0, TypeError, "2.0"),
        COMPLEX,
        _case("below the minimum", minimum - 1, ValueError, str(minimum - 1)),
    ]
    if not optional:
        cases.append(NONE)
    if too_large is not None:
        cases.append(_case("too large", too_large, ValueError, str(too_large)))
    return cases


def FLOAT(bad=(), optional=False):
    """A real number: refused as a string, bool, complex, NaN, inf; ``bad`` are values out
    of range."""
    cases = [STRING, BOOL, COMPLEX, NAN_CASE, INF_CASE]
    cases += [_case(f"out of range ({v})", v, ValueError, re.escape(repr(float(v)))) for v in bad]
    if not optional:
        cases.append(NONE)
    return cases


def BOOLEAN(optional=False):
    cases = [_case("a string", "yes", TypeError, "'yes'"), _case("an int", 1, TypeError, "1")]
    if not optional:
        cases.append(NONE)
    return cases


def CHOICE(optional=False):
    cases = [
        _case("an unknown name", "nope", ValueError, "'nope'"),
        _case("an int", 3, TypeError, "3"),
        _case("a list", ["row"], TypeError, r"\['row'\]"),
    ]
    if not optional:
        cases.append(NONE)
    return cases


SEED = [
    _case("negative", -1, ValueError, "-1"),
    _case("a float", 2.5, TypeError, "2.5"),
    STRING,
    BOOL,
    _case("a list", [1, 2], TypeError, r"\[1, 2\]"),
]


def VECTOR(n, bad=(), optional=False, nonfinite=True, fixed=True):
    """A real vector of length n: wrong types, shapes, NaN, and ``bad`` out-of-range ones
    (``fixed``: the length n is all that passes)."""
    cases = [
        STRING,
        _case("booleans", [True] * n, TypeError, "True|bool"),
        _case("complex numbers", np.full(n, 0.5 + 1j), TypeError, r"\dj|complex"),
        _case("strings", ["a"] * n, TypeError, "'a'|<U1"),
        _case("a matrix", np.full((2, n), 0.5), ValueError, rf"\(2, {n}\)"),
        _case("a ragged list", [[0.5], [0.5, 0.5]], ValueError, "ragged|inhomogeneous|shape"),
    ]
    if fixed:
        cases.append(_case("the wrong length", np.full(n + 1, 0.5), ValueError, rf"\({n + 1},\)"))
    if nonfinite:
        cases.append(_case("NaN", [NAN] * n, ValueError, "nan"))
    cases += [_case(f"entry {v}", [v] * n, ValueError, re.escape(repr(float(v)))) for v in bad]
    if not optional:
        cases.append(NONE)
    return cases


def ARRAY(shape, optional=False, ragged=True, wrong_shape=True, nonfinite=True):
    """A real array of a given shape (2-d or more)."""
    wrong = (shape[0] + 1, *shape[1:])
    cases = [
        STRING,
        _case("booleans", np.ones(shape, bool), TypeError, "bool|True"),
        _case("complex numbers", np.ones(shape) * (1 + 1j), TypeError, r"\dj|complex"),
        _case("a vector", np.ones(3), ValueError, r"\(3,\)"),
    ]
    if wrong_shape:
        cases.append(_case("the wrong shape", np.ones(wrong), ValueError, re.escape(str(wrong))))
    if nonfinite:
        cases.append(_case("NaN", np.full(shape, NAN), ValueError, "nan|finite"))
    if ragged:
        cases.append(
            _case("a ragged list", [[1.0], [1.0, 2.0]], ValueError, "ragged|inhomogeneous|shape")
        )
    return cases + ([] if optional else [NONE])


def INDICES(n, repeats=False, optional=False):
    """Client indices in [0, n): integers only, in range, no repeats (unless allowed)."""
    cases = [
        _case("floats", [0.7], TypeError, "0.7|float"),
        _case("a negative index", [-1], ValueError, "-1"),
        _case("an index too large", [n], ValueError, str(n)),
        _case("strings", ["a"], TypeError, "'a'|<U1"),
        _case("booleans", [True, False], TypeError, "True|bool"),
        _case("a matrix", [[0, 1]], ValueError, r"\(1, 2\)"),
        STRING,
    ]
    if not repeats:
        cases.append(_case("a repeated index", [1, 1], ValueError, "1"))
    if not optional:
        cases.append(NONE)
    return cases


def MASKS_2D(n):
    """A (rounds, n) boolean array."""
    return [
        _case("integers", np.ones((2, n), int), TypeError, "int"),
        _case("floats", np.ones((2, n)), TypeError, "float"),
        _case("a vector", np.ones(n, bool), ValueError, rf"\({n},\)"),
        _case("no rounds", np.ones((0, n), bool), ValueError, rf"\(0, {n}\)"),
        _case("a string", "abc", TypeError, "'abc'|<U3"),
        NONE,
    ]


def MASK(n):
    return [
        _case("integers", [1, 0] * (n // 2), TypeError, "int"),
        _case("floats", [0.5] * n, TypeError, "float"),
        _case("a matrix", np.ones((2, 2), bool), ValueError, r"\(2, 2\)"),
        _case("a string", "abc", TypeError, "'abc'|<U3"),
        NONE,
    ]


def MATRIX(square=True, optional=False, lists=False, nonfinite=True):
    """A dense or sparse matrix; ``lists``: nested lists pass (else they are refused);
    ``nonfinite``: a NaN entry is refused (the ``is_*`` tests answer False instead)."""
    cases = [
        STRING,
        _case("booleans", np.eye(2, dtype=bool), TypeError, "bool"),
        _case("complex entries", np.eye(2) * (1 + 1j), TypeError, "complex"),
        _case("a vector", np.ones(2), ValueError, r"\(2,\)"),
    ]
    if nonfinite:
        cases.append(_case("NaN", np.array([[NAN, 0.0], [0.0, 1.0]]), ValueError, "nan|finite"))
    if not lists:
        cases.append(_case("a list", [[1.0, 0.0], [0.0, 1.0]], TypeError, "list"))
    if square:
        cases.append(_case("a non-square matrix", np.ones((2, 3)) / 3, ValueError, r"\(2, 3\)"))
    if not optional:
        cases.append(NONE)
    return cases


GRAPH = [
    STRING,
    NONE,
    _case("a matrix", np.eye(3), TypeError, "ndarray"),
    _case("string nodes", nx.path_graph(["a", "b"]), TypeError, "'a'"),
    _case("a node outside 0..n-1", nx.Graph([(0, 5)]), ValueError, "5"),
]


# small objects the rows use
G3 = nx.cycle_graph(3)
W2 = np.full((2, 2), 0.5)
SEQ = mixing.OnePeerExponential(4)
MASK4 = np.array([True, False, True, False])
P4 = np.full(4, 0.5)
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
PARTS = [np.arange(0, 6), np.arange(6, 12)]
LS = problems.LeastSquares.random(4, 2, rows_per_client=3, seed=0)
LG = problems.Logistic.random(4, 2, rows_per_client=5, seed=0)
FEATURES = np.ones((4, 3, 2)) + np.arange(24).reshape(4, 3, 2) % 5
STACKED = np.arange(24.0).reshape(12, 2) % 7
MASKS = np.array([[True, True, False, False], [False, False, True, True]])
AMAP = analysis.AffineMap(0.5 * sp.identity(4), np.zeros(4), (2, 2))
ZEROS_HESSIAN = np.zeros((4, 2))


# a method's probabilities: p_i (their number is known only at the run), or "fedau"
PROBABILITIES = [
    c for c in VECTOR(4, bad=(0.0, 1.5), optional=True, fixed=False) if c[0] != "a string"
] + [_case("an unknown name", "nope", ValueError, "'nope'"), BOOL]


def _method():
    return alg.FOCUS(0.05)


SPECS = [
    # ----------------------------------------------------------------- participation
    ("Full", participation.Full, dict(n_clients=4), {"n_clients": INT()}),
    (
        "UniformSample",
        participation.UniformSample,
        dict(n_clients=4, size=2),
        {"n_clients": INT(), "size": INT(too_large=9), "draws": CHOICE()},
    ),
    (
        "WeightedSample",
        participation.WeightedSample,
        dict(weights=[1.0, 2.0, 3.0, 4.0], size=2),
        {"weights": VECTOR(4, bad=(-1.0,), fixed=False), "size": INT(too_large=5)},
    ),
    (
        "Bernoulli",
        participation.Bernoulli,
        dict(p=P4),
        {
            "p": VECTOR(4, bad=(0.0, 1.5), fixed=False),
            "n_clients": INT(optional=True, too_large=5),
            "draws": CHOICE(),
        },
    ),
    (
        "Bernoulli (scalar p)",
        participation.Bernoulli,
        dict(p=0.5, n_clients=4),
        {"p": FLOAT(bad=(0.0, 1.5)), "n_clients": INT(optional=True), "draws": CHOICE()},
    ),
    (
        "Bernoulli.heterogeneous",
        participation.Bernoulli.heterogeneous,
        dict(n_clients=4, low=0.1, high=0.9, seed=0),
        {
            "n_clients": INT(),
            "low": FLOAT(bad=(0.0, 1.5)),
            "high": FLOAT(bad=(0.0, 1.5, 0.05)),
            "seed": SEED,
            "draws": CHOICE(),
        },
    ),
    (
        "Regularized",
        participation.Regularized,
        dict(n_clients=4, size=2),
        {"n_clients": INT(), "size": INT(too_large=9)},
    ),
    (
        "Periodic",
        participation.Periodic,
        dict(groups=2, active_rounds=3, n_clients=4),
        {
            "groups": INT(too_large=5)[:5]
            + [
                _case("float labels", [0.5, 0.5, 1.5, 1.5], TypeError, "float"),
                _case("a matrix of labels", [[0, 1], [0, 1]], ValueError, r"\(2, 2\)"),
                _case("an empty list", [], ValueError, r"\(0,\)"),
                _case("None", None, TypeError, "None"),
            ],
            "active_rounds": INT(),
            "offset": INT(minimum=0, optional=True, too_large=6),
            "n_clients": INT(optional=True),
            "p_available": FLOAT(bad=(0.0, 1.5)),
            "size": INT(optional=True),
            "selection": CHOICE(),
        },
    ),
    (
        "Periodic.wang_ji",
        participation.Periodic.wang_ji,
        dict(majority_labels=np.arange(10), active_rounds=3, size=2),
        {
            "majority_labels": [
                _case("floats", np.full(10, 0.5), TypeError, "float"),
                _case("negative labels", -np.arange(10), ValueError, "-9"),
                _case("a matrix", np.zeros((2, 5), int), ValueError, r"\(2, 5\)"),
                STRING,
            ],
            "n_clients": INT(),
            "labels_per_group": INT(),
            "active_rounds": INT(),
            "size": INT(),
            "offset": INT(minimum=0, optional=True),
        },
    ),
    (
        "Markov",
        participation.Markov,
        dict(p_on=0.5, p_off=0.5, n_clients=4),
        {
            "p_on": FLOAT(bad=(0.0, 1.5))
            + [_case("a vector of the wrong length", [0.5] * 3, ValueError, r"\(3,\)")],
            "p_off": FLOAT(bad=(-0.5, 1.5))
            + [_case("booleans", [True] * 4, TypeError, "True|bool")],
            "n_clients": INT(optional=True),
        },
    ),
    (
        "Trace",
        participation.Trace,
        dict(masks=np.ones((3, 4), bool)),
        {
            "masks": [
                _case("floats", np.ones((3, 4)), TypeError, "float"),
                _case("a vector", np.ones(4, bool), ValueError, r"\(4,\)"),
                _case("no rounds", np.ones((0, 4), bool), ValueError, r"\(0, 4\)"),
                _case("a ragged list", [[True], [True, False]], ValueError, "ragged|inhomog"),
                _case("an int", 3, TypeError, "3|int"),
                NONE,
            ],
            "repeat": BOOLEAN(),
        },
    ),
    ("masks", participation.Full(4).masks, dict(seed=0), {"seed": SEED}),
    ("participants", participation.Full(4).participants, dict(seed=0), {"seed": SEED}),
    (
        "sample",
        participation.Full(4).sample,
        dict(rounds=3, seed=0),
        {"rounds": INT(), "seed": SEED},
    ),
    (
        "estimate_probabilities",
        participation.Bernoulli(P4).estimate_probabilities,
        dict(rounds=3, seed=0),
        {"rounds": INT(), "seed": SEED},
    ),
    (
        "empirical_probabilities",
        participation.empirical_probabilities,
        dict(masks=MASKS),
        {"masks": MASKS_2D(4)},
    ),
    (
        "participation_intervals",
        participation.participation_intervals,
        dict(masks=MASKS),
        {"masks": MASKS_2D(4)},
    ),
    ("mean_intervals", participation.mean_intervals, dict(masks=MASKS), {"masks": MASKS_2D(4)}),
    (
        "period_averaged_weights",
        participation.period_averaged_weights,
        dict(weights_per_round=np.ones((4, 3)), period=2),
        {"weights_per_round": ARRAY((4, 3), wrong_shape=False), "period": INT(too_large=5)},
    ),
    (
        "weight_variance",
        participation.weight_variance,
        dict(weights_per_round=np.ones((4, 3)), period=2, center=None),
        {"center": FLOAT(optional=True), "period": INT()},
    ),
    (
        "uniform_weights",
        participation.uniform_weights,
        dict(participants=np.array([0, 2])),
        {"participants": [c for c in INDICES(4) if c[0] != "an index too large"]},
    ),
    (
        "unbiased_weights",
        participation.unbiased_weights,
        dict(participants=np.array([0, 2]), probabilities=P4, n_clients=4),
        {
            "participants": INDICES(4),
            "probabilities": VECTOR(4, bad=(0.0, 1.5)),
            "n_clients": INT(),
        },
    ),
    (
        "FedAUEstimator",
        participation.FedAUEstimator,
        dict(n_clients=4, cutoff=50, timing="authors"),
        {"n_clients": INT(), "cutoff": INT(), "timing": CHOICE()},
    ),
    (
        "FedAUEstimator.update",
        lambda **kw: participation.FedAUEstimator(4).update(**kw),
        dict(r=0, participants=np.array([0, 2])),
        {"r": INT(minimum=0), "participants": INDICES(4)},
    ),
    # ------------------------------------------------------------------------ mixing
    ("assign", mixing.assign, dict(mask=MASK4), {"mask": MASK(4)}),
    ("collect", mixing.collect, dict(mask=MASK4), {"mask": MASK(4)}),
    ("local_diagonal", mixing.local_diagonal, dict(mask=MASK4), {"mask": MASK(4)}),
    (
        "average",
        mixing.average,
        dict(mask=MASK4, weights=P4, server_lr=1.0),
        {"mask": MASK(4), "weights": VECTOR(4, bad=(-1.0,)), "server_lr": FLOAT(bad=(0.0,))},
    ),
    *[
        (
            f"{builder.__name__}",
            builder,
            dict(participants=np.array([0, 2]), n_clients=4),
            {
                "participants": INDICES(4)
                + [_case("unsorted indices", [2, 0], ValueError, "sorted")],
                "n_clients": INT(minimum=0),
            },
        )
        for builder in (mixing.assign_rows, mixing.collect_rows, mixing.local_diagonal_rows)
    ],
    (
        "average_rows",
        mixing.average_rows,
        dict(participants=np.array([0, 2]), weights=np.array([0.5, 0.5]), n_clients=4),
        {
            "participants": INDICES(4),
            "weights": VECTOR(2, bad=(-1.0,)),
            "n_clients": INT(minimum=0),
            "server_lr": FLOAT(bad=(0.0,)),
        },
    ),
    (
        "RowSparse",
        mixing.RowSparse,
        dict(size=3, rows=np.array([0]), values=sp.csr_array(np.ones((1, 3)))),
        {
            "size": INT(minimum=0),
            "rows": INDICES(3)[:6],
            "values": [
                STRING,
                _case("the wrong shape", sp.csr_array(np.ones((2, 3))), ValueError, r"\(2, 3\)"),
            ],
            "identity_elsewhere": BOOLEAN(),
        },
    ),
    (
        "RowSparse.from_entries",
        mixing.RowSparse.from_entries,
        dict(size=3, rows=[0, 1], cols=[1, 2], vals=[0.5, 0.5]),
        {
            "size": INT(minimum=0),
            "rows": INDICES(3, repeats=True)[:6],
            "cols": INDICES(3, repeats=True)[:6],
            "vals": VECTOR(2)[:4] + [NONE],
            "identity_elsewhere": BOOLEAN(),
        },
    ),
    (
        "graph_to_matrix",
        mixing.graph_to_matrix,
        dict(graph=G3),
        {
            "graph": GRAPH
            + [
                _case(
                    "a weight that is a string",
                    nx.DiGraph([(0, 1, {"weight": "x"})]),
                    TypeError,
                    "'x'",
                ),
                _case("a NaN weight", nx.DiGraph([(0, 1, {"weight": NAN})]), ValueError, "nan"),
                _case("a complex weight", nx.DiGraph([(0, 1, {"weight": 1j})]), TypeError, "1j"),
                _case("a bool weight", nx.DiGraph([(0, 1, {"weight": True})]), TypeError, "True"),
            ],
            "n_nodes": INT(minimum=0, optional=True)[:5] + [_case("too small", 2, ValueError, "2")],
        },
    ),
    ("matrix_to_graph", mixing.matrix_to_graph, dict(W=W2), {"W": MATRIX()}),
    (
        "StaticSequence",
        mixing.StaticSequence,
        dict(graph=G3),
        {
            "graph": GRAPH
            + [_case("a multigraph", nx.MultiGraph([(0, 1)]), TypeError, "multigraph")],
            "n_nodes": INT(optional=True)[:5] + [_case("too small", 2, ValueError, "2")],
        },
    ),
    (
        "PeriodicSequence",
        mixing.PeriodicSequence,
        dict(graphs=[G3, G3]),
        {
            "graphs": [
                _case("an empty list", [], ValueError, r"\[\]|at least one"),
                _case("an int", 3, TypeError, "3|int"),
                _case("a single graph", G3, TypeError, "Graph"),
                _case("a list holding a string", [G3, "x"], TypeError, "'x'|str"),
                STRING,
                NONE,
            ],
            "n_nodes": INT(optional=True)[:5] + [_case("too small", 2, ValueError, "2")],
        },
    ),
    (
        "DirectedRingSequence",
        mixing.DirectedRingSequence,
        dict(n_nodes=4, shifts=(1,)),
        {
            "n_nodes": INT(),
            "shifts": [
                _case("an int", 3, TypeError, "3"),
                _case("an empty list", [], ValueError, r"\[\]|at least one"),
                _case("a float shift", [1.5], TypeError, "1.5"),
                _case("a bool shift", [True], TypeError, "True"),
                STRING,
                NONE,
            ],
        },
    ),
    ("OnePeerExponential", mixing.OnePeerExponential, dict(n_nodes=4), {"n_nodes": INT()}),
    (
        "RandomSequence",
        mixing.RandomSequence,
        dict(n_nodes=4, seed=0),
        {
            "n_nodes": INT(),
            "kind": CHOICE(),
            "p": FLOAT(bad=(-0.5, 1.5), optional=True),
            "seed": SEED,
            "connected": BOOLEAN(),
        },
    ),
    (
        "MessageDrops",
        mixing.MessageDrops,
        dict(graphs=SEQ, probability=0.1, seed=0),
        {
            "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
            "probability": FLOAT(bad=(-0.5, 1.5)),
            "model": CHOICE(),
            "symmetric": BOOLEAN(),
            "lost_weight": CHOICE(),
            "seed": SEED,
        },
    ),
    (
        "MessageDrops (gilbert_elliott)",
        mixing.MessageDrops,
        dict(graphs=SEQ, model="gilbert_elliott", p_good_to_bad=0.1, p_bad_to_good=0.5, seed=0),
        {
            "p_good_to_bad": FLOAT(bad=(-0.5, 1.5)),
            "p_bad_to_good": FLOAT(bad=(0.0, 1.5)),
            "drop_in_good": FLOAT(bad=(-0.5, 1.5)),
            "drop_in_bad": FLOAT(bad=(-0.5, 1.5)),
        },
    ),
    (
        "GraphSequence.matrix",
        SEQ.matrix,
        dict(k=0, rule="row"),
        {"k": INT(minimum=0), "rule": CHOICE()},
    ),
    ("GraphSequence.graph", SEQ.graph, dict(k=0), {"k": INT(minimum=0)}),
    ("GraphSequence.adjacency", SEQ.adjacency, dict(k=0), {"k": INT(minimum=0)}),
    (
        "StaticSequence.graph",
        mixing.StaticSequence(G3).graph,
        dict(k=0),
        {"k": INT(minimum=0)},
    ),
    (
        "RandomSequence.edges",
        mixing.RandomSequence(4, seed=0).edges,
        dict(k=0),
        {"k": INT(minimum=0)},
    ),
    (
        "is_strongly_connected_union",
        mixing.is_strongly_connected_union,
        dict(seq=SEQ, start=0, length=2),
        {"seq": [STRING, NONE], "start": INT(minimum=0), "length": INT()},
    ),
    *[
        (
            check.__name__,
            check,
            dict(W=W2),
            {
                "W": MATRIX(square=False),
                "atol": FLOAT(bad=(-1.0,)),
                "name": [_case("an int", 3, TypeError, "3"), NONE],
            },
        )
        for check in (
            mixing.check_row_stochastic,
            mixing.check_column_stochastic,
            mixing.check_doubly_stochastic,
            mixing.check_rows_sum_to_one,
            mixing.check_columns_sum_to_one,
        )
    ],
    *[
        (
            test.__name__,
            test,
            dict(W=W2),
            {"W": MATRIX(square=False, nonfinite=False), "atol": FLOAT(bad=(-1.0,))},
        )
        for test in (
            mixing.is_row_stochastic,
            mixing.is_column_stochastic,
            mixing.is_doubly_stochastic,
            mixing.rows_sum_to_one,
            mixing.columns_sum_to_one,
        )
    ],
    (
        "stochasticity_problem",
        stochasticity_problem,
        dict(W=W2, kind="row"),
        {"W": MATRIX(square=False, nonfinite=False), "kind": CHOICE(), "atol": FLOAT(bad=(-1.0,))},
    ),
    (
        "eigenvalues",
        mixing.eigenvalues,
        dict(W=W2),
        {"W": MATRIX(), "k": INT(optional=True, too_large=3), "method": CHOICE()},
    ),
    *[
        (
            fn.__name__,
            fn,
            dict(W=W2),
            {"W": MATRIX(), "method": CHOICE(), "atol": FLOAT(bad=(-1.0,))},
        )
        for fn in (
            mixing.spectral_radius,
            mixing.second_largest_modulus,
            mixing.spectral_gap,
            mixing.ergodicity_coefficient,
            mixing.mixing_summary,
        )
    ],
    *[
        (
            fn.__name__,
            fn,
            dict(W=W2),
            {"W": MATRIX(), "side": CHOICE(), "method": CHOICE(), "atol": FLOAT(bad=(-1.0,))},
        )
        for fn in (mixing.perron_vector, mixing.stationary_distributions)
    ],
    (
        "consensus_contraction",
        mixing.consensus_contraction,
        dict(W=W2),
        {"W": MATRIX(), "pi": VECTOR(2, optional=True), "method": CHOICE()},
    ),
    (
        "product",
        mixing.product,
        dict(matrices=[W2, W2]),
        {
            "matrices": [
                _case("an int", 3, TypeError, "3|int"),
                _case("an empty list", [], ValueError, "at least one"),
                _case("a list holding a string", [W2, "abc"], TypeError, "'abc'|str"),
                _case("matrices of different shapes", [W2, np.eye(3)], ValueError, r"\(3, 3\)"),
                STRING,
                NONE,
            ]
        },
    ),
    (
        "sequence_product",
        mixing.sequence_product,
        dict(sequence=SEQ, start=0, length=2),
        {
            "sequence": [STRING, NONE],
            "start": INT(minimum=0),
            "length": INT(),
            "rule": CHOICE(),
        },
    ),
    (
        "expected_matrix",
        mixing.expected_matrix,
        dict(builder=mixing.assign, process_or_masks=MASKS),
        {
            "builder": [STRING, NONE],
            "process_or_masks": MASK(4)[:2] + [STRING, NONE],
            "rounds": INT(optional=True, too_large=3),
            "seed": SEED,
            "std_error": BOOLEAN(),
        },
    ),
    *[
        (fn.__name__, fn, dict(p=P4), {"p": VECTOR(4, bad=(-0.5, 1.5), fixed=False)})
        for fn in (mixing.expected_assign, mixing.expected_collect, mixing.expected_local_diagonal)
    ],
    (
        "expected_average",
        mixing.expected_average,
        dict(p=P4, weights=P4),
        {
            "p": VECTOR(4, bad=(-0.5, 1.5)),
            "weights": VECTOR(4, bad=(-1.0,)),
            "server_lr": FLOAT(bad=(0.0,)),
        },
    ),
    (
        "summary_table",
        mixing.summary_table,
        dict(matrices={"W": W2}),
        {
            "matrices": [
                _case("a list", [W2], TypeError, "list"),
                _case("a mapping to a string", {"W": "abc"}, TypeError, "'abc'|str"),
                _case("a mapping to a vector", {"W": np.ones(2)}, ValueError, r"\(2,\)"),
                NONE,
            ],
            "method": CHOICE(),
        },
    ),
    (
        "star_graph",
        mixing.star_graph,
        dict(mask=MASK4, block="average", weights=P4),
        {
            "mask": MASK(4),
            "block": CHOICE(),
            "weights": VECTOR(4, bad=(-1.0,), optional=True)
            + [_case("None (required for the average)", None, ValueError, "None")],
            "server_lr": FLOAT(bad=(0.0,)),
        },
    ),
    *[
        (
            rule.__name__,
            rule,
            dict(graph=G3),
            {
                "graph": GRAPH,
                "n_nodes": INT(optional=True)[:5] + [_case("too small", 2, ValueError, "2")],
            },
        )
        for rule in (
            mixing.metropolis_hastings,
            mixing.uniform_in_neighbors,
            mixing.uniform_out_neighbors,
        )
    ],
    # ---------------------------------------------------------------------- problems
    (
        "Quadratic",
        problems.Quadratic,
        dict(centers=np.zeros((4, 2)), hessians=np.ones((4, 2))),
        {
            "centers": ARRAY((4, 2)),
            "hessians": ARRAY((4, 2))
            + [_case("a negative diagonal", -np.ones((4, 2)), ValueError, "-1.0")],
        },
    ),
    (
        "Quadratic.random",
        problems.Quadratic.random,
        dict(n_clients=4, dim=2, seed=0),
        {
            "n_clients": INT(),
            "dim": INT(),
            "diagonal": BOOLEAN(),
            "condition": FLOAT(bad=(0.5,)),
            "heterogeneity": FLOAT(bad=(-1.0,)),
            "seed": SEED,
        },
    ),
    (
        "LeastSquares",
        problems.LeastSquares,
        dict(features=FEATURES, targets=np.ones((4, 3))),
        {
            "features": ARRAY((4, 3, 2), ragged=False, wrong_shape=False),
            "targets": ARRAY((4, 3), ragged=False),
            "reg": FLOAT(bad=(-1.0,)),
            "form": CHOICE(),
        },
    ),
    (
        "LeastSquares.from_stacked",
        problems.LeastSquares.from_stacked,
        dict(features=STACKED, targets=np.ones(12), counts=np.full(4, 3)),
        {
            "features": ARRAY((12, 2), wrong_shape=False),
            "targets": VECTOR(12),
            "counts": [
                _case("floats", np.full(4, 3.0), TypeError, "float"),
                _case("booleans", np.ones(12, bool), TypeError, "bool"),
                _case("a zero count", [0, 4, 4, 4], ValueError, "0"),
                _case("the wrong total", [3, 3, 3, 4], ValueError, "13"),
                STRING,
                NONE,
            ],
            "reg": FLOAT(bad=(-1.0,)),
            "form": CHOICE(),
        },
    ),
    (
        "LeastSquares.random",
        problems.LeastSquares.random,
        dict(n_clients=4, dim=2, seed=0),
        {
            "n_clients": INT(),
            "dim": INT(),
            "rows_per_client": INT()[:-1]
            + [
                _case("a bad pair", (3, 1), ValueError, "1"),
                _case("a triple", (1, 2, 3), ValueError, r"\(1, 2, 3\)"),
            ],
            "reg": FLOAT(bad=(-1.0,)),
            "heterogeneity": FLOAT(bad=(-1.0,)),
            "noise": FLOAT(bad=(-1.0,)),
            "seed": SEED,
            "form": CHOICE(),
        },
    ),
    (
        "Logistic",
        problems.Logistic,
        dict(features=FEATURES, labels=np.array([[0, 1, 0]] * 4), reg=0.1),
        {
            "features": ARRAY((4, 3, 2), ragged=False, wrong_shape=False),
            "labels": [
                _case("non-integral floats", np.full((4, 3), 0.5), ValueError, "0.5|integ"),
                _case("booleans", np.ones((4, 3), bool), TypeError, "bool"),
                _case("complex numbers", np.ones((4, 3)) * 1j, TypeError, "complex"),
                _case("negative labels", -np.ones((4, 3), int), ValueError, "-1"),
                _case("strings", np.full((4, 3), "a"), TypeError, "<U1|'a'"),
                _case("the wrong shape", np.ones((4, 2), int), ValueError, r"\(4, 2\)"),
                NONE,
            ],
            "reg": FLOAT(bad=(-1.0,)),
            "n_classes": INT(minimum=2, optional=True),
            "intercept": BOOLEAN(),
            "softmax": BOOLEAN(optional=True),
            "allow_no_minimiser": BOOLEAN(),
        },
    ),
    (
        "Logistic.from_stacked",
        problems.Logistic.from_stacked,
        dict(features=STACKED, labels=LABELS, counts=np.full(4, 3), reg=0.1),
        {
            "features": ARRAY((12, 2), wrong_shape=False),
            "labels": [
                _case("booleans", np.ones(12, bool), TypeError, "bool"),
                _case("the wrong length", np.ones(11, int), ValueError, r"\(11,\)"),
                STRING,
                NONE,
            ],
            "counts": [_case("floats", np.full(4, 3.0), TypeError, "float"), NONE],
            "reg": FLOAT(bad=(-1.0,)),
            "n_classes": [_case("too few for the labels", 2, ValueError, "2")],
        },
    ),
    (
        "Logistic.random",
        problems.Logistic.random,
        dict(n_clients=4, dim=2, seed=0),
        {
            "n_clients": INT(),
            "dim": INT(),
            "rows_per_client": INT()[:-1],
            "n_classes": INT(minimum=2),
            "reg": FLOAT(bad=(-1.0,)),
            "heterogeneity": FLOAT(bad=(-1.0,)),
            "scale": FLOAT(bad=(-1.0,)),
            "intercept": BOOLEAN(),
            "softmax": BOOLEAN(optional=True),
            "seed": SEED,
        },
    ),
    (
        "Problem.gradients",
        Q.gradients,
        dict(clients=np.array([0, 1]), points=np.zeros((2, 2))),
        {"clients": INDICES(4, repeats=True), "points": ARRAY((2, 2))[:5] + [NONE]},
    ),
    *[
        (
            f"Problem.{fn.__name__}",
            fn,
            dict(x=np.zeros(2)),
            {"x": VECTOR(2, nonfinite=False)},
        )
        for fn in (Q.objective, Q.gradient, Q.objective_gap, LS.objective, LG.objective)
    ],
    (
        "Problem.client_objectives",
        Q.client_objectives,
        dict(points=np.zeros((4, 2))),
        {"points": ARRAY((4, 2))[:5] + [NONE]},
    ),
    (
        "Logistic.predict",
        LG.predict,
        dict(x=np.zeros(2), features=np.ones((3, 2))),
        {"x": VECTOR(2, nonfinite=False), "features": ARRAY((3, 2))[:3] + [NONE]},
    ),
    (
        "Logistic.accuracy",
        LG.accuracy,
        dict(x=np.zeros(2), features=np.ones((3, 2)), labels=np.array([0, 1, 0])),
        {
            "features": [STRING, NONE, _case("a number", 3.0, ValueError, r"\(\)|3.0")],
            "labels": [
                _case("the wrong length", [0, 1], ValueError, r"\(2,\)"),
                STRING,
                NONE,
            ],
        },
    ),
    (
        "Problem.minibatch",
        LS.minibatch,
        dict(batch_size=2, seed=0),
        {"batch_size": INT(), "seed": SEED},
    ),
    (
        "Problem.noisy",
        Q.noisy,
        dict(sigma=0.1, seed=0),
        {"sigma": FLOAT(bad=(-1.0,)), "seed": SEED},
    ),
    (
        "Minibatch",
        problems.Minibatch,
        dict(problem=LS, batch_size=2, seed=0),
        {
            "problem": [
                STRING,
                NONE,
                _case("a problem without samples", Q, TypeError, "Quadratic"),
            ],
            "batch_size": INT(),
            "seed": SEED,
        },
    ),
    (
        "Noisy",
        problems.Noisy,
        dict(problem=Q, sigma=0.1, seed=0),
        {"problem": [STRING, NONE], "sigma": FLOAT(bad=(-1.0,)), "seed": SEED},
    ),
    (
        "iid_partition",
        problems.iid_partition,
        dict(n_samples=12, n_clients=3, seed=0),
        {"n_samples": INT(), "n_clients": INT(too_large=13), "seed": SEED},
    ),
    (
        "dirichlet_partition",
        problems.dirichlet_partition,
        dict(labels=LABELS, n_clients=3, alpha=1.0, seed=0),
        {
            "labels": [
                _case("floats", LABELS * 0.5, TypeError, "float"),
                _case("booleans", LABELS > 0, TypeError, "bool"),
                _case("negative labels", -LABELS, ValueError, "-1|-2"),
                _case("a matrix", LABELS.reshape(3, 4), ValueError, r"\(3, 4\)"),
                _case("an empty list", [], ValueError, "at least one|empty"),
                STRING,
                NONE,
            ],
            "n_clients": INT(too_large=13),
            "alpha": FLOAT(bad=(0.0,)),
            "seed": SEED,
            "min_size": INT(minimum=0, too_large=5),
        },
    ),
    (
        "majority_partition",
        problems.majority_partition,
        dict(labels=LABELS, n_clients=3, seed=0),
        {
            "labels": [_case("floats", LABELS * 0.5, TypeError, "float"), STRING, NONE],
            "n_clients": INT(too_large=13),
            "majority_fraction": FLOAT(bad=(-0.5, 1.5)),
            "seed": SEED,
            "majority_labels": [
                _case("floats", [0.0, 1.0, 2.0], TypeError, "float"),
                _case("a label no sample has", [0, 1, 7], ValueError, "7"),
                _case("the wrong length", [0, 1], ValueError, r"\(2,\)"),
                STRING,
            ],
        },
    ),
    (
        "label_swap",
        problems.label_swap,
        dict(labels=LABELS, clients_partition=PARTS, group=[1], fraction=0.5, seed=0),
        {
            "labels": [_case("floats", LABELS * 0.5, TypeError, "float"), STRING, NONE],
            "clients_partition": [
                _case("an empty list", [], ValueError, "non-empty"),
                _case("float indices", [np.array([0.5])], TypeError, "float"),
                _case("an index too large", [np.array([12])], ValueError, "12"),
                _case("overlapping parts", [np.arange(6), np.arange(5, 12)], ValueError, "5"),
                _case("an array", np.arange(12), TypeError, "ndarray|array"),
                STRING,
                NONE,
            ],
            "group": [
                _case("floats", [0.5], TypeError, "float|0.5"),
                _case("a client too large", [2], ValueError, "2"),
                _case("a negative client", [-1], ValueError, "-1"),
                _case("a mask of the wrong length", [True], ValueError, r"\(1,\)"),
                STRING,
                NONE,
            ],
            "fraction": FLOAT(bad=(-0.5, 1.5)),
            "swap": [
                _case("the same label twice", (1, 1), ValueError, "1"),
                _case("a negative label", (0, -1), ValueError, "-1"),
                _case("an int", 3, TypeError, "3"),
                _case("a triple", (0, 1, 2), ValueError, r"\(0, 1, 2\)"),
                _case("a string pair", ("a", "b"), TypeError, "'a'"),
                STRING,
                NONE,
            ],
            "seed": SEED,
        },
    ),
    (
        "partition_stats",
        problems.partition_stats,
        dict(labels=LABELS, parts=PARTS),
        {
            "labels": [_case("floats", LABELS * 0.5, TypeError, "float"), STRING, NONE],
            "parts": [
                _case("an empty list", [], ValueError, "non-empty"),
                _case("float indices", [np.array([0.5])], TypeError, "float"),
                _case("an index too large", [np.array([12])], ValueError, "12"),
                _case("a negative index", [np.array([-1])], ValueError, "-1"),
                STRING,
                NONE,
            ],
            "n_classes": INT(optional=True)[:5] + [_case("too small", 2, ValueError, "2")],
        },
    ),
    (
        "label_entropy",
        problems.label_entropy,
        dict(counts=np.ones((2, 3))),
        {
            "counts": [
                STRING,
                NONE,
                _case("booleans", np.ones(3, bool), TypeError, "bool"),
                _case("complex numbers", np.ones(3) * 1j, TypeError, "complex"),
                _case("negative counts", [-1.0, 2.0], ValueError, "-1.0"),
                _case("NaN", [NAN, 1.0], ValueError, "nan"),
                _case("a number", 3.0, ValueError, r"\(\)"),
            ]
        },
    ),
    (
        "client_majority",
        problems.client_majority,
        dict(labels=LABELS, parts=PARTS),
        {"labels": [STRING, NONE], "parts": [STRING, NONE]},
    ),
    (
        "client_arrays",
        problems.client_arrays,
        dict(features=STACKED, targets=np.ones(12), parts=PARTS),
        {
            "features": ARRAY((12, 2), wrong_shape=False),
            "targets": [
                _case("the wrong length", np.ones(11), ValueError, r"\(11,\)"),
                _case("complex numbers", np.ones(12) * 1j, TypeError, "complex"),
                STRING,
                NONE,
            ],
            "parts": [
                _case("an index too large", [np.array([12])], ValueError, "12"),
                STRING,
                NONE,
            ],
        },
    ),
    # ---------------------------------------------------------------------- analysis
    (
        "AffineGradients",
        analysis.AffineGradients,
        dict(hessians=np.ones((4, 2)), linear=np.zeros((4, 2))),
        {"hessians": ARRAY((4, 2)), "linear": ARRAY((4, 2))},
    ),
    ("affine_gradients", analysis.affine_gradients, dict(problem=Q), {"problem": [STRING, NONE]}),
    (
        "AffineMap",
        analysis.AffineMap,
        dict(linear=0.5 * sp.identity(4), offset=np.zeros(4), state_shape=(2, 2)),
        {
            "linear": MATRIX(lists=True),
            "offset": VECTOR(4),
            "state_shape": [
                _case("a shape of another size", (3, 3), ValueError, r"\(3, 3\)"),
                _case("a float shape", (2.0, 2.0), TypeError, "2.0"),
                _case("a 3-d shape", (1, 2, 2), ValueError, r"\(1, 2, 2\)"),
                STRING,
            ],
        },
    ),
    ("AffineMap.identity", analysis.AffineMap.identity, dict(size=4), {"size": INT(minimum=0)}),
    ("AffineMap.power", AMAP.power, dict(k=2), {"k": INT(minimum=0)}),
    (
        "AffineMap.__call__",
        AMAP,
        dict(z=np.zeros(4)),
        {"z": VECTOR(4, nonfinite=False)[:4] + [NONE]},
    ),
    (
        "AffineMap.compose",
        AMAP.compose,
        dict(other=AMAP),
        {
            "other": [
                STRING,
                NONE,
                _case("a map of another size", analysis.AffineMap.identity(3), ValueError, "3"),
            ]
        },
    ),
    (
        "AffineMap.fixed_point",
        AMAP.fixed_point,
        dict(start=None),
        {"start": VECTOR(4, optional=True)},
    ),
    (
        "AffineMap.spectral_radius",
        AMAP.spectral_radius,
        dict(exclude_unit=False),
        {"exclude_unit": BOOLEAN()},
    ),
    (
        "run_context",
        analysis.run_context,
        dict(method=_method(), problem=Q),
        {
            "method": [STRING, NONE],
            "problem": [STRING, NONE],
            "probabilities": VECTOR(4, bad=(0.0, 1.5), optional=True),
        },
    ),
    (
        "round_operator",
        lambda **kw: analysis.round_operator(**{"method": _method(), **kw}),
        dict(problem=Q, participants=np.array([0, 2])),
        {
            "problem": [STRING, NONE, _case("a logistic problem", LG, TypeError, "Logistic")],
            "participants": INDICES(4)[:4]
            + INDICES(4)[5:]
            + [_case("a mask of the wrong length", np.ones(3, bool), ValueError, r"\(3,\)")],
            "r": INT(minimum=0),
            "ctx": [STRING],
        },
    ),
    *[
        (
            fn.__name__,
            lambda fn=fn, **kw: fn(**{"method": _method(), **kw}),
            dict(problem=Q, masks=MASKS),
            {
                "masks": MASK(4)[:2]
                + [
                    _case(
                        "masks over other clients", np.ones((2, 3), bool), ValueError, r"\(2, 3\)"
                    ),
                    _case("no rounds", np.ones((0, 4), bool), ValueError, r"\(0, 4\)"),
                    NONE,
                ],
                "first_round": INT(minimum=0, optional=True),
                "problem": [STRING, NONE],
            },
        )
        for fn in (
            analysis.pattern_operator,
            analysis.fixed_point_under_pattern,
            analysis.periodic_rate,
            analysis.conserved_quantities,
        )
    ],
    (
        "fixed_point_under_pattern (x0)",
        lambda **kw: analysis.fixed_point_under_pattern(_method(), Q, MASKS, **kw),
        dict(x0=None),
        {"x0": VECTOR(2, optional=True)},
    ),
    (
        "periodic_rate (exclude_unit)",
        lambda **kw: analysis.periodic_rate(_method(), Q, MASKS, **kw),
        dict(exclude_unit=True),
        {"exclude_unit": BOOLEAN()},
    ),
    (
        "lyapunov_rate",
        lambda **kw: analysis.lyapunov_rate(**{"method": _method(), **kw}),
        dict(problem=Q, participation=participation.Bernoulli(P4), rounds=20, burn_in=2, batches=2),
        {
            "participation": [
                STRING,
                NONE,
                _case("a process over 5 clients", participation.Full(5), ValueError, "5"),
            ],
            "rounds": INT(minimum=2),
            "seed": SEED,
            "burn_in": INT(minimum=0),
            "batches": INT(minimum=2, too_large=21),
            "start": CHOICE(),
            "measure": CHOICE(),
            "conserved": [
                _case("an unknown name", "nope", ValueError, "'nope'"),
                _case("a list of names", ["auto"], TypeError, "auto|<U4"),
                _case("a basis of the wrong shape", np.ones((2, 1)), ValueError, r"\(2, 1\)"),
                _case("a complex basis", np.ones((6, 1)) * 1j, TypeError, "complex"),
            ],
            "confidence": FLOAT(bad=(0.0, 1.0)),
            "renormalize_every": INT(),
        },
    ),
    (
        "bernoulli_expected_weights",
        analysis.bernoulli_expected_weights,
        dict(p=P4),
        {"p": VECTOR(4, bad=(0.0, 1.5), fixed=False)},
    ),
    (
        "compare_with_fedstale_eq4",
        analysis.compare_with_fedstale_eq4,
        dict(p=P4),
        {"p": VECTOR(4, bad=(0.0, 1.5), fixed=False)},
    ),
    (
        "expected_weights",
        analysis.expected_weights,
        dict(participation=P4, rounds=20, batches=2),
        {
            "participation": [
                STRING,
                NONE,
                _case("probabilities above 1", [1.5, 0.5], ValueError, "1.5"),
            ],
            "n_clients": INT(optional=True, too_large=5),
            "rounds": INT(minimum=2),
            "seed": SEED,
            "batches": INT(minimum=2),
            "monte_carlo": BOOLEAN(),
        },
    ),
    ("all_pull_round_matrix", analysis.all_pull_round_matrix, dict(mask=MASK4), {"mask": MASK(4)}),
    (
        "expected_all_pull_matrix",
        analysis.expected_all_pull_matrix,
        dict(participation=P4, rounds=3),
        {
            "participation": [STRING, NONE],
            "n_clients": INT(optional=True, too_large=5),
            "rounds": INT(),
            "seed": SEED,
        },
    ),
    (
        "perron_vector (analysis)",
        analysis.perron_vector,
        dict(matrix=W2),
        {"matrix": MATRIX(lists=True)},
    ),
    (
        "weighted_minimizer",
        analysis.weighted_minimizer,
        dict(problem=Q, weights=P4),
        {
            "problem": [STRING, NONE],
            "weights": VECTOR(4, bad=(-1.0, 0.0)),
        },
    ),
    # -------------------------------------------------------------------- algorithms
    (
        "FedAvg",
        alg.FedAvg,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0, -1.0)),
            "local_steps": INT(),
            "server_lr": FLOAT(bad=(0.0,)),
            "weights": CHOICE(),
            "probabilities": PROBABILITIES,
            "cutoff": INT(),
            "timing": CHOICE(),
        },
    ),
    (
        "FOCUS",
        alg.FOCUS,
        dict(lr=0.1),
        {"lr": FLOAT(bad=(0.0,)), "local_steps": INT(), "skip_empty_rounds": BOOLEAN()},
    ),
    (
        "FedStale",
        alg.FedStale,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "local_steps": INT(),
            "beta": FLOAT(bad=(-0.5, 2.0)),
            "server_lr": FLOAT(bad=(0.0,)),
            "probabilities": PROBABILITIES,
            "cutoff": INT(),
            "skip_empty_rounds": BOOLEAN(),
            "timing": CHOICE(),
        },
    ),
    (
        "FedVARP",
        alg.FedVARP,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "local_steps": INT(),
            "server_lr": FLOAT(bad=(0.0,)),
            "probabilities": PROBABILITIES,
            "cutoff": INT(),
            "skip_empty_rounds": BOOLEAN(),
            "timing": CHOICE(),
        },
    ),
    (
        "MIFA",
        alg.MIFA,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "local_steps": INT(),
            "server_lr": FLOAT(bad=(0.0,)),
            "skip_empty_rounds": BOOLEAN(),
        },
    ),
    (
        "SCAFFOLD",
        alg.SCAFFOLD,
        dict(lr=0.1),
        {"lr": FLOAT(bad=(0.0,)), "local_steps": INT(), "server_lr": FLOAT(bad=(0.0,))},
    ),
    (
        "AmplifiedFedAvg",
        alg.AmplifiedFedAvg,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "local_steps": INT(),
            "amplification": FLOAT(bad=(0.0,)),
            "period": INT(),
            "weights": CHOICE(),
            "probabilities": PROBABILITIES,
            "cutoff": INT(),
            "timing": CHOICE(),
        },
    ),
    (
        "FedAvgM",
        alg.FedAvgM,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "local_steps": INT(),
            "beta": FLOAT(bad=(-0.5, 1.0)),
            "server_lr": FLOAT(bad=(0.0,)),
            "weights": CHOICE(),
            "probabilities": PROBABILITIES,
            "cutoff": INT(),
            "skip_empty_rounds": BOOLEAN(),
            "timing": CHOICE(),
        },
    ),
    (
        "FedDyn",
        alg.FedDyn,
        dict(lr=0.1),
        {"lr": FLOAT(bad=(0.0,)), "local_steps": INT(), "alpha": FLOAT(bad=(0.0, -1.0))},
    ),
    (
        "Scaffnew",
        alg.Scaffnew,
        dict(lr=0.1),
        {"lr": FLOAT(bad=(0.0,)), "p": FLOAT(bad=(0.0, 1.5)), "seed": INT(minimum=0)},
    ),
    *[
        (
            cls.__name__,
            cls,
            dict(lr=0.1, graphs=SEQ),
            {
                "lr": FLOAT(bad=(0.0,)),
                "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
                "check_mixing": BOOLEAN(),
                **({"rule": CHOICE()} if cls is not alg.PushPull else {}),
                **({"decay": FLOAT(bad=(-1.0,))} if cls in (alg.DGD, alg.PushSum) else {}),
                **({"row_rule": CHOICE(), "column_rule": CHOICE()} if cls is alg.PushPull else {}),
            },
        )
        for cls in (alg.DGD, alg.GradientTracking, alg.PushPull, alg.PushSum)
    ],
    *[
        (
            cls.__name__,
            cls,
            dict(lr=0.1, graphs=SEQ),
            {
                "lr": FLOAT(bad=(0.0, -1.0)),
                "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
                "check_mixing": BOOLEAN(),
                **({"rule": CHOICE()} if cls in (alg.PGEXTRA, alg.ProxNIDS) else {}),
                **({"penalty": FLOAT(bad=(0.0, -1.0))} if cls is alg.DLM else {}),
                **(
                    {"solver": CHOICE(), "local_steps": INT()}
                    if cls is alg.DecentralizedADMM
                    else {}
                ),
            },
        )
        for cls in (alg.PGEXTRA, alg.ProxNIDS, alg.DLM, alg.DecentralizedADMM)
    ],
    *[
        (
            cls.__name__,
            cls,
            dict(lr=0.1),
            {"lr": FLOAT(bad=(0.0,)), "local_steps": INT(), "server_lr": FLOAT(bad=(0.0,))},
        )
        for cls in (alg.FedMid, alg.FedDualAvg)
    ],
    (
        "FedPD",
        alg.FedPD,
        dict(lr=0.1),
        {
            "lr": FLOAT(bad=(0.0,)),
            "eta": FLOAT(bad=(0.0, -1.0)),
            "local_steps": INT(),
            "p": FLOAT(bad=(0.0, 1.5)),
        },
    ),
    *[
        (
            cls.__name__,
            cls,
            dict(lr=0.1, graphs=SEQ),
            {
                "lr": FLOAT(bad=(0.0,)),
                "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
                "batch": INT(),
                "rule": CHOICE(),
                "check_mixing": BOOLEAN(),
                **({"snapshot_every": INT()} if cls is alg.GTSVRG else {"restart_every": INT()}),
            },
        )
        for cls in (alg.GTSVRG, alg.GTSARAH)
    ],
    (
        "GTSAGA",
        alg.GTSAGA,
        dict(lr=0.1, graphs=SEQ),
        {
            "lr": FLOAT(bad=(0.0,)),
            "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
            "rule": CHOICE(),
            "check_mixing": BOOLEAN(),
        },
    ),
    (
        "LED",
        alg.LED,
        dict(lr=0.1, graphs=SEQ),
        {
            "lr": FLOAT(bad=(0.0,)),
            "graphs": [STRING, NONE, _case("a graph", G3, TypeError, "Graph")],
            "local_steps": INT(),
            "beta": FLOAT(bad=(0.0,), optional=True),
            "rule": CHOICE(),
            "check_mixing": BOOLEAN(),
        },
    ),
    # ------------------------------------------------- activation processes and timing
    (
        "PoissonClocks",
        participation.PoissonClocks,
        dict(rates=1.0, n_nodes=4),
        {
            "rates": [
                STRING,
                NAN_CASE,
                _case("zero", 0.0, ValueError, "0.0"),
                _case("subnormal", 5e-324, ValueError, "5e-324"),
                _case("a subnormal entry", [1.0] * 3 + [1e-320], ValueError, "1e-320"),
            ],
            "n_nodes": INT(optional=True),
        },
    ),  # fmt: skip
    (
        "RandomEdge",
        participation.RandomEdge,
        dict(graph=nx.cycle_graph(4)),
        {
            "graph": [c for c in GRAPH if c[0] != "a matrix"],
            "weights": [c for c in VECTOR(4, bad=(-1.0,), optional=True) if c[0] != "a string"],
            "rate": FLOAT(bad=(0.0, 5e-324), optional=True),
            "mixing": CHOICE(),
        },
    ),
    (
        "RandomMatching",
        participation.RandomMatching,
        dict(graph=nx.cycle_graph(4)),
        {"graph": [c for c in GRAPH if c[0] != "a matrix"], "mixing": CHOICE()},
    ),
    ("OnePeerPermutation", participation.OnePeerPermutation, dict(n_nodes=4), {"n_nodes": INT(2)}),
    (
        "UplinkDrops",
        participation.UplinkDrops,
        dict(process=FULL, p=0.2),
        {"process": [STRING, NONE], "p": FLOAT(bad=(-1.0, 1.0))},
    ),
    ("Constant", timing.Constant, dict(value=1.0), {"value": FLOAT(bad=(-1.0, 1e308))}),
    (
        "Exponential",
        timing.Exponential,
        dict(mean=1.0),
        {"mean": FLOAT(bad=(0.0, 1e300)), "shift": FLOAT(bad=(-1.0, 1e200))},
    ),
    (
        "LogNormal",
        timing.LogNormal,
        dict(median=1.0, sigma=0.5),
        {"median": FLOAT(bad=(0.0, 1e200)), "sigma": FLOAT(bad=(-1.0, 30.0))},
    ),
    (
        "Pareto",
        timing.Pareto,
        dict(shape=1.5, scale=0.1),
        {"shape": FLOAT(bad=(0.0, 0.1)), "scale": FLOAT(bad=(0.0, 1e200))},
    ),
    (
        "TimeModel",
        timing.TimeModel,
        dict(compute=1.0, speeds=[1.0, 2.0]),
        {
            **{
                name: [
                    STRING,
                    NONE,
                    BOOL,
                    NAN_CASE,
                    _case("negative", -1.0, ValueError, "-1.0"),
                    _case("overflowing", 1e300, ValueError, "1e\\+300"),
                ]
                for name in ("compute", "download", "upload")
            },
            "speeds": [
                c
                for c in VECTOR(2, bad=(0.0, 1e308), optional=True, fixed=False)
                if c[0] != "a string"
            ],
        },
    ),  # fmt: skip
    (
        "Clock",
        timing.Clock,
        dict(time_model=timing.TimeModel(), deadline=2.0),
        {
            "time_model": [STRING, NONE],
            "deadline": FLOAT(bad=(0.0, -1.0), optional=True),
            "partial_work": BOOLEAN(),
            "availability": [STRING, _case("a number", 1.0, TypeError, "1.0")],
        },
    ),
    (
        "OnOff",
        timing.OnOff,
        dict(mean_on=1.0, mean_off=1.0),
        {
            "mean_on": FLOAT(bad=(0.0, 5e-324)),
            "mean_off": FLOAT(bad=(0.0, 5e-324)),
        },
    ),
    # -------------------------------------------------------------------- regularizers
    ("L1", problems.L1, dict(weight=0.1), {"weight": FLOAT(bad=(-1.0,))}),
    (
        "ElasticNet",
        problems.ElasticNet,
        dict(l1=0.1, l2=0.1),
        {"l1": FLOAT(bad=(-1.0,)), "l2": FLOAT(bad=(-0.5,))},
    ),
    (
        "GroupLasso",
        problems.GroupLasso,
        dict(weight=0.1, groups=2),
        {"weight": FLOAT(bad=(-1.0,)), "groups": [STRING, NONE, _case("zero", 0, ValueError, "0")]},
    ),
    (
        "Box",
        problems.Box,
        dict(low=-1.0, high=1.0),
        {
            "low": [
                STRING,
                _case("above high", 2.0, ValueError, "2.0"),
                _case("+inf", INF, ValueError, "inf"),
            ],
            "high": [STRING, _case("-inf", -INF, ValueError, "-inf")],
        },  # fmt: skip
    ),
    (
        "Composite",
        problems.Composite,
        dict(problem=LS, regularizer=problems.L1(0.1)),
        {
            "problem": [STRING, NONE],
            "regularizer": [STRING, NONE, _case("a number", 0.1, TypeError, "0.1")],
        },
    ),
]


def _audit_rows():
    rows = []
    for entry, fn, base, arguments in SPECS:
        for argument, cases in arguments.items():
            for label, value, error, shows in cases:
                names = rf"(?<![\w]){re.escape(argument)}(?![\w])"
                needle = names + (rf".*(?:{shows})" if shows else "")
                call = functools.partial(_call_with, fn, {**base, argument: value})
                rows.append((f"{entry}({argument}=<{label}>)", call, error, needle))
    return rows


def _call_with(fn, kwargs):
    return fn(**kwargs)


def _file(name: str, content: bytes) -> Path:
    path = TMP / name
    path.write_bytes(content)
    return path


def _npy(name: str, array, allow_pickle: bool = False) -> Path:
    path = TMP / name
    np.save(path, array, allow_pickle=allow_pickle)
    return path


def _npz(name: str, **arrays) -> Path:
    path = TMP / name
    np.savez(path, **arrays)
    return path


def _pickled_npz(name: str) -> Path:
    path = TMP / name
    np.savez(path, meta=np.array([{"method": "x"}], dtype=object))
    return path


def _saved_result(name: str) -> Path:
    result = sm.run(alg.FedAvg(0.1), Q, FULL, 2, progress=False)
    return result.save(TMP / name)


FILE_ROWS = [
    (
        "Result.load of a missing file",
        lambda: sm.engine.Result.load(TMP / "missing.npz"),
        ValueError,
        r"missing\.npz",
    ),
    (
        "Result.load of a corrupt file",
        lambda: sm.engine.Result.load(_file("corrupt.npz", b"PK\x03\x04 not a zip at all")),
        ValueError,
        r"corrupt\.npz",
    ),
    (
        "Result.load of a text file",
        lambda: sm.engine.Result.load(_file("notes.txt", b"hello\n")),
        ValueError,
        r"notes\.txt",
    ),
    (
        "Result.load of an empty file",
        lambda: sm.engine.Result.load(_file("empty.npz", b"")),
        ValueError,
        r"empty\.npz",
    ),
    (
        "Result.load of an .npz that is no stochmix result",
        lambda: sm.engine.Result.load(_npz("other.npz", a=np.ones(3))),
        ValueError,
        r"other\.npz",
    ),
    (
        "Result.load of a result whose metadata is not JSON",
        lambda: sm.engine.Result.load(
            _npz("badmeta.npz", meta=np.array("{not json"), server=np.ones((2, 2)))
        ),
        ValueError,
        r"badmeta\.npz",
    ),
    (
        "Result.load of a result that lost its server array",
        lambda: sm.engine.Result.load(
            _npz(
                "noserver.npz", meta=np.array('{"method": "m", "diverged_at": null, "config": {}}')
            )
        ),
        ValueError,
        r"noserver\.npz",
    ),
    (
        "Result.load of a file holding pickled objects",
        lambda: sm.engine.Result.load(_pickled_npz("pickled.npz")),
        ValueError,
        r"pickled\.npz",
    ),
    (
        "Result.load of a folder",
        lambda: sm.engine.Result.load(TMP),
        ValueError,
        re.escape(TMP.name),
    ),
    ("Result.load of None", lambda: sm.engine.Result.load(None), TypeError, "path.*None"),
    ("Result.load of a number", lambda: sm.engine.Result.load(3), TypeError, "path.*3"),
    (
        "Trace from a missing file",
        lambda: participation.Trace(TMP / "missing.npy"),
        ValueError,
        r"masks.*missing\.npy",
    ),
    (
        "Trace from a file holding pickled objects",
        lambda: participation.Trace(_npy("objects.npy", np.array([{"a": 1}], dtype=object), True)),
        ValueError,
        r"masks.*objects\.npy.*pickle",
    ),
    (
        "Trace from a corrupt file",
        lambda: participation.Trace(_file("corrupt.npy", b"\x93NUMPY garbage")),
        ValueError,
        r"masks.*corrupt\.npy",
    ),
    (
        "Trace from an empty file",
        lambda: participation.Trace(_file("empty.npy", b"")),
        ValueError,
        r"masks.*empty\.npy",
    ),
    (
        "Trace from an .npz archive",
        lambda: participation.Trace(_npz("archive.npz", masks=np.ones((2, 2), bool))),
        TypeError,
        r"masks.*archive\.npz",
    ),
    (
        "Trace from a file of floats",
        lambda: participation.Trace(_npy("floats.npy", np.ones((2, 2)))),
        TypeError,
        r"masks.*floats\.npy.*float64",
    ),
    (
        "Trace from a file of a vector",
        lambda: participation.Trace(_npy("vector.npy", np.ones(3, bool))),
        ValueError,
        r"masks.*vector\.npy.*\(3,\)",
    ),
    (
        "a negative seed to run",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, seed=-1, progress=False),
        ValueError,
        "seed.*-1",
    ),
    (
        "a float seed to run",
        lambda: sm.run(alg.FedAvg(0.1), Q, FULL, 2, seed=1.5, progress=False),
        TypeError,
        "seed.*1.5",
    ),
]

BAD_INPUTS += _audit_rows() + FILE_ROWS


@pytest.mark.parametrize(
    ("what", "call", "error", "needle"), BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS]
)
def test_bad_input_gets_a_clear_error(what, call, error, needle):
    """The library's own checks, without the test suite's runtime type checker: what a
    user gets."""
    jaxtyping_config.update("jaxtyping_disable", True)
    try:
        with pytest.raises(error) as caught:
            call()
    finally:
        jaxtyping_config.update("jaxtyping_disable", False)
    message = str(caught.value)
    assert re.search(needle, message, re.IGNORECASE | re.DOTALL), message


@pytest.mark.parametrize(
    ("what", "call", "error", "needle"), BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS]
)
def test_bad_input_is_refused_under_the_runtime_checker(what, call, error, needle):
    """Under the runtime checker (annotations enforced) the input is still refused with a
    TypeError or ValueError naming the argument: the library's own message (the row's
    needle) where its check comes first, else jaxtyping's TypeCheckError, which names the
    parameter it refused (or the entry of a mapping the library checks, ``matrices['W']``)."""
    name = re.escape(CHECKER_BLAMES.get(what, _argument(what, needle)))
    names = rf"(?:{needle})|typechecking parameter '{name}'|^{name}\["
    with pytest.raises((TypeError, ValueError), match=f"(?is){names}"):
        call()


#: Rows where a size that two arguments share is wrong in the first: the checker binds the
#: size from the first and names the second.
CHECKER_BLAMES = {
    "Quadratic(centers=<the wrong shape>)": "hessians",
    "expected_average(p=<the wrong length>)": "weights",
}


def _argument(what, needle):
    """The argument a row is about: ``f(arg=<...>)`` in an audit row's name, else the first
    word of its needle (the argument, in every hand-written row the checker refuses first;
    a command-line option's dashes, escaped in the needle, are skipped)."""
    found = re.search(r"\((\w+)=<", what) or re.match(r"(?:\(\?<!\[\\w\]\))?(?:\\-)*(\w+)", needle)
    return found.group(1)


@pytest.mark.parametrize(("entry", "fn", "kwargs", "arguments"), SPECS, ids=[s[0] for s in SPECS])
def test_audit_baseline_calls_are_valid(entry, fn, kwargs, arguments):
    """Every audited call succeeds with its baseline arguments, so each row fails for its
    one bad argument only."""
    jaxtyping_config.update("jaxtyping_disable", True)
    try:
        fn(**kwargs)
    finally:
        jaxtyping_config.update("jaxtyping_disable", False)


def test_diverging_run_is_stopped_and_named():
    with pytest.warns(sm.engine.DivergenceWarning, match="FedAvg diverged.*round"):
        res = sm.run(alg.FedAvg(50.0, 5), Q, FULL, 500)
    assert res.diverged and res.rounds == res.diverged_at < 500
    assert np.isfinite(res.server[:-1]).all()


KINDS = st.sampled_from(["quadratic", "least_squares", "cubic", 3])
PROCESS = st.sampled_from(["full", "uniform", "bernoulli", "regularized", "markov", "nope"])
METHOD = st.sampled_from(["fedavg", "focus", "fedstale", "scaffold", "mifa", "fedau", "x"])
VALUE = st.one_of(
    st.integers(-3, 30), st.floats(-1, 2), st.just(float("nan")), st.text(max_size=3), st.booleans()
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=KINDS,
    n=st.integers(-1, 6),
    dim=st.integers(-1, 4),
    process=PROCESS,
    extra=st.dictionaries(
        st.sampled_from(["size", "p", "low", "high", "p_on", "p_off", "zz"]), VALUE, max_size=2
    ),
    method=METHOD,
    options=st.dictionaries(
        st.sampled_from(["lr", "local_steps", "beta", "server_lr", "qq"]), VALUE, max_size=3
    ),
    rounds=st.one_of(st.integers(-2, 4), st.text(max_size=2)),
)
def test_random_configs_run_or_fail_cleanly(kind, n, dim, process, extra, method, options, rounds):
    raw = {
        "rounds": rounds,
        "problem": {"kind": kind, "n_clients": n, "dim": dim, "seed": 0},
        "participation": {"kind": process, **extra},
        "methods": [{"kind": method, "lr": 0.05, **options}],
    }
    try:
        exp = parse(raw)
    except ConfigError as error:
        assert "\n" not in str(error).strip()
        return
    for spec in exp.methods:
        result = sm.run(
            spec.build(spec.lrs[0]),
            exp.problem,
            exp.participation,
            exp.rounds,
            progress=False,
            on_divergence="warn",
        )
        assert result.rounds <= exp.rounds


def test_cli_reports_config_errors_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("rounds = [")
    assert main(["run", str(bad), "--quiet"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_torch_model_whose_features_do_not_fit_the_module_is_refused():
    """Data with 7 features for a module whose first layer takes 64: refused when the
    problem is built (one forward pass on one sample), naming the features' shape and the
    module, instead of torch's RuntimeError from the first gradient."""
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
    ).train()
    data = [(np.ones((5, 7)), np.arange(5)) for _ in range(3)]
    shown = re.escape(
        "client_datasets: features of shape (7,) per sample do not fit the module"
        " Sequential( (0): Linear(in_features=64, out_features=32"
    )
    with pytest.raises(ValueError, match=shown + r".*\(1x7 and 64x32\)"):
        problems.TorchModel(module, data)
    assert all(part.training for part in module.modules())  # the check restores the modes
    fitting = [(np.ones((5, 64)), np.arange(5)) for _ in range(3)]
    assert problems.TorchModel(module, fitting).dim == 64 * 32 + 32 + 32 * 10 + 10
