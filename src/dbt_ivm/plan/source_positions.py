"""Where a construct stands in the model's SQL: the line and column a refusal points at.

The parser records where each identifier, literal and function call began; a construct's position
is that of its first such token (a clause such as LIMIT has none of its own: its operand's).

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT id\\nFROM orders\\nWHERE random() > 0.5", read="postgres")
>>> position_of(tree.find(exp.Rand)), position_of(tree.find(exp.GT)), position_of(exp.Literal.number(1))
((3, 7), (3, 7), None)
"""

from __future__ import annotations

from sqlglot import exp


def position_of(node: exp.Expr | None) -> tuple[int, int] | None:
    """(line, column), both from 1, of the first token of `node` the parser placed; None when it
    placed none (a node built by a rewrite)."""
    if node is None:
        return None
    placed = [n.meta for n in node.walk() if {"line", "col", "start", "end"} <= n.meta.keys()]
    if not placed:
        return None
    first = min(placed, key=lambda meta: meta["start"])
    # `col` is where the token ends; its start is as many characters before as it is long.
    return int(first["line"]), int(first["col"]) - (int(first["end"]) - int(first["start"]))
