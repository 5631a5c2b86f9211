"""An enum value renamed (``ALTER TYPE … RENAME VALUE``) changes what a query that shows the value as
text returns, without a write to any row: capture must notice, and the next refresh is FULL (a
rebuild for IMMEDIATE, at the next run) with the reason. A value added changes nothing shown."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.postgres.streams import execute, refresh_and_check, value

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

STREAMS = {
    "moods_shown": "SELECT id, m::text AS mood FROM t",
    "moods_counted": "SELECT m::text AS mood, COUNT(*) AS n FROM t GROUP BY m::text",
    "moods_kept": "SELECT id, m FROM t WHERE m <> 'sad'",
    "moods_listed": "SELECT id, ms::text AS moods FROM u",
}


@pytest.mark.parametrize("mode", ["differential", "auto", "immediate"])
def test_a_renamed_enum_value_is_a_full_refresh(pg_conn: Any, mode: str) -> None:
    execute(
        pg_conn,
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');"
        "CREATE TABLE t (id int PRIMARY KEY, m mood); INSERT INTO t VALUES (1, 'sad'), (2, 'ok'), (3, 'ok');"
        # An array of the enum: its element type's labels count too.
        "CREATE TABLE u (id int PRIMARY KEY, ms mood[]); INSERT INTO u VALUES (1, '{ok,sad}'), (2, '{happy}')",
    )
    for name, sql in STREAMS.items():
        refresh_and_check(pg_conn, name, sql, "create", refresh_mode=mode)
    execute(pg_conn, "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'")
    for name, sql in STREAMS.items():
        result = refresh_and_check(pg_conn, name, sql, "after RENAME VALUE", refresh_mode=mode)
        if name != "moods_kept":
            assert result.action in ("FULL", "REBUILD") and "enum" in (result.reason or ""), result.summary()
    execute(pg_conn, "ALTER TYPE mood ADD VALUE 'meh' BEFORE 'fine'")
    execute(pg_conn, "INSERT INTO t VALUES (4, 'meh'); UPDATE t SET m = 'happy' WHERE id = 2")
    for name, sql in STREAMS.items():
        refresh_and_check(pg_conn, name, sql, "after ADD VALUE and writes", refresh_mode=mode)


def test_capture_installed_before_labels_were_kept_says_so(pg_conn: Any) -> None:
    """A capture fingerprint without labels (an earlier dbt-ivm): one FULL, named an upgrade."""
    execute(
        pg_conn,
        "CREATE TYPE mood AS ENUM ('sad', 'ok');"
        "CREATE TABLE t (id int PRIMARY KEY, m mood); INSERT INTO t VALUES (1, 'sad'), (2, 'ok')",
    )
    sql = STREAMS["moods_shown"]
    refresh_and_check(pg_conn, "moods_shown", sql, "create", refresh_mode="differential")
    state = value(pg_conn, "SELECT state FROM dbt_ivm.change_buffers WHERE source = 'public.t'")
    state["columns"] = [
        [part for part in column if not isinstance(part, list)] for column in state["columns"]
    ]
    execute(
        pg_conn, f"UPDATE dbt_ivm.change_buffers SET state = '{json.dumps(state)}' WHERE source = 'public.t'"
    )
    result = refresh_and_check(pg_conn, "moods_shown", sql, "after the upgrade", refresh_mode="differential")
    assert result.action == "FULL" and "upgraded" in (result.reason or ""), result.summary()
    execute(pg_conn, "INSERT INTO t VALUES (3, 'ok')")
    result = refresh_and_check(pg_conn, "moods_shown", sql, "then", refresh_mode="differential")
    assert result.action == "DIFFERENTIAL", result.summary()
