"""Registrations no model uses: a stream-table model that was deleted, disabled or renamed leaves its
table (dbt never drops it) and its registration, so its sources' changes keep being captured for a
refresh that never comes.

Each `dbt run` records its project's name with the registrations it keeps (`run_settings`). A later
run of the same project unregisters those of its own that none of its enabled models builds any more
(`owned_orphans`; the table stays, as a plain table); one recorded by another project, or by no
project (registered before projects were recorded), is only warned about, and `dbt-ivm gc
--manifest` unregisters it.

Only registrations in the schemas the project builds into count: another project, or the same project
under another target (dev and prod), may share the catalog. Names compare case-insensitively (Spark's
metastore keeps them in lower case).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Project:
    """What a dbt project builds: its stream tables' (schema, table) and every schema it writes to;
    `name` is its `name:` in dbt_project.yml (None: not known)."""

    stream_tables: frozenset[tuple[str, str]]
    schemas: frozenset[str]
    name: str | None = None

    @classmethod
    def of(
        cls, stream_tables: Iterable[Iterable[str]], schemas: Iterable[str], name: str | None = None
    ) -> Project:
        pairs = (tuple(part.lower() for part in pair) for pair in stream_tables)
        return cls(frozenset((p[0], p[1]) for p in pairs), frozenset(s.lower() for s in schemas), name)


class RegisteredTable(NamedTuple):
    """One registration: its key ("schema.table"), where its table is, and the dbt project that last
    kept it (None: no dbt run recorded one)."""

    key: str
    schema: str
    table: str
    project: str | None = None


def unused(registered: Iterable[RegisteredTable], project: Project) -> list[str]:
    """The registered stream tables in the project's schemas that none of its enabled stream-table
    models builds.

    >>> project = Project.of([("analytics", "totals")], ["analytics", "staging"])
    >>> unused([RegisteredTable("analytics.totals", "analytics", "totals"),
    ...         RegisteredTable("analytics.old", "analytics", "old"), RegisteredTable("other.x", "other", "x")], project)
    ['analytics.old']
    """
    return sorted(r.key for r in _orphans(registered, project))


def owned_orphans(registered: Iterable[RegisteredTable], project: Project) -> list[str]:
    """Of `unused`, those the project itself recorded: a run of it may unregister them.

    >>> project = Project.of([], ["analytics"], name="shop")
    >>> owned_orphans([RegisteredTable("analytics.a", "analytics", "a", "shop"),
    ...                RegisteredTable("analytics.b", "analytics", "b", "other_project"),
    ...                RegisteredTable("analytics.c", "analytics", "c", None)], project)
    ['analytics.a']
    """
    if project.name is None:
        return []
    return sorted(r.key for r in _orphans(registered, project) if r.project == project.name)


def _orphans(registered: Iterable[RegisteredTable], project: Project) -> list[RegisteredTable]:
    return [
        r
        for r in registered
        if r.schema.lower() in project.schemas
        and (r.schema.lower(), r.table.lower()) not in project.stream_tables
    ]


def project_of_manifest(manifest: Mapping[str, Any]) -> Project:
    """The project a `target/manifest.json` describes (its enabled nodes; disabled ones are apart).

    >>> project_of_manifest({"metadata": {"project_name": "p"}, "nodes": {
    ...     "model.p.a": {"resource_type": "model", "schema": "s", "alias": "a",
    ...                   "config": {"materialized": "stream_table"}},
    ...     "seed.p.b": {"resource_type": "seed", "schema": "raw", "alias": "b", "config": {}}}})
    Project(stream_tables=frozenset({('s', 'a')}), schemas=frozenset({...}), name='p')
    """
    nodes = [n for n in manifest.get("nodes", {}).values() if n.get("resource_type") in BUILT]
    name = (manifest.get("metadata") or {}).get("project_name")
    return Project.of(
        [
            (str(n["schema"]), str(n.get("alias") or n["name"]))
            for n in nodes
            if (n.get("config") or {}).get("materialized") == "stream_table"
        ],
        [str(n["schema"]) for n in nodes],
        str(name) if name else None,
    )


# The nodes that write tables or views into a schema.
BUILT = ("model", "seed", "snapshot")
