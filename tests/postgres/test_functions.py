"""Common scalar functions evaluated through the engine and directly, on PostgreSQL.

One stream table per expression, ``SELECT id, <expr> AS v FROM t``, refreshed differentially after
DML on the source and compared with the query as a multiset. The stream table's column type must
also equal the type the query yields (format_type, typmod included): a user expression is parsed
once and rendered faithfully, so nothing may widen, narrow or re-cast it on the way.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.postgres.streams import connect, execute, refresh_and_check, rows

pytestmark = pytest.mark.postgres

SOURCE = (
    "CREATE TABLE t (id int PRIMARY KEY, s text, n int, d numeric(10,2), ts timestamp, dt date, b boolean)"
)
ROWS = (
    "INSERT INTO t VALUES "
    "(1, 'abc,def', 7, 12.34, '2024-03-15 10:20:30', '2024-03-15', true), "
    "(2, '  Hello World  ', -5, -0.05, '2023-12-31 23:59:59', '2024-02-29', false), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(4, 'aab', 0, 99.99, '2020-01-01 00:00:00', '2020-01-01', true), "
    "(5, 'ab_ab,x,y', 12, 0.00, '2024-12-31 12:00:00', '2024-12-31', NULL)"
)
CHANGES = [
    "UPDATE t SET s = 'xyz,ab', n = 8, d = 50.55 WHERE id = 1",
    "DELETE FROM t WHERE id = 2",
    "UPDATE t SET s = 'aaabbb', n = 3, d = 1.15, ts = '2024-01-31 08:00:00', dt = '2024-01-31', b = false "
    "WHERE id = 3",
    "UPDATE t SET s = NULL, n = NULL, d = NULL, ts = NULL, dt = NULL, b = NULL WHERE id = 4",
    "INSERT INTO t VALUES (6, 'Mixed Case,Ab', -11, -7.25, '2022-06-15 00:00:01', '2022-06-15', true), "
    "(7, '', 1, 100.00, '1999-12-31 23:59:59', '1999-12-31', false)",
]

EXPRESSIONS: dict[str, str] = {
    # strings
    "upper": "upper(s)",
    "lower": "lower(s)",
    "length": "length(s)",
    "char_length": "char_length(s)",
    "substr": "substr(s, 2, 3)",
    "substr_from": "substr(s, 3)",
    "substring_from_for": "substring(s from 2 for 3)",
    "concat": "concat(s, '-', n)",
    "concat_op": "s || '-' || n",
    "concat_ws": "concat_ws('|', s, n, d)",
    "trim": "trim(s)",
    "trim_chars": "trim(both 'a' from s)",
    "ltrim": "ltrim(s)",
    "replace": "replace(s, 'a', 'X')",
    "split_part": "split_part(s, ',', 1)",
    "split_part_2": "split_part(s, ',', 2)",
    "left": "left(s, 2)",
    "right": "right(s, 2)",
    "lpad": "lpad(s, 6, '*')",
    "rpad": "rpad(s, 6, '*')",
    "position": "position('b' in s)",
    "strpos": "strpos(s, 'b')",
    "reverse": "reverse(s)",
    "initcap": "initcap(s)",
    "btrim": "btrim(s, 'a')",
    "translate": "translate(s, 'ab', 'xy')",
    "md5": "md5(s)",
    "string_to_array_1": "(string_to_array(s, ','))[1]",
    "similar_to": "s SIMILAR TO 'a%'",
    "not_regexp_op": "s !~ 'a'",
    "like": "s LIKE 'a%'",
    "ilike": "s ILIKE '%hello%'",
    # regular expressions
    "regexp_replace": "regexp_replace(s, '[a-c]', 'X')",
    "regexp_replace_g": "regexp_replace(s, '[a-c]', 'X', 'g')",
    "substring_regex": "substring(s from '(b+)')",
    "regexp_match_group_2": "(regexp_match(s, '(a)(b)'))[2]",
    "regexp_like_op": "s ~ '^a+b'",
    # numbers
    "int_div": "n / 2",
    "int_div_neg": "n / -3",
    "div_function": "div(n, 2)",
    "float_div": "n / 2.0",
    "mod": "mod(n, 3)",
    "mod_op": "n % 3",
    "abs": "abs(n)",
    "abs_numeric": "abs(d)",
    "round": "round(d, 1)",
    "round_0": "round(d)",
    "floor": "floor(d)",
    "ceil": "ceil(d)",
    "trunc": "trunc(d, 1)",
    "power": "power(n, 2)",
    "numeric_arith": "d * (1 - d / 100)",
    "int_times_numeric": "n * d",
    "sign": "sign(d)",
    "numeric_div": "d / 3",
    "int_as_numeric_div": "n::numeric / 3",
    "float_cast_div": "n::float8 / 2",
    "to_char_numeric": "to_char(d, '999.99')",
    # casts
    "int_to_text": "cast(n AS text)",
    "text_to_int": "cast(cast(n AS text) AS int)",
    "int_to_numeric": "cast(n AS numeric(10, 2))",
    "numeric_to_int": "cast(d AS int)",
    "numeric_to_text": "d::text",
    "text_to_numeric": "cast(cast(d AS text) AS numeric)",
    "int_to_bigint": "n::bigint",
    "ts_to_date": "cast(ts AS date)",
    "date_to_text": "cast(dt AS text)",
    "bool_to_text": "cast(b AS text)",
    "to_varchar_3": "cast(s AS varchar(3))",
    "to_char_3": "cast(s AS char(3))",
    "to_numeric_5_1": "cast(d AS numeric(5, 1))",
    "ts_to_time": "ts::time",
    # dates and times
    "date_trunc_month": "date_trunc('month', ts)",
    "date_trunc_date": "date_trunc('day', dt)",
    "extract_year": "extract(year FROM ts)",
    "extract_dow": "extract(dow FROM dt)",
    "date_part": "date_part('month', ts)",
    "date_plus_int": "dt + 7",
    "date_minus_date": "dt - date '2024-01-01'",
    "ts_plus_interval": "ts + interval '1 day'",
    "date_plus_interval": "dt + interval '1 month'",
    "to_char": "to_char(ts, 'YYYY-MM-DD')",
    "extract_epoch": "extract(epoch FROM ts)",
    "extract_hour": "extract(hour FROM ts)",
    "date_part_date": "date_part('year', dt)",
    "date_trunc_week": "date_trunc('week', dt)",
    "ts_minus_interval": "ts - interval '2 hours'",
    "age": "age(ts, timestamp '2020-01-01')",
    # conditionals
    "case": "CASE WHEN n > 0 THEN 'pos' WHEN n < 0 THEN 'neg' ELSE 'zero' END",
    "case_simple": "CASE n WHEN 7 THEN 'seven' WHEN 8 THEN 'eight' ELSE 'other' END",
    "case_numeric": "CASE WHEN s LIKE 'a%' THEN d * (1 - d / 100) ELSE 0 END",
    "coalesce": "coalesce(s, 'none')",
    "coalesce_numeric": "coalesce(d, n, 0)",
    "nullif": "nullif(n, 0)",
    "greatest": "greatest(n, 0)",
    "least": "least(d, 50)",
    # booleans
    "bool_logic": "b AND n > 0 OR s IS NULL",
    "bool_not": "NOT b",
    "is_distinct_from": "n IS DISTINCT FROM 7",
    "in_list": "n IN (0, 7, 8)",
    "between": "d BETWEEN 0 AND 50",
    "is_true": "b IS TRUE",
}


def _query(expression: str) -> str:
    return f"SELECT id, {expression} AS v FROM t"


def _column_types(conn: Any, relation: str) -> list[tuple[str, str]]:
    """(name, format_type with typmod) of a relation's columns, hidden ``__ivm_*`` ones left out."""
    found = rows(
        conn,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (relation,),
    )
    return [(r[0], r[1]) for r in found if not r[0].startswith("__ivm_")]


def _query_types(conn: Any, sql: str) -> list[tuple[str, str]]:
    """The columns' types as the query yields them: a temporary view describes it, typmods included."""
    execute(conn, "DROP VIEW IF EXISTS pg_temp.type_probe")
    execute(conn, f"CREATE TEMP VIEW type_probe AS {sql}")
    try:
        return _column_types(conn, "pg_temp.type_probe")
    finally:
        execute(conn, "DROP VIEW pg_temp.type_probe")


def _check_types(conn: Any, name: str, sql: str, step: str) -> None:
    stored = _column_types(conn, f"public.{name}")
    expected = _query_types(conn, sql)
    assert stored == expected, f"{step}: stream table column types {stored} != query types {expected}"


@pytest.mark.parametrize("expression", list(EXPRESSIONS.values()), ids=list(EXPRESSIONS))
def test_function_matches_direct_evaluation(pg_dsn: str, expression: str) -> None:
    conn = connect(pg_dsn)
    try:
        execute(conn, SOURCE)
        execute(conn, ROWS)
        sql = _query(expression)
        name = "fn"
        result = refresh_and_check(conn, name, sql, f"create: {expression}", refresh_mode="differential")
        assert result.action == "CREATE", result.summary()
        _check_types(conn, name, sql, "create")
        for change in CHANGES:
            execute(conn, change)
        result = refresh_and_check(conn, name, sql, f"after DML: {expression}", refresh_mode="differential")
        assert result.action == "DIFFERENTIAL", result.summary()
        _check_types(conn, name, sql, "after DML")
        execute(conn, "UPDATE t SET n = n + 1, d = d * 2, s = upper(s) WHERE id % 2 = 1")
        refresh_and_check(conn, name, sql, f"second DML: {expression}", refresh_mode="differential")
    finally:
        conn.close()
