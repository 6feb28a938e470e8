"""Screenshots of the built site in headless Chromium, with no network: the home page, a
method page of the guide, an API page and a gallery page, to see that math and figures
render from the site's own files.

    python docs/screenshots.py [--html docs/_build/html] [--out docs/_build/screenshots]

Needs Chromium (Debian: ``apt-get install chromium``). Chromium's network log is kept
beside the PNGs, and the script fails if any page asked for anything but local files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGES = {
    "home": "index.html",
    "method": "guide/methods.html",
    "api": "api/generated/stochmix.algorithms.FOCUS.html",
    "gallery": "auto_examples/focus_figure4.html",
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--safebrowsing-disable-auto-update",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--no-pings",
    "--no-default-browser-check",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,1400",
    "--virtual-time-budget=8000",  # MathJax typesets after load
]


#: Chromium's own background services, never asked for by a page: network time and
#: sign-in (google.com and its subdomains), and the component updater, safe-browsing and
#: optimization-guide hosts that Debian's build contacts whatever its flags (exact names:
#: fonts.googleapis.com, which a page could ask for, stays remote).
BROWSER_HOSTS = ("google.com", "gvt1.com")
BROWSER_EXACT = (
    "update.googleapis.com",
    "safebrowsing.googleapis.com",
    "safebrowsingohttpgateway.googleapis.com",
    "optimizationguide-pa.googleapis.com",
    "content-autofill.googleapis.com",
    "www.googleapis.com",
)


def is_remote(url: str) -> bool:
    """Whether a page asked for ``url`` from the network (not Chromium itself)."""
    if url.startswith(("file:", "data:", "blob:", "chrome")):
        return False
    host = url.split("/")[2].split(":")[0] if "://" in url else ""
    if host in BROWSER_EXACT:
        return False
    return not any(host == h or host.endswith("." + h) for h in BROWSER_HOSTS)


def requested_urls(netlog: Path) -> set[str]:
    """The URLs of the requests in a Chromium network log."""
    text = netlog.read_text()
    if not text.rstrip().endswith("}"):  # an unfinished log ends with a comma
        text = text.rstrip().rstrip(",") + "]}"
    events = json.loads(text).get("events", [])
    return {e["params"]["url"] for e in events if "url" in e.get("params", {})}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=HERE / "_build" / "html")
    parser.add_argument("--out", type=Path, default=HERE / "_build" / "screenshots")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print(
            "screenshots: skipped: no chromium on PATH (apt-get install chromium)",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    remote = set()
    for name, page in PAGES.items():
        path = (args.html / page).resolve()
        if not path.exists():
            print(f"screenshots: {path} does not exist (build the site first)", file=sys.stderr)
            return 2
        png, netlog = args.out / f"{name}.png", args.out / f"{name}.netlog.json"
        profile = args.out / f".profile-{name}"
        shutil.rmtree(profile, ignore_errors=True)
        command = [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--log-net-log={netlog}",
            f"--screenshot={png}",
            path.as_uri(),
        ]
        if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"]).returncode == 0:
            command = ["unshare", "-rn", *command]  # no network at all, where allowed
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        shutil.rmtree(profile, ignore_errors=True)
        urls = requested_urls(netlog)
        remote |= {u for u in urls if is_remote(u)}
        print(f"{name}: {png} ({png.stat().st_size} bytes, {len(urls)} URLs requested)")
    if remote:
        print(
            "screenshots: pages asked for the network (a host of Chromium's own services "
            "belongs in BROWSER_EXACT of docs/screenshots.py; the PNGs were written):",
            *sorted(remote),
            sep="\n  ",
        )
        return 1
    print("no page asked for anything but local files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
