"""Child process of test_cluster: the randomized oracle suite through a `method: thrift` dbt profile.

    python -m tests.spark.thrift_child MASTER METASTORE_URIS THRIFT_PORT WAREHOUSE PROJECT_DIR

Every statement of the workload and of the oracle goes to the Thrift server (a driver of its own on
the cluster); `dbt run` builds and refreshes the streams as stream table models, with the refresh
driver dbt starts in this process, on the same cluster and metastore. Prints how many executors the
refresh driver had, then "thrift ok".
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from tests.depth import by_depth
from tests.spark.cluster import CLUSTER_CONF
from tests.spark.test_randomized import STEPS, create_sources, stream_queries

# Two `dbt run`s after the first (a refresh on state a refresh wrote); the in-process randomized
# suite takes three.
CYCLES = by_depth(2, 3)
SOURCES = "thrift_sources"
STREAMS = "thrift_streams"


class ThriftSql:
    """Statements through a PyHive connection to the Thrift server."""

    def __init__(self, port: int) -> None:
        from pyhive import hive

        self.cursor = hive.connect(host="127.0.0.1", port=port, username="dbt").cursor()

    def run(self, sql: str) -> None:
        self.cursor.execute(sql)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        self.cursor.execute(sql)
        return list(self.cursor.fetchall())

    def columns(self, relation: str) -> list[str]:
        self.cursor.execute(f"SELECT * FROM {relation} LIMIT 0")
        self.cursor.fetchall()
        return [str(d[0]).split(".")[-1] for d in self.cursor.description]


def write_project(project: Path, profile: dict[str, Any], queries: dict[str, str]) -> None:
    models = project / "models"
    models.mkdir(parents=True, exist_ok=True)
    (project / "dbt_project.yml").write_text(
        "name: thrift_streams\nversion: '1.0'\nconfig-version: 2\nprofile: thrift_streams\n"
    )
    (project / "profiles.yml").write_text(
        json.dumps({"thrift_streams": {"target": "t", "outputs": {"t": profile}}})
    )
    config = "{{ config(materialized='stream_table', refresh_mode='differential') }}\n"
    for name, sql in queries.items():
        (models / f"{name}.sql").write_text(config + sql)


def dbt_run(project: Path) -> None:
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(["run", "--project-dir", str(project), "--profiles-dir", str(project)])
    assert result.success, result.exception or _failed_models(result.result)


def _failed_models(run: Any) -> Any:
    """Each model that did not succeed, with dbt's message (what a failed run's summary says)."""
    results = getattr(run, "results", None)
    if not results:
        return run
    return [(r.node.name, str(r.status), r.message) for r in results if str(r.status) != "success"]


def check(thrift: ThriftSql, queries: dict[str, str], context: str) -> None:
    """The oracle, through the Thrift server: each stream table equals its query as a multiset."""
    for name, sql in queries.items():
        relation = f"{STREAMS}.{name}"
        columns = [c for c in thrift.columns(relation) if not c.startswith("__ivm_")]
        stored = f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM {relation}"
        extra = thrift.rows(f"{stored} EXCEPT ALL ({sql})")
        missing = thrift.rows(f"({sql}) EXCEPT ALL {stored}")
        assert not extra and not missing, (
            f"{relation} ({context}): extra {extra[:20]}, missing {missing[:20]}"
        )


def main() -> None:
    master, metastore_uris, port, warehouse, project_dir = sys.argv[1:6]
    seed = int(os.environ.get("DBT_IVM_SPARK_SEED", "20240611"))
    thrift = ThriftSql(int(port))
    thrift.run(f"CREATE DATABASE {SOURCES}")
    workload = create_sources(thrift.run, SOURCES, random.Random(seed))
    queries = stream_queries(SOURCES)
    project = Path(project_dir)
    profile = {
        "type": "ivm_spark",
        "method": "thrift",
        "host": "127.0.0.1",
        "port": int(port),
        "user": "dbt",
        "schema": STREAMS,
        "threads": 2,
        "metastore_uris": metastore_uris,
        "warehouse": warehouse,
        "master": master,
        "refresh_driver_conf": CLUSTER_CONF,
    }
    write_project(project, profile, queries)
    dbt_run(project)
    check(thrift, queries, f"seed {seed} create")
    for cycle in range(CYCLES):
        done = [workload.step() for _ in range(STEPS)]
        dbt_run(project)
        check(thrift, queries, f"seed {seed} cycle {cycle}: {done}")
    actions = thrift.rows("SELECT action, count(*) FROM dbt_ivm.refresh_history GROUP BY action")
    print(f"actions {sorted(actions)}")
    from pyspark.sql import SparkSession

    driver = SparkSession._instantiatedSession
    assert driver is not None, "dbt started no refresh driver"
    print(f"executors {driver.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1}")
    print("thrift ok")


if __name__ == "__main__":
    main()
