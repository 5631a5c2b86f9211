"""NaN and ±Infinity in numeric running sums: NaN − NaN is NaN, so a group whose batch adds or takes
away such a value has its sum read again from its rows (`dbt_ivm.delta.non_finite`); every refresh
must equal the query, in every mode, through values that come and go."""

from __future__ import annotations

from typing import Any

import pytest

from tests.postgres.streams import execute, follow_writes

pytestmark = pytest.mark.postgres

ROWS = (
    "CREATE TABLE m (id int PRIMARY KEY, g int, x numeric);"
    "INSERT INTO m VALUES (1, 1, 1.5), (2, 1, 'NaN'), (3, 2, 'Infinity'), (4, 2, 2), (5, 3, '-Infinity'),"
    " (6, 3, 'Infinity'), (7, 4, 'NaN'), (8, 4, NULL)"
)
STREAMS = {
    "sums": "SELECT g, SUM(x) AS s, AVG(x) AS a, COUNT(x) AS c FROM m GROUP BY g",
    "only_sum": "SELECT g, SUM(x) AS s FROM m GROUP BY g",
    "overall": "SELECT SUM(x) AS s, AVG(x) AS a FROM m",
    "per_row": "SELECT id, SUM(x) AS s FROM m GROUP BY id",  # a key that cannot be NULL: matched by =
    "extremes": "SELECT g, MIN(x) AS lo, MAX(x) AS hi FROM m GROUP BY g",
}
WRITES = [
    "DELETE FROM m WHERE id = 2",  # group 1 back to a finite sum
    "DELETE FROM m WHERE id = 3",  # Infinity leaves group 2
    "DELETE FROM m WHERE id = 5",  # -Infinity leaves: Infinity alone
    "DELETE FROM m WHERE id = 7",  # group 4: only a NULL left
    "UPDATE m SET x = 'NaN' WHERE id = 4",
    "UPDATE m SET x = 7 WHERE id = 4",
    "UPDATE m SET x = 'Infinity' WHERE id = 1",
    "UPDATE m SET x = 1 WHERE id = 1",
    "INSERT INTO m VALUES (9, 1, '-Infinity'), (10, 5, 'NaN')",
    "UPDATE m SET g = 5 WHERE id = 9",
    "DELETE FROM m WHERE g = 5",
]


@pytest.mark.parametrize("mode", ["differential", "immediate", "auto"])
def test_sums_through_nan_and_infinity(pg_conn: Any, mode: str) -> None:
    execute(pg_conn, ROWS)
    follow_writes(pg_conn, STREAMS, WRITES, mode)
