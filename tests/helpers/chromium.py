"""Headless chromium (Debian's `chromium`) for the report.html tests and the report benchmark.

`find_chromium()` gives the binary or None; `dump_dom(page, fragment)` loads the page with a URL
fragment (browser.js reads its filters from it) and returns the DOM after the scripts ran;
`screenshot(page, png)` writes a PNG. Each call uses a fresh profile directory and the flags that
keep chromium off the network.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class ChromiumError(RuntimeError):
    """Chromium exited with an error or produced nothing (the message holds its stderr tail)."""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(arguments: list[str], timeout: float) -> subprocess.CompletedProcess:
    binary = find_chromium()
    if binary is None:
        raise ChromiumError("no chromium on PATH")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *arguments],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if done.returncode != 0:
        raise ChromiumError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def url(page: Path, fragment: str = "") -> str:
    return Path(page).resolve().as_uri() + (f"#{fragment}" if fragment else "")


def dump_dom(page: Path, fragment: str = "", *, size=(1400, 1200), timeout: float = 120) -> str:
    """The serialised DOM of `page#fragment` after its scripts ran."""
    done = _run([f"--window-size={size[0]},{size[1]}", "--dump-dom", url(page, fragment)], timeout)
    if "<html" not in done.stdout:
        raise ChromiumError(f"chromium printed no DOM: {done.stderr[-2000:]}")
    return done.stdout


def screenshot(
    page: Path, png: Path, fragment: str = "", *, size=(1400, 1100), timeout: float = 120
) -> Path:
    """A PNG of `page#fragment` at `size`, written to `png`."""
    png = Path(png).resolve()
    _run(
        [
            f"--window-size={size[0]},{size[1]}",
            f"--screenshot={png}",
            "--hide-scrollbars",
            url(page, fragment),
        ],
        timeout,
    )
    if not png.is_file() or png.stat().st_size == 0:
        raise ChromiumError(f"chromium wrote no screenshot to {png}")
    return png
