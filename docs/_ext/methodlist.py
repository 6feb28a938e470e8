"""The home page's list of built-in methods, written from the configuration registry
(:data:`stochmix.config.FEDERATED`, :data:`stochmix.config.DECENTRALIZED`) at every build,
so that it cannot go stale: the line ``<!-- stochmix:methods -->`` of ``index.md`` becomes
one bullet per family, each method linked to its API page with its ``kind``."""

from __future__ import annotations

MARKER = "<!-- stochmix:methods -->"


def _entry(kind: str, constructor, fixed: dict) -> str:
    import stochmix.algorithms as algorithms

    cls = getattr(constructor, "__name__", str(constructor))
    label = getattr(constructor, "name", cls)
    if fixed:
        label += " with " + ", ".join(f"{k}={v!r}" for k, v in fixed.items())
    if hasattr(algorithms, cls):
        return f"{{py:class}}`{label} <stochmix.algorithms.{cls}>` (`{kind}`)"
    return f"{label} (`{kind}`)"


def method_list() -> str:
    """The Markdown bullets: federated, then decentralized methods, in registry order."""
    from stochmix.config import DECENTRALIZED, FEDERATED

    lines = []
    for family, table in (("Federated", FEDERATED), ("Decentralized", DECENTRALIZED)):
        entries = ", ".join(_entry(kind, *spec) for kind, spec in table.items())
        lines.append(f"- **{family}** ({len(table)}): {entries}.")
    return "\n".join(lines) + "\n"


def _fill(app, docname: str, source: list) -> None:
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, method_list())


def setup(app):
    app.connect("source-read", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
