"""Query-shape stream tables and a random workload, written once for PostgreSQL and Spark/Iceberg.

Pure Python, no database imports: the backend test modules (tests/postgres/test_shapes.py,
tests/spark/test_shapes.py) execute what this module generates and compare every stream table with
its defining query using their backend's multiset oracle.

- `create_statements(schema, dialect)`: the five source tables. PostgreSQL gets primary keys; on
  Spark, `orders` gets Iceberg identifier fields (its `id` is NOT NULL) and `customers` / `regions`
  the `dbt_ivm.primary_key` table property — the two key conventions of dbt_ivm.spark.catalog, used
  as tests/spark/test_randomized.py uses them. `returns` and `events` have no key: duplicates allowed.
- `streams(s)`: stream table name -> defining query, in SQL both engines accept (every table
  schema-qualified as `{s}.orders`, no `::` casts). `inner_join` is the control: a shape the engine
  has long maintained, so a failure there means the harness, not the new feature, is broken.
- `Workload`: seeded DML generation (plain INSERT ... VALUES / UPDATE / DELETE, valid on both), with a
  Python model of every table so primary keys stay unique and changes hit rows that exist.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

DIALECTS = ("postgres", "spark")

# Value domains, small and overlapping on purpose: order.customer_id, events.v and returns.order_id
# share values (set operations and joins meet), customer ids range past the ones that exist (joins
# find no partner), region ids past the regions that exist.
CUSTOMER_IDS = range(1, 8)
REGION_IDS = range(1, 5)
NAMES = ["alice", "bob", "carol", "dave", None]
TIERS = ["premium", "standard", None]
REGION_NAMES = ["north", "south", "east", None]
AMOUNTS = [None, *(Decimal(a) for a in ("5.00", "20.00", "49.99", "50.00", "75.50", "120.00"))]
REASONS = ["damaged", "late", "wrong size", None]
KINDS = ["a", "b", "c", None]
EVENT_VALUES = [1, 2, 3, 4, 5, 9, None]


def create_statements(schema: str, dialect: str) -> list[str]:
    """CREATE TABLE (and, on Spark, key-declaring ALTER TABLE) statements for the five source tables."""
    s = schema
    if dialect == "postgres":
        return [
            f"CREATE TABLE {s}.regions (id int PRIMARY KEY, name text)",
            f"CREATE TABLE {s}.customers (id int PRIMARY KEY, name text, tier text, region_id int)",
            f"CREATE TABLE {s}.orders (id int PRIMARY KEY, customer_id int, amount decimal(10,2))",
            f"CREATE TABLE {s}.returns (order_id int, reason text)",
            f"CREATE TABLE {s}.events (kind text, v int)",
        ]
    if dialect == "spark":
        iceberg = "USING iceberg TBLPROPERTIES ('format-version'='2'"
        return [
            f"CREATE TABLE {s}.regions (id int, name string) {iceberg}, 'dbt_ivm.primary_key'='id')",
            f"CREATE TABLE {s}.customers (id int, name string, tier string, region_id int) "
            f"{iceberg}, 'dbt_ivm.primary_key'='id')",
            f"CREATE TABLE {s}.orders (id int NOT NULL, customer_id int, amount decimal(10,2)) {iceberg})",
            f"ALTER TABLE {s}.orders SET IDENTIFIER FIELDS id",
            f"CREATE TABLE {s}.returns (order_id int, reason string) {iceberg})",
            f"CREATE TABLE {s}.events (kind string, v int) {iceberg})",
        ]
    raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")


# Stream tables that store the query's columns and nothing else: every shape here but one that
# groups by a column it does not show (`extreme_hidden_key`, whose rows need that key). Rows that may
# repeat are stored as identical copies (`apply/multiset`).
ONLY_MODEL_COLUMNS = frozenset(
    {
        "inner_join",
        "left_join",
        "left_chain",
        "inner_then_left",
        "shared_state",
        "derived_aggregate_join",
        "derived_min_join",
        "aggregate_over_left_join",
        "scalar_subquery_where",
        "scalar_subquery_select",
        "scalar_subquery_in_expression",
        "max_per_customer",
        "top_total",
        "top_orders",
        "top_totals_offset",
        "top_orders_hidden_order",
        "busiest_tiers",
        "latest_order_per_customer",
        "window_functions",
        "row_number_unpartitioned",
        "top_two_amounts",
        "window_over_groups",
        "rank_of_totals",
        "union_distinct",
        "top_of_union",
        "top_of_union_all_offset",
        "intersect_distinct",
        "except_distinct",
        "right_join",
        "full_join",
        "left_join_filter_on_right",
        "exists_returns",
        "not_exists_returns",
        "exists_filtered_both_sides",
        "not_exists_over_join",
        "exists_expression_key",
        "in_subquery",
        "not_in_subquery",
        "in_union",
        "not_in_except",
        "exists_or_tier",
        "exists_uncorrelated_flag",
        "pair_not_in",
        "case_when_exists",
        "counts_lateral",
        "scalar_aggregate_column",
        "scalar_aggregate_per_group",
        "values_join",
        "values_left_join_totals",
        "union_all_values",
        "in_values",
        "import_ctes",
        "cte_aggregate_of_join",
        "union_all",
        "intersect_all",
        "except_all",
        "keyless_left_join",
        "min_max_distinct",
        "global_extremes",
        "extremes",
        "global_max",
        "filtered_aggregates",
        "having",
        "in_having",
        "count_of_counts",
        "largest_events_per_kind",
        "rollup_totals",
        "cube_counts",
        "internal_names",
        "internal_names_union",
        "grouping_sets_max",
    }
)


# The shapes CI reruns on PostgreSQL 15 where a test runs every shape through a version-dependent
# mechanism (IMMEDIATE's triggers, the refresh function): one of each kind of delta rule — a join, an
# outer join chain, an aggregate over an outer join, an anti join, a scalar subquery, a window, a
# TopK, a bag union, grouping sets, LATERAL. Every shape still runs on PostgreSQL 18.
ON_EVERY_SERVER_VERSION = (
    "inner_join",
    "left_chain",
    "aggregate_over_left_join",
    "not_exists_returns",
    "scalar_subquery_select",
    "window_functions",
    "top_total",
    "union_all",
    "rollup_totals",
    "counts_lateral",
)


def streams(s: str) -> dict[str, str]:
    """Stream table name -> defining query over the tables of schema `s`."""
    return {
        # control: plain inner join, maintained long before outer joins and subqueries
        "inner_join": (
            f"SELECT o.id AS order_id, o.amount, c.name, c.tier "
            f"FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id"
        ),
        # outer joins
        "left_join": (
            f"SELECT o.id AS order_id, o.amount, c.id AS customer_id, c.name, c.tier "
            f"FROM {s}.orders o LEFT JOIN {s}.customers c ON o.customer_id = c.id"
        ),
        "right_join": (
            f"SELECT c.id AS customer_id, c.name, o.id AS order_id, o.amount "
            f"FROM {s}.customers c RIGHT JOIN {s}.orders o ON o.customer_id = c.id"
        ),
        "full_join": (
            f"SELECT o.id AS order_id, o.customer_id AS order_customer, o.amount, c.id AS customer_id, c.name "
            f"FROM {s}.orders o FULL OUTER JOIN {s}.customers c ON o.customer_id = c.id"
        ),
        "left_chain": (
            f"SELECT o.id AS order_id, o.amount, c.name AS customer, r.id AS region_id, r.name AS region "
            f"FROM {s}.orders o LEFT JOIN {s}.customers c ON o.customer_id = c.id "
            f"LEFT JOIN {s}.regions r ON c.region_id = r.id"
        ),
        "inner_then_left": (
            f"SELECT o.id AS order_id, c.name AS customer, c.tier, r.name AS region "
            f"FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id "
            f"LEFT JOIN {s}.regions r ON c.region_id = r.id"
        ),
        "left_join_filter_on_right": (
            f"SELECT o.id AS order_id, o.amount, c.tier "
            f"FROM {s}.orders o LEFT JOIN {s}.customers c ON o.customer_id = c.id "
            f"WHERE c.tier IS NULL OR c.tier = 'premium'"
        ),
        # join trees nested on the right of an outer join: planned as written, not as a chain
        # (`a LEFT JOIN (b CROSS JOIN c)` pads a row of `a` once, not once per row of `c`)
        "left_of_cross_of_full": (
            f"SELECT c.id AS customer_id, o.id AS order_id, r.order_id AS returned, e.v "
            f"FROM {s}.customers c LEFT JOIN ({s}.orders o CROSS JOIN "
            f"({s}.returns r FULL JOIN {s}.events e ON r.order_id = e.v)) ON o.customer_id = c.id"
        ),
        "left_then_full_of_full": (
            f"SELECT o.id AS order_id, c.id AS customer_id, r.order_id AS returned, e.kind "
            f"FROM {s}.orders o LEFT JOIN {s}.customers c ON o.customer_id = c.id "
            f"FULL JOIN ({s}.returns r FULL JOIN {s}.events e ON r.order_id = e.v) ON c.region_id = r.order_id"
        ),
        "full_of_inner_and_left": (
            f"SELECT r.id AS region_id, c.name, o.amount, e.kind "
            f"FROM {s}.regions r FULL JOIN ({s}.customers c JOIN {s}.orders o ON o.customer_id = c.id "
            f"LEFT JOIN {s}.events e ON e.v = o.id) ON c.region_id = r.id"
        ),
        # subqueries in WHERE: semi / anti joins, scalar subqueries
        "exists_returns": (
            f"SELECT o.id, o.amount FROM {s}.orders o "
            f"WHERE EXISTS (SELECT 1 FROM {s}.returns r WHERE r.order_id = o.id)"
        ),
        "not_exists_returns": (
            f"SELECT o.id, o.amount FROM {s}.orders o "
            f"WHERE NOT EXISTS (SELECT 1 FROM {s}.returns r WHERE r.order_id = o.id)"
        ),
        # correlation with a filter on each side, inside the subquery
        "exists_filtered_both_sides": (
            f"SELECT c.id, c.name FROM {s}.customers c WHERE EXISTS (SELECT 1 FROM {s}.orders o "
            f"WHERE o.customer_id = c.id AND o.amount > 20 AND c.tier = 'premium')"
        ),
        # the subquery is a join: its changes come from two tables
        "not_exists_over_join": (
            f"SELECT c.id, c.tier FROM {s}.customers c WHERE NOT EXISTS (SELECT 1 FROM {s}.orders o "
            f"JOIN {s}.returns r ON r.order_id = o.id WHERE o.customer_id = c.id)"
        ),
        # an expression as the key, NULLs among events.v
        "exists_expression_key": (
            f"SELECT o.id, o.customer_id FROM {s}.orders o "
            f"WHERE EXISTS (SELECT 1 FROM {s}.events e WHERE e.v = o.customer_id + 1)"
        ),
        "in_subquery": (
            f"SELECT o.id, o.customer_id FROM {s}.orders o "
            f"WHERE o.customer_id IN (SELECT c.id FROM {s}.customers c WHERE c.tier = 'premium')"
        ),
        # customers.region_id may be NULL: then NOT IN is never true and the result is empty
        "not_in_subquery": (
            f"SELECT o.id, o.customer_id FROM {s}.orders o "
            f"WHERE o.customer_id NOT IN (SELECT c.region_id FROM {s}.customers c)"
        ),
        # IN over a set operation: a derived relation, semi-joined (events.v may be NULL)
        "in_union": (
            f"SELECT o.id, o.customer_id FROM {s}.orders o WHERE o.customer_id IN ("
            f"SELECT c.id FROM {s}.customers c WHERE c.tier = 'premium' "
            f"UNION SELECT e.v FROM {s}.events e WHERE e.kind = 'a')"
        ),
        "not_in_except": (
            f"SELECT o.id, o.amount FROM {s}.orders o WHERE o.customer_id NOT IN ("
            f"SELECT c.id FROM {s}.customers c EXCEPT SELECT e.v FROM {s}.events e)"
        ),
        # EXISTS beside OR, and as a CASE condition: decorrelated into a join of the matched keys
        "exists_or_tier": (
            f"SELECT c.id, c.name FROM {s}.customers c WHERE c.tier = 'premium' OR EXISTS "
            f"(SELECT 1 FROM {s}.orders o WHERE o.customer_id = c.id AND o.amount > 50)"
        ),
        # a row-valued NOT IN: NULL in either row keeps a pair from being ruled out
        "pair_not_in": (
            f"SELECT c.id, c.name FROM {s}.customers c WHERE (c.id, c.region_id) NOT IN "
            f"(SELECT o.customer_id, o.id % 4 FROM {s}.orders o WHERE o.amount > 50)"
        ),
        # uncorrelated: one answer for the whole table, read as a count
        "exists_uncorrelated_flag": (
            f"SELECT c.id, c.name, EXISTS (SELECT 1 FROM {s}.orders o WHERE o.amount > 100) AS big_orders "
            f"FROM {s}.customers c"
        ),
        "case_when_exists": (
            f"SELECT c.id, CASE WHEN EXISTS (SELECT 1 FROM {s}.returns r JOIN {s}.orders o ON o.id = r.order_id "
            "WHERE o.customer_id = c.id) THEN 'returned' ELSE 'kept' END AS status "
            f"FROM {s}.customers c"
        ),
        # aggregates per customer in a LATERAL subquery (the first rows per customer, LIMIT inside
        # LATERAL, are a PostgreSQL test: Spark's analyzer refuses a correlated LIMIT)
        "counts_lateral": (
            f"SELECT c.id, x.n, x.total FROM {s}.customers c LEFT JOIN LATERAL "
            f"(SELECT COUNT(*) AS n, SUM(o.amount) AS total FROM {s}.orders o WHERE o.customer_id = c.id) AS x ON true"
        ),
        # an uncorrelated aggregate as a column: one value on every row (cross joined), and in a
        # grouped query beside the groups' own
        "scalar_aggregate_column": (
            f"SELECT o.id, o.amount, (SELECT MAX(p.amount) FROM {s}.orders p) AS top FROM {s}.orders o"
        ),
        "scalar_aggregate_per_group": (
            f"SELECT o.customer_id, SUM(o.amount) AS total, (SELECT COUNT(*) FROM {s}.customers c "
            f"WHERE c.tier = 'premium') AS premium_customers FROM {s}.orders o GROUP BY o.customer_id"
        ),
        # rows written in the query (VALUES): joined, grouped over, unioned, probed; they never change
        "values_join": (
            f"SELECT c.id, c.name, t.rank FROM {s}.customers c "
            "JOIN (VALUES ('premium', 1), ('standard', 2)) AS t(tier, rank) ON c.tier = t.tier"
        ),
        "values_left_join_totals": (
            "SELECT t.label, COUNT(o.id) AS n, SUM(o.amount) AS total "
            "FROM (VALUES (1, 'one'), (2, 'two'), (9, 'nine')) AS t(cid, label) "
            f"LEFT JOIN {s}.orders o ON o.customer_id = t.cid GROUP BY t.label"
        ),
        "union_all_values": (
            f"SELECT o.id, o.amount FROM {s}.orders o UNION ALL VALUES (0, CAST(NULL AS decimal(10,2))), (-1, 1.5)"
        ),
        "in_values": (
            f"SELECT o.id, o.amount FROM {s}.orders o "
            "WHERE o.customer_id IN (SELECT t.v FROM (VALUES (1), (3), (5)) AS t(v))"
        ),
        "scalar_subquery_where": (
            f"SELECT o.id, o.amount FROM {s}.orders o WHERE o.amount > (SELECT AVG(amount) FROM {s}.orders)"
        ),
        # a correlated aggregate: decorrelated into a LEFT JOIN of per-customer counts (0 when none)
        "scalar_subquery_select": (
            f"SELECT c.id, (SELECT COUNT(*) FROM {s}.orders o WHERE o.customer_id = c.id) AS n_orders, "
            f"(SELECT SUM(o.amount) FROM {s}.orders o WHERE o.customer_id = c.id) AS total "
            f"FROM {s}.customers c"
        ),
        # a correlated count compared in the WHERE, its correlation repeated in each branch of an OR
        # (TPC-DS Q41's form): factored out of the OR, the rest read as NOT (… AND …), decorrelated
        "count_correlated_in_or": (
            f"SELECT c.id, c.name FROM {s}.customers c WHERE (SELECT COUNT(*) FROM {s}.orders o "
            "WHERE (o.customer_id = c.id AND o.amount > 20) OR (o.customer_id = c.id AND o.amount IS NULL)) > 0"
        ),
        # inside expressions: refused as "scalar subquery" before
        "scalar_subquery_in_expression": (
            f"SELECT c.id, (SELECT COUNT(*) FROM {s}.orders o WHERE o.customer_id = c.id) + 1 AS n_plus_one, "
            f"COALESCE((SELECT MAX(o.amount) FROM {s}.orders o WHERE o.customer_id = c.id), -1) AS top, "
            f"CONCAT((SELECT MAX(r.name) FROM {s}.regions r WHERE r.id = c.region_id), '!') AS region "
            f"FROM {s}.customers c"
        ),
        # derived tables and CTEs
        "derived_aggregate_join": (
            f"SELECT c.id, c.name, t.total, t.n FROM {s}.customers c JOIN "
            f"(SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer_id) t "
            f"ON t.customer_id = c.id"
        ),
        "import_ctes": (
            f"with orders as (select * from {s}.orders), "
            f"customers as (select * from {s}.customers), "
            "final as (select orders.id as order_id, orders.amount, customers.name, customers.tier "
            "from orders join customers on orders.customer_id = customers.id) "
            "select * from final"
        ),
        "cte_aggregate_of_join": (
            f"WITH j AS (SELECT c.tier, o.amount FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id) "
            "SELECT tier, SUM(amount) AS total, COUNT(*) AS n, COUNT(amount) AS n_amount FROM j GROUP BY tier"
        ),
        # aggregate state shared: AVG's sum is `total`, its non-NULL count `n_amount`, and the row
        # count `n` (COUNT of a key column): the table holds no hidden column
        "shared_state": (
            f"SELECT customer_id, AVG(amount) AS mean, SUM(amount) AS total, COUNT(amount) AS n_amount, "
            f"COUNT(id) AS n FROM {s}.orders GROUP BY customer_id"
        ),
        # set operations (NULLs compare equal in set operations; multiplicities matter for ALL)
        "union_all": (
            f"SELECT o.id, o.amount FROM {s}.orders o WHERE o.amount > 50 "
            f"UNION ALL SELECT o.id, o.amount FROM {s}.orders o JOIN {s}.customers c "
            f"ON o.customer_id = c.id WHERE c.tier = 'premium'"
        ),
        "union_distinct": (  # ORDER BY alone orders nothing a table keeps
            f"SELECT customer_id AS k FROM {s}.orders UNION SELECT region_id FROM {s}.customers ORDER BY k"
        ),
        "intersect_distinct": (
            f"SELECT customer_id AS k FROM {s}.orders INTERSECT SELECT id FROM {s}.customers"
        ),
        # the first rows of a set operation: ordered by name, by position, NULLs as each engine ranks them
        "top_of_union": (
            f"SELECT customer_id AS k, amount FROM {s}.orders UNION SELECT region_id, CAST(id AS decimal(10,2)) "
            f"FROM {s}.customers ORDER BY amount DESC, k LIMIT 3"
        ),
        "top_of_union_all_offset": (
            f"SELECT id, amount FROM {s}.orders UNION ALL SELECT order_id, CAST(NULL AS decimal(10,2)) "
            f"FROM {s}.returns ORDER BY 2 DESC NULLS LAST, 1 LIMIT 4 OFFSET 1"
        ),
        "intersect_all": f"SELECT v AS k FROM {s}.events INTERSECT ALL SELECT customer_id FROM {s}.orders",
        "except_distinct": f"SELECT customer_id AS k FROM {s}.orders EXCEPT SELECT id FROM {s}.customers",
        "except_all": f"SELECT customer_id AS k FROM {s}.orders EXCEPT ALL SELECT v FROM {s}.events",
        # keyless left side, aggregate over an outer join
        "keyless_left_join": (
            f"SELECT r.order_id, r.reason, o.amount, o.customer_id "
            f"FROM {s}.returns r LEFT JOIN {s}.orders o ON r.order_id = o.id"
        ),
        "aggregate_over_left_join": (
            f"SELECT c.id, c.name, COUNT(o.id) AS n_orders, SUM(o.amount) AS total "
            f"FROM {s}.customers c LEFT JOIN {s}.orders o ON o.customer_id = c.id GROUP BY c.id, c.name"
        ),
        # aggregates without running state: the groups a batch touches are recomputed
        "min_max_distinct": (
            f"SELECT customer_id, MIN(amount) AS lo, MAX(amount) AS hi, COUNT(DISTINCT amount) AS n_amounts, "
            f"SUM(DISTINCT amount) AS distinct_total FROM {s}.orders GROUP BY customer_id"
        ),
        "global_extremes": f"SELECT MIN(amount) AS lo, MAX(amount) AS hi, COUNT(*) AS n FROM {s}.orders",
        # MIN / MAX alone: insert-only groups combine the stored extreme with the batch's
        "extremes": f"SELECT customer_id, MIN(amount) AS lo, MAX(amount) AS hi FROM {s}.orders GROUP BY customer_id",
        # a group key that is an expression: compared to the touched groups' keys as one operand
        "extremes_by_condition": (
            f"SELECT amount > 20 AS big, MIN(amount) AS lo, MAX(amount) AS hi FROM {s}.orders GROUP BY amount > 20"
        ),
        "extreme_hidden_key": f"SELECT MIN(e.v) AS lo FROM {s}.events e GROUP BY e.kind",
        "global_max": f"SELECT MAX(v) AS top, MIN(kind) AS first_kind FROM {s}.events",
        "filtered_aggregates": (
            f"SELECT kind, COUNT(*) FILTER (WHERE v > 2) AS big, SUM(v) FILTER (WHERE v < 5) AS small, "
            f"BOOL_OR(v > 4) AS any_big, MIN(v) FILTER (WHERE v > 1) AS lo FROM {s}.events GROUP BY kind"
        ),
        # groups enter and leave as they start and stop qualifying
        "having": (
            f"SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders "
            f"GROUP BY customer_id HAVING COUNT(*) >= 2 AND MAX(amount) > 20"
        ),
        "in_having": (
            f"SELECT c.id, c.name FROM {s}.customers c WHERE c.id IN "
            f"(SELECT o.customer_id FROM {s}.orders o GROUP BY o.customer_id HAVING SUM(o.amount) > 60)"
        ),
        # a recomputed aggregate under a join, and aggregates over aggregates
        "derived_min_join": (
            f"SELECT c.id, c.name, m.lo FROM {s}.customers c JOIN "
            f"(SELECT customer_id, MIN(amount) AS lo FROM {s}.orders GROUP BY customer_id) m "
            f"ON m.customer_id = c.id"
        ),
        "count_of_counts": (
            f"SELECT n, COUNT(*) AS customers FROM "
            f"(SELECT customer_id, COUNT(*) AS n FROM {s}.orders GROUP BY customer_id) x GROUP BY n"
        ),
        # TPC-H Q15's shape: the groups whose total is the largest
        "top_total": (
            f"WITH t AS (SELECT customer_id, SUM(amount) AS total FROM {s}.orders GROUP BY customer_id) "
            "SELECT t.customer_id, t.total FROM t WHERE t.total = (SELECT MAX(total) FROM t)"
        ),
        # TopK: a batch below the last stored row changes nothing; NULL amounts and totals rank too
        "top_orders": (
            f"SELECT o.id, o.amount, o.customer_id FROM {s}.orders o ORDER BY o.amount DESC, o.id LIMIT 3"
        ),
        "top_totals_offset": (
            f"SELECT customer_id, SUM(amount) AS total FROM {s}.orders GROUP BY customer_id "
            "ORDER BY total DESC, customer_id LIMIT 2 OFFSET 1"
        ),
        # ordered by keys not shown (the id, a count): the first rows as copies of what is shown
        "top_orders_hidden_order": (
            f"SELECT o.customer_id, o.amount FROM {s}.orders o ORDER BY o.amount DESC, o.id LIMIT 4"
        ),
        # one row (an aggregate without GROUP BY): the LIMIT cannot cut it, so it is the aggregate
        "one_row_limited": f"SELECT COUNT(*) AS n, SUM(amount) AS total FROM {s}.orders LIMIT 3",
        "busiest_tiers": (
            f"SELECT c.tier FROM {s}.customers c JOIN {s}.orders o ON o.customer_id = c.id "
            "GROUP BY c.tier ORDER BY COUNT(*) DESC, c.tier LIMIT 2"
        ),
        # a correlated MAX, decorrelated into a join with the per-customer maximum
        "max_per_customer": (
            f"SELECT o.id, o.customer_id, o.amount FROM {s}.orders o WHERE o.amount = "
            f"(SELECT MAX(o2.amount) FROM {s}.orders o2 WHERE o2.customer_id = o.customer_id)"
        ),
        # window functions: the partitions a batch touches are recomputed
        "latest_order_per_customer": (
            f"SELECT id, customer_id, amount FROM (SELECT o.id, o.customer_id, o.amount, ROW_NUMBER() "
            f"OVER (PARTITION BY o.customer_id ORDER BY o.id DESC) AS rn FROM {s}.orders o) latest WHERE rn = 1"
        ),
        "window_functions": (
            f"SELECT o.id, o.customer_id, RANK() OVER (PARTITION BY o.customer_id ORDER BY o.amount DESC) AS r, "
            "DENSE_RANK() OVER (PARTITION BY o.customer_id ORDER BY o.amount) AS dr, "
            "LAG(o.amount) OVER (PARTITION BY o.customer_id ORDER BY o.id) AS previous_amount, "
            "SUM(o.amount) OVER (PARTITION BY o.customer_id ORDER BY o.id) AS running_total, "
            "FIRST_VALUE(o.id) OVER (PARTITION BY o.customer_id ORDER BY o.id) AS first_id, "
            f"COUNT(*) OVER (PARTITION BY o.customer_id) AS orders_of_customer FROM {s}.orders o"
        ),
        "row_number_unpartitioned": f"SELECT o.id, ROW_NUMBER() OVER (ORDER BY o.id) AS n FROM {s}.orders o",
        # the WHERE is ranked with the window; the partition column not shown, so not read back
        "top_two_amounts": (
            f"SELECT id, amount, r FROM (SELECT o.id, o.amount, RANK() OVER (PARTITION BY o.customer_id "
            f"ORDER BY o.amount DESC) AS r FROM {s}.orders o) ranked WHERE r <= 2 AND amount > 5"
        ),
        # a keyless input whose stored rows are read back per partition, NULL kinds among them
        "largest_events_per_kind": (
            f"SELECT kind, v FROM (SELECT kind, v, ROW_NUMBER() OVER (PARTITION BY kind ORDER BY v DESC) "
            f"AS n FROM {s}.events) e WHERE n <= 2"
        ),
        "window_over_groups": (
            f"SELECT kind, v, COUNT(*) AS n, RANK() OVER (PARTITION BY kind ORDER BY COUNT(*) DESC) AS r "
            f"FROM {s}.events GROUP BY kind, v"
        ),
        "rank_of_totals": (
            f"SELECT customer_id, SUM(amount) AS total, RANK() OVER (ORDER BY SUM(amount) DESC) AS r "
            f"FROM {s}.orders GROUP BY customer_id"
        ),
        # grouping sets: one aggregate per grouping, unioned
        "rollup_totals": (
            f"SELECT c.tier, c.region_id, SUM(o.amount) AS total, COUNT(*) AS n, GROUPING(c.tier) AS g "
            f"FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id GROUP BY ROLLUP (c.tier, c.region_id)"
        ),
        "cube_counts": f"SELECT kind, v, COUNT(*) AS n FROM {s}.events GROUP BY CUBE (kind, v)",
        # the first rows of a ROLLUP: a TopK over its groupings' rows (the grand total among them)
        "top_rolled_totals": (
            f"SELECT customer_id, GROUPING(customer_id) AS grand, SUM(amount) AS total FROM {s}.orders "
            "GROUP BY ROLLUP (customer_id) ORDER BY total DESC, customer_id, grand LIMIT 3"
        ),
        # user names spelled like the engine's: a grouped subquery's alias and outputs, filtered
        # customers (a restriction reaches the subquery), and an EXISTS whose alias shadows the
        # outer one while its condition reads the outer table unqualified
        "internal_names": (
            f"SELECT c.id, c.name, t.__ivm_weight AS total, t.__ivm_count AS n FROM {s}.customers c JOIN "
            f"(SELECT __ivm_reach.customer_id, SUM(__ivm_reach.amount) AS __ivm_weight, COUNT(*) AS __ivm_count "
            f"FROM {s}.orders __ivm_reach GROUP BY __ivm_reach.customer_id) t ON t.customer_id = c.id "
            f"WHERE c.tier = 'premium' AND EXISTS (SELECT 1 FROM {s}.returns c WHERE c.order_id = region_id)"
        ),
        # a set operation whose output is spelled like the engine's, named by its first branch
        "internal_names_union": (
            f"SELECT u.__ivm_w AS w, u.k FROM (SELECT o.amount AS __ivm_w, o.customer_id AS k FROM {s}.orders o "
            f"UNION ALL SELECT CAST(r.order_id AS decimal(10,2)), r.order_id FROM {s}.returns r) u"
        ),
        "grouping_sets_max": (
            f"SELECT customer_id, amount, MAX(id) AS m, COUNT(*) AS n FROM {s}.orders "
            "GROUP BY GROUPING SETS ((customer_id), (amount), ())"
        ),
    }


def literal(value: object) -> str:
    """A SQL literal both engines read the same way (decimals as written: exact numeric literals)."""
    if value is None:
        return "NULL"
    if isinstance(value, int | Decimal):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _row(*values: object) -> str:
    return "(" + ", ".join(literal(v) for v in values) + ")"


@dataclass
class Customer:
    name: str | None
    tier: str | None
    region_id: int | None


@dataclass
class Order:
    customer_id: int | None
    amount: Decimal | None


class Workload:
    """Seeded random DML over the five tables of schema `schema`.

    Every method returns the statements to run (in order) and updates the Python model of the tables,
    so later statements know which keys exist. Nothing is executed here.
    """

    def __init__(self, schema: str, rng: random.Random) -> None:
        self.s = schema
        self.rng = rng
        self.regions: dict[int, str | None] = {}
        self.customers: dict[int, Customer] = {}
        self.orders: dict[int, Order] = {}
        self.returns: list[tuple[int | None, str | None]] = []
        self.events: list[tuple[str | None, int | None]] = []
        self.next_order = 1

    # -- the starting data ------------------------------------------------------------------------

    def seed(self) -> list[str]:
        """A dozen rows per table: every region but one, customers in regions (no NULL region_id yet,
        so NOT IN has rows), orders with NULL and dangling customer ids and NULL amounts, duplicate
        returns and events."""
        s, rng = self.s, self.rng
        self.regions = {1: "north", 2: "south", 3: "east"}
        self.customers = {
            1: Customer("alice", "premium", 1),
            2: Customer("bob", "standard", 2),
            3: Customer("carol", None, 3),
            4: Customer("dave", "premium", 4),  # region 4 does not exist
        }
        statements = [
            f"INSERT INTO {s}.regions VALUES " + ", ".join(_row(k, v) for k, v in self.regions.items()),
            f"INSERT INTO {s}.customers VALUES "
            + ", ".join(_row(k, c.name, c.tier, c.region_id) for k, c in self.customers.items()),
        ]
        d = Decimal
        fixed = [
            (1, d("20.00")),
            (1, d("75.50")),
            (2, None),
            (None, d("49.99")),
            (6, d("120.00")),
            (3, d("5")),
        ]
        extra = [(rng.choice([*CUSTOMER_IDS, None]), rng.choice(AMOUNTS)) for _ in range(4)]
        statements.append(self._insert_orders(fixed + extra))
        statements += self._insert_returns([(1, "damaged"), (1, "damaged"), (4, None), (99, "late")])
        statements += self._insert_events([("a", 1), ("a", 1), ("b", 2), (None, 6), ("c", None)])
        return statements

    # -- single changes -----------------------------------------------------------------------------

    def _insert_orders(self, rows: list[tuple[int | None, Decimal | None]]) -> str:
        values = []
        for customer_id, amount in rows:
            self.orders[self.next_order] = Order(customer_id, amount)
            values.append(_row(self.next_order, customer_id, amount))
            self.next_order += 1
        return f"INSERT INTO {self.s}.orders VALUES {', '.join(values)}"

    def _insert_returns(self, rows: list[tuple[int | None, str | None]]) -> list[str]:
        self.returns += rows
        return [f"INSERT INTO {self.s}.returns VALUES {', '.join(_row(*r) for r in rows)}"]

    def _insert_events(self, rows: list[tuple[str | None, int | None]]) -> list[str]:
        self.events += rows
        return [f"INSERT INTO {self.s}.events VALUES {', '.join(_row(*r) for r in rows)}"]

    def _customer_ref(self) -> int | None:
        """An existing customer, a missing one or NULL."""
        return self.rng.choice([*CUSTOMER_IDS, None])

    def _an_order(self) -> int | None:
        return self.rng.choice(sorted(self.orders)) if self.orders else None

    def insert_orders(self) -> list[str]:
        """1-3 orders; customer ids may be NULL or name no customer, amounts may be NULL."""
        count = self.rng.randint(1, 3)
        return [self._insert_orders([(self._customer_ref(), self.rng.choice(AMOUNTS)) for _ in range(count)])]

    def update_amount(self) -> list[str]:
        order = self._an_order()
        if order is None:
            return self.insert_orders()
        amount = self.rng.choice(AMOUNTS)
        self.orders[order].amount = amount
        return [f"UPDATE {self.s}.orders SET amount = {literal(amount)} WHERE id = {order}"]

    def update_order_customer(self) -> list[str]:
        """Change an order's join key (to another customer, a missing one, or NULL)."""
        order = self._an_order()
        if order is None:
            return self.insert_orders()
        customer = self._customer_ref()
        self.orders[order].customer_id = customer
        return [f"UPDATE {self.s}.orders SET customer_id = {literal(customer)} WHERE id = {order}"]

    def delete_orders(self) -> list[str]:
        """One order by key, or every order of one customer (or of none: customer_id IS NULL)."""
        if not self.orders:
            return self.insert_orders()
        if self.rng.random() < 0.6:
            order = self._an_order()
            del self.orders[order]  # type: ignore[arg-type]
            return [f"DELETE FROM {self.s}.orders WHERE id = {order}"]
        customer = self.rng.choice(sorted({o.customer_id for o in self.orders.values()}, key=_none_first))
        self.orders = {k: o for k, o in self.orders.items() if o.customer_id != customer}
        where = "customer_id IS NULL" if customer is None else f"customer_id = {customer}"
        return [f"DELETE FROM {self.s}.orders WHERE {where}"]

    def customer_appears(self) -> list[str]:
        """Insert a missing customer, preferring one that existing orders already reference."""
        missing = [c for c in CUSTOMER_IDS if c not in self.customers]
        if not missing:
            return self.customer_vanishes()
        referenced = [c for c in missing if any(o.customer_id == c for o in self.orders.values())]
        customer_id = self.rng.choice(referenced or missing)
        return self._insert_customer(customer_id)

    def _insert_customer(self, customer_id: int) -> list[str]:
        rng = self.rng
        region = rng.choice([*REGION_IDS, None]) if rng.random() < 0.3 else rng.choice(list(REGION_IDS))
        customer = Customer(rng.choice(NAMES), rng.choice(TIERS), region)
        self.customers[customer_id] = customer
        return [
            f"INSERT INTO {self.s}.customers VALUES "
            + _row(customer_id, customer.name, customer.tier, customer.region_id)
        ]

    def customer_vanishes(self) -> list[str]:
        """Delete a customer, preferring one that has orders (their partner disappears)."""
        if not self.customers:
            return self.customer_appears()
        with_orders = [c for c in self.customers if any(o.customer_id == c for o in self.orders.values())]
        customer_id = self.rng.choice(with_orders or sorted(self.customers))
        del self.customers[customer_id]
        return [f"DELETE FROM {self.s}.customers WHERE id = {customer_id}"]

    def update_customer(self) -> list[str]:
        """Change a customer's tier, region_id (a join key; may become NULL or name no region) or both."""
        if not self.customers:
            return self.customer_appears()
        customer_id = self.rng.choice(sorted(self.customers))
        customer = self.customers[customer_id]
        sets = []
        if self.rng.random() < 0.6:
            customer.tier = self.rng.choice(TIERS)
            sets.append(f"tier = {literal(customer.tier)}")
        if not sets or self.rng.random() < 0.5:
            customer.region_id = self.rng.choice([*REGION_IDS, None])
            sets.append(f"region_id = {literal(customer.region_id)}")
        return [f"UPDATE {self.s}.customers SET {', '.join(sets)} WHERE id = {customer_id}"]

    def clear_null_regions(self) -> list[str]:
        """Give every customer without a region one (NOT IN over region_id comes back to life)."""
        region = self.rng.choice(list(REGION_IDS))
        for customer in self.customers.values():
            if customer.region_id is None:
                customer.region_id = region
        return [f"UPDATE {self.s}.customers SET region_id = {region} WHERE region_id IS NULL"]

    def rekey_customer(self) -> list[str]:
        """Change a customer's primary key (the join key on the customers side) to an unused id."""
        missing = [c for c in CUSTOMER_IDS if c not in self.customers]
        if not missing or not self.customers:
            return self.update_customer()
        old = self.rng.choice(sorted(self.customers))
        new = self.rng.choice(missing)
        self.customers[new] = self.customers.pop(old)
        return [f"UPDATE {self.s}.customers SET id = {new} WHERE id = {old}"]

    def region_change(self) -> list[str]:
        """A region appears, vanishes or is renamed."""
        region = self.rng.choice(list(REGION_IDS))
        if region not in self.regions:
            self.regions[region] = self.rng.choice(REGION_NAMES)
            return [f"INSERT INTO {self.s}.regions VALUES {_row(region, self.regions[region])}"]
        if self.rng.random() < 0.5:
            del self.regions[region]
            return [f"DELETE FROM {self.s}.regions WHERE id = {region}"]
        self.regions[region] = self.rng.choice(REGION_NAMES)
        return [f"UPDATE {self.s}.regions SET name = {literal(self.regions[region])} WHERE id = {region}"]

    def returns_change(self) -> list[str]:
        """Insert returns (the same row twice sometimes; for existing and missing orders) or delete all
        copies of some."""
        rng = self.rng
        if self.returns and rng.random() < 0.35:
            order_id = rng.choice(self.returns)[0]
            self.returns = [r for r in self.returns if r[0] != order_id]
            where = "order_id IS NULL" if order_id is None else f"order_id = {order_id}"
            return [f"DELETE FROM {self.s}.returns WHERE {where}"]
        order = self._an_order() if rng.random() < 0.8 else rng.choice([99, None])
        row = (order, rng.choice(REASONS))
        rows = [row, row] if rng.random() < 0.4 else [row]
        return self._insert_returns(rows)

    def events_change(self) -> list[str]:
        """Insert events with duplicates, delete every copy of one value, or update some."""
        rng = self.rng
        roll = rng.random()
        if self.events and roll < 0.3:
            v = rng.choice(self.events)[1]
            self.events = [e for e in self.events if e[1] != v]
            where = "v IS NULL" if v is None else f"v = {v}"
            return [f"DELETE FROM {self.s}.events WHERE {where}"]
        if self.events and roll < 0.45:
            kind = rng.choice(self.events)[0]
            v = rng.choice(EVENT_VALUES)
            self.events = [(k, v) if k == kind else (k, old) for k, old in self.events]
            where = "kind IS NULL" if kind is None else f"kind = {literal(kind)}"
            return [f"UPDATE {self.s}.events SET v = {literal(v)} WHERE {where}"]
        row = (rng.choice(KINDS), rng.choice(EVENT_VALUES))
        rows = [row, row, (rng.choice(KINDS), rng.choice(EVENT_VALUES))]
        return self._insert_events(rows)

    def both_sides(self) -> list[str]:
        """Both sides of the orders-customers join change in one batch: a new customer with its first
        order; an order moved to another customer while the old customer goes; a customer removed
        with an order of theirs deleted and a return for it inserted."""
        rng = self.rng
        roll = rng.random()
        missing = [c for c in CUSTOMER_IDS if c not in self.customers]
        if roll < 0.35 and missing:
            customer_id = rng.choice(missing)
            return [
                *self._insert_customer(customer_id),
                self._insert_orders([(customer_id, rng.choice(AMOUNTS))]),
            ]
        if roll < 0.7 and self.orders and self.customers:
            order = self._an_order()
            assert order is not None
            old = self.orders[order].customer_id
            new = rng.choice(sorted(self.customers))
            self.orders[order].customer_id = new
            statements = [f"UPDATE {self.s}.orders SET customer_id = {new} WHERE id = {order}"]
            if old is not None and old in self.customers and old != new:
                del self.customers[old]
                statements.append(f"DELETE FROM {self.s}.customers WHERE id = {old}")
            return statements
        statements = self.customer_vanishes()
        order = self._an_order()
        if order is not None:
            del self.orders[order]
            statements.append(f"DELETE FROM {self.s}.orders WHERE id = {order}")
            statements += self._insert_returns([(order, rng.choice(REASONS))])
        return statements

    # -- batches ------------------------------------------------------------------------------------

    def operations(self) -> list[tuple[Callable[[], list[str]], int]]:
        """Every kind of change with its weight."""
        return [
            (self.insert_orders, 4),
            (self.update_amount, 3),
            (self.update_order_customer, 3),
            (self.delete_orders, 2),
            (self.customer_appears, 2),
            (self.customer_vanishes, 2),
            (self.update_customer, 3),
            (self.clear_null_regions, 1),
            (self.rekey_customer, 1),
            (self.region_change, 2),
            (self.returns_change, 3),
            (self.events_change, 3),
            (self.both_sides, 3),
        ]

    def batch(self, changes: int) -> list[str]:
        """`changes` random changes, flattened into one list of statements."""
        operations = self.operations()
        methods = [m for m, _ in operations]
        weights = [w for _, w in operations]
        statements: list[str] = []
        for method in self.rng.choices(methods, weights=weights, k=changes):
            statements += method()
        return statements


def _none_first(value: int | None) -> tuple[bool, int]:
    return (value is not None, value or 0)


# Each batch reaches a group whose sum may be left NULL: values leaving with others still set, the
# last value leaving while a NULL stays, values summing to 0 that stay, a group left with only NULLs
# and refilled, a NULL group, and a group moving away entirely.
SUM_IN_DOUBT_ROWS = "(1, 1, 5), (2, 1, NULL), (3, 2, 9), (4, 2, -9), (5, 2, 3), (6, NULL, 4), (7, 3, NULL)"
SUM_IN_DOUBT_BATCHES = [
    "DELETE FROM {t} WHERE id = 1; DELETE FROM {t} WHERE id = 5",
    "INSERT INTO {t} VALUES (8, 1, 0), (9, 3, 2); UPDATE {t} SET amount = NULL WHERE id = 6",
    "UPDATE {t} SET amount = NULL WHERE id IN (3, 4); DELETE FROM {t} WHERE id = 8",
    "UPDATE {t} SET customer_id = 4 WHERE customer_id = 2; INSERT INTO {t} VALUES (10, 1, 7), (11, NULL, 1)",
    "UPDATE {t} SET amount = amount - 7 WHERE id = 10; DELETE FROM {t} WHERE id = 9",
]


def sum_in_doubt_streams(table: str) -> dict[str, str]:
    """SUMs of a column that may be NULL: shown as it is, and inside an expression (a hidden sum); and
    groups whose row count no column shows, kept only by a sum or a count of values (`sums`,
    `priced`: a group whose sum lands on 0 or whose values all go may still have rows)."""
    return {
        "totals": f"SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM {table} GROUP BY customer_id",
        "doubled": f"SELECT customer_id, SUM(amount) * 2 AS twice, SUM(id) AS ids, COUNT(*) AS n "
        f"FROM {table} GROUP BY customer_id",
        "sums": f"SELECT customer_id, SUM(amount) AS total FROM {table} GROUP BY customer_id",
        "priced": f"SELECT customer_id, COUNT(amount) AS priced FROM {table} GROUP BY customer_id",
    }


# Rows no key identifies, stored as identical copies (`apply/multiset`): `orders` has a key (on Spark
# declared by `dbt_ivm.primary_key`), `events` none. Each batch touches both tables; statements are
# separated by "; ".
REPEATING_ORDERS = "(1, 1, 5), (2, 1, 7), (3, 2, 9), (4, NULL, 1), (5, 1, 5), (6, 2, 9)"
REPEATING_EVENTS = "('a', 1), ('a', 1), ('a', 1), ('b', 2), (NULL, NULL), (NULL, NULL)"
REPEATING_BATCHES = [
    # two of three identical copies go (all deleted, one inserted again), copies of others come
    "DELETE FROM {s}.events WHERE kind = 'a'; INSERT INTO {s}.events VALUES ('a', 1), ('b', 2), ('b', 2), "
    "(NULL, NULL); UPDATE {s}.orders SET amount = 6 WHERE id = 5",
    "INSERT INTO {s}.orders VALUES (7, 1, 5), (8, NULL, 1); DELETE FROM {s}.orders WHERE id = 2; "
    "UPDATE {s}.events SET v = 1 WHERE kind = 'b'",
    # every copy of a value goes
    "DELETE FROM {s}.events WHERE kind IS NULL; UPDATE {s}.orders SET customer_id = 2 WHERE customer_id = 1",
    "DELETE FROM {s}.orders WHERE customer_id = 2; "
    "INSERT INTO {s}.events VALUES ('c', 3), ('c', 3), ('c', 3), ('c', 3)",
    "INSERT INTO {s}.orders VALUES (9, 3, 2), (10, 3, 2), (11, NULL, 8); DELETE FROM {s}.events WHERE kind = 'c'",
    "UPDATE {s}.orders SET amount = 2 WHERE amount > 2; INSERT INTO {s}.events VALUES ('e', 3), ('e', 3)",
]


def repeating_streams(s: str) -> dict[str, str]:
    """A keyless table, UNION / INTERSECT / EXCEPT ALL, a keyless LEFT JOIN, a window hiding its
    input's key, ROLLUP: rows that may repeat."""
    return {
        "notes": f"SELECT kind, v FROM {s}.events",
        "both": f"SELECT customer_id FROM {s}.orders UNION ALL SELECT customer_id FROM {s}.orders WHERE amount > 5",
        "shared": f"SELECT customer_id FROM {s}.orders INTERSECT ALL SELECT v FROM {s}.events",
        "unmatched": f"SELECT customer_id FROM {s}.orders EXCEPT ALL SELECT v FROM {s}.events",
        "paired": f"SELECT e.kind, o.amount FROM {s}.events e LEFT JOIN {s}.orders o ON o.customer_id = e.v",
        "ranked": f"SELECT customer_id, RANK() OVER (PARTITION BY customer_id ORDER BY amount) AS r FROM {s}.orders",
        "rolled": f"SELECT customer_id, SUM(amount) AS total FROM {s}.orders GROUP BY ROLLUP (customer_id)",
    }
