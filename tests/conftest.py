"""Engine-test fixtures.

`pg_server` is overridden here because the root fixture puts the cluster under pytest's temp root,
which pytest creates 0700 (and re-tightens at the start of every session). Under root the server
runs as an unprivileged user whose group is still root's, so it cannot reach a data directory there.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG15_BIN = "/usr/lib/postgresql/15/bin"


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[object]:
    """One throwaway PostgreSQL cluster for the engine tests, in a directory the server can reach."""
    from dbt_ivm.embedded import postgres_server

    value = str(request.config.getoption("--pg-bin") or "")
    bin_dir = PG15_BIN if value == "15" else (value or None)
    base = Path(tempfile.mkdtemp(prefix="dbt_ivm_tests_"))
    base.chmod(0o755)
    server = postgres_server.start(base / "data", bin_dir=bin_dir)
    yield server
    postgres_server.destroy(base / "data")
    shutil.rmtree(base, ignore_errors=True)
