"""dbt-labs' classic jaffle_shop at scale (issue 60): its marts as `table` models, as stream tables
under `auto`, and as stream tables under `refresh_mode='differential'`, each in its own database
(PostgreSQL: on one embedded PostgreSQL 18 server) or schema (Spark: in one embedded Spark + Iceberg
session), fed the same rows and the same batches.

    python benchmarks/bench_jaffle_shop.py [--engine postgres|spark] [--orders 200000]
        [--fraction 0.005] [--days 3] [--png docs/img/bench_jaffle_shop.png]

First the creating `dbt run`, then per day one batch (tests/jaffle_shop.Shop.batch: new orders and
payments, status changes, corrected payments, deleted orders, new and renamed customers) and a
`dbt run` of each project, in a rotating order. Timed: the whole `dbt run` (in-process) and each
mart's own time from dbt's results (what run_results.json records). Every stream table is checked
against its query after the last day. Prints markdown tables; nothing here is a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pg_support import (
    fmt_seconds,
    fresh_database,
    machine_description,
    markdown_table,
    median,
    start_server,
)
from tests.oracle import assert_matches_query

from tests import jaffle_shop

SCHEMA = "jaffle"
RAW_TABLES = ("raw_customers", "raw_orders", "raw_payments")
VARIANTS = {
    "table": "{marts: table}",
    "auto": "{marts: stream_table, refresh_mode: auto}",
    "differential": "{marts: stream_table, refresh_mode: differential}",
    # What a FULL refresh costs by itself: decided before any change is read.
    "full": "{marts: stream_table, refresh_mode: full}",
}


class Project:
    """One copy of the project, its marts materialized as `variant`."""

    def __init__(self, root: Path, variant: str) -> None:
        self.variant = variant
        self.path = jaffle_shop.copy_project(root / variant)

    def run(self) -> tuple[float, dict[str, float]]:
        """Seconds of the whole `dbt run`, and each mart's seconds as dbt recorded them."""
        started = time.perf_counter()
        results = jaffle_shop.dbt(self.path, "run", "--vars", VARIANTS[self.variant])
        seconds = time.perf_counter() - started
        marts = {r.node.name: r.execution_time for r in results.results if r.node.name in jaffle_shop.MARTS}
        return seconds, marts

    def write(self, statements: list[str]) -> None:
        raise NotImplementedError

    def grow_like(self, first: Project, growth: list[str]) -> None:
        """The rows `growth` gave `first`'s raw tables, in this project's."""
        self.write(growth)

    def retargeted(self, statement: str, first: Project) -> str:
        """`statement`, written for `first`'s raw tables, for this project's."""
        return statement

    def raw(self, name: str) -> str:
        raise NotImplementedError

    def history(self, since: int) -> list[tuple[int, str, str]]:
        """(refresh id, table, action) of the refreshes recorded after `since`."""
        raise NotImplementedError

    def assert_marts_match(self) -> None:
        raise NotImplementedError

    def newest_refresh(self) -> int:
        found = self.history(-1) if self.variant != "table" else []
        return max((refresh for refresh, _, _ in found), default=0)

    def actions(self, since: int) -> dict[str, str]:
        if self.variant == "table":
            return {}
        return {table.split(".")[-1]: action for _, table, action in self.history(since)}


class PostgresProject(Project):
    def __init__(self, root: Path, variant: str, server: Any) -> None:
        super().__init__(root, variant)
        self.database = f"jaffle_{variant}"
        self.conn = fresh_database(server, self.database)
        output = {"type": "ivm_postgres", "host": server.host, "port": server.port, "user": server.user}
        output |= {"pass": "", "dbname": self.database, "schema": SCHEMA, "threads": 1}
        jaffle_shop.write_profile(self.path, output)

    def raw(self, name: str) -> str:
        return f'"{SCHEMA}"."{name}"'

    def write(self, statements: list[str]) -> None:
        with self.conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            cur.execute(
                f"ANALYZE {self.raw('raw_orders')}, {self.raw('raw_payments')}, {self.raw('raw_customers')}"
            )

    def history(self, since: int) -> list[tuple[int, str, str]]:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT refresh_id, stream_table, action FROM dbt_ivm.refresh_history WHERE refresh_id > %s "
                "ORDER BY refresh_id",
                (since,),
            )
            return list(cur.fetchall())

    def assert_marts_match(self) -> None:
        for mart in jaffle_shop.MARTS:
            assert_matches_query(self.conn, SCHEMA, mart, jaffle_shop.compiled_sql(mart, self.path))


class SparkProject(Project):
    """A schema of its own in the one embedded session (dbt's adapter starts it at the first run)."""

    def __init__(self, root: Path, variant: str, warehouse: Path) -> None:
        super().__init__(root, variant)
        self.schema = f"jaffle_{variant}"
        output = {"type": "ivm_spark", "method": "session", "warehouse": str(warehouse)}
        jaffle_shop.write_profile(self.path, output | {"schema": self.schema, "threads": 1})

    @property
    def spark(self) -> Any:
        from dbt_ivm.spark.session import existing_session

        return existing_session()

    def raw(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def grow_like(self, first: Project, growth: list[str]) -> None:
        # Copied: Spark parses a long VALUES list slowly.
        self.write([f"INSERT OVERWRITE {self.raw(t)} SELECT * FROM {first.raw(t)}" for t in RAW_TABLES])

    def retargeted(self, statement: str, first: Project) -> str:
        return statement.replace(first.raw(""), self.raw(""))

    def write(self, statements: list[str]) -> None:
        for statement in statements:
            self.spark.sql(statement)

    def history(self, since: int) -> list[tuple[int, str, str]]:
        rows = self.spark.sql(
            "SELECT refresh_id, stream_table, action FROM dbt_ivm.refresh_history "
            f"WHERE refresh_id > {since} AND stream_table LIKE '{self.schema}.%' ORDER BY refresh_id"
        ).collect()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def assert_marts_match(self) -> None:
        from tests.spark.oracle import assert_matches_query as spark_matches

        for mart in jaffle_shop.MARTS:
            spark_matches(self.spark, self.schema, mart, jaffle_shop.compiled_sql(mart, self.path))


def row(label: str, samples: dict[str, list[tuple[float, dict[str, float]]]], variant: str) -> list[str]:
    whole = median([s for s, _ in samples[variant]])
    marts = [median([m[name] for _, m in samples[variant]]) for name in jaffle_shop.MARTS]
    return [label, variant, fmt_seconds(whole), fmt_seconds(sum(marts)), *(fmt_seconds(m) for m in marts)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=("postgres", "spark"), default="postgres")
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--fraction", type=float, default=0.005)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--png", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-jaffle-") as scratch:
        root = Path(scratch)
        projects: list[Project]
        if args.engine == "postgres":
            server = start_server(root / "pg")
            print(machine_description(server))
            projects = [PostgresProject(root, variant, server) for variant in VARIANTS]
        else:
            projects = [SparkProject(root, variant, root / "warehouse") for variant in VARIANTS]
        for project in projects:
            jaffle_shop.dbt(project.path, "seed")
        first = projects[0]
        shop = jaffle_shop.Shop(first.raw)
        growth = shop.grow(customers=args.orders // 10, orders=args.orders)
        first.write(growth)
        for project in projects[1:]:
            project.grow_like(first, growth)
        print(
            f"{args.engine}: {shop.orders} orders, {len(shop.customers)} customers; a day changes {args.fraction:.1%} of orders"
        )
        created = {p.variant: [p.run()] for p in projects}
        days: dict[str, list[tuple[float, dict[str, float]]]] = {p.variant: [] for p in projects}
        actions: dict[str, list[dict[str, str]]] = {p.variant: [] for p in projects}
        for day in range(args.days):
            batch = shop.batch(args.fraction)
            for project in projects:
                project.write([project.retargeted(statement, first) for statement in batch])
            order = projects[day % 3 :] + projects[: day % 3]
            for project in order:
                before = project.newest_refresh()
                days[project.variant].append(project.run())
                actions[project.variant].append(project.actions(before))
        for project in projects[1:]:
            project.assert_marts_match()
        header = ["run", "marts as", "whole dbt run", "marts", *jaffle_shop.MARTS]
        lines = [row("first (create)", created, v) for v in VARIANTS]
        lines += [row(f"after a day (median of {args.days})", days, v) for v in VARIANTS]
        print(markdown_table(header, lines))
        for variant in ("auto", "differential", "full"):
            print(f"{variant}: actions per day {actions[variant]}")
        report_ratios(created, days)
        if args.png:
            plot(days, args.png, args.days)


def report_ratios(first: dict[str, Any], days: dict[str, Any]) -> None:
    def marts(samples: list[tuple[float, dict[str, float]]], name: str | None = None) -> float:
        names = [name] if name else list(jaffle_shop.MARTS)
        return median([sum(m[n] for n in names) for _, m in samples])

    def whole(samples: list[tuple[float, dict[str, float]]]) -> float:
        return median([s for s, _ in samples])

    print(
        f"\ntables' marts ÷ auto's marts after a day: {marts(days['table']) / marts(days['auto']):.2f}× (target ≥ 3)"
    )
    print(f"tables' dbt run ÷ auto's: {whole(days['table']) / whole(days['auto']):.2f}× (target > 1)")
    print(f"first run, auto ÷ tables: {whole(first['auto']) / whole(first['table']):.2f}× (target ≤ 1.5)")
    for name in jaffle_shop.MARTS:
        ratio = marts(days["auto"], name) / marts(days["differential"], name)
        print(f"{name}: auto ÷ differential {ratio:.2f}× (target ≤ 1.2)")


def plot(days: dict[str, list[tuple[float, dict[str, float]]]], png: str, count: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.4))
    width = 0.27
    for index, variant in enumerate(VARIANTS):
        values = [median([m[name] for _, m in days[variant]]) * 1e3 for name in jaffle_shop.MARTS]
        positions = [i + (index - 1) * width for i in range(len(values))]
        axis.bar(positions, values, width, label=f"marts as {variant}")
    axis.set_xticks(range(len(jaffle_shop.MARTS)), list(jaffle_shop.MARTS))
    axis.set_ylabel("ms in dbt run after a day's batch")
    axis.set_title(f"jaffle_shop marts, median of {count} days")
    axis.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
