"""The sources' versions one refresh reads: each Iceberg source's current snapshot (the batch's end)
and the field ids of the columns read, from one load of each table."""

from __future__ import annotations

from typing import Any

from dbt_ivm.spark import field_ids
from dbt_ivm.spark.catalog import NO_SNAPSHOT, SparkTable
from dbt_ivm.spark.iceberg import load_table


class SourceVersions:
    def __init__(self, spark: Any, sources: list[SparkTable], reads: dict[str, tuple[str, ...]]) -> None:
        self.ends: dict[str, int] = {}  # by source: its current snapshot (NO_SNAPSHOT: none yet)
        self.fields: field_ids.Fields = {}  # by source: the columns read, by their current field id
        self._loaded: dict[str, Any] = {}
        for source in sources:
            if not source.is_iceberg:
                continue
            name = source.info.qualified
            loaded = load_table(spark, (source.info.schema, source.info.name))
            snapshot = loaded.currentSnapshot()
            self._loaded[name] = loaded
            self.ends[name] = NO_SNAPSHOT if snapshot is None else int(snapshot.snapshotId())
            self.fields[name] = field_ids.field_ids(loaded, None, reads.get(name))

    def names_at(self, source: str, snapshot: int) -> dict[str, str | None]:
        """The columns read that the snapshot names otherwise (None: it has no such field)."""
        if source not in self._loaded:
            return {}
        return field_ids.names_at(self._loaded[source], snapshot, self.fields[source])

    def moved_since(self, recorded: str, frontier: dict[str, int]) -> str | None:
        """Why the columns read are not those the stream table was computed from (None: they are).
        `recorded`: the stamp's field ids; a stamp without them is judged by its frontier snapshots."""
        before = field_ids.loads(recorded)
        if before is None:
            before = {}
            for name, loaded in self._loaded.items():
                start = frontier.get(name, NO_SNAPSHOT)
                then = {} if start == NO_SNAPSHOT else field_ids.field_ids(loaded, start, self.fields[name])
                if then:  # else unknown (no snapshot then, or expired: a FULL refresh anyway)
                    before[name] = then
        moved = field_ids.moved(before, self.fields)
        if not moved:
            return None
        named = "; ".join(f"{', '.join(columns)} of {source}" for source, columns in moved.items())
        return (
            f"columns the query reads now name other Iceberg fields than when the stream table was last "
            f"computed (dropped and added again, or renamed): {named}"
        )
