"""Registrations no model uses: a stream-table model that was deleted, disabled or renamed leaves its
table (dbt never drops it) and its registration, so its sources' changes keep being captured for a
refresh that never comes. `dbt run` warns about them and `dbt-ivm gc --manifest` unregisters them.

Only registrations in the schemas the project builds into count: another project may share the catalog.
Names compare case-insensitively (Spark's metastore keeps them in lower case).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Project:
    """What a dbt project builds: its stream tables' (schema, table) and every schema it writes to."""

    stream_tables: frozenset[tuple[str, str]]
    schemas: frozenset[str]

    @classmethod
    def of(cls, stream_tables: Iterable[Iterable[str]], schemas: Iterable[str]) -> Project:
        pairs = (tuple(part.lower() for part in pair) for pair in stream_tables)
        return cls(frozenset((p[0], p[1]) for p in pairs), frozenset(s.lower() for s in schemas))


def unused(registered: Iterable[tuple[str, str, str]], project: Project) -> list[str]:
    """The registered stream tables (key, schema, table) in the project's schemas that none of its
    enabled stream-table models builds.

    >>> project = Project.of([("analytics", "totals")], ["analytics", "staging"])
    >>> unused([("analytics.totals", "analytics", "totals"), ("analytics.old", "analytics", "old"),
    ...         ("other.x", "other", "x")], project)
    ['analytics.old']
    """
    return sorted(
        key
        for key, schema, table in registered
        if schema.lower() in project.schemas and (schema.lower(), table.lower()) not in project.stream_tables
    )


def project_of_manifest(manifest: Mapping[str, Any]) -> Project:
    """The project a `target/manifest.json` describes (its enabled nodes; disabled ones are apart).

    >>> project_of_manifest({"nodes": {
    ...     "model.p.a": {"resource_type": "model", "schema": "s", "alias": "a",
    ...                   "config": {"materialized": "stream_table"}},
    ...     "seed.p.b": {"resource_type": "seed", "schema": "raw", "alias": "b", "config": {}}}})
    Project(stream_tables=frozenset({('s', 'a')}), schemas=frozenset({...}))
    """
    nodes = [n for n in manifest.get("nodes", {}).values() if n.get("resource_type") in BUILT]
    return Project.of(
        [
            (str(n["schema"]), str(n.get("alias") or n["name"]))
            for n in nodes
            if (n.get("config") or {}).get("materialized") == "stream_table"
        ],
        [str(n["schema"]) for n in nodes],
    )


# The nodes that write tables or views into a schema.
BUILT = ("model", "seed", "snapshot")
