"""dbt-labs' classic jaffle_shop as a workload: the vendored project, a data generator, a day's batch.

The project (`integration_tests/jaffle_shop`) is seeded by dbt with its own small CSVs; `Shop` then
grows the three raw tables to any size and writes batches of new, changed and deleted orders,
payments and customers, as SQL both PostgreSQL and Spark SQL accept. It remembers which ids exist, so
it never reads the database. The suite (integration_tests/tests/postgres/test_postgres_jaffle_shop.py,
integration_tests/tests/spark/test_spark_jaffle_shop.py) and benchmarks/bench_jaffle_shop.py share it.
"""

from __future__ import annotations

import csv
import datetime
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import yaml  # type: ignore[import-untyped, unused-ignore]

PROJECT = Path(__file__).resolve().parents[1] / "integration_tests" / "jaffle_shop"
MARTS = ("customers", "orders")
# The values the project's own schema tests accept.
STATUSES = ("placed", "shipped", "completed", "return_pending", "returned")
PAYMENT_METHODS = ("credit_card", "coupon", "bank_transfer", "gift_card")
FIRST_NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Frances", "Niklaus", "Radia", "Tony")
ROWS_PER_INSERT = 2_000
FIRST_DAY = datetime.date(2018, 1, 1)
STREAM_MARTS = "{marts: stream_table, refresh_mode: differential}"


class Warehouse(Protocol):
    """What the suite's run of the project needs from one engine."""

    def write(self, statements: list[str]) -> None: ...

    def assert_matches_query(self, name: str, sql: str, context: str) -> None: ...

    def newest_refresh(self) -> int:
        """The largest refresh_id in the refresh history (0 before any)."""
        ...

    def actions_since(self, refresh_id: int) -> dict[str, str]:
        """Table name → action of each refresh recorded after `refresh_id`."""
        ...


def follow_days(project: Path, warehouse: Warehouse, shop: Shop, days: int = 3) -> None:
    """Seed and grow the shop, create its marts as differential stream tables, then run `days` batches:
    after each `dbt run` every mart equals its compiled query and was refreshed differentially; the
    project's own schema tests pass at the end."""

    def assert_marts_match(context: str) -> None:
        for mart in MARTS:
            warehouse.assert_matches_query(mart, compiled_sql(mart, project), context)

    dbt(project, "seed")
    warehouse.write(shop.grow(customers=150, orders=600))
    dbt(project, "run", "--vars", STREAM_MARTS)
    assert_marts_match("after the creating run")
    for day in range(1, days + 1):
        before = warehouse.newest_refresh()
        warehouse.write(shop.batch(0.02))
        dbt(project, "run", "--vars", STREAM_MARTS)
        assert_marts_match(f"after day {day}")
        assert warehouse.actions_since(before) == dict.fromkeys(MARTS, "DIFFERENTIAL"), f"day {day}"
    dbt(project, "test")


def dbt(project: Path, *args: str) -> Any:
    """One in-process dbt invocation in `project` (profiles.yml there), which must succeed. Its
    adapter is dropped afterwards: dbt keeps the first one registered per adapter type for the whole
    process, and the suite's other dbt tests (dbt-tests-adapter's classes) would reuse this profile."""
    from dbt.adapters.factory import reset_adapters
    from dbt.cli.main import dbtRunner

    try:
        result = dbtRunner().invoke(
            [*args, "--project-dir", str(project), "--profiles-dir", str(project), "--quiet"]
        )
    finally:
        reset_adapters()
    if not result.success:
        raise AssertionError(f"dbt {' '.join(args)} failed: {result.exception}")
    return result.result


def write_profile(project: Path, output: dict[str, Any]) -> None:
    profiles = {"jaffle_shop": {"target": "default", "outputs": {"default": output}}}
    (project / "profiles.yml").write_text(yaml.safe_dump(profiles))


def copy_project(directory: Path) -> Path:
    """A copy of the project (and the macros it shares with the demo, `../macros`) under `directory`,
    so dbt's target/ and a profiles.yml stay out of the repository; returns the project's path."""
    shutil.copytree(PROJECT.parent / "macros", directory / "macros")
    project = directory / PROJECT.name
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("target", "logs"))
    return project


def compiled_sql(name: str, project: Path = PROJECT) -> str:
    """A model's query as dbt compiled it in the last run (what the oracle recomputes)."""
    return (project / "target" / "compiled" / "jaffle_shop" / "models" / f"{name}.sql").read_text()


def _seed_ids(name: str) -> list[int]:
    with (PROJECT / "seeds" / f"{name}.csv").open() as file:
        return [int(row["id"]) for row in csv.DictReader(file)]


class Shop:
    """The raw tables' ids as the seeds and every statement written since left them.

    `table` qualifies a raw table's name for the engine (`raw_orders` → `"s"."raw_orders"`).
    """

    def __init__(self, table: Callable[[str], str], seed: int = 7) -> None:
        self.table = table
        self.random = random.Random(seed)
        self.customers = _seed_ids("raw_customers")
        self.payments_of: dict[int, list[int]] = {order: [] for order in _seed_ids("raw_orders")}
        with (PROJECT / "seeds" / "raw_payments.csv").open() as file:
            for row in csv.DictReader(file):
                self.payments_of.setdefault(int(row["order_id"]), []).append(int(row["id"]))
        self.next_customer = max(self.customers) + 1
        self.next_order = max(self.payments_of) + 1
        self.next_payment = max(p for ps in self.payments_of.values() for p in ps) + 1
        self.day = 100  # days after FIRST_DAY the newest order was placed

    @property
    def orders(self) -> int:
        return len(self.payments_of)

    def grow(self, customers: int, orders: int) -> list[str]:
        """INSERTs adding `customers` customers and `orders` orders, each with one or two payments."""
        return [*self._new_customers(customers), *self._new_orders(orders)]

    def batch(self, fraction: float) -> list[str]:
        """A day of the shop's writes touching `fraction` of its orders: new orders and their payments,
        orders moving on in status, payments corrected, orders deleted with their payments, new and
        renamed customers."""
        size = max(1, round(self.orders * fraction))
        self.day += 1
        changed = self.random.sample(sorted(self.payments_of), min(size, self.orders))
        deleted = changed[: max(1, size // 5)]
        statements = [*self._new_customers(max(1, size // 20)), *self._new_orders(size)]
        statuses = " ".join(
            f"when {order} then '{self.random.choice(STATUSES)}'" for order in changed[len(deleted) :]
        )
        if statuses:
            ids = ", ".join(str(order) for order in changed[len(deleted) :])
            statements.append(
                f"update {self.table('raw_orders')} set status = case id {statuses} end where id in ({ids})"
            )
        corrected = [p for order in changed[len(deleted) :][: size // 2] for p in self.payments_of[order][:1]]
        if corrected:
            ids = ", ".join(str(p) for p in corrected)
            statements.append(
                f"update {self.table('raw_payments')} set amount = amount + 100 where id in ({ids})"
            )
        gone = [p for order in deleted for p in self.payments_of.pop(order)]
        if gone:
            ids = ", ".join(str(p) for p in gone)
            statements.append(f"delete from {self.table('raw_payments')} where id in ({ids})")
        ids = ", ".join(str(order) for order in deleted)
        statements.append(f"delete from {self.table('raw_orders')} where id in ({ids})")
        renamed = self.random.sample(self.customers, min(len(self.customers), max(1, size // 50)))
        ids = ", ".join(str(customer) for customer in renamed)
        statements.append(
            f"update {self.table('raw_customers')} set first_name = '{self.random.choice(FIRST_NAMES)}' "
            f"where id in ({ids})"
        )
        return statements

    def _new_customers(self, count: int) -> Iterator[str]:
        rows = []
        for _ in range(count):
            customer = self.next_customer
            self.next_customer += 1
            self.customers.append(customer)
            rows.append(f"({customer}, '{self.random.choice(FIRST_NAMES)}', '{chr(65 + customer % 26)}.')")
        yield from self._inserts("raw_customers", "id, first_name, last_name", rows)

    def _new_orders(self, count: int) -> Iterator[str]:
        orders, payments = [], []
        for _ in range(count):
            order = self.next_order
            self.next_order += 1
            day = FIRST_DAY + datetime.timedelta(
                days=self.random.randrange(max(1, self.day - 30), self.day + 1)
            )
            customer = self.random.choice(self.customers)
            orders.append(
                f"({order}, {customer}, date '{day.isoformat()}', '{self.random.choice(STATUSES[:3])}')"
            )
            self.payments_of[order] = []
            for _ in range(1 + (self.random.random() < 0.15)):
                payment = self.next_payment
                self.next_payment += 1
                self.payments_of[order].append(payment)
                method = self.random.choice(PAYMENT_METHODS)
                payments.append(f"({payment}, {order}, '{method}', {self.random.randrange(0, 3000, 100)})")
        yield from self._inserts("raw_orders", "id, user_id, order_date, status", orders)
        yield from self._inserts("raw_payments", "id, order_id, payment_method, amount", payments)

    def _inserts(self, name: str, columns: str, rows: list[str]) -> Iterator[str]:
        for start in range(0, len(rows), ROWS_PER_INSERT):
            values = ", ".join(rows[start : start + ROWS_PER_INSERT])
            yield f"insert into {self.table(name)} ({columns}) values {values}"
