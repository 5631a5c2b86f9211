"""Atomicity: SIGKILL a refresh after it read the sources' snapshots, before, during and after the
MERGE commit that also stamps the new frontier, and after the history row.

The next refresh must leave the stream table equal to its query and never apply a batch twice
(an aggregate's sums and counts would show a double application). Both phases run in child
processes on their own warehouse (see kill_child.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbt_ivm.spark.runner import KILL_POINTS

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TESTED_POINTS = KILL_POINTS


def _child(phase: str, warehouse: Path, kill_at: str = "") -> subprocess.CompletedProcess[str]:
    # during_merge: killed by a timer this far into the MERGE, which takes seconds on Spark.
    env = {**os.environ, "DBT_IVM_SPARK_KILL_AT": kill_at, "DBT_IVM_SPARK_KILL_DELAY": "0.2"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "tests.spark.kill_child", phase, str(warehouse)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("point", TESTED_POINTS)
def test_killed_refresh_recovers(tmp_path: Path, point: str) -> None:
    assert point in KILL_POINTS
    warehouse = tmp_path / "warehouse"
    killed = _child("prepare", warehouse, point)
    assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr[-3000:])
    recovered = _child("recover", warehouse)
    assert recovered.returncode == 0, (recovered.returncode, recovered.stdout, recovered.stderr[-3000:])
    assert "recovered" in recovered.stdout
