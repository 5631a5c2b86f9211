"""Refresh a stream table from a PySpark program, without dbt.

    from dbt_ivm.spark import refresh
    result = refresh(spark, "analytics.customer_totals")
    result.action, result.rows_changed, result.seconds, result.reason

`dbt run` created the stream table and stored what refreshing it needs: its defining query and
refresh mode in the registry (``<catalog_schema>.stream_tables``), its frontier on the table's own
commits. This reads them back and runs the same refresh a later `dbt run` would: a pipeline can
refresh between its own steps without starting dbt. The history row says ``initiated_by='pyspark'``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dbt_ivm.catalog import qualified_name
from dbt_ivm.errors import IvmError
from dbt_ivm.spec import RefreshResult

INITIATED_BY = "pyspark"


class NotAStreamTable(IvmError):
    """The name given is not a stream table that `dbt run` registered."""


def refresh(
    spark: Any,
    stream_table: str,
    catalog_schema: str = "dbt_ivm",
    full_refresh_threshold: float | None = None,
) -> RefreshResult:
    """Bring `stream_table` ("schema.name") up to date on `spark`, as its last `dbt run` defined it.

    `catalog_schema`: the model's `catalog_schema` config, if it set one. `full_refresh_threshold`:
    AUTO's threshold for this refresh only (default: the model's, as its last dbt run kept it)."""
    from dbt_ivm.spark import registry
    from dbt_ivm.spark.registrations import spec_of
    from dbt_ivm.spark.runner import run_stream_table

    schema, _, name = stream_table.rpartition(".")
    if not schema or not name:
        raise NotAStreamTable(f"{stream_table!r}: name the stream table as schema.name")
    registry.bootstrap(spark, catalog_schema)
    found = registry.lookup(spark, catalog_schema, qualified_name(schema, name))
    if found is None:  # the metastore keeps names in lower case
        found = registry.lookup(spark, catalog_schema, qualified_name(schema.lower(), name.lower()))
    if found is None:
        raise NotAStreamTable(
            f"{stream_table} is not a stream table registered in {catalog_schema}.stream_tables: "
            "create it with dbt run first (or pass the catalog_schema its model configured)"
        )
    spec = spec_of(found, catalog_schema, INITIATED_BY)  # as its last dbt run defined and configured it
    if full_refresh_threshold is not None:
        spec = dataclasses.replace(spec, full_refresh_threshold=full_refresh_threshold)
    return run_stream_table(spark, spec)
