"""Triggers of the user's own under a name dbt-ivm gives its triggers.

dbt-ivm creates its triggers (capture on sources, the guard on stream tables) with CREATE OR REPLACE
TRIGGER, which would replace a user's trigger of the same name without a word: callers refuse
those by name instead (errors.TriggerNameTaken).
"""

from __future__ import annotations

from typing import Any

from dbt_ivm.postgres.db import Db


def foreign_triggers(
    db: Db,
    relids_sql: str,
    params: dict[str, Any],
    names: list[str],
    function: str,
    among: tuple[str, str] | None = None,
) -> list[str]:
    """`name ON table` for each trigger on the relations `relids_sql` (SQL yielding oids, with
    `params`) named one of `names` whose function is not ours: not `function` (a regprocedure text)
    nor, given `among` (a schema and a regular expression), a function of that schema whose name
    matches. A function is told by its schema and name there, not its oid: a restored dump has new
    oids, and no one but dbt-ivm's role may create functions in its catalog schema."""
    ours = "t.tgfoid = pg_catalog.to_regprocedure(%(__function)s)"
    if among is not None:
        ours = (
            f"({ours} OR EXISTS (SELECT FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n "
            "ON n.oid = p.pronamespace WHERE p.oid = t.tgfoid AND n.nspname = %(__schema)s "
            "AND p.proname ~ %(__pattern)s))"
        )
    schema, pattern = among or (None, None)
    rows = db.rows(
        "SELECT pg_catalog.format('%%I ON %%s', t.tgname, t.tgrelid::pg_catalog.regclass) "
        f"FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid IN ({relids_sql}) "
        f"AND t.tgname = ANY(%(__names)s) AND NOT COALESCE({ours}, false) ORDER BY 1",
        {**params, "__names": names, "__function": function, "__schema": schema, "__pattern": pattern},
    )
    return [str(r[0]) for r in rows]
