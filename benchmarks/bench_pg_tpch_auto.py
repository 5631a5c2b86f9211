"""PostgreSQL benchmark for AUTO's choice by cost (issue #11): all 22 TPC-H queries, AUTO against
DIFFERENTIAL and FULL on the same batches.

    python benchmarks/bench_pg_tpch_auto.py                  # TPC-H sf 0.01, 4 rounds
    python benchmarks/bench_pg_tpch_auto.py --sf 0.1 --rounds 3 --orders 150

Run by hand; prints a Markdown table on stdout and progress on stderr.

Data: TPC-H from DuckDB's tpch extension (tests/tpch.py, no network), loaded with COPY, primary keys,
ANALYZE. Each query is kept three times: refresh_mode='auto', 'differential' and 'full'. Each round
applies one batch of TPC-H-style refresh rows (tests/tpch.py `Batches`: --orders new orders with
their lineitems, as many deleted, dimension updates) in one transaction, then refreshes the three
copies of every query in a rotating order. Times are client wall clock around `run_stream_table`.

What it checks: AUTO must never choose a differential refresh that takes more than 1.5× the FULL
refresh of the same round ("slow DIFF" below), and every AUTO table must equal its query at the end.
AUTO's reason for each choice is printed with --reasons.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.tpch, tests.oracle

from bench_postgres import engine_version, log
from pg_support import (
    drop_database,
    fmt_seconds,
    fresh_database,
    machine_description,
    markdown_table,
    start_server,
    timed,
)
from tests.oracle import differences
from tests.tpch import PRIMARY_KEYS, Batches, Data

from dbt_ivm.embedded import postgres_server
from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshMode, StreamTableSpec

SCHEMA = "public"
DATABASE = "bench_tpch_auto"
MODES: tuple[RefreshMode, ...] = ("auto", "differential", "full")
LIMIT = 1.5  # AUTO's differential refresh may take at most this many times the round's FULL refresh


@dataclass
class Round:
    seconds: dict[str, float] = field(default_factory=dict)  # by mode
    auto_action: str = ""
    auto_reason: str = ""

    @property
    def slow_differential(self) -> bool:
        return self.auto_action == "DIFFERENTIAL" and self.seconds["auto"] > LIMIT * self.seconds["full"]


def spec(number: int, sql: str, mode: RefreshMode) -> StreamTableSpec:
    name = f"q{number}_{mode}"
    return StreamTableSpec(model=name, schema=SCHEMA, name=name, sql=sql, refresh_mode=mode)


def load(conn: Any, data: Data) -> None:
    with conn.cursor() as cur:
        for statement in data.create_statements(SCHEMA, "postgres"):
            cur.execute(statement)
        for table in PRIMARY_KEYS:
            with data.csv(table).open() as rows:
                cur.copy_expert(f"COPY {SCHEMA}.{table} FROM STDIN WITH (FORMAT csv)", rows)
        cur.execute("ANALYZE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--orders", type=int, default=15, help="orders inserted and deleted per round")
    parser.add_argument("--queries", type=int, nargs="*", default=list(range(1, 23)))
    parser.add_argument("--reasons", action="store_true", help="print AUTO's reason for every choice")
    parser.add_argument("--data-dir", default=".ivm/bench_pg", help="the benchmark server's cluster")
    args = parser.parse_args()

    server = start_server(Path(args.data_dir).resolve())
    conn = fresh_database(server, DATABASE)
    try:
        with tempfile.TemporaryDirectory(prefix="bench_tpch_") as directory:
            data = Data(args.sf, Path(directory))
            load(conn, data)
            rounds = run(conn, data, args.queries, args.rounds, args.orders)
        wrong = [n for n in args.queries if any(differences(conn, SCHEMA, f"q{n}_auto", data_sql(data, n)))]
        report(server, args, rounds, wrong)
        slow = [(n, i) for n, rs in rounds.items() for i, r in enumerate(rs) if r.slow_differential]
        return 1 if slow or wrong else 0
    finally:
        conn.close()
        drop_database(server, DATABASE)
        postgres_server.stop(Path(args.data_dir).resolve())


def data_sql(data: Data, number: int) -> str:
    return data.queries(SCHEMA, "postgres", range(number, number + 1))[number]


def run(conn: Any, data: Data, numbers: list[int], rounds: int, orders: int) -> dict[int, list[Round]]:
    queries = {n: data_sql(data, n) for n in numbers}
    for number, sql in queries.items():
        for mode in MODES:
            result = run_stream_table(conn, spec(number, sql, mode))
            log(f"Q{number} {mode}: {result.summary()}")
    batches = Batches(data, SCHEMA, seed=11)
    found: dict[int, list[Round]] = {n: [] for n in numbers}
    for index in range(rounds):
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            for statement in batches.batch(orders):
                cur.execute(statement)
            cur.execute("COMMIT")
        for number, sql in queries.items():
            done = Round()
            order = MODES[index % 3 :] + MODES[: index % 3]  # no mode always first (or last)
            for mode in order:
                one = spec(number, sql, mode)
                seconds, result = timed(lambda one=one: run_stream_table(conn, one))
                done.seconds[mode] = seconds
                if mode == "auto":
                    done.auto_action, done.auto_reason = result.action, result.reason or ""
            found[number].append(done)
            log(
                f"round {index} Q{number}: auto {done.auto_action} {fmt_seconds(done.seconds['auto'])}, "
                f"differential {fmt_seconds(done.seconds['differential'])}, "
                f"full {fmt_seconds(done.seconds['full'])}"
            )
    return found


def report(server: Any, args: argparse.Namespace, rounds: dict[int, list[Round]], wrong: list[int]) -> None:
    header = ["query"] + [f"round {i}: AUTO / DIFF / FULL" for i in range(args.rounds)] + ["slow DIFF"]
    rows = []
    for number, done in rounds.items():
        cells = [
            f"{r.auto_action[:4]} {fmt_seconds(r.seconds['auto'])} / {fmt_seconds(r.seconds['differential'])}"
            f" / {fmt_seconds(r.seconds['full'])}"
            for r in done
        ]
        slow = sum(r.slow_differential for r in done)
        rows.append([f"Q{number}", *cells, str(slow) if slow else "-"])
    print(f"TPC-H sf {args.sf}, {args.orders} orders in and out per round; engine {engine_version()}")
    print(machine_description(server))
    print()
    print(markdown_table(header, rows))
    if args.reasons:
        print()
        for number, done in rounds.items():
            for index, r in enumerate(done):
                print(f"Q{number} round {index}: {r.auto_action}: {r.auto_reason}")
    print()
    print(f"AUTO tables differing from their query: {wrong or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
