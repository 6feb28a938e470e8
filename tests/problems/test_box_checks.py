"""Box bounds (issue 41): checked against the model's dimension when the composite problem
is made (not a broadcast error mid-run), and a box without a real point refused."""

import math

import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as alg
from stochmix import participation, problems

LS = problems.LeastSquares.random(4, 2, rows_per_client=3, seed=0)


@pytest.mark.parametrize(
    ("bounds", "needle"),
    [
        (dict(low=[0.0, 0.0, 0.0], high=1.0), r"low .*\(2\), got 3 bounds"),
        (dict(low=-1.0, high=[1.0]), r"high .*\(2\), got 1 bounds"),
    ],
)
def test_box_bounds_of_another_length_than_the_model_are_refused(bounds, needle):
    with pytest.raises(ValueError, match=needle):
        problems.Composite(LS, problems.Box(**bounds))


@pytest.mark.parametrize(
    ("bounds", "needle"),
    [
        (dict(low=math.inf), r"low must not be \+inf.*low=inf"),
        (dict(high=-math.inf), r"high must not be -inf.*high=-inf"),
        (dict(low=[0.0, math.inf], high=math.inf), r"low must not be \+inf"),
        (dict(low=[0.0, 1.0], high=[1.0, 0.5]), r"low must be <= high"),
        (dict(low=[0.0, 1.0], high=[1.0, 2.0, 3.0]), r"same length, got 2 and 3"),
    ],
)
def test_an_empty_box_is_refused(bounds, needle):
    with pytest.raises(ValueError, match=needle):
        problems.Box(**bounds)


def test_a_box_of_the_right_length_runs_to_the_clipped_points():
    """The prox clips each coordinate to its own bounds (np.clip computes the same), and
    a FedMid run on the composite problem stays in the box."""
    box = problems.Box(low=[-0.1, 0.2], high=[0.1, 0.3])
    composite = problems.Composite(LS, box)
    v = np.array([[1.0, -1.0], [0.05, 0.25]])
    np.testing.assert_array_equal(box.prox(v, 0.5), np.clip(v, [-0.1, 0.2], [0.1, 0.3]))
    result = sm.run(alg.FedMid(0.01), composite, participation.Full(4), 5)
    assert np.all(result.final >= [-0.1, 0.2]) and np.all(result.final <= [0.1, 0.3])
