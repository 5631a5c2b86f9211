"""Common Spark SQL functions evaluated through the engine and directly, on Spark + Iceberg.

A user expression is parsed once in the model's dialect (Spark SQL) and must be rendered for Spark
faithfully: `regexp_extract(s, '(a)(b)', 2)` keeps its group index, `n DIV 2` stays an integer
division, a decimal aggregate stays decimal. Spark is slow, so the expressions are columns of a few
stream tables (GROUP_SIZE each), built once per module; each expression is then its own test case
(values and stored type), so a failure names the expression.

Every stream table is created, the source changed, and refreshed differentially; after each step each
column is compared with the query's column as a multiset of (id, value) and its stored Spark type
with the query's type.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import bt, make_spec, refresh_and_check

pytestmark = pytest.mark.spark

GROUP_SIZE = 10

ROWS = (
    "(1, 'abc,def', 7, 12.34, TIMESTAMP '2024-03-15 10:20:30', DATE '2024-03-15', true), "
    "(2, '  Hello World  ', -5, -0.05, TIMESTAMP '2023-12-31 23:59:59', DATE '2024-02-29', false), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(4, 'aab', 0, 99.99, TIMESTAMP '2020-01-01 00:00:00', DATE '2020-01-01', true), "
    "(5, 'ab_ab,x,y', 12, 0.00, TIMESTAMP '2024-12-31 12:00:00', DATE '2024-12-31', NULL)"
)


def _changes(t: str) -> list[str]:
    return [
        f"UPDATE {t} SET s = 'xyz,ab', n = 8, d = 50.55 WHERE id = 1",
        f"DELETE FROM {t} WHERE id = 2",
        f"UPDATE {t} SET s = 'aaabbb', n = 3, d = 1.15, ts = TIMESTAMP '2024-01-31 08:00:00', "
        "dt = DATE '2024-01-31', b = false WHERE id = 3",
        f"UPDATE {t} SET s = NULL, n = NULL, d = NULL, ts = NULL, dt = NULL, b = NULL WHERE id = 4",
        f"INSERT INTO {t} VALUES (6, 'Mixed Case,Ab', -11, -7.25, TIMESTAMP '2022-06-15 00:00:01', "
        "DATE '2022-06-15', true), (7, '', 1, 100.00, TIMESTAMP '1999-12-31 23:59:59', DATE '1999-12-31', false)",
    ]


EXPRESSIONS: dict[str, str] = {
    # regular expressions (the known defect: the group index is dropped)
    "regexp_extract_group_2": "regexp_extract(s, '(a)(b)', 2)",
    "regexp_extract_group_1": "regexp_extract(s, '(a)(b)', 1)",
    "regexp_extract_group_0": "regexp_extract(s, '(a)(b)', 0)",
    "regexp_extract_default": "regexp_extract(s, '(a)(b)')",
    "regexp_extract_words_2": "regexp_extract(s, '([a-z]+),([a-z]+)', 2)",
    "regexp_replace": "regexp_replace(s, '[a-c]', 'X')",
    "rlike": "s RLIKE '^a+b'",
    "regexp_like": "regexp_like(s, '^a+b')",
    # numbers (the known defect: DIV gains a decimal cast)
    "int_div": "n DIV 2",
    "int_div_neg": "n DIV -3",
    "slash_div": "n / 2",
    "pmod": "pmod(n, 3)",
    "mod_op": "n % 3",
    "mod": "mod(n, 3)",
    "abs": "abs(n)",
    "round": "round(d, 1)",
    "round_0": "round(d)",
    "bround": "bround(d, 1)",
    "floor": "floor(d)",
    "ceil": "ceil(d)",
    "decimal_div": "d / 3",
    "numeric_arith": "d * (1 - d / 100)",
    "int_times_decimal": "n * d",
    "power": "power(n, 2)",
    "signum": "signum(d)",
    # strings
    "upper": "upper(s)",
    "lower": "lower(s)",
    "length": "length(s)",
    "substring": "substring(s, 2, 3)",
    "substr_from": "substr(s, 3)",
    "concat": "concat(s, '-', n)",
    "concat_op": "s || '-' || n",
    "concat_ws": "concat_ws('|', s, cast(n AS string))",
    "trim": "trim(s)",
    "ltrim": "ltrim(s)",
    "replace": "replace(s, 'a', 'X')",
    "split_index_0": "split(s, ',')[0]",
    "element_at_split": "element_at(split(s, ','), 2)",
    "split_part": "split_part(s, ',', 1)",
    "instr": "instr(s, 'b')",
    "locate": "locate('b', s)",
    "lpad": "lpad(s, 6, '*')",
    "rpad": "rpad(s, 6, '*')",
    "left": "left(s, 2)",
    "right": "right(s, 2)",
    "reverse": "reverse(s)",
    "initcap": "initcap(s)",
    "like": "s LIKE 'a%'",
    "ilike": "s ILIKE '%hello%'",
    # casts
    "int_to_string": "cast(n AS string)",
    "string_to_int": "cast(cast(n AS string) AS int)",
    "int_to_decimal": "cast(n AS decimal(10, 2))",
    "decimal_to_int": "cast(d AS int)",
    "decimal_to_string": "cast(d AS string)",
    "int_to_bigint": "cast(n AS bigint)",
    "int_to_double": "cast(n AS double)",
    "ts_to_date": "cast(ts AS date)",
    "date_to_string": "cast(dt AS string)",
    "bool_to_string": "cast(b AS string)",
    "to_decimal_5_1": "cast(d AS decimal(5, 1))",
    # dates and times
    "date_trunc_month": "date_trunc('MONTH', ts)",
    "trunc_date": "trunc(dt, 'MM')",
    "date_add": "date_add(dt, 7)",
    "date_sub": "date_sub(dt, 7)",
    "datediff": "datediff(dt, DATE '2024-01-01')",
    "year": "year(ts)",
    "month": "month(dt)",
    "dayofweek": "dayofweek(dt)",
    "extract_year": "extract(YEAR FROM ts)",
    "date_format": "date_format(ts, 'yyyy-MM-dd')",
    "add_months": "add_months(dt, 1)",
    "ts_plus_interval": "ts + INTERVAL 1 DAY",
    "last_day": "last_day(dt)",
    # conditionals
    "case": "CASE WHEN n > 0 THEN 'pos' WHEN n < 0 THEN 'neg' ELSE 'zero' END",
    "case_simple": "CASE n WHEN 7 THEN 'seven' WHEN 8 THEN 'eight' ELSE 'other' END",
    "case_numeric": "CASE WHEN s LIKE 'a%' THEN d * (1 - d / 100) ELSE 0 END",
    "coalesce": "coalesce(s, 'none')",
    "coalesce_numeric": "coalesce(d, n, 0)",
    "nullif": "nullif(n, 0)",
    "greatest": "greatest(n, 0)",
    "least": "least(d, 50)",
    "if": "if(n > 0, 'p', 'np')",
    "nvl": "nvl(s, 'x')",
    # booleans
    "bool_logic": "b AND n > 0 OR s IS NULL",
    "bool_not": "NOT b",
    "null_safe_eq": "n <=> 7",
    "in_list": "n IN (0, 7, 8)",
    "between": "d BETWEEN 0 AND 50",
}

# TPC-H Q14-like: an aggregate whose result type is decimal(38,6) in Spark.
AGGREGATES: dict[str, str] = {
    "q14_promo": (
        "SELECT 100.00 * SUM(CASE WHEN s LIKE 'a%' THEN d * (1 - d / 100) ELSE 0 END) "
        "/ SUM(d * (1 - d / 100)) AS promo FROM {t}"
    ),
    "q14_promo_grouped": (
        "SELECT id % 2 AS parity, 100.00 * SUM(CASE WHEN s LIKE 'a%' THEN d * (1 - d / 100) ELSE 0 END) "
        "/ SUM(d * (1 - d / 100)) AS promo, SUM(d * n) AS dn FROM {t} GROUP BY id % 2"
    ),
}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def column_of(name: str) -> str:
    """The stream table column of an expression (prefixed: some ids are keywords, e.g. `left`, `if`)."""
    return f"v_{name}"


class Unit:
    """One stream table: `SELECT id, <expr> AS <name>, … FROM t` over some of EXPRESSIONS."""

    def __init__(self, schema: str, name: str, names: list[str]) -> None:
        self.schema, self.name, self.names = schema, name, names
        listed = ", ".join(f"{EXPRESSIONS[n]} AS {column_of(n)}" for n in names)
        self.sql = f"SELECT id, {listed} FROM {schema}.t"

    def refresh(self, spark: Any) -> str:
        return run_stream_table(
            spark, make_spec(self.schema, self.name, self.sql, refresh_mode="differential")
        ).action


class Evaluation:
    """Failures per expression id: ('values' | 'type') -> first line of each problem, per step."""

    def __init__(self) -> None:
        self.values: dict[str, list[str]] = {n: [] for n in [*EXPRESSIONS, *AGGREGATES]}
        self.types: dict[str, list[str]] = {n: [] for n in [*EXPRESSIONS, *AGGREGATES]}

    def check_columns(self, spark: Any, unit: Unit, step: str) -> None:
        relation = f"{bt(unit.schema)}.{bt(unit.name)}"
        spark.sql(f"REFRESH TABLE {relation}")
        stored_types = {f.name: f.dataType.simpleString() for f in spark.table(relation).schema.fields}
        query_types = {f.name: f.dataType.simpleString() for f in spark.sql(unit.sql).schema.fields}
        for name in unit.names:
            column = column_of(name)
            if stored_types.get(column) != query_types.get(column):
                self.types[name].append(
                    f"{step}: stored type {stored_types.get(column)} != query type {query_types.get(column)}"
                )
        # Every column of the unit in one job: ids are unique on both sides, so a row of one side
        # that the other lacks, or whose value differs (NULL-safe), is exactly what EXCEPT ALL over
        # (id, column) both ways would report for that column.
        columns = [column_of(name) for name in unit.names]
        same = ", ".join(f"s.{c} <=> q.{c} AS same_{i}" for i, c in enumerate(columns))
        values = ", ".join(f"s.{c} AS s_{i}, q.{c} AS q_{i}" for i, c in enumerate(columns))
        rows = spark.sql(
            f"SELECT s.id AS s_id, q.id AS q_id, {values}, {same} "
            f"FROM {relation} AS s FULL JOIN ({unit.sql}) AS q ON s.id = q.id"
        ).collect()
        for i, name in enumerate(unit.names):
            differing = [
                r for r in rows if not (r["s_id"] is not None and r["q_id"] is not None and r[f"same_{i}"])
            ]
            extra = [(r["s_id"], r[f"s_{i}"]) for r in differing if r["s_id"] is not None]
            missing = [(r["q_id"], r[f"q_{i}"]) for r in differing if r["q_id"] is not None]
            if extra or missing:
                self.values[name].append(
                    f"{step}: stored but not in the query {sorted(extra, key=repr)}; "
                    f"in the query but not stored {sorted(missing, key=repr)}"
                )


@pytest.fixture(scope="module")
def evaluation(spark: Any) -> Evaluation:
    schema = f"functions_{os.getpid()}"
    spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
    spark.sql(f"CREATE DATABASE {schema}")
    t = f"{schema}.t"
    spark.sql(
        f"CREATE TABLE {t} (id int NOT NULL, s string, n int, d decimal(10,2), ts timestamp, dt date, "
        "b boolean) USING iceberg"
    )
    spark.sql(f"ALTER TABLE {t} SET IDENTIFIER FIELDS id")
    spark.sql(f"INSERT INTO {t} VALUES {ROWS}")
    found = Evaluation()
    names = list(EXPRESSIONS)
    units = [
        Unit(schema, f"g{i // GROUP_SIZE}", names[i : i + GROUP_SIZE])
        for i in range(0, len(names), GROUP_SIZE)
    ]
    live: list[Unit] = []
    for unit in units:
        try:
            unit.refresh(spark)
            live.append(unit)
        except Exception:
            # Isolate: one stream table per expression of the group that failed to create.
            for name in unit.names:
                single = Unit(schema, f"{unit.name}_{name}", [name])
                try:
                    single.refresh(spark)
                    live.append(single)
                except Exception as error:
                    found.values[name].append(f"create: {_first_line(error)}")
    for unit in live:
        found.check_columns(spark, unit, "create")
    aggregates = {name: sql.format(t=t) for name, sql in AGGREGATES.items()}

    def check_aggregate(name: str, sql: str, step: str) -> None:
        try:
            result = refresh_and_check(spark, schema, name, sql, step, refresh_mode="differential")
            if step != "create" and result.action != "DIFFERENTIAL":
                found.values[name].append(f"{step}: action {result.action}, not DIFFERENTIAL")
        except AssertionError as error:  # the contents differ: the message lists the rows
            found.values[name].append(f"{step}: " + " ".join(str(error).split()))
        except Exception as error:
            found.values[name].append(f"{step}: {_first_line(error)}")
            return
        stored = {f.name: f.dataType.simpleString() for f in spark.table(f"{schema}.{name}").schema.fields}
        for field in spark.sql(sql).schema.fields:
            if stored.get(field.name) != field.dataType.simpleString():
                found.types[name].append(
                    f"{step}: column {field.name} stored as {stored.get(field.name)}, "
                    f"query yields {field.dataType.simpleString()}"
                )

    for name, sql in aggregates.items():
        check_aggregate(name, sql, "create")
    for change in _changes(t):
        spark.sql(change)
    for unit in live:
        try:
            action = unit.refresh(spark)
        except Exception as error:
            for name in unit.names:
                found.values[name].append(f"after DML (stream table {unit.name}): {_first_line(error)}")
            continue
        if action != "DIFFERENTIAL":
            for name in unit.names:
                found.values[name].append(f"after DML: action {action}, not DIFFERENTIAL")
        found.check_columns(spark, unit, "after DML")
    for name, sql in aggregates.items():
        check_aggregate(name, sql, "after DML")
    return found


@pytest.mark.parametrize("name", list(EXPRESSIONS) + list(AGGREGATES))
def test_values_match_direct_evaluation(evaluation: Evaluation, name: str) -> None:
    expression = EXPRESSIONS.get(name) or AGGREGATES[name]
    problems = evaluation.values[name]
    assert not problems, f"{expression}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", list(EXPRESSIONS) + list(AGGREGATES))
def test_stored_type_matches_query_type(evaluation: Evaluation, name: str) -> None:
    expression = EXPRESSIONS.get(name) or AGGREGATES[name]
    problems = evaluation.types[name]
    assert not problems, f"{expression}:\n  " + "\n  ".join(problems)
