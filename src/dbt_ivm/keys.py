"""How two relations' rows are matched on a stream table's row key, without trusting a hash alone.

On PostgreSQL, key columns may be NULL, and ``a IS NOT DISTINCT FROM b`` cannot drive a hash join or
an index scan. So the stream table stores ``__ivm_hash`` (hash_record_extended over the key, which
hashes equal values equally, e.g. 1.0 and 1.00) with an index, and a match is
``hash = hash AND every key column IS NOT DISTINCT FROM``: the hash finds candidates fast, the real
key decides. Spark's ``<=>`` is itself a join key, so it needs no hash.
"""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.layout import HASH
from dbt_ivm.sqltext import q


def hash_sql(expressions: Sequence[str]) -> str:
    """The PostgreSQL key hash over already-rendered expressions."""
    return f"hash_record_extended(ROW({', '.join(expressions)}), 0)"


def match_sql(
    stored_alias: str,
    key_columns: Sequence[str],
    other: Sequence[str],
    use_hash: bool,
    other_hash: str | None = None,
) -> str:
    """Condition matching stream-table rows (alias `stored_alias`) to rows whose keys are `other`."""
    if not key_columns:
        return "TRUE"  # a global aggregate has exactly one row
    parts = []
    if use_hash:
        parts.append(f"{q(stored_alias)}.{q(HASH)} = {other_hash or hash_sql(other)}")
    for column, expression in zip(key_columns, other, strict=True):
        parts.append(f"{q(stored_alias)}.{q(column)} IS NOT DISTINCT FROM {expression}")
    return " AND ".join(parts)


def same_values_sql(left: str, right: str, columns: Sequence[str]) -> str:
    """True when every column is equal or both NULL (the negation is the unchanged-row guard)."""
    if not columns:
        return "TRUE"
    return " AND ".join(f"{q(left)}.{q(c)} IS NOT DISTINCT FROM {q(right)}.{q(c)}" for c in columns)
