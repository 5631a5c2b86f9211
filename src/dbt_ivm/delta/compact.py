"""Net effect of a source's raw changes in one batch, per primary key.

Raw changes are rows with ``__ivm_weight`` −1 (a row image that stopped existing: DELETE, or an
UPDATE's old image) or +1 (INSERT, or an UPDATE's new image) in order ``__ivm_seq``. For one key the
images alternate, so the batch's net effect is: remove the *first* image if it is a −1 (the row
existed before the batch), add the *last* image if it is a +1 (the row exists after). Following key
3 through ``UPDATE 75→10; UPDATE 10→20; DELETE``: −75 +10 −10 +20 −20 → first −75 kept, last is −1
so nothing added: the delta is just −75. INSERT then DELETE yields nothing at all.

Sources without a primary key keep plain weights: identical rows are interchangeable.

``cancel_identical`` also drops what cancels out: a key whose net effect is −r +r (the same row
removed and put back — a copy-on-write rewrite carrying an untouched row over into a new file), and,
without a key, as many −1/+1 pairs of one row as cancel. Iceberg's raw changelog is mostly such rows
when a few updates rewrite big files; the delta rules would otherwise carry them all the way through.
Following key 8, carried over by an UPDATE of another row in its file: −(8, 'x') +(8, 'x') → first
and last kept by the rule above, then their weights sum to 0 over the identical row → both dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.sqltext import SEQ, WEIGHT, q


def compacted_sql(
    raw: str, columns: Sequence[str], primary_key: Sequence[str], cancel_identical: bool = False
) -> str:
    """SELECT of `columns` + weight: the net effect of the raw change relation `raw`."""
    cols = ", ".join(q(c) for c in columns)
    if not primary_key:
        if cancel_identical:
            return _cancelled_without_key(raw, cols)
        return f"SELECT {cols}, {q(WEIGHT)} FROM {raw} AS {q('__ivm_raw')}"
    pk = ", ".join(q(c) for c in primary_key)
    first = f"row_number() OVER (PARTITION BY {pk} ORDER BY {q(SEQ)}, {q(WEIGHT)})"
    last = f"row_number() OVER (PARTITION BY {pk} ORDER BY {q(SEQ)} DESC, {q(WEIGHT)} DESC)"
    compacted = (
        f"SELECT {cols}, {q(WEIGHT)} FROM ("
        f"SELECT {cols}, {q(WEIGHT)}, {first} AS {q('__ivm_first')}, {last} AS {q('__ivm_last')} "
        f"FROM {raw} AS {q('__ivm_raw')}) AS {q('__ivm_ranked')} "
        f"WHERE ({q('__ivm_first')} = 1 AND {q(WEIGHT)} < 0) OR ({q('__ivm_last')} = 1 AND {q(WEIGHT)} > 0)"
    )
    if not cancel_identical:
        return compacted
    # At most one −1 and one +1 per key remain; identical ones sum to 0 over the whole row. The window
    # partitions by every column, the key among them, so Spark reuses the key's shuffle.
    net = f"SUM({q(WEIGHT)}) OVER (PARTITION BY {cols})"
    return (
        f"SELECT {cols}, {q(WEIGHT)} FROM (SELECT {cols}, {q(WEIGHT)}, {net} AS {q('__ivm_net')} "
        f"FROM ({compacted}) AS {q('__ivm_compacted')}) AS {q('__ivm_netted')} WHERE {q('__ivm_net')} <> 0"
    )


def _cancelled_without_key(raw: str, cols: str) -> str:
    """Keep |net| rows of weight sign(net) for each distinct row: the −1/+1 pairs that cancel go."""
    net = f"SUM({q(WEIGHT)}) OVER (PARTITION BY {cols})"
    rank = f"row_number() OVER (PARTITION BY {cols}, {q(WEIGHT)} ORDER BY {q(SEQ)})"
    return (
        f"SELECT {cols}, {q(WEIGHT)} FROM (SELECT {cols}, {q(WEIGHT)}, {net} AS {q('__ivm_net')}, "
        f"{rank} AS {q('__ivm_rank')} FROM {raw} AS {q('__ivm_raw')}) AS {q('__ivm_netted')} "
        f"WHERE SIGN({q(WEIGHT)}) = SIGN({q('__ivm_net')}) AND {q('__ivm_rank')} <= ABS({q('__ivm_net')})"
    )
