"""The dbt-ivm demo: seed orders and customers, build two stream tables, change the sources, refresh.

    python integration_tests/demo.py                     # embedded Spark + Iceberg (the default)
    python integration_tests/demo.py --target postgres [--pg-bin DIR] [--keep-server]

Starts a throwaway engine under integration_tests/.ivm/ (an in-process Spark session over a fresh
Iceberg warehouse, or an embedded PostgreSQL server), writes a profile there, runs `dbt seed` and
`dbt run`, applies inserts, updates and deletes with plain SQL, runs `dbt run` again, prints both stream
tables and the refresh history, and checks that each stream table equals its query (EXCEPT ALL both
ways). Exits non-zero when a stream table differs from its query or a dbt command fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

PROJECT_DIR = Path(__file__).resolve().parent
STATE_DIR = PROJECT_DIR / ".ivm"
PROFILE = "dbt_ivm_demo"
SCHEMA = "demo"
STREAM_TABLES = ("customer_totals", "order_details")
HIDDEN_COLUMN_PREFIX = "__ivm_"

# The changes applied between the two runs: every kind of row change, on both sources.
SOURCE_CHANGES = (
    # INSERT: a new order for alice, a new customer with her first order
    "insert into {schema}.orders (id, customer_id, amount) values (21, 1, 42.00)",
    "insert into {schema}.customers (id, name, tier) values (7, 'erin', 'standard')",
    "insert into {schema}.orders (id, customer_id, amount) values (22, 7, 60.00)",
    # UPDATE: an order amount (customer_totals) and a customer's tier (order_details)
    "update {schema}.orders set amount = 99.99 where id = 3",
    "update {schema}.customers set tier = 'premium' where id = 2",
    # DELETE: one of alice's orders, and all of carol's (her group vanishes from customer_totals)
    "delete from {schema}.orders where id = 2",
    "delete from {schema}.orders where customer_id = 3",
)

HISTORY_COLUMNS = (
    "refresh_id, stream_table, action, rows_inserted, rows_updated, rows_deleted, changes_read, "
    "cast(duration_seconds as decimal(10, 3)) as seconds, status, reason"
)


class Backend(Protocol):
    """One target the demo runs on: a server, a profile for it, and SQL access to it."""

    def start(self) -> None: ...
    def quote(self, identifier: str) -> str: ...
    def query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]: ...
    def execute(self, sql: str) -> None: ...
    def stop(self) -> None: ...


@dataclass
class PostgresBackend:
    """The embedded PostgreSQL server, with a fresh database for every demo run."""

    pg_bin: str | None
    keep_server: bool
    threads: int
    database: str = "dbt_ivm_demo"
    _conn: Any = None

    @property
    def data_dir(self) -> Path:
        return STATE_DIR / "pg"

    def start(self) -> None:
        import psycopg2

        from dbt_ivm.cli import postgres_output, write_profile
        from dbt_ivm.embedded import postgres_server

        server = postgres_server.start(self.data_dir, bin_dir=self.pg_bin)
        admin = psycopg2.connect(server.dsn())
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(f'drop database if exists "{self.database}" with (force)')
            cursor.execute(f'create database "{self.database}"')
        admin.close()
        output = postgres_output(server.host, server.port, server.user, self.database, SCHEMA, self.threads)
        write_profile(STATE_DIR, PROFILE, "postgres", output)
        self._conn = psycopg2.connect(server.dsn(self.database))
        self._conn.autocommit = True
        print(f"PostgreSQL on {server.host}:{server.port}, database {self.database}")

    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with self._conn.cursor() as cursor:
            cursor.execute(sql)
            return [d.name for d in cursor.description], list(cursor.fetchall())

    def execute(self, sql: str) -> None:
        with self._conn.cursor() as cursor:
            cursor.execute(sql)

    def stop(self) -> None:
        from dbt_ivm.embedded import postgres_server

        if self._conn is not None:
            self._conn.close()
        if not self.keep_server:
            postgres_server.stop(self.data_dir)


def postgres_backend(args: argparse.Namespace) -> Backend:
    return PostgresBackend(pg_bin=args.pg_bin, keep_server=args.keep_server, threads=args.threads)


@dataclass
class SparkBackend:
    """Embedded Spark 3.5 + Iceberg in this process, over a fresh warehouse for every demo run.

    dbt runs in this process too, so its `method: session` connection uses this same session (one
    process per warehouse: the metastore is an embedded Derby database).
    """

    threads: int
    _spark: Any = None

    @property
    def warehouse(self) -> Path:
        return STATE_DIR / "spark-warehouse"

    def start(self) -> None:
        from dbt_ivm.cli import write_profile
        from dbt_ivm.spark.session import SessionSettings, get_or_create_session

        shutil.rmtree(self.warehouse, ignore_errors=True)
        output = {
            "type": "ivm_spark",
            "method": "session",
            "host": "localhost",
            "schema": SCHEMA,
            "warehouse": str(self.warehouse),
            "threads": self.threads,
        }
        write_profile(STATE_DIR, PROFILE, "spark", output)
        self._spark = get_or_create_session(SessionSettings(warehouse=self.warehouse))
        print(f"Spark {self._spark.version} + Iceberg, warehouse {self.warehouse}")

    def quote(self, identifier: str) -> str:
        return "`" + identifier.replace("`", "``") + "`"

    def query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        frame = self._spark.sql(sql)
        return list(frame.columns), [tuple(row) for row in frame.collect()]

    def execute(self, sql: str) -> None:
        self._spark.sql(sql)

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()


def spark_backend(args: argparse.Namespace) -> Backend:
    return SparkBackend(threads=args.threads)


# --target NAME -> how to build its backend.
BACKENDS: dict[str, Callable[[argparse.Namespace], Backend]] = {
    "spark": spark_backend,
    "postgres": postgres_backend,
}


def run_dbt(command: Sequence[str], target: str) -> Any:
    """Run one dbt command in-process, as a user would on the command line; stop the demo if it fails."""
    from dbt.cli.main import dbtRunner

    args = [*command, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(STATE_DIR), "--target", target]
    print(f"\n$ dbt {' '.join(command)} --target {target}", flush=True)
    result = dbtRunner().invoke(args)
    if not result.success:
        raise SystemExit(f"dbt {' '.join(command)} failed")
    return result.result


def compiled_queries(run_result: Any) -> dict[str, str]:
    """Each stream table's compiled defining query, from `dbt run`'s results."""
    queries: dict[str, str] = {}
    for node_result in run_result.results:
        node = node_result.node
        if node.name in STREAM_TABLES:
            queries[node.name] = node.compiled_code
    return queries


def print_table(title: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    cells = [["" if value is None else str(value) for value in row] for row in rows]
    widths = [max([len(column)] + [len(row[i]) for row in cells]) for i, column in enumerate(columns)]
    print(f"\n{title} ({len(rows)} rows)")
    print("  " + " | ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True)))
    print("  " + "-+-".join("-" * width for width in widths))
    for row in cells:
        print("  " + " | ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)))


def user_columns(backend: Backend, table: str) -> list[str]:
    columns, _ = backend.query(f"select * from {backend.quote(SCHEMA)}.{backend.quote(table)} where false")
    return [column for column in columns if not column.startswith(HIDDEN_COLUMN_PREFIX)]


def show_stream_table(backend: Backend, table: str) -> None:
    columns = user_columns(backend, table)
    select_list = ", ".join(backend.quote(column) for column in columns)
    order = ", ".join(str(i + 1) for i in range(len(columns)))
    names, rows = backend.query(
        f"select {select_list} from {backend.quote(SCHEMA)}.{backend.quote(table)} order by {order}"
    )
    print_table(f"{SCHEMA}.{table}", names, rows)


def differences(backend: Backend, table: str, query: str) -> int:
    """Rows in the stream table but not in its query, plus the reverse, counting duplicates."""
    select_list = ", ".join(backend.quote(column) for column in user_columns(backend, table))
    stored = f"select {select_list} from {backend.quote(SCHEMA)}.{backend.quote(table)}"
    fresh = f"select {select_list} from ({query}) as defining_query"
    total = 0
    for left, right in ((stored, fresh), (fresh, stored)):
        _, rows = backend.query(f"select count(*) from ({left} except all {right}) as difference")
        total += int(rows[0][0])
    return total


def check_stream_tables(backend: Backend, queries: dict[str, str]) -> bool:
    ok = True
    print()
    for table in STREAM_TABLES:
        count = differences(backend, table, queries[table])
        verdict = "equals its query" if count == 0 else f"DIFFERS from its query by {count} rows"
        print(f"check: {SCHEMA}.{table} {verdict}")
        ok = ok and count == 0
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", choices=sorted(BACKENDS), default="spark")
    parser.add_argument("--pg-bin", default=None, help="bin directory of another PostgreSQL build (>= 15)")
    parser.add_argument("--threads", type=int, default=2, help="dbt threads (default 2)")
    parser.add_argument("--keep-server", action="store_true", help="leave the server running afterwards")
    args = parser.parse_args(argv)

    backend = BACKENDS[args.target](args)
    backend.start()
    try:
        run_dbt(["seed"], args.target)
        queries = compiled_queries(run_dbt(["run"], args.target))
        ok = check_stream_tables(backend, queries)

        print("\nChanging the sources:")
        for statement in SOURCE_CHANGES:
            sql = statement.format(schema=backend.quote(SCHEMA))
            print(f"  {sql};")
            backend.execute(sql)

        queries = compiled_queries(run_dbt(["run"], args.target))
        for table in STREAM_TABLES:
            show_stream_table(backend, table)
        history = f"{backend.quote('dbt_ivm')}.{backend.quote('refresh_history')}"
        names, rows = backend.query(f"select {HISTORY_COLUMNS} from {history} order by refresh_id")
        print_table("dbt_ivm.refresh_history", names, rows)
        ok = check_stream_tables(backend, queries) and ok
    finally:
        backend.stop()
    print("\ndemo OK" if ok else "\ndemo FAILED: a stream table differs from its query")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
