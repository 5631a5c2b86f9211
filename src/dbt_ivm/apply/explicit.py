"""Apply consolidated rows as three plain statements — DELETE, UPDATE, INSERT — instead of one MERGE.

Row triggers on the stream table then fire as on any table: a DELETE trigger sees the removed row as
OLD, an UPDATE trigger sees OLD and NEW of a changed row, an INSERT trigger sees NEW. Statements run in
that order (DELETE → UPDATE → INSERT). The UPDATE is guarded by IS DISTINCT FROM, so a row whose
values stay the same is not touched and fires nothing.

Input is what the MERGE path already materializes: for keyed and aggregate layouts the consolidated
rows (one per affected key: weight < 0 removes the key, weight > 0 writes the row's new values); for
multiset layouts each value's net weight (−k deletes k of its copies, +k inserts k, `apply/multiset`).
A multiset row is identified by its values, so it never changes in place: DELETE and INSERT only.

DELETE and UPDATE join the (small) rows table to the stream table (``DELETE ... USING``,
``UPDATE ... FROM``) rather than ``WHERE EXISTS``: the key match uses IS NOT DISTINCT FROM, which
keeps PostgreSQL from turning a semi-join around, so EXISTS would scan the whole stream table where a
join probes the index on its key's hash once per row. Each rows/ops row matches at most one stored row,
so the join never touches a row twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.apply import multiset
from dbt_ivm.apply.statements import STORED, assignments, weight_is
from dbt_ivm.delta.terms import aliased
from dbt_ivm.keys import changed, same_key, same_values
from dbt_ivm.layout import Layout
from dbt_ivm.sqltext import all_of, columns
from dbt_ivm.target import Target

ROWS = "r"


@dataclass(frozen=True)
class ExplicitDml:
    """The statements to run, in order; `update` is None for multiset layouts."""

    delete: exp.Delete
    update: exp.Update | None
    insert: exp.Insert


def _delete(stream_table: exp.Table, source: exp.Expr, alias: str, condition: exp.Expr) -> exp.Delete:
    """DELETE the stream-table rows ("t") that `condition` joins to rows of `source`."""
    return exp.Delete(
        this=aliased(stream_table, STORED),
        using=[aliased(source, alias)],
        where=exp.Where(this=all_of(weight_is(exp.LT, alias), condition)),
    )


def _insert(stream_table: exp.Table, names: list[str], rows: exp.Select) -> exp.Insert:
    into = exp.Schema(
        this=stream_table.copy(), expressions=[exp.to_identifier(n, quoted=True) for n in names]
    )
    return exp.Insert(this=into, expression=rows)


def _stored(stream_table: exp.Table, condition: exp.Expr) -> exp.Exists:
    """Is there a stream-table row ("t") for which `condition` holds?"""
    query = exp.select(exp.Literal.number(1)).from_(aliased(stream_table, STORED)).where(condition)
    return exp.Exists(this=query)


def keyed_dml(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> ExplicitDml:
    """DELETE removed keys, UPDATE rows whose values changed, INSERT new keys (keyed/aggregate)."""
    match = same_key(STORED, layout.key, ROWS, target)
    delete = _delete(stream_table, rows, ROWS, match.copy())
    updates = assignments(layout.columns, ROWS)
    update = exp.Update(
        this=aliased(stream_table, STORED),
        expressions=updates,
        from_=exp.From(this=aliased(rows, ROWS)),
        where=exp.Where(
            this=all_of(weight_is(exp.GT, ROWS), match.copy(), changed(STORED, ROWS, layout.columns))
        ),
    )
    inserted = list(layout.columns)
    new_keys = (
        exp.select(*columns(inserted, ROWS))
        .from_(aliased(rows, ROWS))
        .where(all_of(weight_is(exp.GT, ROWS), exp.not_(_stored(stream_table, match))))
    )
    return ExplicitDml(delete, update, _insert(stream_table, inserted, new_keys))


def multiset_dml(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> ExplicitDml:
    """DELETE the copies that go, INSERT the copies that come (multiset layouts; `rows`: each value's
    net weight, `multiset.counted_rows`)."""
    return ExplicitDml(
        multiset.delete(layout, rows, stream_table, target), None, multiset.insert(layout, rows, stream_table)
    )


def _count(source: exp.Expr, alias: str, condition: exp.Expr) -> exp.Select:
    return exp.select(exp.func("count", exp.Star())).from_(aliased(source, alias)).where(condition)


def keyed_mismatches(layout: Layout, rows: exp.Expr, stream_table: exp.Table, target: Target) -> exp.Select:
    """After the writes: how many keys do not read back as written (a BEFORE trigger changed or skipped them).

    A key with weight > 0 must now hold exactly the row's values; a key with weight < 0 must be gone.
    """
    match = same_key(STORED, layout.key, ROWS, target)
    written = all_of(match.copy(), same_values(STORED, ROWS, layout.columns))
    differs = (
        exp.Case()
        .when(weight_is(exp.GT, ROWS), exp.not_(_stored(stream_table, written)))
        .else_(_stored(stream_table, match))
    )
    return _count(rows, ROWS, differs)
