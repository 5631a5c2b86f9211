"""Child process for the kill tests: refresh one stream table in its own SparkSession.

    python -m tests.spark.kill_child WAREHOUSE SCHEMA NAME SQL
with DBT_IVM_SPARK_KILL_AT naming the point where the runner SIGKILLs its process group.
"""

from __future__ import annotations

import sys

from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import make_spec
from tests.spark.sessions import build_session


def main() -> None:
    warehouse, schema, name, sql = sys.argv[1:5]
    spark = build_session(warehouse)
    result = run_stream_table(spark, make_spec(schema, name, sql, full_refresh_threshold=100.0))
    print(result.summary())


if __name__ == "__main__":
    main()
