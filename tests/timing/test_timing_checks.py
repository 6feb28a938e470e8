"""The long tail of issue 41 in the timing layer: each bad value is one error naming the
argument and the value, when the object is made, before any run."""

import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import participation, problems
from stochmix.timing import Clock, Constant, Exponential, LogNormal, OnOff, Pareto, TimeModel
from stochmix.timing.delays import MAX_SECONDS

BAD = [
    ("Clock(partial_work=True) without deadline",
     lambda: Clock(TimeModel(), partial_work=True), r"partial_work=True needs a deadline.*None"),
    ("a constant delay that overflows", lambda: Constant(1e308), r"value=1e\+308"),
    ("a plain number that overflows", lambda: TimeModel(compute=1e300), r"compute=1e\+300"),
    ("an exponential mean that overflows", lambda: Exponential(1e300), r"mean=1e\+300"),
    ("an exponential shift that overflows", lambda: Exponential(1.0, 1e200), r"shift=1e\+200"),
    ("a lognormal sigma that overflows", lambda: LogNormal(1.0, 30.0), r"sigma=30\.0"),
    ("a lognormal median that overflows", lambda: LogNormal(1e200, 0.0), r"median=1e\+200"),
    ("a Pareto shape that overflows", lambda: Pareto(0.1, 1.0), r"shape=0\.1"),
    ("a Pareto scale that overflows", lambda: Pareto(2.0, 1e200), r"scale=1e\+200"),
    ("speeds that overflow", lambda: TimeModel(compute=1.0, speeds=[1.0, 1e308]),
     r"speeds.*1e\+308"),
    ("speeds x compute that overflow", lambda: TimeModel(compute=1e90, speeds=[1e20] * 2),
     r"speeds.*1e\+20"),
    ("OnOff with nobody ever on", lambda: OnOff(1e-300, 1e300), r"mean_on=1e-300.*no client"),
    ("OnOff with a subnormal mean_on", lambda: OnOff(5e-324, 1.0), r"mean_on.*5e-324"),
    ("OnOff with a subnormal mean_off", lambda: OnOff(1.0, 5e-324), r"mean_off.*5e-324"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "call", "needle"), BAD, ids=[row[0] for row in BAD])
def test_bad_timing_input_is_one_error_naming_the_argument(what, call, needle):
    with pytest.raises(ValueError, match=needle) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_the_largest_allowed_delays_run_to_a_finite_clock():
    """At the bound, a run's time stays finite and equals the sum of its rounds, each the
    longest of its cohort (constant delays: K steps x value x speed), computed here."""
    value, speeds = MAX_SECONDS / 1e4, np.array([1.0, 2.0, 3.0])
    clock = Clock(TimeModel(compute=value, speeds=speeds))
    result = sm.run(
        alg.FedAvg(0.1, 2),
        problems.Quadratic.random(3, 2, seed=0),
        participation.Full(3),
        5,
        clock=clock,
    )
    assert np.isfinite(result.time).all()
    np.testing.assert_allclose(result.time[-1], 5 * 2 * value * speeds.max(), rtol=1e-12)


def test_heavy_tails_within_the_bound_are_accepted():
    Pareto(0.5, 1.0)  # infinite mean, largest draw 2^106 s
    LogNormal(1.0, 20.0)
    OnOff(1e-3, 1e3)
    Clock(TimeModel(), deadline=2.0, partial_work=True)
