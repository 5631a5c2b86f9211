"""Refreshes without dbt (`dbt-ivm refresh` and `CALL dbt_ivm.refresh`, issue 14 item 3): what a
refresh that finds nothing to do costs in the engine, through the CLI and as a CALL, and a 1,000-change
refresh by the engine and by CALL side by side with a hand-written upsert of the same changes
(INSERT … ON CONFLICT DO UPDATE of the aggregated changes, then deleting emptied groups); over
customer_totals (SUM/COUNT per customer over 1M orders, 10k customers). Also what `dbt-ivm status`
costs over it and `--status-tables` small stream tables more.

    python benchmarks/bench_cli_refresh.py [--orders 1000000] [--repeats 10] [--png docs/img/bench_cli_refresh.png]

Prints a markdown table; nothing here is a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_postgres import load, log
from benchmarks.pg_support import fmt_seconds, fresh_database, markdown_table, median, start_server, timed

from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import StreamTableSpec

TOTALS = "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer_id"
CLI = [sys.executable, "-m", "dbt_ivm.cli"]


def spec(statements: list[str] | None = None) -> StreamTableSpec:
    return StreamTableSpec(
        model="customer_totals",
        schema="public",
        name="customer_totals",
        sql=TOTALS,
        refresh_mode="differential",
        initiated_by="benchmark",
        on_statement=None if statements is None else statements.append,
    )


def changes(conn: Any, rng: random.Random, count: int, first_id: int) -> None:
    """`count` changes to orders (a third each inserts, updates, deletes), also kept as signed rows in
    `hand_changes` for the hand-written upsert."""
    third = count // 3
    ids = rng.sample(range(1, 900_000), 2 * (count - third))
    updated, deleted = ids[: count - 2 * third], ids[count - 2 * third :][:third]
    with conn.cursor() as cur:
        cur.execute(
            "WITH n AS (INSERT INTO orders SELECT g, 1 + (g %% 10000), 1 FROM generate_series(%s, %s) g "
            "RETURNING customer_id, amount) INSERT INTO hand_changes SELECT customer_id, amount, 1 FROM n",
            (first_id, first_id + third - 1),
        )
        cur.execute(
            "INSERT INTO hand_changes SELECT customer_id, amount, -1 FROM orders WHERE id = ANY(%s)",
            (updated,),
        )
        cur.execute(
            "WITH u AS (UPDATE orders SET amount = amount + 1 WHERE id = ANY(%s) RETURNING customer_id, amount) "
            "INSERT INTO hand_changes SELECT customer_id, amount, 1 FROM u",
            (updated,),
        )
        cur.execute(
            "WITH d AS (DELETE FROM orders WHERE id = ANY(%s) RETURNING customer_id, amount) "
            "INSERT INTO hand_changes SELECT customer_id, amount, -1 FROM d",
            (deleted,),
        )


# The same changes applied by hand: aggregated per customer, upserted, emptied groups removed.
HAND_UPSERT = (
    "INSERT INTO totals_by_hand AS t SELECT customer_id, sum(amount * weight), sum(weight) FROM hand_changes "
    "GROUP BY customer_id ON CONFLICT (customer_id) DO UPDATE SET total = t.total + excluded.total, "
    "order_count = t.order_count + excluded.order_count; "
    "DELETE FROM totals_by_hand WHERE order_count = 0; TRUNCATE hand_changes"
)


def hand_upsert(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute(f"BEGIN; {HAND_UPSERT}; COMMIT")


def call_refresh(conn: Any) -> str:
    """CALL dbt_ivm.refresh on the connection (autocommit, as pg_cron runs it); its action."""
    with conn.cursor() as cur:
        cur.execute("CALL dbt_ivm.refresh('public.customer_totals')")
        return str(cur.fetchone()[0])


def status_rows(conn: Any, dsn: str, env: dict[str, str], repeats: int, tables: int) -> list[list[str]]:
    """`dbt-ivm status` over customer_totals and `tables` small stream tables more: the catalog read
    in process, and the command as a process."""
    from dbt_ivm.postgres import registrations
    from dbt_ivm.postgres.db import Db

    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE small (id int PRIMARY KEY, k int); INSERT INTO small SELECT g, g % 7 FROM generate_series(1, 100) g"
        )
    for n in range(tables):
        small = dataclasses.replace(
            spec(),
            model=f"small_{n}",
            name=f"small_{n}",
            sql=f"SELECT k, COUNT(*) + {n} AS c FROM small GROUP BY k",
        )
        assert run_stream_table(conn, small).action == "CREATE"
    listed = []
    for _ in range(repeats):
        seconds, found = timed(lambda: registrations.list_registrations(Db(conn), "dbt_ivm"))
        assert len(found) == tables + 1
        listed.append(seconds)
    processes = []
    for _ in range(repeats):
        seconds, done = timed(
            lambda: subprocess.run([*CLI, "status", "--dsn", dsn], env=env, capture_output=True, text=True)
        )
        assert done.returncode == 0 and "customer_totals" in done.stdout, done.stdout + done.stderr
        processes.append(seconds)
    return [
        [f"status of {tables + 1} stream tables, catalog read (Python)", fmt_seconds(median(listed)), ""],
        [
            f"status of {tables + 1} stream tables, `dbt-ivm status` (process)",
            fmt_seconds(median(processes)),
            "",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "dbt_ivm_bench_cli_pg")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--status-tables", type=int, default=20, help="stream tables `dbt-ivm status` lists")
    args = parser.parse_args()
    server = start_server(args.data_dir)
    conn = fresh_database(server, "bench_cli")
    dsn = server.dsn("bench_cli")
    log(f"loading {args.orders:,} orders")
    load(conn, args.orders, 10_000)
    assert run_stream_table(conn, spec()).action == "CREATE"
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE totals_by_hand AS {TOTALS}; ALTER TABLE totals_by_hand ADD PRIMARY KEY (customer_id)"
        )
        cur.execute("CREATE UNLOGGED TABLE hand_changes (customer_id int, amount numeric(10,2), weight int)")
    rows: list[list[str]] = []

    statements: list[str] = []
    engine = []
    for _ in range(args.repeats):
        statements.clear()
        seconds, result = timed(lambda: run_stream_table(conn, spec(statements)))
        assert result.action == "SKIP", result.summary()
        engine.append(seconds)
    rows.append(["no change, engine call (Python)", fmt_seconds(median(engine)), str(len(statements))])
    called = []
    for _ in range(args.repeats):
        seconds, action = timed(lambda: call_refresh(conn))
        assert action == "SKIP", action
        called.append(seconds)
    rows.append(["no change, `CALL dbt_ivm.refresh` (round trip included)", fmt_seconds(median(called)), "1"])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    cli = []
    for _ in range(args.repeats):
        seconds, done = timed(
            lambda: subprocess.run(
                [*CLI, "refresh", "--dsn", dsn, "public.customer_totals"],
                env=env,
                capture_output=True,
                text=True,
            )
        )
        assert done.returncode == 0 and "NO-OP" in done.stdout, done.stdout + done.stderr
        cli.append(seconds)
    rows.append(["no change, `dbt-ivm refresh` (process)", fmt_seconds(median(cli)), ""])
    imports = []
    for _ in range(args.repeats):
        seconds, done = timed(
            lambda: subprocess.run([sys.executable, "-c", "import dbt_ivm.postgres.runner"], env=env)
        )
        assert done.returncode == 0
        imports.append(seconds)
    rows.append(["of which: Python start and the engine's imports", fmt_seconds(median(imports)), ""])

    rows.extend(status_rows(conn, dsn, env, args.repeats, args.status_tables))

    rng = random.Random(14)
    refreshes: list[float] = []
    calls: list[float] = []
    hand: list[float] = []
    next_id = args.orders + 1
    for _ in range(args.repeats):
        # The engine, then CALL, each on a batch of its own, each batch also upserted by hand.
        changes(conn, rng, 1000, next_id)
        next_id += 1000
        statements.clear()
        seconds, result = timed(lambda: run_stream_table(conn, spec(statements)))
        assert result.action == "DIFFERENTIAL", result.summary()
        refreshes.append(seconds)
        hand.append(timed(lambda: hand_upsert(conn))[0])
        changes(conn, rng, 1000, next_id)
        next_id += 1000
        seconds, action = timed(lambda: call_refresh(conn))
        assert action == "DIFFERENTIAL", action
        calls.append(seconds)
        hand.append(timed(lambda: hand_upsert(conn))[0])
    with conn.cursor() as cur:  # both ways hold the same rows
        cur.execute(
            "SELECT count(*) FROM ((TABLE totals_by_hand EXCEPT ALL "
            "SELECT customer_id, total, order_count FROM customer_totals) UNION ALL "
            "(SELECT customer_id, total, order_count FROM customer_totals EXCEPT ALL TABLE totals_by_hand)) d"
        )
        assert cur.fetchone()[0] == 0
    rows.append(["1,000 changes, engine call", fmt_seconds(median(refreshes)), str(len(statements))])
    rows.append(["1,000 changes, `CALL dbt_ivm.refresh`", fmt_seconds(median(calls)), "1"])
    rows.append(["1,000 changes, hand-written upsert of the same changes", fmt_seconds(median(hand)), "3"])
    rows.append(["engine ÷ hand-written", f"{median(refreshes) / median(hand):.1f}×", ""])
    rows.append(["CALL ÷ hand-written", f"{median(calls) / median(hand):.1f}×", ""])
    print(markdown_table([f"customer_totals over {args.orders:,} orders", "median", "statements"], rows))
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [
            "no change\nengine",
            "no change\nCLI process",
            "no change\nCALL",
            "1,000 changes\nengine",
            "1,000 changes\nCALL",
            "1,000 changes\nby hand",
        ]
        values = [median(x) * 1e3 for x in (engine, cli, called, refreshes, calls, hand)]
        fig, ax = plt.subplots(figsize=(8, 3.8))
        ax.bar(labels, values, color=["#4c72b0", "#dd8452", "#c44e52", "#55a868", "#c44e52", "#8c8c8c"])
        ax.set_yscale("log")
        ax.axhline(300, color="grey", linestyle="--", linewidth=1, label="CLI target 300 ms")
        ax.set_ylabel("milliseconds (median)")
        ax.set_title(f"Refresh without dbt, customer_totals over {args.orders:,} orders")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
