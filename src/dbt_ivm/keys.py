"""How two relations' rows are matched on a stream table's row key, without trusting a hash alone.

On PostgreSQL, key columns may be NULL, and ``a IS NOT DISTINCT FROM b`` cannot drive a hash join or
an index scan. So the stream table has an index on the expression hash_record_extended over its key
(which hashes equal values equally, e.g. 1.0 and 1.00), and a match is ``hash = hash AND every key
column IS NOT DISTINCT FROM``: the hash finds candidates fast through the index, the real key
decides. The hash is not stored: readers see only the model's columns. Rows being applied carry
theirs as ``__ivm_hash``, computed once. Spark's ``<=>`` is itself a join key, so it needs no hash.

>>> other = [exp.column("k", "r", quoted=True)]
>>> match("t", ["k"], other, POSTGRES).sql("postgres")
'HASH_RECORD_EXTENDED(ROW("t"."k"), 0) = HASH_RECORD_EXTENDED(ROW("r"."k"), 0) AND "t"."k" IS NOT DISTINCT FROM "r"."k"'
>>> match("t", ["k"], other, SPARK).sql("spark")
'`t`.`k` IS NOT DISTINCT FROM `r`.`k`'

A key that can never be NULL (a NOT NULL group key, a primary key no outer join pads) is matched by
`=`, served by an index on the key columns themselves:

>>> match("t", ["k"], other, replace(POSTGRES, equal_keys=True)).sql("postgres")
'"t"."k" = "r"."k"'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace  # noqa: F401  (the examples')

from sqlglot import exp

from dbt_ivm.layout import HASH
from dbt_ivm.sqltext import all_of, columns
from dbt_ivm.target import POSTGRES, SPARK, Target  # noqa: F401  (SPARK: the examples')


def key_hash(expressions: Sequence[exp.Expr]) -> exp.Expr:
    """The PostgreSQL key hash over `expressions`."""
    row = exp.Anonymous(this="ROW", expressions=[e.copy() for e in expressions])
    return exp.Anonymous(this="hash_record_extended", expressions=[row, exp.Literal.number(0)])


def hash_column(key: Sequence[str], target: Target, table: str | None = None) -> list[exp.Expr]:
    """The key hash as ``__ivm_hash`` over the key columns of `table` (rows to apply), where the
    target finds rows by it."""
    if not target.hashed(key):
        return []
    return [exp.alias_(key_hash(columns(key, table)), HASH, quoted=True)]


def with_hash(names: Sequence[str], key: Sequence[str], target: Target) -> list[str]:
    """`names`, then ``__ivm_hash`` where rows to apply carry the hash of `key`."""
    return [*names, *([HASH] if target.hashed(key) else [])]


def match(
    stored_alias: str,
    key_columns: Sequence[str],
    other: Sequence[exp.Expr],
    target: Target,
    other_hash: exp.Expr | None = None,
) -> exp.Expr:
    """Condition matching stream-table rows (alias `stored_alias`) to rows whose keys are `other`
    (`other_hash`: their key hash, when already computed)."""
    if not key_columns:
        return exp.true()  # a global aggregate has exactly one row
    parts: list[exp.Expr] = []
    if target.hashed(key_columns):
        found = other_hash.copy() if other_hash is not None else key_hash(other)
        stored = key_hash(columns(key_columns, stored_alias))  # the expression the table's index holds
        parts.append(exp.EQ(this=stored, expression=found))
    compare = exp.EQ if target.equal_keys else exp.NullSafeEQ
    for column, expression in zip(key_columns, other, strict=True):
        parts.append(
            compare(this=exp.column(column, stored_alias, quoted=True), expression=expression.copy())
        )
    return all_of(*parts)


def same_key(stored_alias: str, key_columns: Sequence[str], rows_alias: str, target: Target) -> exp.Expr:
    """`match` against rows (alias `rows_alias`) that carry the key columns under their own names, and
    their key hash as ``__ivm_hash`` where the target finds rows by it."""
    rows_hash = exp.column(HASH, rows_alias, quoted=True)
    return match(stored_alias, key_columns, columns(key_columns, rows_alias), target, rows_hash)


def same_values(left: str, right: str, names: Sequence[str]) -> exp.Expr:
    """True when every column is equal or both NULL."""
    if not names:
        return exp.true()
    pairs = zip(columns(names, left), columns(names, right), strict=True)
    return all_of(*[exp.NullSafeEQ(this=a, expression=b) for a, b in pairs])


def changed(left: str, right: str, names: Sequence[str]) -> exp.Expr:
    """True when some column differs (the unchanged-row guard)."""
    return exp.Not(this=exp.paren(same_values(left, right, names), copy=False))
