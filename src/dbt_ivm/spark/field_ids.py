"""Which Iceberg field each column name means, now and at a snapshot.

Iceberg knows a column by its field id, Spark SQL by its name. Dropping a column and adding one of
the same name, or swapping two names, commits no snapshot, yet the table reads differently: the new
column is NULL on every row, the swapped ones trade values. A time-travel read (``VERSION AS OF``)
uses the snapshot's own schema, so it still sees the old columns. A stream table therefore records
the field id of every column it reads (in its stamp), and a refresh reads each snapshot through the
current names: ``b AS a`` where the field now called ``a`` was ``b`` then, NULL where it did not
exist yet.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from dbt_ivm.spark.jvm import items

Fields = dict[str, dict[str, int]]  # by source (qualified name): column name -> field id


def field_ids(loaded: Any, snapshot_id: int | None, columns: Collection[str] | None) -> dict[str, int]:
    """Column name -> field id in the schema of `snapshot_id` (None: the current schema), for
    `columns` only when given. Empty when the snapshot is gone."""
    schema = _schema(loaded, snapshot_id)
    if schema is None:
        return {}
    return {
        str(f.name()): int(f.fieldId())
        for f in items(schema.columns())
        if columns is None or str(f.name()) in columns
    }


def names_at(loaded: Any, snapshot_id: int, now: dict[str, int]) -> dict[str, str | None]:
    """For each column of `now` (name -> field id) named otherwise in the snapshot's schema: its name
    there, None when the snapshot has no such field (added since). Empty when nothing differs."""
    schema = _schema(loaded, snapshot_id)
    if schema is None:
        return {}
    then = {int(f.fieldId()): str(f.name()) for f in items(schema.columns())}
    return {name: then.get(field) for name, field in now.items() if then.get(field) != name}


def moved(recorded: Fields, now: Fields) -> dict[str, list[str]]:
    """By source: the columns read whose field id differs from the recorded one."""
    found = {}
    for source, fields in now.items():
        before = recorded.get(source)
        if before is None:
            continue  # a source the record does not know: judged by its frontier instead
        names = sorted(name for name, field in fields.items() if before.get(name) != field)
        if names:
            found[source] = names
    return found


def dumps(fields: Fields) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def loads(text: str) -> Fields | None:
    """The recorded fields; None when the stamp predates them (or is unreadable)."""
    if not text:
        return None
    try:
        value = json.loads(text)
        return {str(s): {str(n): int(f) for n, f in columns.items()} for s, columns in value.items()}
    except (ValueError, AttributeError, TypeError):
        return None


def _schema(loaded: Any, snapshot_id: int | None) -> Any | None:
    if snapshot_id is None:
        return loaded.schema()
    snapshot = loaded.snapshot(int(snapshot_id))
    if snapshot is None:
        return None
    schema_id = snapshot.schemaId()
    if schema_id is None:  # format v1 metadata kept no schema per snapshot
        return loaded.schema()
    return loaded.schemas().get(schema_id)
