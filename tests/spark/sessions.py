"""An embedded SparkSession with an Iceberg (Hadoop-type) catalog over a local warehouse directory.

The tests' own builder, used by the session fixture and by the kill-test child processes, so both
see the same catalog. Table metadata caching is off: a child process commits behind this session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"


def iceberg_jar() -> str:
    import snowpark_connect_deps_iceberg

    return str(Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / ICEBERG_JAR)


def build_session(warehouse: str) -> Any:
    from pyspark.sql import SparkSession

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
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
