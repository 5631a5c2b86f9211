"""Net effect of a source's raw changes in one batch: the sum of their weights per row image.

Raw changes are rows with ``__ivm_weight`` −1 (a row image that stopped existing: DELETE, or an
UPDATE's old image) or +1 (INSERT, or an UPDATE's new image). Their net effect is the Z-set sum of
the weights of identical images, which does not depend on the order the changes are listed or were
captured in. Following key 3 through ``UPDATE 75→10; UPDATE 10→20; DELETE``, in any order:
−(3, 75) +(3, 10) −(3, 10) +(3, 20) −(3, 20) sums to −(3, 75): the delta is just −75. INSERT then
DELETE sums to nothing. A row trigger that updates the row again (its capture fires before the outer
statement's) contributes its −/+ pair just the same.

A key whose row existed before the batch and after it thus keeps at most one −1 image (the old row)
and one +1 image (the new one): every committed transaction leaves at most one row per key, and the
sum telescopes across them. A row removed and put back unchanged (an update that set the same values,
a copy-on-write rewrite carrying a row over into a new file) sums to 0 and disappears. Without a
key, identical rows are interchangeable: a net weight of n becomes n rows of weight sign(n).

`image` identifies a row image. By default it is the columns themselves; PostgreSQL passes the row's
text form, which every type has (json and point have no equality operator to partition by) and which
tells apart values that compare equal but differ (1.0 and 1.00).

>>> print(compacted_sql('"raw"', ["id", "amount"]))  # doctest: +NORMALIZE_WHITESPACE
SELECT "id", "amount", "__ivm_weight" FROM (SELECT "id", "amount", "__ivm_weight",
SUM("__ivm_weight") OVER (PARTITION BY "id", "amount") AS "__ivm_net",
row_number() OVER (PARTITION BY "id", "amount", "__ivm_weight" ORDER BY "__ivm_weight") AS "__ivm_rank"
FROM "raw" AS "__ivm_raw") AS "__ivm_netted"
WHERE SIGN("__ivm_weight") = SIGN("__ivm_net") AND "__ivm_rank" <= ABS("__ivm_net")
"""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.sqltext import WEIGHT, q

IMAGE, NET, RANK = "__ivm_image", "__ivm_net", "__ivm_rank"


def compacted_sql(raw: str, columns: Sequence[str], image: str | None = None) -> str:
    """SELECT of `columns` + weight (±1 rows): the net effect of the raw change relation `raw`.

    `image`: an expression over `raw`'s columns that identifies a row image (default: the columns)."""
    cols = ", ".join(q(c) for c in columns)
    if image is None:
        # Several partition columns: carried as they are, the window partitions by all of them.
        partition, imaged = cols, cols
    else:
        partition, imaged = q(IMAGE), f"{image} AS {q(IMAGE)}"
    net = f"SUM({q(WEIGHT)}) OVER (PARTITION BY {partition})"
    # Raw weights are ±1: keep |net| of the rows whose sign is the net's.
    rank = f"row_number() OVER (PARTITION BY {partition}, {q(WEIGHT)} ORDER BY {q(WEIGHT)})"
    source = f"{raw} AS {q('__ivm_raw')}"
    if image is not None:
        source = f"(SELECT {cols}, {q(WEIGHT)}, {imaged} FROM {source}) AS {q('__ivm_imaged')}"
    return (
        f"SELECT {cols}, {q(WEIGHT)} FROM (SELECT {cols}, {q(WEIGHT)}, {net} AS {q(NET)}, "
        f"{rank} AS {q(RANK)} FROM {source}) AS {q('__ivm_netted')} "
        f"WHERE SIGN({q(WEIGHT)}) = SIGN({q(NET)}) AND {q(RANK)} <= ABS({q(NET)})"
    )


def row_image_sql(columns: Sequence[str]) -> str:
    """PostgreSQL: a row image as text (every type has a text form; equal text, identical image)."""
    return f"ROW({', '.join(q(c) for c in columns)})::text"
