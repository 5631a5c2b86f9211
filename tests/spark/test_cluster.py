"""The randomized oracle suite on a real cluster, the way a dbt user with one runs it: a standalone
master and two workers, a Hive metastore service and a Spark Thrift server on loopback
(tests/spark/cluster.py), and a `method: thrift` dbt profile (thrift_child.py). The workload's writes
and the oracle's queries go through the Thrift server; `dbt run` refreshes the streams as stream
table models in a refresh driver of its own on the same cluster and metastore. Every task runs in an
executor JVM: the Iceberg runtime shipped to them, rows serialized between them, shuffles across
processes, commits from two drivers under the metastore's locks. Marked `cluster`: `-m "not
cluster"` skips it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbt_ivm.spark.session import SessionSettings
from tests.spark.cluster import CLUSTER_CONF, hive_metastore, standalone_cluster, thrift_server

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


def test_stream_tables_through_a_thrift_server_on_a_cluster(tmp_path: Path) -> None:
    """Over 60 s (about 3 min in CI): a master, two workers, a metastore service and a Thrift server
    start (each a JVM), and `dbt run` creates and refreshes the streams three times through them."""
    warehouse = str(tmp_path / "warehouse")
    # Two cores and 2 GB per worker: room for the executors of two applications at once.
    with (
        standalone_cluster(tmp_path / "cluster", workers=2, cores=2, memory="2g") as master,
        hive_metastore(tmp_path / "metastore") as metastore_uris,
    ):
        settings = SessionSettings(
            warehouse=warehouse,
            master=master,
            metastore_uris=metastore_uris,
            app_name="thrift-server",
            conf=CLUSTER_CONF,
        )
        with thrift_server(tmp_path / "thrift", settings) as port:
            env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
            arguments = [master, metastore_uris, str(port), warehouse, str(tmp_path / "project")]
            child = subprocess.run(
                [sys.executable, "-m", "tests.spark.thrift_child", *arguments],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
    if child.returncode != 0:  # in full: an assertion's message would be cut short
        pytest.fail(
            f"the child exited {child.returncode}\n--- stdout ---\n{child.stdout[-3000:]}\n"
            f"--- stderr ---\n{child.stderr[-5000:]}",
            pytrace=False,
        )
    assert "thrift ok" in child.stdout and "executors 2" in child.stdout, child.stdout
    # Created once, then only differential refreshes (or skips): no FULL, no rebuild.
    actions = child.stdout.split("actions ", 1)[1].splitlines()[0]
    assert "CREATE" in actions and "DIFFERENTIAL" in actions, actions
    assert "FULL" not in actions and "REBUILD" not in actions, actions
