"""How a stream table is named on PostgreSQL: in SQL text, as a sqlglot table, in the registry."""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.catalog import qualified_name
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.sqltext import qn


def relation(spec: StreamTableSpec) -> str:
    """The table, quoted for SQL text."""
    return qn(spec.schema, spec.name)


def table(spec: StreamTableSpec) -> exp.Table:
    """The table, for sqlglot trees."""
    return exp.table_(spec.name, spec.schema, quoted=True)


def key(spec: StreamTableSpec) -> str:
    """The stream table's name in the registry (`schema.name`)."""
    return qualified_name(spec.schema, spec.name)
