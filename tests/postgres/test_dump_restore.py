"""A database with stream tables dumped (`pg_dump -Fc`) and restored, into a new cluster or into
the same one after more transactions: the restored capture is recognised as dbt-ivm's own (its
triggers' functions have new oids), the frontiers that cannot belong to the restored database are
detected, and the next run rebuilds or refreshes FULL with the reason; after that, refreshes are
differential again. Every stream table equals its query throughout (issue 58)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from dbt_ivm.embedded import postgres_server
from tests.postgres.streams import execute, refresh_and_check

pytestmark = [pytest.mark.postgres, pytest.mark.server_version]

STREAMS = {
    "totals": "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer",
    "amounts": "SELECT id, amount FROM orders WHERE amount > 3",
}


def _refresh_all(conn: Any, context: str) -> list[str]:
    results = [
        refresh_and_check(conn, n, sql, context, refresh_mode="differential") for n, sql in STREAMS.items()
    ]
    for result in results:
        # Anything but a differential refresh says why.
        assert result.action in ("CREATE", "DIFFERENTIAL") or result.reason, result.summary()
    return [r.action for r in results]


def _dump(bin_dir: Path, dsn: str, path: Path) -> None:
    subprocess.run([str(bin_dir / "pg_dump"), "-Fc", "-f", str(path), "-d", dsn], check=True)


def _restore(bin_dir: Path, server: Any, database: str, path: Path) -> Any:
    admin = psycopg2.connect(server.dsn())
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    admin.close()
    subprocess.run(
        [str(bin_dir / "pg_restore"), "--exit-on-error", "-d", server.dsn(database), str(path)], check=True
    )
    conn = psycopg2.connect(server.dsn(database))
    conn.autocommit = True
    return conn


def _source_with_stream_tables(conn: Any) -> None:
    execute(
        conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2));"
        "INSERT INTO orders SELECT i, 'c' || (i % 3), i FROM generate_series(1, 9) i;",
    )
    assert _refresh_all(conn, "create") == ["CREATE", "CREATE"]
    execute(conn, "UPDATE orders SET amount = amount + 1 WHERE id < 4")
    assert _refresh_all(conn, "before the dump") == ["DIFFERENTIAL", "DIFFERENTIAL"]
    # Changes captured and not yet applied travel in the dump too.
    execute(conn, "DELETE FROM orders WHERE id = 9")


def _after_restore(restored: Any) -> None:
    execute(restored, "INSERT INTO orders VALUES (10, 'c1', 10); UPDATE orders SET amount = 0 WHERE id = 5")
    actions = _refresh_all(restored, "the first run after the restore")
    assert all(a in ("FULL", "REBUILD") for a in actions), actions
    execute(restored, "UPDATE orders SET amount = amount * 2 WHERE id > 6")
    assert _refresh_all(restored, "the run after that") == ["DIFFERENTIAL", "DIFFERENTIAL"]


def test_restored_into_a_new_cluster(pg_conn: Any, pg_dsn: str, pg_bin_dir: Path) -> None:
    _source_with_stream_tables(pg_conn)
    with tempfile.TemporaryDirectory(prefix="dbt_ivm_restore_") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        _dump(pg_bin_dir, pg_dsn, base / "dump")
        server = postgres_server.start(base / "data", bin_dir=pg_bin_dir)
        try:
            restored = _restore(pg_bin_dir, server, "restored", base / "dump")
            _after_restore(restored)
            restored.close()
        finally:
            postgres_server.destroy(base / "data")


def test_restored_into_the_same_cluster_after_more_transactions(
    pg_conn: Any, pg_dsn: str, pg_bin_dir: Path, pg_server: Any
) -> None:
    _source_with_stream_tables(pg_conn)
    with tempfile.TemporaryDirectory(prefix="dbt_ivm_restore_") as tmp:
        _dump(pg_bin_dir, pg_dsn, Path(tmp) / "dump")
        for _ in range(20):
            execute(pg_conn, "UPDATE orders SET amount = amount WHERE id = 1")
        database = pg_dsn.rsplit("dbname=", 1)[1] + "_restored"
        restored = _restore(pg_bin_dir, pg_server, database, Path(tmp) / "dump")
        try:
            _after_restore(restored)
        finally:
            restored.close()
            admin = psycopg2.connect(pg_server.dsn())
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.close()
