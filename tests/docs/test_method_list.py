"""The home page lists every registered method (written from the registry at build time),
the docs no longer say decentralized methods take full participation only, and the
screenshot script tells Chromium's own services from a page's requests."""

import sys
from pathlib import Path

from stochmix import config
from stochmix.cli import kinds_help

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT / "docs"))
import methodlist  # noqa: E402
import screenshots  # noqa: E402

sys.path.pop(0)
sys.path.pop(0)


def test_every_registered_method_is_on_the_home_page():
    assert methodlist.MARKER in (ROOT / "docs" / "index.md").read_text()
    text = methodlist.method_list()
    for kind, (constructor, _) in config.METHODS.items():
        assert f"(`{kind}`)" in text, kind
        assert f"stochmix.algorithms.{constructor.__name__}>" in text, kind
    assert f"**Federated** ({len(config.FEDERATED)})" in text


def test_no_page_says_decentralized_methods_take_full_participation_only():
    pages = {
        "cli.md": (ROOT / "docs" / "guide" / "cli.md").read_text(),
        "decentralized.toml": (ROOT / "examples" / "decentralized.toml").read_text(),
        "config docstring": config.__doc__,
        "run --help": kinds_help(),
    }
    for name, text in pages.items():
        flat = " ".join(text.split())
        assert "another kind is refused" not in flat, name
        assert "with a [graphs] table and full participation" not in flat, name
        assert "random_edge" in flat, name


def test_screenshots_count_only_a_pages_requests():
    assert not screenshots.is_remote("https://update.googleapis.com/service/update2/json")
    assert not screenshots.is_remote("https://redirector.gvt1.com/edgedl/x.crx")
    assert not screenshots.is_remote("file:///tmp/index.html")
    assert screenshots.is_remote("https://fonts.googleapis.com/css?family=Roboto")
    assert screenshots.is_remote("https://cdn.jsdelivr.net/npm/mathjax@3")
