"""Child process of test_cluster: a dbt-ivm session whose executors run on a standalone cluster.

    python -m tests.spark.cluster_child MASTER_URL WAREHOUSE

Runs the randomized oracle suite there, then prints how many executors served it and "cluster ok".
"""

from __future__ import annotations

import sys

from dbt_ivm.spark.session import SessionSettings, get_or_create_session
from tests.spark.test_randomized import check_randomized_refreshes

# What a cluster on loopback needs beside the defaults: executors reach the driver on 127.0.0.1, and
# each worker's one core runs one executor of 1 GB.
CLUSTER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.sql.shuffle.partitions": "4",
}


def main() -> None:
    master, warehouse = sys.argv[1:3]
    settings = SessionSettings(warehouse=warehouse, master=master, app_name="cluster-test", conf=CLUSTER_CONF)
    spark = get_or_create_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE DATABASE IF NOT EXISTS on_cluster")
    check_randomized_refreshes(spark, "on_cluster")
    # The driver's own block manager is listed too.
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(f"executors {executors}")
    spark.stop()
    print("cluster ok")


if __name__ == "__main__":
    main()
