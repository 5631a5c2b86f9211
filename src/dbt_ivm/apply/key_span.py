"""The span of a row key that a batch touches, as a predicate on the stream table's rows.

A batch's consolidated rows name every key the MERGE will look up, so a stored row outside the
smallest and largest value of the key's first column cannot match any of them. Reading the stored
side through that predicate lets a table format skip whole files by their column bounds (Iceberg
keeps a lower and upper bound per column per file): when the batch touches recent keys of a table
whose files are clustered by key, the refresh reads the files that hold them, not the table.
A key column may be NULL (a group key), and NULL lies in no span: it is admitted by name.

>>> span = KeySpan("id", exp.Literal.number(10), exp.Literal.number(20), holds_null=False)
>>> span.covers("t").sql("spark")
'`t`.`id` BETWEEN 10 AND 20'
>>> KeySpan("day", exp.Literal.string("a"), exp.Literal.string("b"), holds_null=True).covers().sql("spark")
"(`day` BETWEEN 'a' AND 'b' OR `day` IS NULL)"
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp


@dataclass(frozen=True)
class KeySpan:
    """`column`'s smallest and largest value among a batch's rows (SQL expressions of its type), and
    whether some row's value is NULL."""

    column: str
    low: exp.Expr
    high: exp.Expr
    holds_null: bool

    def covers(self, table: str | None = None) -> exp.Expr:
        """True for a row of `table` (an alias; None: unqualified) whose key may be in the batch."""
        key = exp.column(self.column, table, quoted=True)
        within = exp.Between(this=key, low=self.low.copy(), high=self.high.copy())
        if not self.holds_null:
            return within
        return exp.Paren(this=exp.or_(within, exp.Is(this=key.copy(), expression=exp.null())))
