"""Whether a subquery's rows are its FROM and WHERE as they are: what EXISTS and IN may read
through a semi-join without planning the subquery as a derived table of its own.

>>> import sqlglot
>>> is_plain(sqlglot.parse_one("SELECT DISTINCT u.b FROM u WHERE u.k = 1"))
True
>>> is_plain(sqlglot.parse_one("SELECT MAX(u.b) FROM u")), is_plain(sqlglot.parse_one("SELECT u.b FROM u OFFSET 2"))
(False, False)
"""

from __future__ import annotations

from sqlglot import exp


def is_plain(select: exp.Select) -> bool:
    """No grouping, aggregates, windows or row limits (DISTINCT changes nothing under EXISTS)."""
    if any(select.args.get(clause) for clause in ("group", "having", "limit", "offset", "qualify")):
        return False
    return not any(s.find(exp.AggFunc, exp.Window) for s in select.selects)
