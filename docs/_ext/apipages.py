"""The API reference's pages, written from the packages' ``__all__`` at every build, so
that every public name has a page and none can be forgotten.

Each public object gets one page, under the first package (in :data:`PACKAGES` order)
that exports it; a later package that re-exports it lists it with a link.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from pathlib import Path

#: The public packages and modules, in the order the reference shows them.
PACKAGES = (
    ("stochmix", "Running, comparing and writing methods"),
    ("stochmix.algorithms", "Methods"),
    ("stochmix.problems", "Problems, stochastic gradients and data"),
    ("stochmix.participation", "Participation processes and weights"),
    ("stochmix.timing", "Simulated time: delays, clocks and asynchronous arrivals"),
    ("stochmix.mixing", "Mixing: graphs, matrices and building blocks"),
    ("stochmix.mixing.spectral", "Spectral tools"),
    ("stochmix.analysis", "Analysis: operators, fixed points and rates"),
    ("stochmix.analysis.linear", "Exact linear operators"),
    ("stochmix.analysis.certificates", "Certified worst-case rates, tuning and worst instances"),
    ("stochmix.engine", "The engine"),
    ("stochmix.engine.model", "Engine stage 1: the method model"),
    ("stochmix.engine.plan", "Engine stage 2: planning a round"),
    ("stochmix.engine.codegen", "Engine stage 3: code generation"),
    ("stochmix.engine.backends", "Engine stage 4: backends"),
    ("stochmix.engine.backends.distributed", "The distributed backend"),
    ("stochmix.engine.runner", "Engine stage 5: the run"),
    ("stochmix.config", "Configurations"),
    ("stochmix.config.plugins", "Your own kinds in configurations: entry points"),
    ("stochmix.studies", "Studies: sweeps over a configuration"),
    ("stochmix.experiments", "Running a configuration: its runs, the best step, its files"),
    ("stochmix.reporting", "Summaries and comparison tables"),
    ("stochmix.cli", "The command line"),
    ("stochmix.protocols", "Protocols: the contracts of your own parts"),
)


def public_names(module: types.ModuleType) -> list[str]:
    """The names ``module`` exports (its ``__all__``), submodules left out."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not isinstance(getattr(module, n), types.ModuleType)]


def kind(obj) -> str:
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "data"


def plan() -> list[tuple[str, str, list[tuple[str, str]], list[tuple[str, str]]]]:
    """``(package, title, own, reexported)`` per package: ``own`` the ``(name, kind)`` it
    documents, ``reexported`` the ``(name, canonical full name)`` documented elsewhere."""
    seen: dict[int, str] = {}
    pages = []
    for package, title in PACKAGES:
        module = importlib.import_module(package)
        own, again = [], []
        for name in public_names(module):
            obj = getattr(module, name)
            key = id(obj)
            if inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj):
                if key in seen:
                    again.append((name, seen[key]))
                    continue
                seen[key] = f"{package}.{name}"
            own.append((name, kind(obj)))
        pages.append((package, title, own, again))
    return pages


def write_api_pages(folder: Path) -> None:
    """Write ``folder/index.rst`` and one page per package (only files whose text
    changed are rewritten, so incremental builds stay incremental)."""
    folder.mkdir(exist_ok=True)
    index = [
        "API reference",
        "=============",
        "",
        "Every public name of stochmix, by the package that exports it. The pages are",
        "generated from the docstrings; the update rules, shapes and references are there.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    for package, title, own, again in plan():
        index.append(f"   {package}")
        lines = [f"``{package}``: {title}", "=" * (len(package) + len(title) + 6), ""]
        lines += [
            f".. automodule:: {package}",
            "   :no-members:",
            "",
            f".. currentmodule:: {package}",
            "",
        ]
        data = [n for n, k in own if k == "data"]
        for label, wanted in (("Classes", "class"), ("Functions", "function")):
            names = [n for n, k in own if k == wanted]
            if not names:
                continue
            lines += [
                label,
                "-" * len(label),
                "",
                ".. autosummary::",
                "   :toctree: generated",
                f"   :template: autosummary/{wanted}.rst",
                "",
            ]
            lines += [f"   {n}" for n in names] + [""]
        if data:
            lines += ["Data", "----", "", ".. toctree::", "   :hidden:", ""]
            lines += [f"   generated/{package}.{n}" for n in data] + [""]
            module = importlib.import_module(package)
            for name in data:
                comment = data_comment(package, name, getattr(module, name))
                first = comment.split("\n\n")[0].replace("\n", " ")
                lines.append(f"* :data:`{name}`: {first}")
                _write(
                    folder / "generated" / f"{package}.{name}.rst",
                    data_page(package, name, comment),
                )
            lines.append("")
        if again:
            lines += ["Also exported here", "------------------", ""]
            lines += [f"* ``{package}.{n}``: :obj:`{full}`" for n, full in again] + [""]
        _write(folder / f"{package}.rst", "\n".join(lines))
    _write(folder / "index.rst", "\n".join(index) + "\n")


def data_comment(package: str, name: str, value) -> str:
    """The ``#:`` comment that documents ``package.name``, read from the module of the
    package that assigns it (a constant has no ``__doc__`` of its own)."""
    from sphinx.pycode import ModuleAnalyzer
    from sphinx.util import logging

    module = importlib.import_module(package)
    candidates = [package]
    if hasattr(module, "__path__"):
        found = pkgutil.walk_packages(module.__path__, package + ".")
        candidates += [m.name for m in found if not m.name.endswith("__main__")]
    # a module that re-exports a constant (stochmix.cli's GRAPH_NODES_LIMIT): where it is set
    candidates += sorted(
        m
        for m, loaded in list(sys.modules.items())
        if m.startswith("stochmix.") and getattr(loaded, name, None) is value
    )
    for candidate in candidates:
        if (
            candidate != package
            and getattr(importlib.import_module(candidate), name, None) is not value
        ):
            continue
        docs = ModuleAnalyzer.for_module(candidate).find_attr_docs()
        found = docs.get(("", name))
        if found:
            return "\n".join(found).strip()
    logging.getLogger(__name__).warning(
        "%s.%s is public but has no '#:' comment to document it", package, name
    )
    return ""


def data_page(package: str, name: str, comment: str) -> str:
    title = f"{package}.{name}"
    body = "\n".join(f"   {line}" if line else "" for line in comment.splitlines())
    head = f"{title}\n{'=' * len(title)}\n\n.. currentmodule:: {package}\n\n"
    return f"{head}.. data:: {name}\n\n{body}\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
