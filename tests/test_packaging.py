"""The wheel ships the adapters and the single-sourced macros without owning dbt's namespace packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contents(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("dbt_ivm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "dbt/adapters/ivm_postgres/__init__.py" in names
    assert "dbt/include/ivm/dbt_project.yml" in names
    assert "dbt/include/ivm/macros/materializations/stream_table.sql" in names
    assert "dbt_ivm/plan/build.py" in names
    # dbt-core and dbt-adapters own these; shipping them would break their namespace packages.
    for owned in ("dbt/__init__.py", "dbt/adapters/__init__.py", "dbt/include/__init__.py"):
        assert owned not in names
    macro_sources = {p.relative_to(ROOT / "macros").as_posix() for p in (ROOT / "macros").rglob("*.sql")}
    shipped = {
        n.removeprefix("dbt/include/ivm/macros/") for n in names if n.startswith("dbt/include/ivm/macros/")
    }
    assert macro_sources <= shipped
