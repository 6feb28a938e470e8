"""How a step-size grid picks its best step (issue 26): by rounds to a tolerance by default,
then by final error; the criterion is a configuration key, written in the resolved
configuration, and the log line says which step won and why."""

import numpy as np
import pytest

from stochmix import config
from stochmix.config import ConfigError
from stochmix.experiments import choose_lr, run_experiment

GRID = [5e-5, 1e-4, 2e-4, 3e-4]


def focus_grid(**top):
    return {
        "rounds": 600,
        **top,
        "problem": {"kind": "least_squares", "n_clients": 20, "dim": 10, "rows_per_client": 20},
        "participation": {"kind": "bernoulli", "low": 0.1, "high": 0.9},
        "methods": [{"kind": "focus", "lr": GRID, "local_steps": 5}],
    }


def test_the_default_picks_the_fewest_rounds_to_the_tolerance_and_says_so():
    exp = config.parse(focus_grid())
    lines = []
    (outcome,) = run_experiment(exp, progress=False, log=lines.append)
    rounds = {lr: outcome.runs[lr][0].rounds_to(1e-8) or np.inf for lr in GRID}
    assert rounds[3e-4] < rounds[2e-4] < rounds[1e-4] < np.inf
    assert outcome.best_lr == min(GRID, key=lambda lr: (rounds[lr], lr)) == 3e-4
    assert "fewest rounds to 1e-08" in outcome.why and "best lr 0.0003" in lines[0]
    resolved = exp.resolved()
    assert resolved["best_lr_by"] == "rounds_to_tolerance" and resolved["tolerance"] == 1e-8
    assert config.parse(resolved).lr_choice == exp.lr_choice


@pytest.mark.slow  # (long: run after the quick suite)
def test_final_error_is_a_key_and_ranks_by_the_last_error():
    exp = config.parse(focus_grid(best_lr_by="final_error"))
    (outcome,) = run_experiment(exp, progress=False, log=None)
    finals = {lr: outcome.runs[lr][0].relative_error[-1] for lr in GRID}
    assert outcome.best_lr == min(GRID, key=lambda lr: (finals[lr], lr))
    assert outcome.why.startswith("smallest final error")


def test_a_grid_that_never_reaches_the_tolerance_falls_back_to_the_final_error():
    exp = config.parse(focus_grid(rounds=40, tolerance=1e-12))
    (outcome,) = run_experiment(exp, progress=False, log=None)
    finals = {lr: outcome.runs[lr][0].relative_error[-1] for lr in GRID}
    assert outcome.best_lr == min(GRID, key=lambda lr: finals[lr])
    assert outcome.why.startswith("no step reaches 1e-12")


def test_choose_lr_ranks_unreached_steps_last(unchecked):
    class Run:
        diverged = False
        distance = np.ones(3)

        def __init__(self, hit, last):
            self.hit, self.final = hit, last

        def rounds_to(self, eps, metric):
            return self.hit

        def last(self, metric):
            return self.final

        def evaluated(self, metric):  # what diverging() reads of a step never reached
            return np.arange(2), np.array([1.0, self.final])

    runs = {0.1: [Run(None, 1e-3)], 0.2: [Run(50, 1e-9)], 0.3: [Run(40, 1e-9), Run(None, 1)]}
    assert choose_lr(runs, "rounds_to_tolerance", 1e-8)[0] == 0.2
    assert choose_lr(runs, "final_error", 1e-8)[0] == 0.2


@pytest.mark.parametrize(
    ("top", "needle"),
    [
        ({"best_lr_by": "speed"}, "best_lr_by must be one of"),
        ({"tolerance": 0}, "tolerance must be a positive number, got 0"),
        ({"tolerance": "1e-8"}, "tolerance must be a positive number, got '1e-8'"),
        ({"tolerance": True}, "tolerance must be a positive number, got True"),
    ],
)
def test_bad_criteria_name_the_key(top, needle):
    with pytest.raises(ConfigError, match=needle):
        config.parse(focus_grid(**top))
