"""Planner pass: a generator in FROM read as the same call in a SELECT list.

``FROM o, unnest(o.tags) AS t(tag)`` (also ``CROSS JOIN LATERAL``, ``generate_series(1, o.n) AS
g(i)``) on PostgreSQL and ``LATERAL VIEW explode(o.tags) t AS tag`` on Spark give each row of ``o``
once per element, as ``unnest`` / ``explode`` in a SELECT list over ``o`` does: the item it reads
becomes a derived table that adds the call as a column (a projection stored as a multiset,
plan/generators.py), and references to the generator's column read that column. Runs after qualify.

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT o.id, t.tag FROM o, UNNEST(o.tags) AS t(tag) WHERE t.tag <> 'x'")
>>> print(from_generators(tree, "m").sql())
SELECT o.id, "o"."tag" FROM (SELECT "o"."id" AS "id", UNNEST(o.tags) AS "tag" FROM o) AS "o" WHERE "o"."tag" <> 'x'

Several generators, one reading another's element, an outer form (``LEFT JOIN LATERAL``,
``LATERAL VIEW OUTER``), ``WITH ORDINALITY`` or a generator of several columns are refused by name,
as is a LATERAL subquery that is neither the first rows nor aggregates per outer row
(plan/lateral_subqueries.py); ``LATERAL (VALUES …)`` that reads no outer column is plain ``VALUES``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.lateral_subqueries import decorrelate_lateral
from dbt_ivm.plan.messages import excerpt
from dbt_ivm.plan.source_positions import position_of


@dataclass
class _Generator:
    holder: exp.Expr  # the Join or Lateral node to remove
    call: exp.Expr
    alias: exp.TableAlias | None
    outer: bool


def from_generators(tree: exp.Expr, model: str) -> exp.Expr:
    for select in list(tree.find_all(exp.Select)):
        found = _generators(select, model)
        if found:
            _rewrite(select, found, model)
    return tree


def _generators(select: exp.Select, model: str) -> list[_Generator]:
    found = []
    for join in select.args.get("joins") or []:
        item = join.this
        outer = (join.side or "").upper() in ("LEFT", "RIGHT", "FULL")
        if isinstance(item, exp.Lateral) and isinstance(item.this, exp.Subquery):
            _lateral_subquery(select, join, item, model)
        elif isinstance(item, exp.Lateral):
            found.append(_Generator(join, item.this, item.args.get("alias"), outer))
        elif isinstance(item, exp.Unnest):
            found.append(_Generator(join, item, item.args.get("alias"), outer))
        elif isinstance(item, exp.Table) and isinstance(item.this, exp.Func):
            found.append(_Generator(join, item.this, item.args.get("alias"), outer))
    for lateral in select.args.get("laterals") or []:
        found.append(
            _Generator(lateral, lateral.this, lateral.args.get("alias"), bool(lateral.args.get("outer")))
        )
    return found


def _lateral_subquery(select: exp.Select, join: exp.Join, lateral: exp.Lateral, model: str) -> None:
    """`LATERAL (VALUES …)` that reads no outer column is plain VALUES; the first rows or the
    aggregates per outer row are joins (plan/lateral_subqueries.py); any other LATERAL subquery is
    refused by name (each outer row would need its own evaluation)."""
    if decorrelate_lateral(select, join, lateral):
        return
    inner = lateral.this.this
    reads = inner.find(exp.Column)
    if isinstance(inner, exp.Values) and reads is None:
        values = inner.copy()
        values.set("alias", lateral.args.get("alias"))
        join.set("this", values)
        return
    if isinstance(inner, exp.Values):
        raise UnsupportedQuery(
            model,
            f"`LATERAL (VALUES …)` reading `{excerpt(reads)}`",
            "UNION ALL one SELECT per value, or use refresh_mode='full'",
            position_of(lateral),
        )
    raise UnsupportedQuery(
        model,
        f"`LATERAL` subquery `{excerpt(lateral)}`",
        "correlate it by equalities only, as the first rows (ORDER BY … LIMIT n) or aggregates read in the "
        "SELECT list; or join a subquery grouped by the join columns; or use refresh_mode='full'",
        position_of(lateral),
    )


def _rewrite(select: exp.Select, generators: list[_Generator], model: str) -> None:
    shown = excerpt(generators[0].holder)
    if len(generators) > 1:
        raise UnsupportedQuery(model, f"several generators in FROM `{shown}`", "unnest one per model")
    generator = generators[0]
    call, alias = generator.call, generator.alias
    names = [c.name for c in alias.columns] if alias is not None else []
    if generator.outer:
        raise UnsupportedQuery(
            model, f"outer generator `{shown}`", "unnest in an inner form, or use refresh_mode='full'"
        )
    if isinstance(call, exp.Unnest) and (call.args.get("offset") or len(call.expressions) != 1):
        raise UnsupportedQuery(model, f"`{shown}`", "unnest one array, without WITH ORDINALITY")
    if alias is None or len(names) != 1:
        raise UnsupportedQuery(
            model, f"generator in FROM `{shown}`", "name its one column: unnest(o.tags) AS t(tag)"
        )
    from_ = select.args.get("from_") or select.args.get("from")
    items = [from_.this] if from_ is not None else []
    items += [j.this for j in select.args.get("joins") or [] if j is not generator.holder]
    read = {c.table for c in call.find_all(exp.Column)}
    sources = [i for i in items if i.alias_or_name in read]
    if (
        len(sources) != 1
        or not isinstance(sources[0], exp.Table | exp.Subquery)
        or read - {sources[0].alias_or_name}
    ):
        raise UnsupportedQuery(
            model, f"generator in FROM `{shown}`", "unnest a column of one table or subquery of the FROM"
        )
    source = sources[0]
    owner, element = source.alias_or_name, alias.name
    generator.holder.pop()
    columns = sorted({c.name for c in select.find_all(exp.Column) if c.table == owner})
    column = names[0]
    while column in columns:
        column += "_"
    inner = exp.select(
        *(exp.alias_(exp.column(c, owner, quoted=True), c, quoted=True) for c in columns),
        exp.alias_(_in_select_list(call), column, quoted=True),
    ).from_(source.copy())
    for reference in select.find_all(exp.Column):
        if reference.table == element and reference.name == names[0]:
            reference.replace(exp.column(column, owner, quoted=True))
    source.replace(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(owner, quoted=True))))


def _in_select_list(call: exp.Expr) -> exp.Expr:
    """The call as a SELECT list spells it (a FROM unnest carries its alias; Spark's LATERAL VIEW
    call is already the select-list one)."""
    call = call.copy()
    call.set("alias", None)
    return call
