"""How a stream table is named on Spark: in the registry, as catalog parts, as a sqlglot table."""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.catalog import qualified_name
from dbt_ivm.spec import StreamTableSpec


def key(spec: StreamTableSpec) -> str:
    """The stream table's name in the registry (`schema.name`)."""
    return qualified_name(spec.schema, spec.name)


def parts(spec: StreamTableSpec) -> tuple[str, str]:
    """(schema, name), as the catalog helpers take them."""
    return (spec.schema, spec.name)


def table(spec: StreamTableSpec) -> exp.Table:
    """The table, for sqlglot trees."""
    return exp.table_(spec.name, spec.schema, quoted=True)
