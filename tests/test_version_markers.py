"""CI reruns the PostgreSQL tests marked `server_version` on PostgreSQL 15 (scripts/suite.py), not the
whole suite: these checks keep that subset from missing what depends on the server's version.

- A test module that reads the server's version (``server_version``, ``server_version_num``) or
  picks a server build must carry the marker in its ``pytestmark``.
- Each engine module that reads the server's version is named in `VERSION_READERS`, with the marked
  test modules that exercise both of its branches; a new reader fails here until it is listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A read of the version (`conn.server_version`, `SHOW server_version_num`) or a choice of server build;
# not the marker itself (`pytest.mark.server_version`).
READS_VERSION = re.compile(r"(?<!mark)\.server_version\b|server_version_num|PG15_BIN|pg_bin")
MARKER = "server_version"

# Engine module -> the marked test modules that run its version-dependent branches.
VERSION_READERS = {
    # MERGE … RETURNING merge_action() from PostgreSQL 17, a staged apply before: every refresh.
    "src/dbt_ivm/postgres/apply.py": ["tests/postgres/test_randomized.py", "tests/postgres/test_modes.py"],
}


def _marked(path: Path) -> bool:
    """Whether the module's `pytestmark` names the marker (a single mark or a list of them)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return any(isinstance(n, ast.Attribute) and n.attr == MARKER for n in ast.walk(node.value))
    return False


def _helpers(path: Path) -> list[Path]:
    """The tests.postgres helper modules a test module imports (a reader of the version may be one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.postgres."):
            helper = ROOT / (node.module or "").replace(".", "/")
            if helper.with_suffix(".py").exists():
                found.append(helper.with_suffix(".py"))
    return found


POSTGRES_TEST_MODULES = sorted(
    [
        *(ROOT / "tests" / "postgres").glob("test_*.py"),
        *(ROOT / "integration_tests" / "tests" / "postgres").glob("test_*.py"),
    ]
)


@pytest.mark.parametrize("path", POSTGRES_TEST_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_reading_the_version_is_marked(path: Path) -> None:
    readers = [p for p in [path, *_helpers(path)] if READS_VERSION.search(p.read_text())]
    if readers and not _marked(path):
        pytest.fail(
            f"{path.relative_to(ROOT)} depends on the server version ({', '.join(str(p.relative_to(ROOT)) for p in readers)} "
            f"reads it) but its pytestmark lacks pytest.mark.{MARKER}: add it, so CI reruns it on PostgreSQL 15"
        )


def test_every_engine_reader_of_the_version_is_exercised_on_both_sides() -> None:
    readers = {
        str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.py") if "server_version" in p.read_text()
    }
    assert readers == set(VERSION_READERS), (
        f"engine modules reading the server version: {sorted(readers)}; listed in VERSION_READERS: "
        f"{sorted(VERSION_READERS)} — list each with the marked test modules that run its branches"
    )
    for reader, tests in VERSION_READERS.items():
        unmarked = [t for t in tests if not _marked(ROOT / t)]
        assert not unmarked, f"{reader} is exercised by {unmarked}, which lack pytest.mark.{MARKER}"
