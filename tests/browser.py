"""A real headless browser (Debian's chromium) for the tests of pages dbt-ivm writes.

`open_page` loads a local file as a user's browser would, with the network turned off, and returns
the DOM after its scripts ran plus a screenshot. Without chromium the caller skips, saying so; CI
installs it (.ci/run), where a missing browser fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

# Flags for a sandboxed root process on a closed network: no first-run, sync or update traffic.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9",  # nothing may be fetched: a page that needs the network shows it
)


@dataclass(frozen=True)
class Loaded:
    dom: str
    screenshot: Path


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium for this test")
        pytest.skip("no chromium installed (Debian: apt-get install chromium); the page test needs one")
    return found


def open_page(page: Path, screenshot: Path, size: tuple[int, int] = (1400, 1000)) -> Loaded:
    browser = chromium()
    with tempfile.TemporaryDirectory() as profile:
        common = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"]
        dom = subprocess.run(
            [*common, "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        subprocess.run(
            [*common, f"--screenshot={screenshot}", page.as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )
    return Loaded(dom, screenshot)
