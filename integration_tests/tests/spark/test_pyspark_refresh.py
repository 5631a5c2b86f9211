"""`dbt_ivm.spark.refresh` from a plain PySpark program: `dbt build` creates the demo's stream tables
in one process, a PySpark script in another changes the sources and refreshes them without dbt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

PROJECT = Path(__file__).resolve().parents[2]
PIPELINE = Path(__file__).with_name("pyspark_pipeline.py")
SCHEMA = "shop"


def _run(command: list[str], cwd: Path) -> str:
    completed = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=900, env=dict(os.environ), check=False
    )
    assert completed.returncode == 0, (completed.stdout[-4000:], completed.stderr[-4000:])
    return completed.stdout


def test_a_pyspark_script_refreshes_what_dbt_built(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("tests", ".ivm", "target", "logs"))
    warehouse = tmp_path / "warehouse"
    (tmp_path / "profiles.yml").write_text(
        "dbt_ivm_demo:\n  target: spark\n  outputs:\n    spark:\n      type: ivm_spark\n"
        f"      method: session\n      schema: {SCHEMA}\n      warehouse: {warehouse}\n"
    )
    dbt = str(Path(sys.executable).with_name("dbt"))
    _run([dbt, "build", "--profiles-dir", str(tmp_path)], project)

    output = _run([sys.executable, str(PIPELINE), str(warehouse), SCHEMA], tmp_path)
    report = json.loads(output.strip().splitlines()[-1])
    for name in ("customer_totals", "order_details"):
        done = report[name]
        assert done["differ"] == 0, (name, done)
        assert done["first"][0] == "DIFFERENTIAL" and done["first"][1] > 0, (name, done)
        assert done["second"][:2] == ["SKIP", 0], (name, done)
    by_whom = {(row[0], row[1], row[2]) for row in report["history"]}
    assert (f"{SCHEMA}.customer_totals", "CREATE", "dbt") in by_whom, by_whom
    assert (f"{SCHEMA}.customer_totals", "DIFFERENTIAL", "pyspark") in by_whom, by_whom
