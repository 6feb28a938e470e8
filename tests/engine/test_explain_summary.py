"""``str(explain(..., rounds=R))`` lists a round's segments once and sums up the rounds
that repeat them in one line, whatever R."""

import numpy as np

import stochmix as sm
from stochmix.algorithms import FedAvg
from stochmix.participation import Bernoulli, Full
from stochmix.problems import LeastSquares


def test_repeated_rounds_are_one_line():
    problem = LeastSquares.random(10, 3, 5, seed=0)
    plan = sm.explain(FedAvg(0.01, 2), problem, Bernoulli(np.full(10, 0.5), 10), rounds=60)
    text = str(plan)
    counts = [p.participants for p in plan.rounds[1:]]
    assert f"rounds 1-59, {min(counts)}-{max(counts)} participants" in text
    assert "the same segments as round 0, each over its own nodes" in text
    assert len(text.splitlines()) == 7  # header (3), round 0 (2), the rest (1), slow paths
    full = str(sm.explain(FedAvg(0.01, 2), problem, Full(10), rounds=4))
    assert "rounds 1-3, 10 participants" in full and "each over its own nodes" not in full


def test_rounds_with_nothing_to_do_are_summed_up_too():
    problem = LeastSquares.random(10, 3, 5, seed=0)
    plan = sm.explain(FedAvg(0.01, 2), problem, Bernoulli(np.full(10, 0.05), 10), rounds=8)
    empty = [p.round for p in plan.rounds if not p.segments]
    assert empty  # some rounds draw nobody: the check can fail
    lines = [line for line in str(plan).splitlines() if line.endswith("nothing to do")]
    stated = []
    for line in lines:  # "  round 3, ..." or "  rounds 4-7, ..."
        span = line.split(",")[0].split()[-1]
        lo, _, hi = span.partition("-")
        stated += list(range(int(lo), int(hi or lo) + 1))
    assert stated == empty
