"""How many rows a LIMIT, OFFSET or FETCH FIRST clause names: a whole-number literal, or why not.

>>> import sqlglot
>>> row_count(sqlglot.parse_one("SELECT a FROM t ORDER BY a LIMIT 3").args["limit"])
3
>>> row_count(sqlglot.parse_one("SELECT a FROM t ORDER BY a FETCH FIRST ROW ONLY").args["limit"])
1
>>> row_count(sqlglot.parse_one("SELECT a FROM t ORDER BY a LIMIT :n").args["limit"])
Traceback (most recent call last):
...
dbt_ivm.plan.row_counts.NoRowCount: write LIMIT as a whole number
"""

from __future__ import annotations

from sqlglot import exp

TIES = "order by columns that make the first rows unique"


class NoRowCount(ValueError):
    """The clause names no fixed number of rows; the message is the fix."""

    def __init__(self, fix: str, *, ties: bool = False) -> None:
        super().__init__(fix)
        self.fix = fix
        self.ties = ties  # WITH TIES or PERCENT: the count is not the number of rows kept


def row_count(clause: exp.Expr, *, ties_kept: bool = False) -> int:
    """The number of rows `clause` (LIMIT, OFFSET or FETCH FIRST … ONLY) keeps or skips; with
    `ties_kept`, FETCH FIRST n ROWS WITH TIES counts n (the rows kept are at least that many)."""
    construct = "OFFSET" if isinstance(clause, exp.Offset) else "LIMIT"
    value = clause.args.get("expression") if isinstance(clause, exp.Limit | exp.Offset) else None
    if isinstance(clause, exp.Fetch):
        options = clause.args.get("limit_options")
        if options is not None and (
            (options.args.get("with_ties") and not ties_kept) or options.args.get("percent")
        ):
            raise NoRowCount(TIES, ties=True)
        value = clause.args.get("count") or exp.Literal.number(1)  # FETCH FIRST ROW ONLY
    if not isinstance(value, exp.Literal) or value.is_string or not value.this.isdigit():
        raise NoRowCount(f"write {construct} as a whole number")
    return int(value.this)
