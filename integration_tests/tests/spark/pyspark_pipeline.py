"""A plain PySpark pipeline step: change the demo's sources, then refresh its stream tables without dbt.

    python pyspark_pipeline.py WAREHOUSE SCHEMA

`dbt build` on the demo project created the stream tables in WAREHOUSE. This script starts its own
session on that warehouse, writes to the sources, calls `dbt_ivm.spark.refresh` for each stream
table twice (the second finds nothing to do), and prints one JSON object: per stream table, the two
results and how many rows differ from its query (EXCEPT ALL both ways).
"""

from __future__ import annotations

import json
import sys

from dbt_ivm.spark import SessionSettings, get_or_create_session, refresh

STREAM_TABLES = ("customer_totals", "order_details")
QUERIES = {
    "customer_totals": "SELECT customer_id, SUM(amount) AS total, COUNT(*) AS order_count "
    "FROM {s}.orders GROUP BY customer_id",
    "order_details": "SELECT o.id AS order_id, c.name, c.tier, o.amount "
    "FROM {s}.orders o JOIN {s}.customers c ON o.customer_id = c.id",
}


def main(warehouse: str, schema: str) -> None:
    spark = get_or_create_session(SessionSettings(warehouse=warehouse))
    spark.sql(f"INSERT INTO {schema}.orders VALUES (31, 1, 12.50), (32, 2, 7.25)")
    spark.sql(f"UPDATE {schema}.customers SET tier = 'gold' WHERE id = 1")
    spark.sql(f"DELETE FROM {schema}.orders WHERE id = 3")
    report = {}
    for name in STREAM_TABLES:
        first = refresh(spark, f"{schema}.{name}")
        second = refresh(spark, f"{schema}.{name}")
        query = QUERIES[name].format(s=schema)
        columns = ", ".join(f.name for f in spark.sql(query).schema.fields)
        stored = f"SELECT {columns} FROM {schema}.{name}"
        differ = spark.sql(f"({stored} EXCEPT ALL {query}) UNION ALL ({query} EXCEPT ALL {stored})").count()
        report[name] = {
            "first": [first.action, first.rows_changed, first.reason, round(first.seconds, 3)],
            "second": [second.action, second.rows_changed, second.reason],
            "differ": differ,
        }
    history = spark.sql(
        "SELECT stream_table, action, initiated_by FROM dbt_ivm.refresh_history ORDER BY refresh_id"
    ).collect()
    report["history"] = [list(row) for row in history]
    print(json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
