"""How deep the randomized and scaled tests go: CI's depth by default, more with ``--deep``.

``scripts/test.sh --deep`` sets ``DBT_IVM_TEST_DEPTH=deep``: more seeds, cycles, examples and a larger
TPC-H scale, a bug hunt run by hand before an engine issue is closed (docs/testing.md). At CI's depth
every module keeps the numbers it had before this knob existed.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")
DEPTH_ENV = "DBT_IVM_TEST_DEPTH"


def deep() -> bool:
    value = os.environ.get(DEPTH_ENV, "ci")
    if value not in ("ci", "deep"):
        raise ValueError(f"{DEPTH_ENV}={value!r}: expected 'ci' or 'deep'")
    return value == "deep"


def by_depth(ci: T, deeper: T) -> T:
    """`ci` at CI's depth, `deeper` under ``scripts/test.sh --deep``."""
    return deeper if deep() else ci
