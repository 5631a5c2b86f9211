"""Which columns a subquery reads from the query around it, and whether it reads them only as
`inner = outer` equalities of its WHERE (then a join on those columns can stand for it).

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT 1 FROM o AS o WHERE o.k = c.k AND o.v > 0")
>>> correlated(q), [c.sql() for c in equalities(q).pairs[0]]
(True, ['o.k', 'c.k'])
>>> equalities(sqlglot.parse_one("SELECT 1 FROM o AS o WHERE o.v > c.limit")) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp


def _declared(query: exp.Expr) -> set[str]:
    """The aliases its own FROM items (and those of subqueries inside it) declare."""
    return {t.alias_or_name for t in query.find_all(exp.Table)} | {
        s.alias for s in query.find_all(exp.Subquery) if s.alias
    }


def outer_columns(query: exp.Expr, node: exp.Expr | None = None) -> list[exp.Column]:
    """The columns of `node` (default: the whole query) that belong to an enclosing query."""
    declared = _declared(query)
    return [c for c in (node or query).find_all(exp.Column) if c.table and c.table not in declared]


def correlated(query: exp.Expr) -> bool:
    return bool(outer_columns(query))


@dataclass(frozen=True)
class Equalities:
    """A subquery's WHERE split: its `inner = outer` column pairs, and the conjuncts of its own."""

    pairs: list[tuple[exp.Column, exp.Column]]
    own: list[exp.Expr]


def equalities(query: exp.Select) -> Equalities | None:
    """None when an outer column is read anywhere but in an `inner = outer` conjunct of the WHERE."""
    where = query.args.get("where")
    conjuncts: list[exp.Expr] = []
    if where is not None:
        conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    pairs, own = [], []
    for conjunct in conjuncts:
        if not outer_columns(query, conjunct):
            own.append(conjunct)
            continue
        if not isinstance(conjunct, exp.EQ):
            return None
        left, right = conjunct.this, conjunct.expression
        if outer_columns(query, left) and not outer_columns(query, right):
            left, right = right, left
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            return None
        if outer_columns(query, left) or not outer_columns(query, right):
            return None
        pairs.append((left, right))
    elsewhere = [query.args.get(c) for c in ("from_", "from", "order", "group", "having")]
    elsewhere += [*(query.args.get("joins") or []), *query.selects]
    if any(isinstance(part, exp.Expr) and outer_columns(query, part) for part in elsewhere):
        return None
    return Equalities(pairs, own)
