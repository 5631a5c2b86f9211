"""PostgreSQL text for what stays text (DDL, catalog queries, trigger bodies): every identifier
quoted, every literal escaped. Free of sqlglot, so a command that only runs SQL starts fast."""

from __future__ import annotations


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


def dollar_quoted(body: str) -> str:
    r"""A PL/pgSQL function's `body` between dollar quotes whose tag it does not contain, on a line of
    its own.

    >>> dollar_quoted("BEGIN RETURN '$ivm0$'; END")
    "$ivm1$\nBEGIN RETURN '$ivm0$'; END$ivm1$"
    """
    tag = next(t for t in (f"$ivm{n}$" for n in range(len(body) + 1)) if t not in body)
    return f"{tag}\n{body}{tag}"
