"""Sources whose definition changes under a stream table, and how rows are matched on their keys.

A source dropped and recreated (new oid) or altered gets its capture reinstalled on the next refresh,
which is FULL with the reason; later refreshes are differential again. Writes to an altered source
must never fail because of capture.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.oracle import assert_matches_query
from tests.postgres.streams import (
    CATALOG,
    execute,
    is_apply,
    leave_batches_to_the_engine,
    recording_connection,
    refresh,
    refresh_and_check,
    rows,
    value,
)
from tests.shapes import (
    REPEATING_BATCHES,
    REPEATING_EVENTS,
    REPEATING_ORDERS,
    SUM_IN_DOUBT_BATCHES,
    SUM_IN_DOUBT_ROWS,
    repeating_streams,
    sum_in_doubt_streams,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

STREAMS = {
    "customer_totals": (
        "SELECT customer, SUM(amount) AS total, COUNT(*) AS order_count FROM orders GROUP BY customer"
    ),
    "order_details": "SELECT c.name, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id",
}
ORDERS = "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, customer text, amount numeric(10,2))"


@pytest.fixture
def shop(pg_conn: Any) -> Any:
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);"
        "INSERT INTO customers VALUES (1, 'alice'), (2, 'bob');"
        f"{ORDERS}; INSERT INTO orders VALUES (1, 1, 'alice', 50), (2, 1, 'alice', 30), (3, 2, 'bob', 75);",
    )
    for name, sql in STREAMS.items():
        refresh_and_check(pg_conn, name, sql)
    return pg_conn


def _refresh_all(conn: Any, expected: str, reason: str | None = None) -> None:
    for name, sql in STREAMS.items():
        result = refresh_and_check(conn, name, sql)
        assert result.action == expected, f"{name}: {result.summary()}"
        if reason is not None:
            assert result.reason is not None and reason in result.reason, result.reason


def _capture_objects(conn: Any) -> list[str]:
    """Buffers and capture functions in the catalog schema."""
    return sorted(
        r[0]
        for r in rows(
            conn,
            "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relname LIKE 'changes%%' "
            "AND relkind = 'r' UNION ALL SELECT proname FROM pg_proc WHERE pronamespace = %s::regnamespace",
            (CATALOG, CATALOG),
        )
    )


def test_source_dropped_and_recreated(shop: Any) -> None:
    before = _capture_objects(shop)
    execute(
        shop, f"DROP TABLE orders; {ORDERS}; INSERT INTO orders VALUES (7, 2, 'bob', 1), (8, 9, 'zed', 2)"
    )
    _refresh_all(shop, "FULL", "public.orders")
    # The new table has capture of its own; the old table's buffer and function are gone.
    assert len(_capture_objects(shop)) == len(before)
    assert _capture_objects(shop) != before
    execute(shop, "UPDATE orders SET amount = 5 WHERE id = 7; INSERT INTO orders VALUES (9, 1, 'alice', 3)")
    _refresh_all(shop, "DIFFERENTIAL")


def test_source_gets_a_new_column(shop: Any) -> None:
    execute(
        shop,
        "ALTER TABLE orders ADD COLUMN note text DEFAULT 'n'; INSERT INTO orders VALUES (4, 2, 'bob', 5, 'x')",
    )
    _refresh_all(shop, "FULL", "public.orders")
    execute(shop, "UPDATE orders SET note = 'y', amount = 6 WHERE id = 4; DELETE FROM orders WHERE id = 1")
    _refresh_all(shop, "DIFFERENTIAL")


@pytest.mark.parametrize(
    ("ddl", "first"),
    [
        # the columns end up as they were: capture still fits, nothing to rebuild
        ("ALTER TABLE orders ADD COLUMN note text; ALTER TABLE orders DROP COLUMN note", "DIFFERENTIAL"),
        ("ALTER TABLE orders ADD COLUMN note text", "FULL"),
        ("ALTER TABLE orders DROP COLUMN customer_id", "FULL"),
        ("ALTER TABLE orders RENAME COLUMN customer_id TO client_id", "FULL"),
        ("ALTER TABLE orders ALTER COLUMN customer_id TYPE text", "FULL"),
        ("ALTER TABLE orders ALTER COLUMN customer_id TYPE bigint", "FULL"),
    ],
)
def test_writes_to_an_altered_source_never_fail(shop: Any, ddl: str, first: str) -> None:
    """Capture installed for the old columns must not break the user's INSERT, UPDATE or DELETE."""
    name, sql = "customer_totals", STREAMS["customer_totals"]  # reads no altered column
    execute(shop, ddl)
    execute(shop, "INSERT INTO orders (id, customer, amount) VALUES (10, 'carol', 12)")
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id IN (2, 10)")
    execute(shop, "DELETE FROM orders WHERE id = 3")
    result = refresh_and_check(shop, name, sql, refresh_mode="differential")
    assert result.action == first, result.summary()
    if first == "FULL":
        assert result.reason is not None and "public.orders" in result.reason
    execute(shop, "UPDATE orders SET amount = amount + 1 WHERE id = 2")
    assert refresh_and_check(shop, name, sql, refresh_mode="differential").action == "DIFFERENTIAL"


def test_a_dropped_source_fails_the_refresh_by_name(shop: Any) -> None:
    execute(shop, "DROP TABLE customers")
    with pytest.raises(Exception, match="customers"):
        refresh(shop, "order_details", STREAMS["order_details"])
    # The other stream table is unaffected.
    execute(shop, "INSERT INTO orders VALUES (4, 1, 'alice', 1)")
    assert refresh_and_check(shop, "customer_totals", STREAMS["customer_totals"]).action == "DIFFERENTIAL"


# ---------------------------------------------------------------------------------------------------
# NULL-able keys: matching must use the key hash (index or hash join), never a nested loop whose join
# filter compares IS NOT DISTINCT FROM against the whole table.


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _assert_key_matching_uses_the_hash(statement: str, plan: dict[str, Any]) -> None:
    """Every comparison of key columns is narrowed by the key hash first: by a hash or merge join on it,
    or by an index lookup on it. A nested loop with the comparison as its join filter is refused."""
    for node in _nodes(plan):
        where = f"{node['Node Type']} in:\n{statement[:300]}"
        join_filter = str(node.get("Join Filter", ""))
        if "IS DISTINCT FROM" in join_filter:
            assert node["Node Type"] in ("Hash Join", "Merge Join"), (
                f"key comparison as a join filter: {where}"
            )
            conditions = f"{node.get('Hash Cond', '')} {node.get('Merge Cond', '')}"
            assert "hash_record_extended" in conditions, f"join not on the key hash: {where}"
        if node.get("Relation Name") == "st" and "IS DISTINCT FROM" in str(node.get("Filter", "")):
            lookup = f"{node.get('Index Cond', '')} {node.get('Recheck Cond', '')}"
            assert "hash_record_extended" in lookup, f"stream table scanned without the key hash: {where}"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT customer_id, region, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id, region",
        "SELECT customer_id, region, amount FROM events",  # keyless: rows matched by value
        "SELECT DISTINCT customer_id, region FROM events",
    ],
)
def test_nullable_keys_are_matched_through_the_hash(pg_conn: Any, pg_dsn: str, sql: str) -> None:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, region text, amount numeric);"
        "INSERT INTO orders SELECT i, NULLIF(i % 12000, 0), NULLIF((i % 7)::text, '0'), i "
        "FROM generate_series(1, 24000) i;"
        "CREATE TABLE events AS SELECT customer_id, region, amount FROM orders; ANALYZE orders; ANALYZE events",
    )
    refresh(pg_conn, "st", sql)
    # A batch touching more than 10,000 groups, NULL keys among them.
    execute(
        pg_conn,
        "UPDATE orders SET amount = amount + 1 WHERE customer_id < 10500 OR customer_id IS NULL;"
        "UPDATE events SET amount = amount + 1, region = 'x' WHERE customer_id < 10500 OR customer_id IS NULL",
    )
    with recording_connection(pg_dsn, explain=True) as conn:
        result = refresh(conn, "st", sql, refresh_mode="differential")
        assert result.action == "DIFFERENTIAL" and result.rows_changed >= 10_000, result.summary()
        assert any(is_apply(s) for s, _ in conn.plans)
        for statement, plan in conn.plans:
            _assert_key_matching_uses_the_hash(statement, plan)
    assert_matches_query(pg_conn, "public", "st", sql)
    # The hash is indexed as an expression, not stored: the table holds only the query's columns.
    indexed = value(
        pg_conn,
        "SELECT count(*) FROM pg_indexes WHERE tablename = 'st' AND indexdef LIKE '%%hash_record_extended(ROW(%%'",
    )
    assert indexed == 1
    stored = {
        c
        for (c,) in rows(
            pg_conn, "SELECT attname FROM pg_attribute WHERE attrelid = 'st'::regclass AND attnum > 0"
        )
    }
    assert "__ivm_hash" not in stored, stored


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id",
        "SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON o.customer_id = c.id",
    ],
)
def test_keys_that_cannot_be_null_are_matched_by_equality(pg_conn: Any, pg_dsn: str, sql: str) -> None:
    """A NOT NULL group key, or primary keys no outer join pads: the stream table has an index on its key
    columns and rows are matched with `=` (no hash); a table built with a hash index is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, amount numeric);"
        "INSERT INTO customers SELECT i, 'c' || i FROM generate_series(0, 11999) i;"
        "INSERT INTO orders SELECT i, i % 12000, i FROM generate_series(1, 24000) i; ANALYZE orders",
    )
    refresh(pg_conn, "st", sql)
    indexes = [str(d) for (d,) in rows(pg_conn, "SELECT indexdef FROM pg_indexes WHERE tablename = 'st'")]
    assert len(indexes) == 1 and "hash_record_extended" not in indexes[0], indexes
    execute(
        pg_conn,
        "UPDATE orders SET amount = amount + 1 WHERE customer_id < 10500; DELETE FROM orders WHERE id < 50",
    )
    with recording_connection(pg_dsn, explain=True) as conn:
        result = refresh(conn, "st", sql, refresh_mode="differential")
        assert result.action == "DIFFERENTIAL" and result.rows_changed >= 10_000, result.summary()
        merges = [s for s, _ in conn.plans if is_apply(s)]
        assert merges and not any("hash_record_extended" in s.lower() for s in merges), merges
    assert_matches_query(pg_conn, "public", "st", sql)
    # A table an earlier version built around a hash index (with its refresh function): rebuilt once.
    execute(pg_conn, f"UPDATE {CATALOG}.stream_tables SET shape = replace(shape, 'key index', 'hash index')")
    execute(pg_conn, f"UPDATE {CATALOG}.refresh_procedures SET version = version - 1")
    execute(pg_conn, "UPDATE orders SET amount = amount + 1 WHERE id = 100")
    result = refresh_and_check(pg_conn, "st", sql, refresh_mode="differential")
    assert result.action == "REBUILD" and "an index on its key (no key" in (result.reason or ""), (
        result.summary()
    )
    assert refresh_and_check(pg_conn, "st", sql, refresh_mode="differential").action in (
        "DIFFERENTIAL",
        "SKIP",
    )


def test_keys_that_may_not_fit_or_may_be_null_keep_the_hash_index(pg_conn: Any) -> None:
    """A text key (a btree entry holds at most 2,704 bytes) and, on PostgreSQL 18, a NOT NULL added NOT
    VALID over rows that are still NULL: both stay on the hash index, and NULL groups stay right."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text NOT NULL, amount numeric);"
        "INSERT INTO orders SELECT i, NULLIF(i % 5, 0), repeat('x', i % 3), i FROM generate_series(1, 50) i",
    )
    by_note = "SELECT note, COUNT(*) AS n FROM orders GROUP BY note"
    refresh(pg_conn, "by_note", by_note)
    not_valid = int(pg_conn.server_version) >= 180000
    if not_valid:
        execute(pg_conn, "ALTER TABLE orders ADD CONSTRAINT customer_known NOT NULL customer_id NOT VALID")
    by_customer = "SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id"
    refresh(pg_conn, "by_customer", by_customer)
    for table in ("by_note", "by_customer"):
        indexes = [
            str(d) for (d,) in rows(pg_conn, "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,))
        ]
        assert len(indexes) == 1 and "hash_record_extended" in indexes[0], (table, indexes)
    execute(
        pg_conn,
        "DELETE FROM orders WHERE customer_id IS NULL AND id < 20; UPDATE orders SET note = 'y' WHERE id = 7",
    )
    for table, sql in (("by_note", by_note), ("by_customer", by_customer)):
        assert refresh_and_check(pg_conn, table, sql, refresh_mode="differential").action == "DIFFERENTIAL"


def test_partitioned_source_sees_writes_to_any_partition(pg_conn: Any) -> None:
    execute(
        pg_conn,
        "CREATE TABLE sales (id int, region text, amount numeric, PRIMARY KEY (id, region)) PARTITION BY LIST (region);"
        "CREATE TABLE sales_n PARTITION OF sales FOR VALUES IN ('n');"
        "CREATE TABLE sales_s PARTITION OF sales FOR VALUES IN ('s') PARTITION BY RANGE (id);"
        "CREATE TABLE sales_s_low PARTITION OF sales_s FOR VALUES FROM (0) TO (100);"
        "CREATE TABLE sales_s_high PARTITION OF sales_s FOR VALUES FROM (100) TO (1000);"
        "INSERT INTO sales VALUES (1, 'n', 10), (2, 's', 20), (150, 's', 5);",
    )
    sql = "SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM sales GROUP BY region"

    def check(statements: str, action: str) -> None:
        execute(pg_conn, statements)
        result = refresh_and_check(pg_conn, "by_region", sql, statements, refresh_mode="differential")
        assert result.action == action, f"{statements}: {result.summary()}"

    refresh_and_check(pg_conn, "by_region", sql)
    check("INSERT INTO sales VALUES (3, 'n', 1); UPDATE sales SET amount = 11 WHERE id = 1", "DIFFERENTIAL")
    check("INSERT INTO sales_n VALUES (4, 'n', 100); DELETE FROM sales_s_low WHERE id = 2", "DIFFERENTIAL")
    check(
        "UPDATE sales_s SET amount = amount + 1; INSERT INTO sales_s_high VALUES (200, 's', 7)",
        "DIFFERENTIAL",
    )
    check("UPDATE sales SET region = 's', id = id + 10 WHERE id = 4", "DIFFERENTIAL")  # moves partition
    check("TRUNCATE sales_s_high", "FULL")
    check(
        "CREATE TABLE sales_e (id int, region text, amount numeric, PRIMARY KEY (id, region));"
        "INSERT INTO sales_e VALUES (5, 'e', 50); ALTER TABLE sales ATTACH PARTITION sales_e FOR VALUES IN ('e')",
        "FULL",
    )
    check("INSERT INTO sales_e VALUES (6, 'e', 60)", "DIFFERENTIAL")
    check("ALTER TABLE sales DETACH PARTITION sales_n", "FULL")
    check("INSERT INTO sales_n VALUES (7, 'n', 1); INSERT INTO sales VALUES (8, 'e', 2)", "DIFFERENTIAL")


def test_a_redefined_view_rebuilds_the_stream_table(pg_conn: Any) -> None:
    """Same model SQL, same base table, another view body: the stored rows mean something else now."""
    execute(pg_conn, "CREATE TABLE bills (id int PRIMARY KEY, customer text, amount int)")
    execute(pg_conn, "INSERT INTO bills VALUES (1,'a',10),(2,'a',20),(3,'b',30)")
    execute(pg_conn, "CREATE VIEW big_bills AS SELECT id, customer, amount FROM bills WHERE amount > 15")
    sql = "SELECT customer, SUM(amount) AS total FROM big_bills GROUP BY customer"
    refresh_and_check(pg_conn, "big_totals", sql, "create", full_refresh_threshold=100.0)
    execute(
        pg_conn, "CREATE OR REPLACE VIEW big_bills AS SELECT id, customer, amount FROM bills WHERE amount > 5"
    )
    execute(pg_conn, "INSERT INTO bills VALUES (4,'b',8)")
    result = refresh_and_check(pg_conn, "big_totals", sql, "view redefined", full_refresh_threshold=100.0)
    assert result.action == "REBUILD", result.summary()
    assert result.reason == "a view or function the defining query reads was redefined"
    execute(pg_conn, "INSERT INTO bills VALUES (5,'c',9)")
    later = refresh_and_check(pg_conn, "big_totals", sql, "later", full_refresh_threshold=100.0)
    assert later.action == "DIFFERENTIAL", later.summary()


def test_a_redefined_function_rebuilds_the_stream_table(pg_conn: Any) -> None:
    """Same model SQL, another body of a function it calls: rows computed by the old body are
    recomputed (the next dbt run rebuilds), and a refresh after it is differential again."""
    execute(
        pg_conn,
        "CREATE TABLE bills (id int PRIMARY KEY, amount numeric); INSERT INTO bills VALUES (1, 10), (2, 20);"
        "CREATE FUNCTION taxed(x numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT x * 1.1'",
    )
    sql = "SELECT id, taxed(amount) AS due FROM bills"
    refresh_and_check(pg_conn, "dues", sql, "create")
    execute(
        pg_conn,
        "CREATE OR REPLACE FUNCTION taxed(x numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT x * 2'",
    )
    execute(pg_conn, "INSERT INTO bills VALUES (3, 30)")
    result = refresh_and_check(pg_conn, "dues", sql, "function redefined")
    assert result.action == "REBUILD", result.summary()
    assert result.reason == "a view or function the defining query reads was redefined"
    execute(pg_conn, "INSERT INTO bills VALUES (4, 40)")
    later = refresh_and_check(pg_conn, "dues", sql, "later", refresh_mode="differential")
    assert later.action == "DIFFERENTIAL", later.summary()


def _as_an_earlier_version_left_it(
    conn: Any, table: str, column: tuple[str, str, str], key: list[str]
) -> None:
    """Give a stream table the bookkeeping column (name, type, value) an earlier dbt-ivm kept, and
    its registered shape that column and the row key `key`, as that version left them."""
    name, type_, value = column
    execute(
        conn,
        f"ALTER TABLE {table} ADD COLUMN {name} {type_}; UPDATE {table} SET {name} = {value};"
        f"UPDATE {CATALOG}.stream_tables SET shape = jsonb_set(jsonb_set(shape::jsonb, '{{columns}}', "
        "(shape::jsonb -> 'columns') || %s::jsonb), '{key}', %s::jsonb)::text WHERE stream_table = %s",
        (json.dumps([[name, type_]]), json.dumps(key), f"public.{table}"),
    )


def _created_with_only_model_columns(conn: Any, streams: dict[str, str]) -> None:
    for name, sql in streams.items():
        refresh_and_check(conn, name, sql)
        stored = _stored_columns(conn, name)
        assert not [c for c in stored if c.startswith("__ivm_")], (name, stored)


def _a_multiset_an_earlier_version_left_is_rebuilt(conn: Any, table: str, sql: str, change: str) -> None:
    """The table as an earlier dbt-ivm stored it, a multiset (every column and an ordinal as its key),
    then `change`: the next refresh rebuilds it, saying why."""
    user = [c for c in _stored_columns(conn, table) if not c.startswith("__ivm_")]
    _as_an_earlier_version_left_it(conn, table, ("__ivm_dup", "bigint", "1"), [*user, "__ivm_dup"])
    execute(conn, change)
    _rebuilt_for_its_layout(conn, table, sql)


def _rebuilt_for_its_layout(conn: Any, table: str, sql: str) -> None:
    result = refresh_and_check(conn, table, sql, "after the upgrade")
    assert result.action == "REBUILD", result.summary()
    assert result.reason is not None and "bookkeeping columns differ" in result.reason, result.reason


def test_a_table_built_with_an_earlier_layout_is_rebuilt(pg_conn: Any) -> None:
    """A stream table from a dbt-ivm that kept a hidden key the query's own column now holds (its
    registered shape and its table as that version left them) is rebuilt once, saying why."""
    execute(pg_conn, ORDERS + "; INSERT INTO orders VALUES (1, 1, 'a', 5), (2, 1, 'a', 7)")
    sql = "SELECT id, amount FROM orders WHERE amount > 5"
    refresh_and_check(pg_conn, "big_orders", sql)
    columns = rows(
        pg_conn, "SELECT attname FROM pg_attribute WHERE attrelid = 'big_orders'::regclass AND attnum > 0"
    )
    assert sorted(c for (c,) in columns) == ["amount", "id"]  # the key is the query's own `id`
    _as_an_earlier_version_left_it(pg_conn, "big_orders", ("__ivm_k0_1", "integer", "id"), ["__ivm_k0_1"])
    execute(pg_conn, "INSERT INTO orders VALUES (3, 2, 'b', 9)")
    result = refresh_and_check(pg_conn, "big_orders", sql, "after the upgrade")
    assert result.action == "REBUILD", result.summary()
    assert result.reason is not None and "bookkeeping columns differ" in result.reason, result.reason
    assert "__ivm_k0_1" in result.reason
    assert refresh_and_check(pg_conn, "big_orders", sql).action in ("SKIP", "DIFFERENTIAL")


def _stored_columns(conn: Any, table: str) -> list[str]:
    """The stream table's columns, in table order."""
    return [
        str(c)
        for (c,) in rows(
            conn,
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (table,),
        )
    ]


def _refresh_after_each(conn: Any, streams: dict[str, str], batches: list[str]) -> None:
    """Each batch, then a differential refresh of every stream table, checked against its query."""
    for number, batch in enumerate(batches):
        execute(conn, batch)
        for name, sql in streams.items():
            result = refresh_and_check(conn, name, sql, f"batch {number}", refresh_mode="differential")
            assert result.action == "DIFFERENTIAL", (name, result.summary())


def test_a_join_on_a_tables_whole_key_stores_no_key_of_it(pg_conn: Any) -> None:
    """Orders LEFT JOIN customers on the customer's primary key: each order meets at most one
    customer, so the order's key alone identifies a row and the table holds only the query's columns,
    through a customer's key changing, a customer deleted and added again, and an order waiting for
    its customer. A table an earlier dbt-ivm built with the customer's key stored is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric);"
        "INSERT INTO customers VALUES (1, 'alice'), (2, 'bob');"
        "INSERT INTO orders VALUES (1, 1, 5), (2, 1, 7), (3, 2, 9), (4, NULL, 1)",
    )
    sql = "SELECT o.id, o.amount, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id"
    refresh_and_check(pg_conn, "st", sql)
    assert _stored_columns(pg_conn, "st") == ["id", "amount", "name"]
    indexes = [str(d) for (d,) in rows(pg_conn, "SELECT indexdef FROM pg_indexes WHERE tablename = 'st'")]
    assert len(indexes) == 1 and "(id)" in indexes[0], indexes  # the order's key, matched by `=`
    batches = [
        "UPDATE customers SET id = 10 WHERE id = 1; UPDATE orders SET customer_id = 10 WHERE id = 1",
        "DELETE FROM customers WHERE id = 2; INSERT INTO customers VALUES (2, 'bob again')",
        "INSERT INTO orders VALUES (5, 3, 2); UPDATE orders SET customer_id = 2 WHERE id = 4",
        "INSERT INTO customers VALUES (3, 'carol'); DELETE FROM customers WHERE id = 10",
        "UPDATE customers SET name = 'bo' WHERE id = 2; UPDATE orders SET customer_id = 1 WHERE id = 3",
    ]
    _refresh_after_each(pg_conn, {"st": sql}, batches)

    _as_an_earlier_version_left_it(pg_conn, "st", ("__ivm_k1_1", "integer", "0"), ["id", "__ivm_k1_1"])
    execute(pg_conn, "INSERT INTO orders VALUES (6, 3, 4)")
    _rebuilt_for_its_layout(pg_conn, "st", sql)
    assert _stored_columns(pg_conn, "st") == ["id", "amount", "name"]


def test_aggregate_state_shares_the_columns_that_hold_it(pg_conn: Any) -> None:
    """AVG(amount) beside SUM(amount), COUNT(amount) and COUNT(id): AVG's sum is `total`, its
    non-NULL count `n_amount`, the group's row count `n` (id cannot be NULL). The table holds only
    the query's columns, through NULL amounts coming and going and groups emptied and refilled."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2));"
        "INSERT INTO orders VALUES (1, 1, 5), (2, 1, NULL), (3, 2, 9), (4, 3, NULL)",
    )
    sql = (
        "SELECT customer_id, AVG(amount) AS mean, SUM(amount) AS total, COUNT(amount) AS n_amount, "
        "COUNT(id) AS n FROM orders GROUP BY customer_id"
    )
    refresh_and_check(pg_conn, "st", sql)
    assert _stored_columns(pg_conn, "st") == ["customer_id", "mean", "total", "n_amount", "n"]
    batches = [
        "UPDATE orders SET amount = NULL WHERE id = 1; UPDATE orders SET amount = 4 WHERE id = 4",
        "DELETE FROM orders WHERE customer_id = 2; INSERT INTO orders VALUES (5, 3, NULL)",
        "INSERT INTO orders VALUES (6, 2, NULL), (7, 2, 1.5); DELETE FROM orders WHERE id = 2",
        "UPDATE orders SET customer_id = 1 WHERE id IN (4, 5); DELETE FROM orders WHERE id = 1",
    ]
    _refresh_after_each(pg_conn, {"st": sql}, batches)


def test_a_sums_non_null_count_is_recounted_only_in_doubt(pg_conn: Any) -> None:
    """SUM(amount) over a column that may be NULL keeps no non-NULL count: a group is recounted only
    when a batch removes a value and leaves its sum at 0. Nor is the row count kept where no column
    shows it: a group is recounted when a batch removes rows and leaves no sum other than 0 and no
    count of values above 0. The tables hold only the query's columns, through sums going NULL,
    staying at 0 and coming back, and groups emptied. A table an earlier dbt-ivm built with the
    count stored is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2));"
        f"INSERT INTO orders VALUES {SUM_IN_DOUBT_ROWS}",
    )
    streams = sum_in_doubt_streams("orders")
    _created_with_only_model_columns(pg_conn, {n: streams[n] for n in ("totals", "sums", "priced")})
    refresh_and_check(pg_conn, "doubled", streams["doubled"])
    assert _stored_columns(pg_conn, "doubled") == ["customer_id", "twice", "ids", "n", "__ivm_a0_sum"]
    _refresh_after_each(pg_conn, streams, [b.format(t="orders") for b in SUM_IN_DOUBT_BATCHES])
    user = _stored_columns(pg_conn, "totals")
    _as_an_earlier_version_left_it(pg_conn, "totals", ("__ivm_a0_nn", "bigint", "n"), user[:1])
    execute(pg_conn, "INSERT INTO orders VALUES (12, 1, 1)")
    _rebuilt_for_its_layout(pg_conn, "totals", streams["totals"])


def test_an_append_decides_no_doubt(pg_conn: Any, pg_dsn: str) -> None:
    """A batch that only inserts into the aggregate's source can empty no group: no group's doubt is
    decided (no stored row is looked at for it); a batch that deletes does decide it. Both stay
    equal to the query."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2));"
        f"INSERT INTO orders VALUES {SUM_IN_DOUBT_ROWS}",
    )
    sql = sum_in_doubt_streams("orders")["sums"]
    refresh_and_check(pg_conn, "sums", sql)
    batches = {
        "INSERT INTO orders VALUES (20, 1, 3), (21, 9, NULL), (22, NULL, 2)": False,
        "DELETE FROM orders WHERE id = 20": True,
    }
    for batch, decided in batches.items():
        execute(pg_conn, batch)
        leave_batches_to_the_engine(pg_conn)
        with recording_connection(pg_dsn) as conn:
            result = refresh_and_check(conn, "sums", sql, batch)  # AUTO: built by the engine, not a function
            assert result.action == "DIFFERENTIAL", result.summary()
            run = [s for s in conn.statements if "CREATE OR REPLACE FUNCTION" not in s]  # not the reinstall
            assert any("__ivm_in_doubt" in s for s in run) == decided, batch


def test_a_group_a_joins_delta_adds_and_takes_back_is_no_row(pg_conn: Any) -> None:
    """Totals per customer name over a join, no row count stored: an order for a customer who had
    none arrives in the batch that deletes the customer, so the join's delta adds the pair and takes
    it back. The group's change is all 0; it must not become a row (nor leave one that is there)."""
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2));"
        "INSERT INTO customers VALUES (1, 'alice'), (2, 'bob'), (5, 'eve');"
        "INSERT INTO orders VALUES (1, 1, 5), (2, 2, NULL)",
    )
    streams = {
        "named": "SELECT c.name, SUM(o.amount) AS total FROM orders o JOIN customers c "
        "ON o.customer_id = c.id GROUP BY c.name",
        "priced": "SELECT c.name, COUNT(o.amount) AS priced FROM orders o JOIN customers c "
        "ON o.customer_id = c.id GROUP BY c.name",
    }
    _created_with_only_model_columns(pg_conn, streams)
    batches = [
        "INSERT INTO orders VALUES (3, 5, 4); DELETE FROM customers WHERE id = 5",
        "INSERT INTO orders VALUES (4, 2, 0); DELETE FROM customers WHERE id = 2",
        "INSERT INTO customers VALUES (5, 'eve'), (2, 'bob'); DELETE FROM orders WHERE id = 3",
    ]
    _refresh_after_each(pg_conn, streams, batches)


def test_a_join_to_an_aggregate_on_its_group_key_is_keyed(pg_conn: Any) -> None:
    """Customers joined to their orders' totals on the group key: one group per customer, so the
    customer's key identifies a row (it was a multiset with a hidden ordinal). A decorrelated scalar
    subquery is such a join too. A table an earlier dbt-ivm stored as a multiset is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric);"
        "INSERT INTO customers VALUES (1, 'alice'), (2, 'bob'), (3, 'carol');"
        "INSERT INTO orders VALUES (1, 1, 5), (2, 1, 7), (3, 2, 9), (4, NULL, 1), (5, 4, 2)",
    )
    streams = {
        "totals": "SELECT c.id, c.name, t.total, t.n FROM customers c JOIN (SELECT customer_id, "
        "SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id) t ON t.customer_id = c.id",
        "counted": "SELECT c.id, (SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.id) AS n FROM customers c",
    }
    _created_with_only_model_columns(pg_conn, streams)
    batches = [
        "UPDATE orders SET customer_id = 3 WHERE id = 1; INSERT INTO customers VALUES (4, 'dave')",
        "DELETE FROM orders WHERE customer_id = 2; UPDATE customers SET name = 'al' WHERE id = 1",
        "DELETE FROM customers WHERE id = 3; INSERT INTO orders VALUES (6, 2, 3), (7, NULL, 4)",
        "UPDATE customers SET id = 5 WHERE id = 4; UPDATE orders SET customer_id = 5 WHERE customer_id = 4",
    ]
    _refresh_after_each(pg_conn, streams, batches)

    _a_multiset_an_earlier_version_left_is_rebuilt(
        pg_conn, "totals", streams["totals"], "INSERT INTO orders VALUES (8, 1, 1)"
    )


def test_windows_topk_and_distinct_set_operations_are_keyed(pg_conn: Any) -> None:
    """A window or an ORDER BY … LIMIT gives each of its rows from one row of its input, so the input's
    key, shown, identifies the row, and a set operation without ALL holds each row once (they were
    multisets with a hidden ordinal): the latest order per customer, a ranking of every order, the
    top orders and the top totals, customers with only small orders, through ties, NULLs, keys
    changing and rows leaving. A table an earlier dbt-ivm stored as a multiset is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric);"
        "INSERT INTO orders VALUES (1, 1, 5), (2, 1, 7), (3, 2, 9), (4, NULL, 1), (5, 2, 9)",
    )
    streams = {
        "latest": "SELECT id, customer_id, amount FROM (SELECT o.*, ROW_NUMBER() OVER (PARTITION BY "
        "customer_id ORDER BY id DESC) AS rn FROM orders o) latest WHERE rn = 1",
        "ranked": "SELECT id, customer_id, RANK() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS r "
        "FROM orders",
        "top_orders": "SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 2",
        "top_totals": "SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id "
        "ORDER BY total DESC NULLS LAST, customer_id LIMIT 2",
        "small_only": "SELECT customer_id FROM orders EXCEPT SELECT customer_id FROM orders WHERE amount > 8",
    }
    _created_with_only_model_columns(pg_conn, streams)
    batches = [
        "INSERT INTO orders VALUES (6, 1, 20), (7, NULL, 3); UPDATE orders SET amount = 9 WHERE id = 1",
        "UPDATE orders SET id = 8 WHERE id = 6; DELETE FROM orders WHERE id = 3",
        "UPDATE orders SET customer_id = 1 WHERE customer_id = 2; DELETE FROM orders WHERE id = 8",
        "UPDATE orders SET amount = NULL WHERE id IN (1, 2); INSERT INTO orders VALUES (9, 3, 30)",
    ]
    _refresh_after_each(pg_conn, streams, batches)

    _a_multiset_an_earlier_version_left_is_rebuilt(
        pg_conn, "latest", streams["latest"], "INSERT INTO orders VALUES (10, 1, 1)"
    )


def test_a_sum_over_one_table_reads_its_changes_unnetted(pg_conn: Any, pg_dsn: str) -> None:
    """SUM and COUNT per group over one table add up a batch's raw changes, which are not netted
    first: a row inserted, deleted and inserted again, updated twice, updated to its own values or
    to an equal number written differently, or moved between groups. MAX still nets them (its rule
    reads which rows are gone), and so does a sum over a join (as correct unnetted, but slower on
    TPC-H's joins). Built by the engine (AUTO) and by the refresh function, each stays equal to its
    query."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2));"
        "INSERT INTO orders VALUES (1, 1, 10), (2, 1, NULL), (3, 2, 1.5), (4, 3, 7), (5, 3, 8);"
        "CREATE TABLE customers (id int PRIMARY KEY, name text);"
        "INSERT INTO customers VALUES (1, 'ann'), (2, 'bo'), (3, 'cy')",
    )
    queries = {
        "sums": (
            "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer_id",
            False,
        ),
        "largest": ("SELECT customer_id, MAX(amount) AS largest FROM orders GROUP BY customer_id", True),
        "named": (
            "SELECT c.name, SUM(o.amount) AS total FROM orders o JOIN customers c ON o.customer_id = c.id "
            "GROUP BY c.name",
            True,
        ),
    }
    streams = {
        f"{name}_{mode}": (sql, mode, netted)
        for name, (sql, netted) in queries.items()
        for mode in ("auto", "differential")
    }
    for name, (sql, mode, _) in streams.items():
        refresh_and_check(pg_conn, name, sql, refresh_mode=mode)
    batches = [
        "INSERT INTO orders VALUES (6, 1, 5); DELETE FROM orders WHERE id = 6; INSERT INTO orders VALUES (6, 1, 7.5)",
        "UPDATE orders SET amount = 11 WHERE id = 1; UPDATE orders SET amount = 12 WHERE id = 1;"
        "UPDATE orders SET amount = amount WHERE id = 4; UPDATE orders SET amount = 1.50 WHERE id = 3",
        "UPDATE orders SET customer_id = 2 WHERE id = 5; DELETE FROM orders WHERE id = 4",
        "DELETE FROM orders WHERE id IN (3, 5); INSERT INTO orders VALUES (7, 2, NULL)",
        "UPDATE customers SET name = 'bo' WHERE id = 1; UPDATE orders SET customer_id = 1 WHERE id = 7;"
        "UPDATE customers SET name = 'ann' WHERE id = 1",
    ]
    for batch in batches:
        execute(pg_conn, f"BEGIN; {batch}; COMMIT")
        leave_batches_to_the_engine(pg_conn)
        for name, (sql, mode, netted) in streams.items():
            with recording_connection(pg_dsn) as conn:
                result = refresh_and_check(conn, name, sql, batch, refresh_mode=mode)
                assert result.action == "DIFFERENTIAL", result.summary()
                if mode == "auto":
                    assert any("__ivm_net" in s for s in conn.statements) == netted, (name, batch)
            function = value(
                pg_conn,
                f"SELECT p.prosrc FROM pg_proc p JOIN {CATALOG}.refresh_procedures r "
                "ON p.proname = 'refresh_' || r.tag WHERE r.stream_table = %s",
                (f"public.{name}",),
            )
            assert ("__ivm_net" in function) == netted, name


def test_rows_that_repeat_are_stored_as_copies(pg_conn: Any) -> None:
    """Rows no key identifies (a keyless table, UNION / INTERSECT / EXCEPT ALL, a keyless LEFT JOIN, a
    window hiding its input's key, ROLLUP) are stored as identical copies with only the query's columns:
    a batch deletes as many copies of a value as it removes and inserts as many as it adds, through
    copies added and removed in one batch, every copy going, NULLs, by the engine and by the refresh
    function. A table an earlier dbt-ivm stored with an ordinal (__ivm_dup) is rebuilt once."""
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric);"
        f"CREATE TABLE events (kind text, v int); INSERT INTO orders VALUES {REPEATING_ORDERS};"
        f"INSERT INTO events VALUES {REPEATING_EVENTS}",
    )
    streams = repeating_streams("public")
    _created_with_only_model_columns(pg_conn, streams)
    batches = [batch.format(s="public") for batch in REPEATING_BATCHES]
    _refresh_after_each(pg_conn, streams, batches[:4])
    for number, batch in enumerate(batches[4:]):  # by the engine (AUTO), and FULL as a diff
        execute(pg_conn, batch)
        for name, sql in streams.items():
            refresh_and_check(pg_conn, name, sql, f"auto batch {number}")
            refresh_and_check(pg_conn, name, sql, f"full batch {number}", refresh_mode="full")
    for name in streams:
        stored = _stored_columns(pg_conn, name)
        assert not [c for c in stored if c.startswith("__ivm_")], (name, stored)

    user = _stored_columns(pg_conn, "notes")
    execute(
        pg_conn,
        "ALTER TABLE notes ADD COLUMN __ivm_dup bigint; UPDATE notes SET __ivm_dup = 1;"
        f"UPDATE {CATALOG}.stream_tables SET shape = (shape::jsonb - 'repeats')::text WHERE stream_table = %s",
        ("public.notes",),
    )
    assert "__ivm_dup" in _stored_columns(pg_conn, "notes") and user
    execute(pg_conn, "INSERT INTO events VALUES ('d', 4)")
    _rebuilt_for_its_layout(pg_conn, "notes", streams["notes"])
    assert _stored_columns(pg_conn, "notes") == user
