"""``Problem.closed_form_rows``: the closed-form metrics at many models at once equal the
point-by-point ``objective_gap`` and ``gradient`` to rounding; what the recorder does with
them (and without them)."""

import numpy as np
import pytest

from stochmix import problems
from stochmix.engine.runner.recorder import Recorder


def _cases():
    least_squares = problems.LeastSquares.random(8, 5, rows_per_client=4, seed=1, reg=0.1)
    return {
        "least squares": least_squares,
        "diagonal quadratic": problems.Quadratic.random(8, 5, seed=1, diagonal=True),
        "full quadratic": problems.Quadratic.random(8, 5, seed=1, diagonal=False),
        "composite, L1": problems.Composite(least_squares, problems.L1(0.3)),
        "composite, elastic net": problems.Composite(
            problems.Quadratic.random(8, 5, seed=2), problems.ElasticNet(0.2, 0.5)
        ),
        "composite, group lasso": problems.Composite(
            least_squares, problems.GroupLasso(0.2, groups=[0, 0, 1, 1, 2])
        ),
        "minibatch": least_squares.minibatch(2, seed=0),
    }


@pytest.mark.parametrize("case", sorted(_cases()))
def test_the_rows_equal_the_point_by_point_metrics(case):
    problem = _cases()[case]
    models = np.random.default_rng(3).standard_normal((7, 5))
    gaps = problem.closed_form_rows("objective", models)
    norms = problem.closed_form_rows("gradient_norm", models)
    assert gaps.shape == norms.shape == (7,)
    want_gaps = [problem.objective_gap(x) for x in models]
    want_norms = [np.linalg.norm(problem.gradient(x)) for x in models]
    np.testing.assert_allclose(gaps, want_gaps, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(norms, want_norms, rtol=1e-12, atol=1e-14)


def test_an_indicator_outside_its_set_gives_an_infinite_gap_as_point_by_point():
    problem = problems.Composite(problems.Quadratic.random(8, 3, seed=2), problems.Box(-0.1, 0.1))
    models = np.array([[0.0, 0.05, -0.05], [0.0, 0.5, 0.0]])
    gaps = problem.closed_form_rows("objective", models)
    assert np.isfinite(gaps[0]) and gaps[1] == np.inf == problem.objective_gap(models[1])
    np.testing.assert_allclose(gaps[0], problem.objective_gap(models[0]), rtol=1e-12)


def test_a_problem_without_them_gives_none_and_the_recorder_goes_row_by_row():
    problem = problems.Logistic.random(6, 3, seed=1)
    models = np.random.default_rng(0).standard_normal((4, 3)) * 0.1
    assert problem.closed_form_rows("objective", models) is None
    recorder = _recorder(problem)
    got = recorder.evaluate_rows("gradient_norm", models)
    np.testing.assert_array_equal(got, [np.linalg.norm(problem.gradient(x)) for x in models])


def test_the_recorder_takes_the_rows_where_the_problem_gives_them(monkeypatch):
    problem = problems.LeastSquares.random(8, 5, seed=1)
    calls = []
    original = problem.closed_form_rows

    def counted(name, models):
        calls.append((name, models.shape))
        return original(name, models)

    monkeypatch.setattr(problem, "closed_form_rows", counted)
    recorder = _recorder(problem)
    models = np.random.default_rng(0).standard_normal((6, 5))
    got = recorder.evaluate_rows("objective", models)
    assert calls == [("objective", (6, 5))]
    np.testing.assert_allclose(got, [problem.objective_gap(x) for x in models], rtol=1e-12)


def test_a_bad_metric_name_is_refused_naming_it():
    problem = problems.LeastSquares.random(4, 3, seed=1)
    with pytest.raises(ValueError, match="name must be .*'distance'"):
        problem.closed_form_rows("distance", np.zeros((2, 3)))
    composite = problems.Composite(problem, problems.L1(0.1))
    with pytest.raises(ValueError, match="name must be .*'gradient'"):
        composite.closed_form_rows("gradient", np.zeros((2, 3)))


def _recorder(problem):
    class _Ctx:
        n_clients, dim = problem.n_clients, problem.dim

    return Recorder(problem, object(), _Ctx(), ("objective", "gradient_norm"), 3, 1, 1)


class _ShiftedGap(problems.LeastSquares):
    """Least squares whose objective gap is reported shifted by one (a user's rewrite)."""

    def objective_gap(self, x):
        return super().objective_gap(x) + 1.0


def test_a_subclass_that_rewrites_the_pointwise_metric_is_measured_by_its_rewrite():
    # the rows of the parent class would give the parent's gap: the recorder goes point
    # by point, directly and through a composite problem over the subclass
    rng = np.random.default_rng(1)
    problem = _ShiftedGap(rng.standard_normal((6, 4, 3)), rng.standard_normal((6, 4)))
    models = np.random.default_rng(0).standard_normal((4, 3))
    got = _recorder(problem).evaluate_rows("objective", models)
    np.testing.assert_allclose(got, [problem.objective_gap(x) for x in models], rtol=1e-12)
    composite = problems.Composite(problem, problems.L1(0.1))
    assert composite.closed_form_rows("objective", models) is None
    problem.gradient = lambda x: np.zeros(3)  # an instance's rewrite too
    np.testing.assert_array_equal(_recorder(problem).evaluate_rows("gradient_norm", models), 0.0)


def test_a_point_on_a_box_bound_in_float32_is_on_the_box():
    # float32(-0.15) lies 6e-9 below -0.15: a float32 run's model clipped to the bound
    box = problems.Box(-0.15, 0.2)
    assert box.value(np.array([np.float32(-0.15), 0.1])) == 0.0
    assert box.value(np.array([-0.15 - 1e-6, 0.1])) == np.inf
    bounds = problems.Box(np.array([-0.15, 0.0]), np.array([0.2, 1.0]))
    assert bounds.value(np.array([np.float32(-0.15), 0.5])) == 0.0
    assert bounds.value(np.array([-0.2, 0.5])) == np.inf
    assert problems.NonNegative().value(np.array([-1e-3, 1.0])) == np.inf
