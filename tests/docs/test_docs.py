"""The documentation's code runs as written: the README's quickstart prints what the README
shows, and every ``python`` block of the user guide runs, page by page, each page in a
namespace of its own (a reader may land on any page). A block that cannot run here is
written as ``{code-block} python`` (one that needs processes torchrun starts).

The site's strict build (``python -m sphinx -W``) is CI's, in ``.ci/run``: it takes minutes.
"""

import math
import re
from pathlib import Path

import pytest

from stochmix.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(p.stem for p in GUIDE.glob("*.md")) + ["../internals/how_it_works"]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def same_up_to_rounding(shown: str, printed: str) -> bool:
    """Equal text, and numbers equal within 5%, or both below 1e-12 (the last digits of a
    converged error are rounding, and rounding is not the same on every machine)."""
    if NUMBER.sub("#", shown) != NUMBER.sub("#", printed):
        return False
    for a, b in zip(NUMBER.findall(shown), NUMBER.findall(printed), strict=True):
        x, y = float(a), float(b)
        if not (math.isclose(x, y, rel_tol=0.05) or max(abs(x), abs(y)) < 1e-12):
            return False
    return True


def test_readme_quickstart_prints_what_the_readme_shows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    section = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    (code,) = python_blocks(section)
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) <= 20
    exec(compile(code, str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert same_up_to_rounding(shown.strip(), printed.strip()), printed


def test_same_up_to_rounding_can_fail():
    assert same_up_to_rounding("error 8.4e-16, rate 0.898", "error 3.1e-16, rate 0.899")
    assert not same_up_to_rounding("rate 0.898", "rate 0.700")
    assert not same_up_to_rounding("rounds: 187", "rounds: None")


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for page in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / page).exists(), page


@pytest.mark.parametrize("page", PAGES)
def test_guide_code_blocks_run(page, tmp_path, monkeypatch, capsys, unchecked):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    text = (GUIDE / f"{page}.md").read_text()
    if page == "cli":
        # "From config to figure" reads the run folder of the page's configuration
        config = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
        (tmp_path / "exp.toml").write_text(config)
        assert main(["run", "exp.toml", "--rounds", "30", "--quiet", "--no-plot"]) == 0
    namespace: dict = {}
    for block in python_blocks(text):
        if "import pandas" in block:
            pytest.importorskip("pandas")
        exec(compile(block, str(GUIDE / f"{page}.md"), "exec"), namespace)
    capsys.readouterr()
    if page == "cli":
        assert "FOCUS" in str(namespace["sm"].compare(namespace["runs"]))
    if page == "quickstart":
        assert namespace["result"].relative_error[-1] < 1e-10
    if page == "performance":  # the million clients reach 1e-10 (their time is the benchmarks')
        assert namespace["big_run"].rounds_to(1e-10) is not None
    if page == "own_method":  # the custom method runs and improves on the start
        import numpy as np

        import stochmix as sm

        problem = sm.problems.LeastSquares.random(20, 10, rows_per_client=20, seed=0)
        clients = sm.participation.Bernoulli.heterogeneous(20, 0.1, 0.9, seed=0)
        method = namespace["FedAvgMomentum"](0.5 / problem.smoothness, 5, 0.5)
        res = sm.run(method, problem, clients, 50)
        assert np.isfinite(res.server).all() and res.relative_error[-1] < 0.5


def test_every_guide_page_is_in_the_guide_index():
    index = (GUIDE / "index.md").read_text()
    for page in GUIDE.glob("*.md"):
        assert page.stem == "index" or f"\n{page.stem}\n" in index, page.stem


def test_the_command_line_page_names_every_method_kind():
    from stochmix import config

    text = (GUIDE / "cli.md").read_text()
    named = set(re.findall(r"\w+", text))  # in the configuration's comments or the text
    assert set(config.METHODS) <= named, sorted(set(config.METHODS) - named)


def test_every_public_name_has_an_api_page():
    """The API reference is written from every public package's ``__all__``
    (docs/_ext/apipages.py): no public subpackage is left out, and each of its names is
    documented there or linked to the page of the same object under another package."""
    import importlib
    import pkgutil
    import sys
    import types

    import stochmix

    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import apipages
    finally:
        sys.path.pop(0)
    listed = {package for package, _ in apipages.PACKAGES}
    for info in pkgutil.walk_packages(stochmix.__path__, "stochmix."):
        if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
            assert info.name in listed, f"{info.name} has no section in the API reference"
    for package, _, own, again in apipages.plan():
        module = importlib.import_module(package)
        names = [n for n in module.__all__ if not isinstance(getattr(module, n), types.ModuleType)]
        assert sorted(names) == sorted([n for n, _ in own] + [n for n, _ in again]), package


def test_docstrings_use_one_style():
    """Google-style sections ("Args:", "Returns:", "References:"), read by napoleon: no
    NumPy-style section (a title underlined with dashes) anywhere in the package."""
    numpy_style = re.compile(
        r"^\s*(Parameters|Returns|Yields|Raises|Notes|Examples|Attributes|References|See Also)"
        r"\n\s*-{3,}\s*$",
        re.M,
    )
    found = [
        f"{path.relative_to(ROOT)}: {m.group(1)}"
        for path in sorted((ROOT / "stochmix").rglob("*.py"))
        for m in numpy_style.finditer(path.read_text())
    ]
    assert not found, found
