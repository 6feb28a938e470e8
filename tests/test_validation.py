"""Bad input at every public entry gets one clear error naming the argument.

``BAD_INPUTS`` is the table the README shows (section "Bad input"); every row is tested.
Random configurations either run or fail with a one-line error, never a crash.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import mixing, participation, problems
from stochmix.cli import main
from stochmix.config import ConfigError, parse

Q = problems.Quadratic.random(4, 2, seed=0)
FULL = participation.Full(4)

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
        "a decentralized method under partial participation",
        lambda: sm.run(
            alg.DGD(0.1, mixing.OnePeerExponential(4), rule="natural"),
            Q,
            participation.Bernoulli(np.full(4, 0.5)),
            3,
        ),
        ValueError,
        "Full",
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
]


@pytest.mark.parametrize(
    ("what", "call", "error", "needle"), BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS]
)
def test_bad_input_gets_a_clear_error(what, call, error, needle):
    with pytest.raises(error) as caught:
        call()
    assert needle in str(caught.value)


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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
