"""The embedded SparkSession: Spark 3.5 + Apache Iceberg over a local warehouse directory.

    spark = get_or_create_session(SessionSettings(warehouse="/path/to/warehouse"))

One session per process. When a SparkSession already exists (a PySpark application calling dbt, a
test session), it is returned as it is: its catalogs are the caller's business.

Catalog layout. The built-in session catalog ``spark_catalog`` is Iceberg's SparkSessionCatalog over
a Hive metastore kept in an embedded Derby database inside the warehouse directory:

* ``schema.table`` (dbt's two-part names) resolves in ``spark_catalog``; nothing else is needed;
* tables created without ``USING`` (and with ``USING iceberg``) are Iceberg tables: seeds, table
  models, incremental models, the engine's stream tables and registry;
* views (dbt's view materialization) are Iceberg views in the same metastore;
* other formats (``USING parquet``, ``csv``, ...) stay what they are, as in plain dbt-spark;
* everything persists across processes: each ``dbt run`` is a new process on the same warehouse.

Derby allows one process per metastore at a time: two processes on one warehouse directory at
once fail with "Another instance of Derby may have already booted the database". With
``metastore_uris`` the catalog lives in a Hive metastore service instead, shared by any number of
drivers (a Spark Thrift server, dbt's refresh driver, PySpark pipelines), and Iceberg locks each
table in it for the length of a commit.

Start-up. A short-lived JVM spends most of its time loading and JIT-compiling classes; the
``fast_start`` options (C1 JIT only, serial GC, a class-data archive of Spark's classes, see
``class_archive``) roughly halve the CPU a ``dbt run`` spends before the first query.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dbt_ivm.errors import IvmError
from dbt_ivm.spark import class_archive
from dbt_ivm.spark.java import find_java, use_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_PACKAGE = "snowpark_connect_deps_iceberg"
ICEBERG_RUNTIME_JAR_GLOB = "iceberg-spark-runtime-3.5_2.12-*.jar"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_SESSION_CATALOG = "org.apache.iceberg.spark.SparkSessionCatalog"
DEFAULT_WAREHOUSE = ".ivm/warehouse"
DEFAULT_MASTER = "local[2]"
# C1 only: a dbt run is over before C2's optimized code would pay for its compilation.
FAST_START_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

_lock = threading.Lock()


@dataclass(frozen=True)
class SessionSettings:
    """How to build the embedded session (ignored when a session already exists)."""

    # Warehouse directory: Iceberg data and metadata, the Derby metastore, views. Relative paths are
    # resolved against the working directory when the session starts.
    warehouse: str | os.PathLike[str] = DEFAULT_WAREHOUSE
    master: str = DEFAULT_MASTER
    # A Hive metastore service (``thrift://host:9083``) shared with other drivers (a Thrift server, a
    # PySpark pipeline); None: an embedded Derby metastore in the warehouse, one process at a time.
    metastore_uris: str | None = None
    app_name: str = "dbt-ivm"
    driver_memory: str | None = None  # e.g. "4g"; Spark's default (1g) when None
    # C1-only JIT, serial GC and a class-data archive: faster start, slower long queries.
    fast_start: bool = True
    # Extra Spark settings, applied last (they override everything above).
    conf: Mapping[str, str] = field(default_factory=dict)

    def warehouse_path(self) -> Path:
        return Path(self.warehouse).expanduser().resolve()


@dataclass(frozen=True)
class Warehouse:
    """Where the session keeps things under the warehouse directory."""

    root: Path

    @property
    def metastore(self) -> Path:
        return self.root / "metastore_db"

    @property
    def derby_log(self) -> Path:
        return self.root / "derby.log"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)


def find_iceberg_runtime_jar() -> Path:
    """Iceberg's Spark 3.5 / Scala 2.12 runtime jar from the installed snowpark_connect_deps_iceberg."""
    try:
        import snowpark_connect_deps_iceberg  # type: ignore[import-untyped, unused-ignore]
    except ImportError as error:
        raise IvmError(
            "the embedded Spark needs Apache Iceberg: pip install 'snowpark-connect-deps-iceberg==1.0.1'"
        ) from error
    jars = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars"
    found = sorted(jars.glob(ICEBERG_RUNTIME_JAR_GLOB))
    if not found:
        raise IvmError(
            f"no {ICEBERG_RUNTIME_JAR_GLOB} in {jars}: reinstall snowpark-connect-deps-iceberg==1.0.1"
        )
    return found[-1]


def local_cores(master: str) -> int | None:
    """Worker threads of a local master (``local``, ``local[4]``, ``local[*]``); None otherwise."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        inner = master[len("local[") : -1].split(",")[0]
        if inner == "*":
            return os.cpu_count() or 1
        if inner.isdigit():
            return int(inner)
    return None


def spark_conf(settings: SessionSettings, jar: Path, jvm_options: tuple[str, ...] = ()) -> dict[str, str]:
    """Every Spark setting of the embedded session (pure: no session, no file system changes)."""
    warehouse = Warehouse(settings.warehouse_path())
    java_options = [
        f"-Dderby.stream.error.file={warehouse.derby_log}",
        f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
        *jvm_options,
    ]
    conf = {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # On the application class path (not spark.jars) so the class-data archive can hold it too.
        "spark.driver.extraClassPath": str(jar),
        "spark.driver.extraJavaOptions": " ".join(java_options),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        # The built-in catalog: Iceberg tables and views, plus anything else Spark can store, in a
        # Hive metastore (embedded Derby, or a shared service) that outlives the process.
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(warehouse.root),
        "spark.sql.catalog.spark_catalog": ICEBERG_SESSION_CATALOG,
        "spark.sql.catalog.spark_catalog.type": "hive",
        # Other processes commit to the same tables: always read the current metadata.
        "spark.sql.catalog.spark_catalog.cache-enabled": "false",
        # CREATE TABLE without USING makes an Iceberg table (not a Hive SerDe table).
        "spark.sql.sources.default": "iceberg",
        "spark.sql.legacy.createHiveTableByDefault": "false",
        # As dbt-spark: the same semantics on Spark 3 and 4.
        "spark.sql.ansi.enabled": "false",
    }
    conf.update(_metastore_conf(settings, warehouse))
    cores = local_cores(settings.master)
    if cores is not None:
        conf["spark.sql.shuffle.partitions"] = str(cores)
        conf["spark.default.parallelism"] = str(cores)
        # No network lookups for a single-machine session.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    else:
        # Executors in other JVMs load Iceberg from the jar the driver serves them.
        conf["spark.jars"] = str(jar)
    if settings.driver_memory:
        conf["spark.driver.memory"] = settings.driver_memory
    conf.update({str(k): str(v) for k, v in settings.conf.items()})
    return conf


def _metastore_conf(settings: SessionSettings, warehouse: Warehouse) -> dict[str, str]:
    if settings.metastore_uris:
        # A shared service: other drivers commit to the same tables, so Iceberg takes the
        # metastore's table lock around each commit (its default) to keep commits atomic.
        return {"spark.hadoop.hive.metastore.uris": settings.metastore_uris}
    return {
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={warehouse.metastore};create=true"
        ),
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        # An in-process metastore that cannot open its database will not succeed on a retry.
        "spark.hadoop.hive.hmshandler.retry.attempts": "1",
        # The embedded metastore has no lock tables, and Derby admits one process anyway.
        "spark.hadoop.iceberg.engine.hive.lock-enabled": "false",
        # Iceberg evolves schemas by field id; the metastore's own check compares column types by
        # position and would refuse dropping any column but the last.
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
    }


def existing_session() -> SparkSession | None:
    """The process's running SparkSession, if there is one."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is None or session.sparkContext._jsc is None:
        return None
    return session


def get_or_create_session(settings: SessionSettings | None = None) -> SparkSession:
    """The running SparkSession, or a new embedded Spark + Iceberg session built from `settings`."""
    with _lock:
        session = existing_session()
        if session is not None:
            return session
        return _create_session(settings or SessionSettings())


def _create_session(settings: SessionSettings) -> SparkSession:
    from pyspark.sql import SparkSession

    java = find_java()
    use_java(java)
    jar = find_iceberg_runtime_jar()
    warehouse = Warehouse(settings.warehouse_path())
    warehouse.create()
    archive = class_archive.plan(java, jar) if settings.fast_start else None
    jvm_options: tuple[str, ...] = FAST_START_JVM_OPTIONS if settings.fast_start else ()
    if archive is not None:
        jvm_options += archive.jvm_options
    builder = SparkSession.builder
    for key, value in spark_conf(settings, jar, jvm_options).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if archive is not None:
        class_archive.start_dump_after_exit(session, archive, java)
    _open_metastore(session, warehouse)
    return session


def _open_metastore(session: SparkSession, warehouse: Warehouse) -> None:
    """Open the metastore now, so a warehouse in use by another process fails here, clearly."""
    try:
        session.catalog.databaseExists("default")
    except Exception as error:
        # The Derby error is a cause several levels down: search the JVM stack trace too.
        text = f"{error}\n{getattr(error, 'stackTrace', '')}"
        session.stop()
        if "XSDB6" in text or "Another instance of Derby" in text or "Failed to start database" in text:
            raise IvmError(
                f"the Spark warehouse {warehouse.root} is in use by another process (its embedded "
                "Derby metastore admits one process at a time); wait for it or use another warehouse"
            ) from error
        raise
