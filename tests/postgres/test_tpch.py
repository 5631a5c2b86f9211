"""All 22 TPC-H queries as differential stream tables on PostgreSQL (tests/tpch.py): built, then
refreshed after rounds of RF1/RF2 and dimension updates, each checked against its query (multiset
oracle) after every refresh. Every refresh must be DIFFERENTIAL (or SKIP): never FULL.

A query that fails (refused, wrong rows, FULL) is recorded and left out of later rounds; the test
fails at the end naming each, so one does not hide another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.depth import by_depth
from tests.postgres.streams import SCHEMA, execute, refresh_and_check
from tests.tpch import PRIMARY_KEYS, Batches, Data

pytestmark = pytest.mark.postgres

SF = by_depth(0.002, 0.01)
ROUNDS = by_depth(2, 4)
ORDERS_PER_ROUND = 5  # a little over 0.1 % of sf 0.002's 3,000 orders, in and out


def test_tpch_queries_refresh_differentially(pg_conn: Any, tmp_path: Path) -> None:
    data = Data(SF, tmp_path)
    for statement in data.create_statements(SCHEMA, "postgres"):
        execute(pg_conn, statement)
    with pg_conn.cursor() as cur:
        for table in PRIMARY_KEYS:
            with data.csv(table).open() as rows:
                cur.copy_expert(f"COPY {SCHEMA}.{table} FROM STDIN WITH (FORMAT csv)", rows)
    execute(pg_conn, "ANALYZE")
    queries = data.queries(SCHEMA, "postgres")
    batches = Batches(data, SCHEMA, seed=22)
    failures: dict[int, str] = {}

    def refresh(number: int, stage: str, allowed: tuple[str, ...]) -> None:
        try:
            result = refresh_and_check(
                pg_conn, f"q{number}", queries[number], f"Q{number}, {stage}", refresh_mode="differential"
            )
            assert result.action in allowed, f"{result.action} not in {allowed}: {result.summary()}"
        except Exception as error:  # recorded, reported together at the end
            failures[number] = f"{stage}: {type(error).__name__}: {str(error)[:300]}"

    for number in queries:
        refresh(number, "create", ("CREATE",))
    for round_ in range(ROUNDS):
        execute(pg_conn, "BEGIN")
        for statement in batches.batch(ORDERS_PER_ROUND):
            execute(pg_conn, statement)
        execute(pg_conn, "COMMIT")
        for number in queries:
            if number not in failures:
                refresh(number, f"round {round_}", ("DIFFERENTIAL", "SKIP"))
    assert not failures, f"{len(failures)} of 22 TPC-H stream tables failed:\n" + "\n".join(
        f"  Q{n}: {message}" for n, message in sorted(failures.items())
    )
