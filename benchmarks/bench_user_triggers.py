"""PostgreSQL benchmark: applying a refresh with explicit DELETE/UPDATE/INSERT vs one MERGE.

    python benchmarks/bench_user_triggers.py               # 200k orders, 20k customers, 21 repeats
    python benchmarks/bench_user_triggers.py --repeats 5   # quicker

Run by hand; prints a Markdown table (kept in docs/benchmarks.md) and progress on stderr.

Four stream tables with the same aggregate query (orders per customer) over the same data:

* ``merge`` — no user triggers, user_triggers='auto': one MERGE (the default path);
* ``explicit`` — no user triggers, user_triggers='on': the explicit DML path alone, what the
  decomposition costs without any trigger work;
* ``explicit_audit`` — an AFTER row trigger writing every change to an audit table, 'auto': what a
  user with an audit trigger pays (explicit DML + the trigger's own inserts);
* ``merge_off`` — the same audit trigger with user_triggers='off': one MERGE, triggers disabled and
  re-enabled by name inside the refresh transaction.

Each repeat changes N groups in one transaction (60 % of them updated, 20 % deleted — every order of
the customer — and 20 % new customers), then refreshes the four tables in a rotating order. Times are
client wall clock, median of the repeats, refresh_mode='differential', in two tables:

* the whole refresh — `run_stream_table`, all a `dbt run` waits for (reading the change buffer, the
  delta query, the apply, the history row);
* the apply phase alone — the statements after the consolidated rows (``__ivm_rows``, whose
  creation evaluates the delta query) are materialized and analyzed, up to the history row: the
  counts, then MERGE or DELETE/UPDATE/INSERT (and, for 'off', the two ALTER TABLEs), and the
  frontier update; each timed around its `cursor.execute` on the client.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_support import (
    drop_database,
    fmt_seconds,
    fresh_database,
    machine_description,
    markdown_table,
    median,
    start_server,
    timed,
)

from dbt_ivm.embedded import postgres_server
from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec, UserTriggers

QUERY = "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer_id"
CHANGED_GROUPS = (5, 50, 1_000)
# name -> (user_triggers, has the audit trigger)
VARIANTS: dict[str, tuple[UserTriggers, bool]] = {
    "merge": ("auto", False),
    "explicit": ("on", False),
    "explicit_audit": ("auto", True),
    "merge_off": ("off", True),
}
DATABASE = "bench_user_triggers"


class TimedCursor(psycopg2.extensions.cursor):
    """Records (statement, seconds) of every execute on its connection's `timings` list."""

    def execute(self, query: Any, vars: Any = None) -> None:
        started = time.perf_counter()
        try:
            super().execute(query, vars)
        finally:
            self.connection.timings.append((str(query), time.perf_counter() - started))


class TimedConnection(psycopg2.extensions.connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timings: list[tuple[str, float]] = []

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cursor_factory", TimedCursor)
        return super().cursor(*args, **kwargs)


def apply_seconds(timings: list[tuple[str, float]]) -> float:
    """Seconds from the consolidated rows being ready (after their ANALYZE) up to the history row."""
    ready = next(i for i, (sql, _) in enumerate(timings) if sql == 'ANALYZE "__ivm_rows"')
    end = next(i for i, (sql, _) in enumerate(timings) if i > ready and "refresh_history" in sql)
    return sum(seconds for _, seconds in timings[ready + 1 : end])


def setup(conn: Any, orders: int, customers: int) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2) NOT NULL);"
            "INSERT INTO orders SELECT g, 1 + (g %% %s), (g %% 997) / 10.0 FROM generate_series(1, %s) AS g;"
            "CREATE INDEX ON orders (customer_id);"
            "ANALYZE orders;"
            "CREATE TABLE audit (id bigserial PRIMARY KEY, tbl text, op text, old jsonb, new jsonb);"
            "CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO audit (tbl, op, old, new) VALUES (TG_TABLE_NAME, TG_OP, "
            "CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END, CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END); "
            "RETURN NULL; END $$;",
            (customers, orders),
        )
    for name, (mode, audited) in VARIANTS.items():
        refresh(conn, name, mode)
        if audited:
            with conn.cursor() as cur:
                cur.execute(
                    f'CREATE TRIGGER audit_rows AFTER INSERT OR UPDATE OR DELETE ON "{name}" '
                    "FOR EACH ROW EXECUTE FUNCTION audit_row()"
                )
    # The steady state autovacuum reaches soon after creation; analyzing now keeps it from landing
    # on one variant in the middle of the measurements.
    with conn.cursor() as cur:
        cur.execute("ANALYZE " + ", ".join(f'"{name}"' for name in VARIANTS))


def refresh(conn: Any, name: str, mode: UserTriggers) -> Any:
    spec = StreamTableSpec(
        model=name, schema="public", name=name, sql=QUERY, refresh_mode="differential", user_triggers=mode
    )
    return run_stream_table(conn, spec)


class Changes:
    """Changes to N whole groups per batch: updates, deleted customers, new customers."""

    def __init__(self, conn: Any, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        with conn.cursor() as cur:
            cur.execute("SELECT max(id), max(customer_id) FROM orders")
            self.next_order, self.next_customer = (int(v) + 1 for v in cur.fetchone())

    def apply(self, groups: int) -> None:
        deleted = max(1, groups // 5)
        created = max(1, groups // 5)
        updated = groups - deleted - created
        with self.conn.cursor() as cur:
            cur.execute("SELECT DISTINCT customer_id FROM orders")
            existing = [r[0] for r in cur.fetchall()]
            picked = self.rng.sample(existing, updated + deleted)
            cur.execute("BEGIN")
            cur.execute(
                "UPDATE orders SET amount = amount + 1 WHERE id IN "
                "(SELECT min(id) FROM orders WHERE customer_id = ANY(%s) GROUP BY customer_id)",
                (picked[:updated],),
            )
            cur.execute("DELETE FROM orders WHERE customer_id = ANY(%s)", (picked[updated:],))
            new = list(range(self.next_customer, self.next_customer + created))
            rows = [(self.next_order + i, c, 10 + i) for i, c in enumerate(c for c in new for _ in range(10))]
            cur.executemany("INSERT INTO orders VALUES (%s, %s, %s)", rows)
            cur.execute("COMMIT")
            self.next_customer += created
            self.next_order += len(rows)


def run(args: argparse.Namespace) -> str:
    server = start_server(Path(args.data_dir))
    fresh_database(server, DATABASE).close()
    conn = psycopg2.connect(server.dsn(DATABASE), connection_factory=TimedConnection)
    conn.autocommit = True
    print(f"setting up {args.orders} orders over {args.customers} customers", file=sys.stderr)
    setup(conn, args.orders, args.customers)
    changes = Changes(conn, seed=5)
    names = list(VARIANTS)
    rows: list[list[str]] = []
    apply_rows: list[list[str]] = []
    fastest_rows: list[list[str]] = []
    for groups in CHANGED_GROUPS:
        samples: dict[str, list[float]] = {name: [] for name in names}
        applies: dict[str, list[float]] = {name: [] for name in names}
        for repeat in range(args.repeats):
            changes.apply(groups)
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                conn.timings.clear()
                seconds, result = timed(lambda name=name: refresh(conn, name, VARIANTS[name][0]))
                assert result.action == "DIFFERENTIAL" and result.rows_changed >= groups, (name, result)
                samples[name].append(seconds)
                applies[name].append(apply_seconds(conn.timings))
            with conn.cursor() as cur:
                cur.execute("TRUNCATE audit")
            print(f"  {groups} groups, repeat {repeat + 1}/{args.repeats}", file=sys.stderr)
        tables = ((rows, samples, median), (apply_rows, applies, median), (fastest_rows, applies, min))
        for table, measured, statistic in tables:
            medians = {name: statistic(measured[name]) for name in names}
            table.append(
                [f"{groups:,}", fmt_seconds(medians["merge"])] + [_cell(medians, n) for n in names[1:]]
            )
    header = [
        "changed groups",
        "MERGE (no triggers)",
        "explicit DML (no triggers)",
        "explicit DML + audit trigger",
        "MERGE, user_triggers='off'",
    ]
    refresh_table = markdown_table(header, rows)
    apply_table = markdown_table(header, apply_rows)
    fastest_table = markdown_table(header, fastest_rows)
    description = machine_description(server)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    conn.close()
    drop_database(server, DATABASE)
    if not args.keep_server:
        postgres_server.stop(args.data_dir)
    return (
        f"{args.orders:,} orders over {args.customers:,} customers; median of {args.repeats} refreshes "
        f"per cell; percentages against MERGE.\n\nWhole refresh:\n\n{refresh_table}\n\n"
        f"Apply phase only (median):\n\n{apply_table}\n\nApply phase only (fastest of {args.repeats}):\n\n"
        f"{fastest_table}\n\nMachine: {description}; load average at the end {load}\n"
    )


def _cell(medians: dict[str, float], name: str) -> str:
    base = medians["merge"]
    return f"{fmt_seconds(medians[name])} ({(medians[name] - base) / base:+.0%})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--customers", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--data-dir", default="/tmp/dbt_ivm_bench_user_triggers")
    parser.add_argument("--keep-server", action="store_true", help="leave the server running afterwards")
    print(run(parser.parse_args()))


if __name__ == "__main__":
    main()
