"""Net effect of a source's raw changes in one batch, per primary key.

Raw changes are rows with ``__ivm_weight`` −1 (a row image that stopped existing: DELETE, or an
UPDATE's old image) or +1 (INSERT, or an UPDATE's new image) in order ``__ivm_seq``. For one key the
images alternate, so the batch's net effect is: remove the *first* image if it is a −1 (the row
existed before the batch), add the *last* image if it is a +1 (the row exists after). Following key
3 through ``UPDATE 75→10; UPDATE 10→20; DELETE``: −75 +10 −10 +20 −20 → first −75 kept, last is −1
so nothing added: the delta is just −75. INSERT then DELETE yields nothing at all.

Sources without a primary key keep plain weights: identical rows are interchangeable.
"""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.sqltext import SEQ, WEIGHT, q


def compacted_sql(raw: str, columns: Sequence[str], primary_key: Sequence[str]) -> str:
    """SELECT of `columns` + weight: the net effect of the raw change relation `raw`."""
    cols = ", ".join(q(c) for c in columns)
    if not primary_key:
        return f"SELECT {cols}, {q(WEIGHT)} FROM {raw} AS {q('__ivm_raw')}"
    pk = ", ".join(q(c) for c in primary_key)
    first = f"row_number() OVER (PARTITION BY {pk} ORDER BY {q(SEQ)}, {q(WEIGHT)})"
    last = f"row_number() OVER (PARTITION BY {pk} ORDER BY {q(SEQ)} DESC, {q(WEIGHT)} DESC)"
    return (
        f"SELECT {cols}, {q(WEIGHT)} FROM ("
        f"SELECT {cols}, {q(WEIGHT)}, {first} AS {q('__ivm_first')}, {last} AS {q('__ivm_last')} "
        f"FROM {raw} AS {q('__ivm_raw')}) AS {q('__ivm_ranked')} "
        f"WHERE ({q('__ivm_first')} = 1 AND {q(WEIGHT)} < 0) OR ({q('__ivm_last')} = 1 AND {q(WEIGHT)} > 0)"
    )
