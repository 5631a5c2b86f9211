"""Non-deterministic queries: judged by the catalog's volatility, not by a list of names.

A stream table maintained by deltas keeps, in every row, the value of the refresh that wrote it; a
query whose value changes between runs (a VOLATILE call, a STABLE call that reads only the
transaction, 'now') would silently drift from it. Differential mode refuses such a query naming
the call; auto refreshes it FULL with that reason. Deterministic calls stay differential.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.postgres.catalog import PostgresCatalog
from dbt_ivm.postgres.db import Db
from tests.postgres.streams import execute, history, refresh, refresh_and_check, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

# label -> (defining query, how the refusal names the call)
REFUSED = {
    "user-defined volatile": ("SELECT id, vol_fn(amount) AS v FROM orders", "vol_fn("),
    "random_normal": ("SELECT id, random_normal() AS r FROM orders", "random_normal()"),
    "random": ("SELECT id, amount * random() AS r FROM orders", "random()"),
    "txid_current": ("SELECT id, txid_current() AS x FROM orders", "txid_current()"),
    "pg_current_xact_id": ("SELECT id, pg_current_xact_id()::text AS x FROM orders", "pg_current_xact_id()"),
    # sqlglot spells now() as its SQL synonym
    "now": ("SELECT id, now() AS at FROM orders", "current_timestamp"),
    "'now' literal": ("SELECT id, 'now'::timestamptz AS at FROM orders", "'now'"),
    "'today' literal": ("SELECT id, 'today'::date AS day FROM orders", "'today'"),
    "clock_timestamp": ("SELECT id, clock_timestamp() AS at FROM orders", "clock_timestamp()"),
    "'yesterday' compared with a date": ("SELECT id FROM orders WHERE placed > 'yesterday'", "'yesterday'"),
    "age of a date": ("SELECT id, age(placed) AS age FROM orders", "age("),
    # views are expanded: the call inside one is judged like the model's own
    "volatile inside a view": ("SELECT id, score FROM orders_scored", "vol_fn("),
}
ACCEPTED = {
    "user-defined immutable": "SELECT id, imm_fn(amount) AS doubled FROM orders",
    "stable with arguments": "SELECT id, to_char(amount, 'FM999') AS shown FROM orders",
    "'epoch' literal": "SELECT id, 'epoch'::timestamptz + amount * interval '1 day' AS at FROM orders",
    "stable with arguments, grouped": (
        "SELECT to_char(placed, 'YYYY-MM') AS month, SUM(amount) AS total FROM orders "
        "GROUP BY to_char(placed, 'YYYY-MM')"
    ),
}


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), placed date);"
        "INSERT INTO orders SELECT i, 'c' || i % 3, i, date '2024-01-01' + i FROM generate_series(1, 20) i;"
        "CREATE FUNCTION vol_fn(numeric) RETURNS numeric VOLATILE LANGUAGE sql AS 'SELECT $1 + 1';"
        "CREATE FUNCTION imm_fn(numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';"
        "CREATE VIEW orders_scored AS SELECT id, customer, vol_fn(amount) AS score FROM orders;",
    )
    return pg_conn


def _skip_unless_available(conn: Any, label: str) -> None:
    if label == "random_normal" and int(value(conn, "SHOW server_version_num")) < 160000:
        pytest.skip("random_normal() arrived in PostgreSQL 16")


@pytest.mark.parametrize("label", list(REFUSED))
def test_differential_refuses_a_nondeterministic_query_naming_model_and_call(shop: Any, label: str) -> None:
    _skip_unless_available(shop, label)
    sql, call = REFUSED[label]
    model = "drifting"
    with pytest.raises(UnsupportedQuery) as raised:
        refresh(shop, model, sql, refresh_mode="differential")
    message = str(raised.value)
    assert model in message and call in message.lower(), message
    assert "refresh_mode='full'" in message
    assert value(shop, "SELECT to_regclass(%s)", (f"public.{model}",)) is None
    assert history(shop, model)[-1]["status"] == "FAILED"


@pytest.mark.parametrize("label", list(REFUSED))
def test_auto_refreshes_a_nondeterministic_query_full_with_the_call_as_reason(shop: Any, label: str) -> None:
    _skip_unless_available(shop, label)
    sql, call = REFUSED[label]
    created = refresh(shop, "drifting", sql)
    assert created.action == "CREATE"
    execute(shop, "INSERT INTO orders VALUES (100, 'c1', 5, date '2024-03-01')")
    result = refresh(shop, "drifting", sql)
    assert result.action == "FULL"
    assert result.reason is not None and call in result.reason.lower(), result.reason
    assert history(shop, "drifting")[-1]["reason"] == result.reason


@pytest.mark.parametrize("label", list(ACCEPTED))
def test_deterministic_calls_stay_differential(shop: Any, label: str) -> None:
    sql = ACCEPTED[label]
    assert refresh_and_check(shop, "steady", sql, refresh_mode="differential").action == "CREATE"
    execute(
        shop,
        "INSERT INTO orders VALUES (100, 'c1', 5, date '2024-03-01'); UPDATE orders SET amount = 7 WHERE id = 2",
    )
    result = refresh_and_check(shop, "steady", sql, refresh_mode="differential")
    assert result.action == "DIFFERENTIAL"


def test_catalog_reports_the_worst_volatility_a_call_can_reach(shop: Any) -> None:
    execute(
        shop,
        'CREATE SCHEMA "Lab";'
        # overloads by type: a one-argument call may reach either
        "CREATE FUNCTION \"Lab\".f(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1';"
        "CREATE FUNCTION \"Lab\".f(text) RETURNS int STABLE LANGUAGE sql AS 'SELECT 1';"
        # a default makes the second argument optional
        "CREATE FUNCTION \"Lab\".g(int, int DEFAULT 0) RETURNS int VOLATILE LANGUAGE sql AS 'SELECT $1';"
        'CREATE FUNCTION "Lab"."G"(int) RETURNS int IMMUTABLE LANGUAGE sql AS \'SELECT $1\';'
        "CREATE FUNCTION \"Lab\".h(text, VARIADIC int[]) RETURNS int VOLATILE LANGUAGE sql AS 'SELECT 1';",
    )
    catalog = PostgresCatalog(Db(shop))
    expected = {
        ("Lab", "f", 1): "s",
        ("Lab", "f", 2): None,
        (None, "f", 1): None,  # "Lab" is not on the search path
        ("Lab", "g", 1): "v",
        ("Lab", "g", 2): "v",
        ("Lab", "g", 3): None,
        ("Lab", "G", 1): "i",  # quoted names keep their case
        ("Lab", "h", 1): None,  # VARIADIC wants one element at least
        ("Lab", "h", 2): "v",
        ("Lab", "h", 9): "v",
        (None, "vol_fn", 1): "v",
        (None, "now", 0): "s",
        (None, "to_char", 2): "s",
        (None, "abs", 1): "i",
        (None, "no_such_function", 0): None,
    }
    assert catalog.function_volatilities(list(expected)) == expected  # one query for them all


def test_schema_qualified_and_quoted_calls_are_judged_by_their_own_function(shop: Any) -> None:
    execute(
        shop,
        'CREATE SCHEMA "Lab";'
        'CREATE FUNCTION "Lab"."Jitter"(numeric) RETURNS numeric VOLATILE LANGUAGE sql AS \'SELECT $1\';'
        # an immutable namesake on the search path must not vouch for it
        "CREATE FUNCTION public.jitter(numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT $1';",
    )
    sql = 'SELECT id, "Lab"."Jitter"(amount) AS j FROM orders'
    with pytest.raises(UnsupportedQuery, match=r'`"Lab"\."Jitter"\("orders"\."amount"\)`'):
        refresh(shop, "jittery", sql, refresh_mode="differential")
    steady = "SELECT id, jitter(amount) AS j FROM orders"
    refresh_and_check(shop, "steady", steady, refresh_mode="differential")
    execute(shop, "INSERT INTO orders VALUES (100, 'c1', 5, date '2024-03-01')")
    assert refresh_and_check(shop, "steady", steady, refresh_mode="differential").action == "DIFFERENTIAL"
