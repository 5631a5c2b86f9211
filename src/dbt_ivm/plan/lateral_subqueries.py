"""Planner pass: a LATERAL subquery correlated by equalities, read as a join.

Two PostgreSQL idioms, each exact:

* the first rows per outer row, ``CROSS JOIN LATERAL (SELECT … FROM o WHERE o.k = c.k ORDER BY …
  LIMIT n)``: every row of ``o`` numbered within its ``o.k`` in that order, joined on ``o.k = c.k``
  and a number up to n (``LEFT JOIN LATERAL … ON true`` keeps the outer row with NULLs);
* aggregates per outer row, ``LEFT JOIN LATERAL (SELECT COUNT(*) AS n FROM o WHERE o.k = c.k) x
  ON true``: exactly one row each, so each of its columns the SELECT list shows is that correlated
  scalar subquery, decorrelated by the planner like any other.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT c.k AS k, l.v AS v FROM c AS c CROSS JOIN LATERAL (SELECT o.v AS v FROM o AS o "
...                       "WHERE o.k = c.k AND o.v > 0 ORDER BY o.t DESC LIMIT 2) AS l")
>>> join = q.args["joins"][0]
>>> decorrelate_lateral(q, join, join.this)
True
>>> print(q.sql())
SELECT c.k AS k, l.v AS v FROM c AS c JOIN (SELECT o.v AS v, o.k AS "__ivm_lk0", ROW_NUMBER() OVER (PARTITION BY o.k ORDER BY o.t DESC) AS "__ivm_rn" FROM o AS o WHERE o.v > 0) AS l ON "l"."__ivm_lk0" = c.k AND "l"."__ivm_rn" <= 2

Anything else (a correlation that is not an equality, outer columns outside WHERE, OFFSET, a
grouped or windowed subquery) is left for the caller to refuse.
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.plan.correlation import Equalities, equalities
from dbt_ivm.plan.row_counts import NoRowCount, row_count

RANK = "__ivm_rn"


def decorrelate_lateral(select: exp.Select, join: exp.Join, lateral: exp.Lateral) -> bool:
    """Rewrite `join` (a LATERAL subquery of `select`) in place; False when it is neither idiom."""
    inner, alias = lateral.this.this, lateral.args.get("alias")
    if not isinstance(inner, exp.Select) or alias is None or alias.columns:
        return False
    correlation = equalities(inner)
    if correlation is None or any(inner.args.get(c) for c in ("group", "having", "distinct", "offset")):
        return False
    if inner.find(exp.Window):
        return False
    if inner.args.get("limit") is not None and inner.args.get("order") is not None:
        return _first_rows(join, inner, alias, correlation)
    if inner.args.get("limit") is None and inner.args.get("order") is None:
        return _aggregates(select, join, inner, alias.name)
    return False


def _first_rows(join: exp.Join, inner: exp.Select, alias: exp.TableAlias, correlation: Equalities) -> bool:
    try:
        limit = exp.Literal.number(row_count(inner.args["limit"]))
    except NoRowCount:
        return False
    if any(s.find(exp.AggFunc) for s in inner.selects):
        return False
    name = alias.name
    numbered = inner.copy()
    order = numbered.args["order"]
    keys = [exp.column(f"__ivm_lk{i}", quoted=True) for i in range(len(correlation.pairs))]
    for key, (own_column, _) in zip(keys, correlation.pairs, strict=True):
        numbered.select(exp.alias_(own_column.copy(), key.name, quoted=True), copy=False)
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[own.copy() for own, _ in correlation.pairs],
        order=order.copy(),
    )
    numbered.select(exp.alias_(window, RANK, quoted=True), copy=False)
    for clause in ("order", "limit", "where"):
        numbered.set(clause, None)
    if correlation.own:
        numbered.where(exp.and_(*[c.copy() for c in correlation.own]), copy=False)
    conditions: list[exp.Expr] = [
        exp.EQ(this=exp.column(key.name, name, quoted=True), expression=theirs.copy())
        for key, (_, theirs) in zip(keys, correlation.pairs, strict=True)
    ]
    conditions.append(exp.LTE(this=exp.column(RANK, name, quoted=True), expression=limit.copy()))
    existing = join.args.get("on")
    if existing is not None and not (isinstance(existing, exp.Boolean) and existing.this):
        conditions.append(existing)
    join.set("this", exp.Subquery(this=numbered, alias=alias.copy()))
    join.set("on", exp.and_(*conditions))
    if (join.kind or "").upper() == "CROSS":
        join.set("kind", None)
    return True


def _aggregates(select: exp.Select, join: exp.Join, inner: exp.Select, name: str) -> bool:
    """Each column of a one-row aggregate subquery read as its own correlated scalar subquery."""
    owned = [
        a for s in inner.selects for a in s.find_all(exp.AggFunc) if a.find_ancestor(exp.Select) is inner
    ]
    if not inner.selects or any(not s.find(exp.AggFunc) for s in inner.selects) or not owned:
        return False
    on = join.args.get("on")
    if on is not None and not (isinstance(on, exp.Boolean) and on.this):
        return False
    references = [
        c for c in select.find_all(exp.Column) if c.table == name and not c.find_ancestor(exp.Lateral)
    ]
    # Read as whole columns of the SELECT list: a correlated scalar subquery elsewhere, or inside an
    # expression, is not decorrelated.
    projections = {id(s) for s in select.selects} | {
        id(s.this) for s in select.selects if isinstance(s, exp.Alias)
    }
    if any(id(r) not in projections for r in references):
        return False
    values = {s.alias_or_name: s for s in inner.selects}
    if any(r.name not in values for r in references):
        return False
    join.pop()
    for reference in references:
        one = inner.copy()
        one.set("expressions", [values[reference.name].copy()])  # named, as qualify names each
        reference.replace(exp.Subquery(this=one))
    return True
