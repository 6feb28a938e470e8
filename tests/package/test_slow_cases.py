"""The quick run's list of slow variants (``tests/conftest.py``, ``SLOW_CASES``) must not
go stale: a pattern that matches no test of a file collected whole is refused, so that a
renamed test can neither leave the quick run silently nor stay in it unmarked."""

from types import SimpleNamespace

import pytest

from tests import conftest


def _items(*nodeids):
    return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_a_pattern_of_a_collected_file_that_matches_nothing_is_refused(monkeypatch):
    monkeypatch.setattr(conftest, "SLOW_CASES", ("*/test_a.py::test_gone", "*/test_b.py::x"))
    config = SimpleNamespace(args=["tests"])
    items = _items("tests/test_a.py::test_here")
    with pytest.raises(pytest.UsageError, match="test_a.py::test_gone"):
        conftest._check_slow_cases(config, items, set())
    # a file not collected, or a command naming single tests: nothing to say
    conftest._check_slow_cases(config, _items("tests/test_c.py::t"), set())
    conftest._check_slow_cases(SimpleNamespace(args=["tests/test_a.py::t"]), items, set())
    # a pattern that matched
    conftest._check_slow_cases(config, items, {"*/test_a.py::test_gone"})
