"""Small helpers for writing generated SQL: every identifier quoted, every literal escaped.

Generated SQL is written in PostgreSQL's spelling and rendered to other dialects with sqlglot.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

HIDDEN_PREFIX = "__ivm_"
WEIGHT = "__ivm_weight"
SEQ = "__ivm_seq"


def q(name: str) -> str:
    """Quote one identifier (PostgreSQL spelling).

    >>> q('order"s')
    '"order""s"'
    """
    return '"' + name.replace('"', '""') + '"'


def qn(*parts: str) -> str:
    """Quote a dotted name: qn('s', 't') -> "s"."t"."""
    return ".".join(q(p) for p in parts)


def lit(value: str) -> str:
    """A string literal.

    >>> lit("it's")
    "'it''s'"
    """
    return "'" + value.replace("'", "''") + "'"


def is_hidden(column: str) -> bool:
    return column.startswith(HIDDEN_PREFIX)


def render(sql: str, dialect: str) -> str:
    """Render SQL written in PostgreSQL spelling for `dialect` ("postgres" returns it unchanged)."""
    if dialect == "postgres":
        return sql
    return ";\n".join(sqlglot.transpile(sql, read="postgres", write=dialect))


def expr_sql(expression: exp.Expr) -> str:
    """A parsed expression back to PostgreSQL text."""
    return expression.sql(dialect="postgres")
