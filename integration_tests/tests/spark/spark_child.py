"""A separate process on the embedded session: what a later `dbt run` would see.

    python spark_child.py WAREHOUSE "SQL" ["SQL" ...]

Prints one JSON object: the rows of every statement, the Java the JVM runs on and whether it mapped
a class-data archive; or {"error": ...} when the session cannot start.
"""

from __future__ import annotations

import json
import sys

from dbt_ivm.errors import IvmError
from dbt_ivm.spark.session import SessionSettings, get_or_create_session


def main(warehouse: str, statements: list[str]) -> None:
    try:
        spark = get_or_create_session(SessionSettings(warehouse=warehouse))
    except IvmError as error:
        print(json.dumps({"error": str(error)}))
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    results = [[[str(v) for v in row] for row in spark.sql(sql).collect()] for sql in statements]
    print(
        json.dumps(
            {
                "results": results,
                "java_home": str(jvm.System.getProperty("java.home")),
                "vm_info": str(jvm.System.getProperty("java.vm.info")),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
