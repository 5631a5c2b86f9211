"""Triggers of the user's own under a name dbt-ivm gives its triggers.

dbt-ivm creates its triggers (capture on sources, the guard on stream tables) with CREATE OR REPLACE
TRIGGER, which would replace a user's trigger of the same name without a word: callers refuse
those by name instead (errors.TriggerNameTaken).
"""

from __future__ import annotations

from typing import Any

from dbt_ivm.postgres.db import Db


def foreign_triggers(
    db: Db, relids_sql: str, params: dict[str, Any], names: list[str], function: str
) -> list[str]:
    """`name ON table` for each trigger on the relations `relids_sql` (SQL yielding oids, with
    `params`) named one of `names` whose function is not `function` (a regprocedure text)."""
    rows = db.rows(
        "SELECT pg_catalog.format('%%I ON %%s', t.tgname, t.tgrelid::pg_catalog.regclass) "
        f"FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid IN ({relids_sql}) "
        "AND t.tgname = ANY(%(__names)s) "
        "AND t.tgfoid IS DISTINCT FROM pg_catalog.to_regprocedure(%(__function)s) ORDER BY 1",
        {**params, "__names": names, "__function": function},
    )
    return [str(r[0]) for r in rows]
