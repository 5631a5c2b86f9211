"""The seeds' running examples on Spark + Iceberg: create, refresh after DML, FULL, SKIP."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spark.oracle import refresh_and_check

pytestmark = pytest.mark.spark


def test_examples_follow_dml(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.customers (id int NOT NULL, name string, tier string) USING iceberg")
    spark.sql(f"ALTER TABLE {s}.customers SET IDENTIFIER FIELDS id")
    spark.sql(
        f"CREATE TABLE {s}.orders (id int, customer_id int, customer string, amount decimal(10,2)) USING iceberg "
        "TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"CREATE TABLE {s}.events (kind string, v int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.customers VALUES (1,'alice','premium'),(2,'bob','standard')")
    spark.sql(
        f"INSERT INTO {s}.orders VALUES (1,1,'alice',50),(2,1,'alice',30),(3,2,'bob',75),(4,2,'bob',25)"
    )
    spark.sql(f"INSERT INTO {s}.events VALUES ('a',1),('a',1),('b',null)")
    queries = {
        "customer_totals": f"select customer, sum(amount) as total, count(*) as order_count from {s}.orders group by customer",
        "order_details": f"select c.name, c.tier, o.amount from {s}.orders o join {s}.customers c on o.customer_id = c.id",
        "glob": f"select count(*) as n, sum(amount) as s, avg(amount) as a from {s}.orders",
        "ev": f"select kind, v from {s}.events where kind <> 'z'",
        "evagg": f"select kind, count(v) as c, sum(v) as s, avg(v) a from {s}.events group by kind",
    }
    actions: dict[str, list[str]] = {name: [] for name in queries}

    def check(step: str) -> None:
        for name, sql in queries.items():
            result = refresh_and_check(spark, s, name, sql, step, refresh_mode="differential")
            actions[name].append(result.action)

    check("create")
    spark.sql(f"INSERT INTO {s}.orders VALUES (5,1,'alice',10),(6,3,'carol',5)")
    spark.sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id = 3")
    spark.sql(f"DELETE FROM {s}.orders WHERE id = 2")
    spark.sql(f"INSERT INTO {s}.events VALUES ('a',1),('c',2)")
    spark.sql(f"DELETE FROM {s}.events WHERE kind = 'b'")
    check("dml 1")
    spark.sql(f"UPDATE {s}.orders SET customer = 'bob', customer_id = 2 WHERE id = 1")
    spark.sql(f"INSERT INTO {s}.customers VALUES (3,'carol','x')")
    spark.sql(f"UPDATE {s}.customers SET tier = 'gold' WHERE id = 1")
    spark.sql(f"INSERT INTO {s}.orders VALUES (7,null,null,null)")
    spark.sql(f"DELETE FROM {s}.events WHERE kind = 'a' AND v = 1")
    check("dml 2")
    spark.sql(f"DELETE FROM {s}.orders")
    spark.sql(f"DELETE FROM {s}.events")
    check("delete all")
    check("no changes")
    for name, done in actions.items():
        assert done[0] == "CREATE", (name, done)
        assert done[1:4] == ["DIFFERENTIAL"] * 3, (name, done)
        assert done[4] == "SKIP", (name, done)
