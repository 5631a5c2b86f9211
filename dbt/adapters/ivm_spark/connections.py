"""Profile credentials and connection manager: dbt-spark's, under the `ivm_spark` type name.

`method: session` runs Spark in the dbt process on the embedded Spark + Iceberg session
(`dbt_ivm.spark.session`); `thrift`, `http` and `odbc` connect exactly as dbt-spark does.

    my_profile:
      target: dev
      outputs:
        dev:
          type: ivm_spark
          method: session
          schema: analytics
          warehouse: .ivm/warehouse     # optional; relative to the directory dbt runs in

A `method: thrift` profile sends dbt's SQL to a Spark Thrift server. Stream tables there refresh in
a Spark driver that dbt starts in its own process (the refresh needs Iceberg's Java API, which a
Thrift connection does not reach), on the same catalog: the Hive metastore service the Thrift server
uses (`metastore_uris`), the same `warehouse`, and `master` for where its tasks run.

        prod:
          type: ivm_spark
          method: thrift
          host: spark-thrift.internal
          port: 10000
          schema: analytics
          metastore_uris: thrift://metastore.internal:9083
          warehouse: /shared/warehouse
          master: spark://spark-master.internal:7077
          refresh_driver_conf: {spark.driver.host: 10.0.0.12}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions.connection import FailedToConnectError
from dbt.adapters.spark.connections import (
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkCredentials,
)
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError

from dbt_ivm.errors import IvmError
from dbt_ivm.spark import statements
from dbt_ivm.spark.session import (
    DEFAULT_MASTER,
    DEFAULT_WAREHOUSE,
    SessionSettings,
    existing_session,
    get_or_create_session,
)

ADAPTER_TYPE = "ivm_spark"
logger = AdapterLogger("IvmSpark")


@dataclass
class IvmSparkCredentials(SparkCredentials):
    """dbt-spark's credentials plus the embedded session's settings (used by `method: session`)."""

    # Warehouse directory of the embedded session: Iceberg tables, views, the metastore.
    warehouse: str | None = None
    # Spark master of the embedded session, e.g. local[4] or local[*].
    master: str | None = None
    driver_memory: str | None = None
    # C1-only JIT, serial GC and a cached class-data archive: the embedded JVM starts about twice as
    # fast; set false for long, heavy runs.
    fast_start: bool = True
    # The Hive metastore service the catalog lives in: with `method: session`, instead of the
    # embedded Derby; with `method: thrift`, the Thrift server's, which stream tables need.
    metastore_uris: str | None = None
    # Spark settings of the refresh driver of a `method: thrift` profile (`server_side_parameters`
    # go to the Thrift server).
    refresh_driver_conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # dbt-spark requires a host even where it means nothing.
        if self.method == SparkConnectionMethod.SESSION and self.host is None:
            self.host = "localhost"
        super().__post_init__()

    @property
    def type(self) -> str:
        return ADAPTER_TYPE

    @property
    def unique_field(self) -> str:
        if self.method == SparkConnectionMethod.SESSION:
            return self.session_settings().warehouse_path().as_posix()
        return str(super().unique_field)

    def _connection_keys(self) -> tuple[str, ...]:
        keys = super()._connection_keys()
        if self.method == SparkConnectionMethod.SESSION:
            return (*keys, "method", "warehouse", "master", "metastore_uris", "driver_memory", "fast_start")
        return (*keys, "metastore_uris")

    @property
    def has_refresh_driver(self) -> bool:
        """Whether stream tables can be refreshed: a session, or a Thrift server's metastore."""
        return self.method == SparkConnectionMethod.SESSION or bool(self.metastore_uris)

    def session_settings(self) -> SessionSettings:
        """How to build the driver that refreshes stream tables: the embedded session of
        `method: session` (`server_side_parameters` become its Spark settings), or the refresh
        driver of `method: thrift` (`refresh_driver_conf`)."""
        session = self.method == SparkConnectionMethod.SESSION
        return SessionSettings(
            warehouse=self.warehouse or DEFAULT_WAREHOUSE,
            master=self.master or DEFAULT_MASTER,
            metastore_uris=self.metastore_uris,
            app_name="dbt-ivm" if session else "dbt-ivm-refresh",
            driver_memory=self.driver_memory,
            fast_start=self.fast_start,
            conf=dict(self.server_side_parameters if session else self.refresh_driver_conf),
        )


class IvmSessionCursor(Cursor):
    """dbt-spark's session cursor, on the embedded session instead of a builder of its own."""

    def __init__(self, spark: Any) -> None:
        super().__init__()
        self._spark = spark

    def execute(self, sql: str, *parameters: Any) -> None:
        if parameters:
            sql = sql % parameters
        from pyspark.errors import AnalysisException

        try:
            # statements.run: views and non-Iceberg tables behave as in plain dbt-spark.
            self._df = statements.run(self._spark, sql)
        except AnalysisException as exc:
            raise DbtRuntimeError(str(exc)) from exc


class IvmSessionConnection:
    """The handle of a session connection: hands out cursors on one SparkSession."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def cursor(self) -> IvmSessionCursor:
        return IvmSessionCursor(self.spark)


class IvmSessionConnectionWrapper(SessionConnectionWrapper):
    handle: IvmSessionConnection  # type: ignore[assignment]

    def __init__(self, handle: IvmSessionConnection) -> None:
        super().__init__(handle)  # type: ignore[arg-type]

    @property
    def spark(self) -> Any:
        return self.handle.spark


def _apply_runtime_settings(spark: Any, settings: dict[str, str]) -> None:
    """Profile settings on a session that already existed (static ones only apply at start-up)."""
    for key, value in settings.items():
        if spark.conf.isModifiable(key) and spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


class IvmSparkConnectionManager(SparkConnectionManager):
    TYPE = ADAPTER_TYPE

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        credentials = connection.credentials
        if connection.state == ConnectionState.OPEN:
            return connection
        if getattr(credentials, "method", None) != SparkConnectionMethod.SESSION:
            return super().open(connection)
        assert isinstance(credentials, IvmSparkCredentials)
        spark = start_driver(credentials)
        _apply_runtime_settings(spark, credentials.server_side_parameters)
        connection.handle = IvmSessionConnectionWrapper(IvmSessionConnection(spark))
        connection.state = ConnectionState.OPEN
        return connection


def start_driver(credentials: IvmSparkCredentials) -> Any:
    """The process's SparkSession for `credentials` (started on first use): the embedded session of
    `method: session`, the refresh driver of `method: thrift`."""
    try:
        settings = credentials.session_settings()
        if existing_session() is None:  # a JVM start takes seconds: say so before the pause
            logger.info(
                f"dbt-ivm: starting the Spark driver ({settings.master}, warehouse {settings.warehouse})"
            )
        return get_or_create_session(settings)
    except IvmError as exc:
        raise FailedToConnectError(str(exc)) from exc
    except Exception as exc:
        raise FailedToConnectError(f"could not start the Spark driver of dbt-ivm: {exc}") from exc
