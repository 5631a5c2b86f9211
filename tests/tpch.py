"""TPC-H for the tests, written once for PostgreSQL and Spark/Iceberg: data, the 22 queries, and
refresh batches. Pure Python (DuckDB generates the data): the backend modules load it and run what
this module generates, then compare every stream table with its query (multiset oracle).

- `generate(sf, directory)`: DuckDB's `dbgen` at scale factor `sf` (the `tpch` extension file that the
  `duckdb-extension-tpch` package ships, so no network), each table written as CSV and Parquet.
- `create_statements(schema, dialect)`: the eight tables with their primary keys (PostgreSQL:
  PRIMARY KEY; Spark: Iceberg identifier fields, columns NOT NULL).
- `queries(schema, dialect)`: query number -> the query as DuckDB prints it, tables qualified by
  `schema`, rendered for `dialect`. A top-level ORDER BY is dropped (a stream table holds a set)
  unless a LIMIT needs it (TopK). Q15's view is its CTE.
- `Batches`: TPC-H's refresh functions in miniature as plain SQL statements both engines accept: RF1
  inserts new orders with 1–7 lineitems, RF2 deletes orders with their lineitems, and updates change
  lineitem prices and discounts, customer, supplier, nation, part and partsupp attributes, so that
  dimension changes reach every query.
"""

from __future__ import annotations

import datetime
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

PRIMARY_KEYS = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
FIRST_ORDER_DAY = datetime.date(1992, 1, 1)
LAST_ORDER_DAY = datetime.date(1998, 8, 2) - datetime.timedelta(days=151)
CURRENT_DATE = datetime.date(1995, 6, 17)  # TPC-H: decides return flags and line status
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")


def connection() -> Any:
    """A DuckDB connection with the tpch extension loaded from its PyPI package."""
    import duckdb
    import duckdb_extension_tpch

    package = Path(duckdb_extension_tpch.__file__).parent
    path = package / "extensions" / f"v{duckdb.__version__}" / "tpch.duckdb_extension"
    if not path.exists():
        found = sorted(package.glob("extensions/*/tpch.duckdb_extension"))
        raise RuntimeError(
            f"no tpch extension for duckdb {duckdb.__version__} in {package} (found {found}): "
            "install duckdb and duckdb-extension-tpch of the same version"
        )
    con = duckdb.connect()
    con.execute(f"LOAD '{path}'")
    return con


class Data:
    """TPC-H at scale factor `sf`, generated into DuckDB and written to `directory`."""

    def __init__(self, sf: float, directory: Path) -> None:
        self.con = connection()
        self.con.execute(f"CALL dbgen(sf={sf})")
        self.directory = directory
        self.columns: dict[str, list[tuple[str, str]]] = {
            table: [(r[0], r[1]) for r in self.con.execute(f"DESCRIBE {table}").fetchall()]
            for table in PRIMARY_KEYS
        }
        for table, key in PRIMARY_KEYS.items():
            # dbgen below sf 0.01 repeats a few partsupp keys: keep the first row of each key.
            first = f"SELECT min(rowid) FROM {table} GROUP BY {', '.join(key)}"
            self.con.execute(f"DELETE FROM {table} WHERE rowid NOT IN ({first})")
            self.con.execute(f"COPY {table} TO '{self.csv(table)}' (FORMAT csv, HEADER false)")
            self.con.execute(f"COPY {table} TO '{self.parquet(table)}' (FORMAT parquet)")

    def csv(self, table: str) -> Path:
        return self.directory / f"{table}.csv"

    def parquet(self, table: str) -> Path:
        return self.directory / f"{table}.parquet"

    def create_statements(self, schema: str, dialect: str) -> list[str]:
        statements = []
        for table, key in PRIMARY_KEYS.items():
            columns = ", ".join(f"{n} {_type(t, dialect)} NOT NULL" for n, t in self.columns[table])
            if dialect == "postgres":
                statements.append(
                    f"CREATE TABLE {schema}.{table} ({columns}, PRIMARY KEY ({', '.join(key)}))"
                )
            else:
                statements.append(
                    f"CREATE TABLE {schema}.{table} ({columns}) USING iceberg "
                    "TBLPROPERTIES ('format-version'='2')"
                )
                statements.append(f"ALTER TABLE {schema}.{table} SET IDENTIFIER FIELDS {', '.join(key)}")
        return statements

    def queries(self, schema: str, dialect: str, numbers: range = range(1, 23)) -> dict[int, str]:
        texts = dict(self.con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall())
        return {n: render(texts[n], schema, dialect) for n in numbers}


def _type(duckdb_type: str, dialect: str) -> str:
    if duckdb_type == "VARCHAR":
        return "text" if dialect == "postgres" else "string"
    if duckdb_type == "INTEGER":
        return "int"
    return duckdb_type.lower()


def render(duckdb_text: str, schema: str, dialect: str) -> str:
    """A TPC-H query for `dialect`: tables qualified by `schema`, ORDER BY kept only for LIMIT."""
    tree = sqlglot.parse_one(duckdb_text, read="duckdb")
    if not tree.args.get("limit"):
        tree.set("order", None)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if table.name not in ctes:
            table.set("db", exp.to_identifier(schema))
    return tree.sql(dialect)


def literal(value: object) -> str:
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, int | Decimal):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


class Batches:
    """Seeded refresh batches over the tables of `schema`, tracked in a small Python model."""

    def __init__(self, data: Data, schema: str, seed: int) -> None:
        con, self.s = data.con, schema
        self.rng = random.Random(seed)
        self.columns = {t: [n for n, _ in cols] for t, cols in data.columns.items()}
        self.orders: dict[int, int] = dict(
            con.execute("SELECT l_orderkey, max(l_linenumber) FROM lineitem GROUP BY l_orderkey").fetchall()
        )
        self.next_order = int(con.execute("SELECT max(o_orderkey) FROM orders").fetchone()[0]) + 1
        self.customers, self.suppliers, self.parts, self.part_suppliers, self.types = dimensions(con)

    def _values(self, table: str, rows: list[dict[str, object]]) -> str:
        tuples = ["(" + ", ".join(literal(r[c]) for c in self.columns[table]) + ")" for r in rows]
        return f"INSERT INTO {self.s}.{table} VALUES {', '.join(tuples)}"

    def _new_order(self, key: int) -> tuple[dict[str, object], list[dict[str, object]]]:
        return new_order(self.rng, key, self.customers, self.part_suppliers, self.parts)

    def batch(self, orders: int) -> list[str]:
        """RF1 (`orders` new orders), RF2 (`orders` deleted) and one update of each kind."""
        rng, s = self.rng, self.s
        new_orders, new_lines = [], []
        for key in range(self.next_order, self.next_order + orders):
            order, lines = self._new_order(key)
            new_orders.append(order)
            new_lines += lines
            self.orders[key] = len(lines)
        self.next_order += orders
        statements = [self._values("orders", new_orders), self._values("lineitem", new_lines)]
        gone = rng.sample(sorted(self.orders), orders)
        for key in gone:
            del self.orders[key]
        listed = ", ".join(map(str, gone))
        statements += [
            f"DELETE FROM {s}.orders WHERE o_orderkey IN ({listed})",
            f"DELETE FROM {s}.lineitem WHERE l_orderkey IN ({listed})",
        ]
        repriced = rng.sample(sorted(self.orders), 3)
        for key in repriced:
            statements.append(
                f"UPDATE {s}.lineitem SET l_extendedprice = l_extendedprice + {rng.randint(1, 900)}.00, "
                f"l_discount = {Decimal(rng.randint(0, 10)) / 100} WHERE l_orderkey = {key} AND l_linenumber = 1"
            )
        mover, payer = rng.sample(range(1, self.customers + 1), 2)
        part, supplier = rng.choice(self.part_suppliers)
        retyped = rng.choice(sorted(self.parts))
        statements += [
            f"UPDATE {s}.customer SET c_nationkey = {rng.randrange(25)}, "
            f"c_mktsegment = {literal(rng.choice(SEGMENTS))} WHERE c_custkey = {mover}",
            f"UPDATE {s}.customer SET c_acctbal = c_acctbal - 2000.00 WHERE c_custkey = {payer}",
            f"UPDATE {s}.supplier SET s_nationkey = {rng.randrange(25)}, s_acctbal = s_acctbal + 100.00 "
            f"WHERE s_suppkey = {rng.randint(1, self.suppliers)}",
            f"UPDATE {s}.nation SET n_regionkey = {rng.randrange(5)} WHERE n_nationkey = {rng.randrange(25)}",
            f"UPDATE {s}.part SET p_type = {literal(rng.choice(self.types))}, p_size = {rng.randint(1, 50)} "
            f"WHERE p_partkey = {retyped}",
            f"UPDATE {s}.partsupp SET ps_supplycost = ps_supplycost - 1.00, ps_availqty = ps_availqty + 5 "
            f"WHERE ps_partkey = {part} AND ps_suppkey = {supplier}",
        ]
        return statements


def dimensions(con: Any) -> tuple[int, int, dict[int, Decimal], list[tuple[int, int]], list[str]]:
    """From generated data: the largest customer and supplier keys, each part's retail price, the
    (part, supplier) pairs of partsupp, and the part types."""
    customers = int(con.execute("SELECT max(c_custkey) FROM customer").fetchone()[0])
    suppliers = int(con.execute("SELECT max(s_suppkey) FROM supplier").fetchone()[0])
    prices: dict[int, Decimal] = dict(con.execute("SELECT p_partkey, p_retailprice FROM part").fetchall())
    pairs = con.execute("SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY 1, 2").fetchall()
    types = [r[0] for r in con.execute("SELECT DISTINCT p_type FROM part ORDER BY 1").fetchall()]
    return customers, suppliers, prices, pairs, types


def new_order(
    rng: random.Random,
    key: int,
    customers: int,
    part_suppliers: list[tuple[int, int]],
    prices: dict[int, Decimal],
) -> tuple[dict[str, object], list[dict[str, object]]]:
    """One new order (RF1) with 1–7 lineitems, as column -> value dicts."""
    day = FIRST_ORDER_DAY + datetime.timedelta(days=rng.randrange((LAST_ORDER_DAY - FIRST_ORDER_DAY).days))
    lines: list[dict[str, object]] = []
    for number in range(1, rng.randint(1, 7) + 1):
        part, supplier = rng.choice(part_suppliers)
        quantity = Decimal(rng.randint(1, 50))
        ship = day + datetime.timedelta(days=rng.randint(1, 121))
        receipt = ship + datetime.timedelta(days=rng.randint(1, 30))
        lines.append(
            {
                "l_orderkey": key,
                "l_partkey": part,
                "l_suppkey": supplier,
                "l_linenumber": number,
                "l_quantity": quantity,
                "l_extendedprice": quantity * prices[part],
                "l_discount": Decimal(rng.randint(0, 10)) / 100,
                "l_tax": Decimal(rng.randint(0, 8)) / 100,
                "l_returnflag": rng.choice("RA") if receipt <= CURRENT_DATE else "N",
                "l_linestatus": "O" if ship > CURRENT_DATE else "F",
                "l_shipdate": ship,
                "l_commitdate": day + datetime.timedelta(days=rng.randint(30, 90)),
                "l_receiptdate": receipt,
                "l_shipinstruct": rng.choice(INSTRUCTIONS),
                "l_shipmode": rng.choice(MODES),
                "l_comment": f"refresh line {number}",
            }
        )
    statuses = {line["l_linestatus"] for line in lines}
    order: dict[str, object] = {
        "o_orderkey": key,
        "o_custkey": rng.randint(1, customers),
        "o_orderstatus": "F" if statuses == {"F"} else "O" if statuses == {"O"} else "P",
        "o_totalprice": Decimal(rng.randint(100000, 50000000)) / 100,
        "o_orderdate": day,
        "o_orderpriority": rng.choice(PRIORITIES),
        "o_clerk": f"Clerk#{rng.randint(1, 1000):09d}",
        "o_shippriority": 0,
        "o_comment": "refresh order special requests" if rng.random() < 0.2 else "refresh order",
    }
    return order, lines
