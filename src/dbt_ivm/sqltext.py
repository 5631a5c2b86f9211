"""Small helpers for generated SQL: every identifier quoted, every literal escaped.

Queries and statements are sqlglot trees, rendered in the target's dialect (`columns` builds their
column references). `q`, `qn` and `lit` write PostgreSQL text for what stays text: DDL, catalog
queries and the capture triggers, which run on PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

# Re-exported: most SQL text is written with them next to the trees.
from dbt_ivm.quoting import lit as lit
from dbt_ivm.quoting import q as q
from dbt_ivm.quoting import qn as qn

HIDDEN_PREFIX = "__ivm_"
WEIGHT = "__ivm_weight"
SEQ = "__ivm_seq"


def columns(names: Sequence[str], table: str | None = None) -> list[exp.Expr]:
    """Quoted column references, qualified by `table` when given.

    >>> [c.sql("spark") for c in columns(["id", "total"], "t")]
    ['`t`.`id`', '`t`.`total`']
    """
    return [exp.column(name, table, quoted=True) for name in names]


def all_of(*conditions: exp.Expr) -> exp.Expr:
    """The conjunction of `conditions`, flat however they nest (an OR among them is parenthesized).

    >>> all_of(exp.column("a"), exp.and_("b", "c"), exp.or_("d", "e")).sql()
    'a AND b AND c AND (d OR e)'
    """
    parts = [part for c in conditions for part in (c.flatten() if isinstance(c, exp.And) else [c])]
    wrapped = [exp.paren(p) if isinstance(p, exp.Connector) else p for p in parts]
    result = wrapped[0]
    for part in wrapped[1:]:
        result = exp.And(this=result, expression=part)
    return result


def is_hidden(column: str) -> bool:
    return column.startswith(HIDDEN_PREFIX)


def with_first(named: str, statement: str) -> str:
    """`statement` (SQL text) after the WITH list items `named` (``name AS (…), …``), joined to the
    statement's own WITH clause when it has one (a statement cannot take two)."""
    if statement[:5].upper() == "WITH ":
        return f"WITH {named}, {statement[5:]}"
    return f"WITH {named} {statement}"
