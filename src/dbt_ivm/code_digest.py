"""A digest of the engine's own source code: what generated SQL is a function of besides its inputs.

Something installed from rendered SQL (an IMMEDIATE function) can be compared by the digest of what it
was rendered from, this digest among them, instead of by rendering it again: any change to the
engine, released or not, changes it."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


@functools.cache
def engine_digest() -> str:
    """sha256 over every Python file of the `dbt_ivm` package, by relative path (read once per process)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
