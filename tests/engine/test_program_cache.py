"""The compiled-program cache trusts only a private folder, never runs a file's text, and
serves threads that start the same structure at once."""

import os
import stat
import sys
import threading

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import FOCUS
from stochmix.engine.codegen import cache as programs
from stochmix.engine.codegen import disk_cache

pytest.importorskip("numba")


def _forget_programs():
    """Start as a new process would: no program in memory."""
    programs._ROWWISE.clear()
    programs._PROGRAMS.clear()
    disk_cache._REFUSED.clear()
    for name in [m for m in sys.modules if m.startswith("stochmix_program_")]:
        del sys.modules[name]


def _run():
    problem = sm.problems.Quadratic.random(30, 2, seed=1)
    process = sm.participation.UniformSample(30, 7)
    res = sm.run(FOCUS(0.002, 2), problem, process, 4, metrics=(), compiled=True, progress=False)
    return res.server


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("STOCHMIX_CACHE", str(root))
    _forget_programs()
    yield root / "programs"
    _forget_programs()


def test_a_new_cache_is_private(cache):
    _run()
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / "__pycache__").st_mode) == 0o700
    entries = list(cache.glob("stochmix_program_*.py"))
    assert entries and all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in entries)
    assert not list(cache.glob(".*.tmp"))


@pytest.mark.parametrize("how", ["writable by others", "another owner", "a link"])
def test_a_folder_others_control_is_refused_and_the_run_compiles_in_memory(cache, how, tmp_path):
    expected = _run()
    _forget_programs()
    if how == "writable by others":
        os.chmod(cache, 0o777)
    elif how == "another owner":
        if os.getuid() != 0:
            pytest.skip("changing a folder's owner needs root")
        os.chown(cache, 54321, 54321)
    else:
        target = tmp_path / "elsewhere"
        cache.rename(target)
        cache.symlink_to(target, target_is_directory=True)
    with pytest.warns(RuntimeWarning, match="not using the program cache"):
        got = _run()
    np.testing.assert_array_equal(got, expected)
    assert not any(m.startswith("stochmix_program_") for m in sys.modules)


def test_a_tampered_entry_never_runs(cache, tmp_path):
    expected = _run()
    marker = tmp_path / "ran"
    entries = list(cache.glob("stochmix_program_*.py"))  # the run's structures
    assert entries
    for entry in entries:
        entry.write_text(f"open({str(marker)!r}, 'w').close()\n" + entry.read_text())
    _forget_programs()
    got = _run()
    assert not marker.exists()
    np.testing.assert_array_equal(got, expected)
    for entry in entries:  # rewritten with the program's own text
        assert "open(" not in entry.read_text()


def test_a_program_module_is_found_by_name_after_it_left_sys_modules(cache):
    """Numba's cache imports a program's module by name (``importlib.import_module``, in
    ``numba.core.environment._rebuild_env``) when it loads machine code for a dispatcher
    made earlier; code that tidies sys.modules in between (as _forget_programs does) must
    not make that load fail (it once did, under xdist, at random: a gossip segment's loop,
    kept by segment_kernel.batch_function, met a cache entry another worker wrote)."""
    import importlib

    _run()
    names = [m for m in sys.modules if m.startswith("stochmix_program_")]
    assert names
    modules = {name: sys.modules.pop(name) for name in names}
    try:
        for name, module in modules.items():
            assert importlib.import_module(name) is module
    finally:
        for name in names:
            sys.modules.pop(name, None)


@pytest.mark.slow
@pytest.mark.parametrize("warm", [False, True], ids=["cold cache", "warm cache"])
def test_threads_starting_one_structure_all_succeed(cache, warm):
    expected = _run()
    for _ in range(20 if warm else 6):  # a cold start compiles: 1.3 s a try
        _forget_programs()
        if not warm:
            for path in cache.rglob("*"):
                if path.is_file():
                    path.unlink()
        results, errors = [None] * 4, []

        def work(k, results=results, errors=errors):
            try:
                results[k] = _run()
            except Exception as error:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(error))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for got in results:
            np.testing.assert_array_equal(got, expected)
