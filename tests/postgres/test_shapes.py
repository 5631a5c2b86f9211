"""The shared query shapes (tests/shapes.py) on PostgreSQL: outer joins, semi/anti joins, scalar
subqueries, derived tables and CTEs, set operations, each its own test.

Each test creates the source tables, seeds them, creates one stream table with
refresh_mode='differential', then runs random batches (some in one transaction) and checks the stream
table against its query (multiset oracle) after every refresh. Refreshes must be DIFFERENTIAL, or SKIP
when nothing changed — never FULL. DBT_IVM_SHAPES_SEED picks another seed; it is in every message.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.depth import by_depth
from tests.postgres.streams import SCHEMA, connect, execute, refresh_and_check, rows, seeded_shapes
from tests.shapes import ONLY_MODEL_COLUMNS, streams

pytestmark = pytest.mark.postgres

SEED = int(os.environ.get("DBT_IVM_SHAPES_SEED", "20250101"))
CYCLES = by_depth(6, 20)
CHANGES = 5
STREAMS = streams(SCHEMA)


@pytest.mark.parametrize("name", list(STREAMS))
def test_shape_refreshes_differentially(pg_dsn: str, name: str) -> None:
    sql = STREAMS[name]
    rng = random.Random(f"{SEED}:{name}")
    conn = connect(pg_dsn)
    try:
        workload = seeded_shapes(conn, rng)
        context = f"{name}, seed {SEED} (DBT_IVM_SHAPES_SEED)"
        created = refresh_and_check(conn, name, sql, f"{context}, create", refresh_mode="differential")
        assert created.action == "CREATE", f"{context}: {created.summary()}"
        if name in ONLY_MODEL_COLUMNS:
            stored = rows(
                conn,
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped AND attname LIKE '\\_\\_ivm\\_%%'",
                (f"{SCHEMA}.{name}",),
            )
            assert not stored, f"{context}: hidden columns {stored}"
        for cycle in range(CYCLES):
            batch = workload.batch(CHANGES)
            in_transaction = rng.random() < 0.5
            if in_transaction:
                execute(conn, "BEGIN")
            for statement in batch:
                execute(conn, statement)
            if in_transaction:
                execute(conn, "COMMIT")
            where = f"{context}, cycle {cycle}{' (one transaction)' if in_transaction else ''}: {batch}"
            result = refresh_and_check(conn, name, sql, where, refresh_mode="differential")
            assert result.action in ("DIFFERENTIAL", "SKIP"), f"{where}: {result.summary()}"
        # nothing changed since the last refresh
        result = refresh_and_check(conn, name, sql, f"{context}, no change", refresh_mode="differential")
        assert result.action in ("DIFFERENTIAL", "SKIP"), f"{context}, no change: {result.summary()}"
    finally:
        conn.close()
