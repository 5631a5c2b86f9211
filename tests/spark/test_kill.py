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

from dbt_ivm.spark.crash_points import KILL_POINTS
from tests.depth import by_depth

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
# CI kills the refresh around its one commit, where atomicity is at stake (before, during, after the
# MERGE that stamps the frontier); before reading changes and after the history row, nothing or
# everything is durable already: those two run under --deep (a JVM each, ~80 s of CI's longest lane).
TESTED_POINTS = by_depth(("before_merge", "during_merge", "after_merge"), KILL_POINTS)


def _child(phase: str, warehouse: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "tests.spark.kill_child", phase, str(warehouse), *arguments],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def recovered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One process prepares a schema per point; each point is killed in its schema, one process
    each; then one process recovers them all. By point: what killing it printed when it did not die
    by SIGKILL, or the recovery's output.

    Over 60 s (100 s alone, ~2.5 min in CI, the first test's setup): five child processes (seven under
    --deep), each a JVM of its own, since a SIGKILLed refresh takes its process with it."""
    warehouse = tmp_path_factory.mktemp("killed") / "warehouse"
    prepared = _child("prepare", warehouse, *TESTED_POINTS)
    assert prepared.returncode == 0, f"{prepared.stdout}\n{prepared.stderr[-3000:]}"
    outcome: dict[str, str] = {}
    for point in TESTED_POINTS:
        killed = _child("kill", warehouse, point, point)  # each point in a schema named after it
        if killed.returncode != -9:
            outcome[point] = f"not killed: {killed.returncode}\n{killed.stdout}\n{killed.stderr[-3000:]}"
    alive = [p for p in TESTED_POINTS if p not in outcome]
    recovery = _child("recover", warehouse, *alive)
    for point in alive:
        done = f"recovered {point}\n" in recovery.stdout
        outcome[point] = "recovered" if done else f"{recovery.stdout}\n{recovery.stderr[-3000:]}"
    return outcome


@pytest.mark.parametrize("point", TESTED_POINTS)
def test_killed_refresh_recovers(recovered: dict[str, str], point: str) -> None:
    assert point in KILL_POINTS
    assert recovered[point] == "recovered", recovered[point]
