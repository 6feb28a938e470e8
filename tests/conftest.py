"""Test set-up: every annotated function of stochmix is shape- and type-checked at run time.

The import hook is installed for the whole session, before anything imports stochmix, which
is why it sits at the top of the root conftest.
"""

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from jaxtyping import config, install_import_hook

import tests._typecheck  # noqa: F401  (the checker the hook names)

_hook = install_import_hook("stochmix", "tests._typecheck.typecheck")

# Compiled row-wise programs go to a cache of this session's own, not the user's.
if "STOCHMIX_CACHE" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="stochmix-cache-")
    os.environ["STOCHMIX_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)


@pytest.fixture
def unchecked():
    """Run without the runtime shape checks: for the long numerical experiments, whose every
    function is also called, checked, by the rest of the suite (the checks cost more than the
    arithmetic of a small problem)."""
    config.update("jaxtyping_disable", True)
    yield
    config.update("jaxtyping_disable", False)


# Property tests draw the same examples on every run unless HYPOTHESIS_PROFILE=explore, so
# that CI is reproducible; exploring with fresh randomness is one variable away. "thorough"
# (CI's second pass) draws four times the examples of "default" (every run) and more where a
# test sets none (tests.examples sizes those that do).
settings.register_profile("default", derandomize=True)
settings.register_profile("ci", derandomize=True)  # the former name of "default"
settings.register_profile("thorough", derandomize=True, max_examples=200)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
