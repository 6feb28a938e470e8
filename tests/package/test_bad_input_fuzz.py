"""Random wrong types and values at every audited public entry.

For every entry of the audit table (``SPECS`` in ``test_validation.py``: participation
processes, weight rules, mixing builders, graph sequences, checks, spectral tools, problems,
partitioners, analysis functions, the algorithms' constructors), hypothesis replaces some
of its keyword arguments by random values: integers (negative ones included), floats
(NaN and inf included), bools, complex numbers, strings, None, lists, ragged lists and
arrays of odd shapes and dtypes. The call must either succeed or raise a ``TypeError`` or
``ValueError`` whose message names one of the arguments passed; any other exception
(AttributeError, IndexError, ZeroDivisionError, NumPy's own errors, ...) fails.

The library's own checks are what is tested, so the suite's runtime type checker is off
while the calls run. Examples are drawn from a fixed sequence (the suite's hypothesis
profile); a few dozen per entry keep the whole file at a few seconds.
"""

import os
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jaxtyping import config as jaxtyping_config

from tests import examples
from tests.package.test_validation import SPECS

NUMBERS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([0, 1, 2, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, 1.5, -0.5, 2.0, float("nan"), float("inf")]),
    st.booleans(),
    st.complex_numbers(max_magnitude=4),
)
DTYPES = st.sampled_from(
    [np.bool_, np.int8, np.int64, np.uint8, np.float32, np.float64, np.complex128, "<U2"]
)
ARRAYS = hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
VALUES = st.one_of(
    NUMBERS,
    st.text(max_size=3),
    st.none(),
    st.lists(NUMBERS, max_size=5),
    st.lists(st.lists(st.integers(-1, 4) | st.floats(-1, 2), max_size=3), max_size=3),
    st.tuples(st.integers(-2, 5), st.integers(-2, 5)),
    ARRAYS,
)

ENTRIES = [spec for spec in SPECS if spec[3]]


def _names(message: str, kwargs: dict) -> bool:
    """Whether ``message`` names one of the arguments passed (or, for the stochasticity
    checks, the matrix by the ``name`` it was given)."""
    names = list(kwargs)
    if isinstance(kwargs.get("name"), str) and kwargs["name"].strip():
        names.append(kwargs["name"])
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", message) for a in names)


@pytest.mark.parametrize(
    ("entry", "fn", "base", "arguments"), ENTRIES, ids=[spec[0] for spec in ENTRIES]
)
@settings(
    max_examples=int(os.environ.get("STOCHMIX_FUZZ_EXAMPLES", examples(30))),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_random_bad_arguments_get_a_clear_error(entry, fn, base, arguments, data):
    names = sorted(arguments)
    chosen = data.draw(
        st.lists(st.sampled_from(names), min_size=1, max_size=min(3, len(names)), unique=True),
        label="arguments",
    )
    kwargs = dict(base)
    for name in chosen:
        kwargs[name] = data.draw(VALUES, label=name)
    jaxtyping_config.update("jaxtyping_disable", True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow and the like: not what is tested here
            fn(**kwargs)
    except (TypeError, ValueError) as error:
        message = str(error)
        assert _names(message, kwargs), (
            f"{entry}({chosen}): {type(error).__name__} names no argument: {message}"
        )
    finally:
        jaxtyping_config.update("jaxtyping_disable", False)
