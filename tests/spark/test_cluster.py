"""The randomized oracle suite on a real cluster: a standalone master and two workers on loopback
(tests/spark/cluster.py), the refresh's driver in a child process (cluster_child.py). Every task runs
in an executor JVM: the Iceberg runtime shipped to them, rows serialized between them, shuffles
across processes. Marked `cluster`: `-m "not cluster"` skips it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


def test_randomized_suite_on_a_standalone_cluster(tmp_path: Path) -> None:
    with standalone_cluster(tmp_path / "cluster", workers=2) as master:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        child = subprocess.run(
            [sys.executable, "-m", "tests.spark.cluster_child", master, str(tmp_path / "warehouse")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    assert child.returncode == 0, (child.stdout[-3000:], child.stderr[-5000:])
    assert "executors 2" in child.stdout and "cluster ok" in child.stdout, child.stdout
