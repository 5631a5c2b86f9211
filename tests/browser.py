"""A real headless browser (Debian's chromium) for the tests of pages dbt-ivm writes.

`open_page` loads a local file as a user's browser would, with the network turned off, and returns
the DOM after its scripts ran plus a screenshot. Without chromium the caller skips, saying so; CI
installs it (.ci/run), where a missing browser fails instead.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
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


def png_colours(path: Path) -> set[tuple[int, int, int]]:
    """Every RGB colour in an 8-bit RGB or RGBA PNG (what chromium's screenshots are), decoded with
    the standard library: the scanlines inflated and unfiltered (PNG's five filters)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    position, chunks, header = 8, [], b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), f"{path}: bit depth {depth}, colour type {colour_type}"
    step = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * step
    previous, found = bytearray(stride), set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                near = min(
                    (abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner)
                )
                line[i] = (line[i] + near[2]) & 0xFF
        found.update(tuple(line[i : i + 3]) for i in range(0, stride, step))
        previous = line
    return found
