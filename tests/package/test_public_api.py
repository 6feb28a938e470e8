"""The public surface is explicit: every public module says what it exports.

A module is public when no part of its dotted name starts with an underscore
(``stochmix._arrays`` and ``stochmix.problems._common`` are private; ``stochmix.__main__``
runs the command and is not imported here). Each public module lists its public names in
``__all__``: every listed name exists and none is private (``__version__`` aside). What a
user needs from a private module is re-exported by a public one.
"""

import importlib
import importlib.metadata
import pkgutil
from pathlib import Path

import pytest

import stochmix

ROOT = Path(__file__).resolve().parents[2]


def _public_modules() -> list[str]:
    names = ["stochmix"]
    for info in pkgutil.walk_packages(stochmix.__path__, prefix="stochmix."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return sorted(names)


PUBLIC = _public_modules()


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as error:  # an optional dependency missing where the tests run
        pytest.skip(f"{name} does not import here: {error}")


def test_the_walk_finds_the_package():
    assert len(PUBLIC) > 80
    expected = {"stochmix.engine", "stochmix.engine.model.equations", "stochmix.problems.base"}
    assert expected <= set(PUBLIC)
    assert not any(name.rsplit(".", 1)[-1].startswith("_") for name in PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_lists_its_public_names(name):
    module = _import(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    listed = module.__all__
    assert isinstance(listed, list | tuple), f"{name}.__all__ is a {type(listed).__name__}"
    assert all(isinstance(n, str) for n in listed), f"{name}.__all__ holds a non-string"
    duplicated = sorted({n for n in listed if listed.count(n) > 1})
    assert not duplicated, f"{name}.__all__ lists {duplicated} twice"
    missing = [n for n in listed if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names it does not have: {missing}"
    private = [n for n in listed if n.startswith("_") and n != "__version__"]
    assert not private, f"{name}.__all__ lists private names: {private}"


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from stochmix import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(stochmix.__all__)


def test_version_is_the_installed_distribution_version():
    assert "__version__" in stochmix.__all__
    assert stochmix.__version__ == importlib.metadata.version("stochmix")


@pytest.mark.parametrize(
    "where, name",
    [
        # the data store of a problem (``problem.data``), defined in problems._common
        ("stochmix.problems", "ClientData"),
        ("stochmix.problems", "client_rows"),
        # the array type of the annotations, defined in stochmix._arrays
        ("stochmix.problems", "Array"),
        # ``RunContext.phase_cache``
        ("stochmix.engine", "PhaseCache"),
        ("stochmix.engine", "RunContext"),
    ],
)
def test_what_users_need_is_public(where, name):
    module = importlib.import_module(where)
    assert name in module.__all__
    assert getattr(module, name) is not None


def test_the_package_ships_its_type_marker():
    """``py.typed`` (PEP 561) says the annotations are meant for type checkers; the build
    configuration puts it in the wheel."""
    assert (ROOT / "stochmix" / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'stochmix = ["py.typed"]' in pyproject


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("stochmix.engine.loop", "stochmix.engine.runner.loop", "run"),
        ("stochmix.engine.method", "stochmix.engine.model.method", "Method"),
        ("stochmix.engine.rowwise", "stochmix.engine.codegen.rowwise", "RowwiseProgram"),
        ("stochmix.engine.execute", "stochmix.engine.plan.round_plan", "plan_round"),
        ("stochmix.engine.execute", "stochmix.engine.backends.dispatch", "execute"),
        ("stochmix.engine.backend_names", "stochmix.engine.backends.names", "make_backend"),
    ],
)
def test_the_engine_paths_of_0_1_still_import_with_a_warning(old, new, name):
    """The engine's flat 0.1 modules moved into stage folders: the old path gives the new
    module's objects for one release, with a DeprecationWarning naming where they went."""
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    sys.modules.pop(old, None)  # the next test warns again


def test_only_the_moved_engine_paths_are_redirected():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("stochmix.engine.no_such_module")
