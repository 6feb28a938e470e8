"""Sphinx configuration of the stochmix documentation.

Build (offline, strict): ``python -m sphinx -W -b html docs docs/_build/html``.
``STOCHMIX_DOCS_QUICK=1`` runs the gallery's examples at reduced size (what CI does: about
a minute; the full gallery takes about half an hour). An example whose optional package is
missing (:data:`NEEDS`: the digits example needs torch) is left out of the gallery.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

from apipages import write_api_pages  # noqa: E402
from gallery_argv import ExampleArgv  # noqa: E402

import stochmix  # noqa: E402

project = "stochmix"
author = "the stochmix developers"
copyright = "2026, the stochmix developers"  # noqa: A001
release = stochmix.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx-mathjax-offline",  # MathJax served from the built site: no CDN
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "methodlist",  # the home page's list of built-in methods, from the registry (_ext)
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb"]

# ---------------------------------------------------------------- MyST (the user guide)
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # the guide's pages start at h1 and may skip to h3

# MathJax is served from the built site (sphinx-mathjax-offline); its menu, whose
# accessibility options would fetch the speech-rule engine from a CDN, is off.
# ``\top`` is the transpose (^\mathsf{T}), not MathJax's thin "top" tick.
mathjax3_config = {
    "options": {"enableMenu": False},
    "tex": {"macros": {"top": "{\\mathsf{T}}"}},
}

# ----------------------------------------------------------------- API reference
# Google-style docstrings ("Args:", "Returns:", "Raises:"), read by napoleon.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True
napoleon_use_ivar = True
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the docstrings give shapes; jaxtyping reprs read badly
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = True
python_use_unqualified_type_names = True
add_module_names = False

write_api_pages(HERE / "api")

# ------------------------------------------------------------------------- gallery
QUICK = os.environ.get("STOCHMIX_DOCS_QUICK", "") not in ("", "0")


def _has(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


#: Examples that need an optional package: left out of the gallery where it is missing
#: (``pip install ".[docs]"`` brings no torch), so the build still passes.
NEEDS = {"sg_focus_digits.py": "torch"}
SKIPPED = sorted(name for name, module in NEEDS.items() if not _has(module))
if SKIPPED:
    print(f"stochmix docs: gallery without {SKIPPED} (missing {[NEEDS[n] for n in SKIPPED]})")
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/[a-z]",  # every script is run
    "ignore_pattern": "|".join([r"__init__\.py", *(name.replace(".", r"\.") for name in SKIPPED)]),
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "within_subsection_order": "FileNameSortKey",
    "reset_modules": ("matplotlib",),
    "show_memory": False,
    "plot_gallery": "True",
    "capture_repr": ("_repr_html_",),
    "first_notebook_cell": None,
    "promote_jupyter_magic": False,
    "min_reported_time": 1,
    "write_computation_times": False,  # its page loads DataTables from a CDN
    "reset_argv": ExampleArgv(QUICK),
}

# -------------------------------------------------------------------------- output
html_theme = "pydata_sphinx_theme"
html_title = f"stochmix {release}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["stochmix.css"]  # wide equations scroll (overflow-x) instead of clipping
html_context = {"default_mode": "light"}
