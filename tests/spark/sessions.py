"""SparkSessions for the Spark tests.

``shared_session``: the pytest process's one session (dbt_ivm.spark.session, Hive-metastore Iceberg
catalog), shared with integration_tests/tests/spark. ``build_session``: an Iceberg (Hadoop-type)
catalog over a local warehouse directory, for the kill-test child processes, which each own a
warehouse of their own (Derby admits one process per metastore; a Hadoop catalog needs none).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"


def iceberg_jar() -> str:
    import snowpark_connect_deps_iceberg

    return str(Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / ICEBERG_JAR)


def build_session(warehouse: str) -> Any:
    """A short-lived child's session: the product's fast-start JIT and GC (C1 only, serial GC), as a
    `dbt run` starts, since a child runs a few refreshes and exits (or is killed)."""
    from pyspark.sql import SparkSession

    from dbt_ivm.spark.session import FAST_START_JVM_OPTIONS

    Path(warehouse).mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dbt-ivm-tests")
        .config("spark.jars", iceberg_jar())
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.spark_catalog", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.spark_catalog.type", "hadoop")
        .config("spark.sql.catalog.spark_catalog.warehouse", warehouse)
        .config("spark.sql.catalog.spark_catalog.cache-enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", " ".join(FAST_START_JVM_OPTIONS))
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Where the test session's Thrift server listens if a test starts one (a static setting). Chosen once
# per pytest process, so whichever Spark fixture starts the shared session first sets the same port.
TEST_THRIFT_PORT = int(os.environ.setdefault("DBT_IVM_TEST_THRIFT_PORT", str(free_port())))


def shared_session(warehouse: Path) -> Any:
    """The pytest process's one SparkSession: dbt_ivm.spark.session's embedded Spark + Iceberg.

    Both Spark test directories (tests/spark, integration_tests/tests/spark) start it the same way;
    the first fixture to run creates it, the other gets the running session.
    """
    from dbt_ivm.spark.session import SessionSettings, get_or_create_session

    thrift = {
        "spark.hadoop.hive.server2.thrift.port": str(TEST_THRIFT_PORT),
        "spark.hadoop.hive.server2.thrift.bind.host": "127.0.0.1",
    }
    # fast_start (C1-only JIT, serial GC) is for a `dbt run` of a few minutes; this session plans and
    # runs queries for up to an hour, where the full JIT pays back its warm-up many times (20 query
    # shapes refreshed thrice: 164 s with it, 138 s without, 1.5x faster per cycle once warm).
    # DBT_IVM_TEST_SPARK_CONF="key=value,key=value": settings to try on the test session (by hand).
    extra = dict(
        item.split("=", 1) for item in os.environ.get("DBT_IVM_TEST_SPARK_CONF", "").split(",") if "=" in item
    )
    settings = SessionSettings(warehouse=warehouse, conf={**thrift, **extra}, fast_start=False)
    return get_or_create_session(settings)


def shared_warehouse(factory: Any) -> Path:
    """The shared session's warehouse (one path per pytest run, whichever fixture asks first)."""
    return Path(factory.getbasetemp()) / "spark-warehouse"
