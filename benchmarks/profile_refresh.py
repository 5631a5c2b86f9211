"""Where one DIFFERENTIAL refresh spends its time: every statement timed, the big ones EXPLAINed.

    python benchmarks/profile_refresh.py --rows 1000000 --batch 1000
    python benchmarks/profile_refresh.py --rows 10000000 --batch 1000 --table order_details --explain

Same data and batches as bench_postgres.py. Each statement the runtime sends (through
`dbt_ivm.postgres.db.Db`) is timed on the client; with --explain a second batch is refreshed with the
delta, count, MERGE and cleanup statements run under EXPLAIN (ANALYZE, BUFFERS) instead — EXPLAIN
ANALYZE executes them, so the refresh still completes and stays correct.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_postgres as bench
from pg_support import connect, fresh_database, median, start_server

from dbt_ivm.embedded import postgres_server
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.runner import run_stream_table

EXPLAINED = ("CREATE TEMP TABLE", "MERGE", "SELECT COALESCE(SUM(CASE", "DELETE FROM", "INSERT INTO", "UPDATE")
Runner = Callable[[Db, str, Sequence[Any] | None], Any]


def one_line(sql: str, width: int = 140) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class Recorder:
    """Wraps Db.execute / Db.rows for the duration of one refresh."""

    def __init__(self, explain: bool) -> None:
        self.explain = explain
        self.log: list[tuple[float, str]] = []
        self.originals: tuple[Runner, Runner] = (Db.execute, Db.rows)

    def _wrap(self, original: Runner, returns_rows: bool) -> Runner:
        def run(db: Db, sql: str, params: Sequence[Any] | None = None) -> Any:
            head = sql.lstrip()
            # A row-returning statement runs again for real after its EXPLAIN, so only SELECTs there.
            wanted = head.startswith("SELECT") if returns_rows else head.startswith(EXPLAINED)
            interesting = 'pg_temp."__ivm' in sql or '."changes_' in sql  # delta, apply, buffer reads
            if self.explain and wanted and interesting:
                started = time.perf_counter()
                with db.connection.cursor() as cur:
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                    plan = "\n".join(row[0] for row in cur.fetchall())
                print(f"\n--- {(time.perf_counter() - started) * 1e3:.1f} ms: {one_line(sql, 400)}\n{plan}")
                if not returns_rows:
                    return 0  # EXPLAIN ANALYZE already executed it
            started = time.perf_counter()
            value = original(db, sql, params)
            self.log.append((time.perf_counter() - started, sql))
            return value

        return run

    def __enter__(self) -> Recorder:
        Db.execute = self._wrap(self.originals[0], False)  # type: ignore[method-assign]
        Db.rows = self._wrap(self.originals[1], True)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Db.execute, Db.rows = self.originals  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--table", choices=list(bench.QUERIES), action="append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a planner/server setting for the refreshing sessions, e.g. random_page_cost=1.1",
    )
    parser.add_argument("--data-dir", default="/tmp/dbt_ivm_bench/profile")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    args = parser.parse_args()
    tables = args.table or list(bench.QUERIES)

    data_dir = Path(args.data_dir)
    server = start_server(data_dir)
    try:
        conn = fresh_database(server, "profile")
        if args.set:
            with conn.cursor() as cur:
                for setting in args.set:
                    name, value = setting.split("=", 1)
                    cur.execute(f'ALTER DATABASE "profile" SET {name} = %s', (value,))
            conn.close()
            conn = connect(server.dsn("profile"))
        bench.load(conn, args.rows, args.customers)
        for name in tables:
            run_stream_table(conn, bench.spec_for(name, False))
            with conn.cursor() as cur:
                cur.execute(f"VACUUM ANALYZE {name}")
        summary: dict[str, list[float]] = {name: [] for name in tables}
        rng = random.Random(1)
        ids = bench.OrderIds(args.rows + 1)
        for repeat in range(args.repeats + (1 if args.explain else 0)):
            explain = args.explain and repeat == args.repeats
            bench.apply_batch(conn, rng, ids, bench.batch_mix(args.batch, repeat), args.customers)
            for name in tables:
                with Recorder(explain) as recorder:
                    started = time.perf_counter()
                    result = run_stream_table(conn, bench.spec_for(name, False))
                    wall = time.perf_counter() - started
                summary[name].append(wall)
                if explain:
                    continue
                in_sql = sum(seconds for seconds, _ in recorder.log)
                print(
                    f"\n{name} #{repeat + 1}: {result.summary()}; wall {wall * 1e3:.1f} ms = "
                    f"{in_sql * 1e3:.1f} ms in {len(recorder.log)} statements + {(wall - in_sql) * 1e3:.1f} ms "
                    "in Python"
                )
                for seconds, sql in sorted(recorder.log, key=lambda item: -item[0])[: args.top]:
                    print(f"  {seconds * 1e3:8.2f} ms  {one_line(sql)}")
        for name, walls in summary.items():
            print(
                f"\n{name}: median wall {median(walls[: args.repeats]) * 1e3:.1f} ms over {args.repeats} refreshes"
            )
        conn.close()
    finally:
        if not args.keep:
            postgres_server.stop(data_dir)


if __name__ == "__main__":
    main()
