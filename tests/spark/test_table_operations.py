"""Iceberg's own table operations on a source never leave a stream table wrong or stale.

Each test runs one family of operations on `orders` (keyed) under three stream tables — an aggregate,
a keyed projection and a join with a keyless dimension — refreshes them after every step, checks
each against its query (EXCEPT ALL both ways) and asserts what the refresh did: a compaction changes
no row and costs no FULL refresh, a lost start snapshot is a FULL refresh that says why, a column the
query reads changing type rebuilds the table, anything else stays differential.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlglot import exp

from dbt_ivm.errors import InvalidQuery
from dbt_ivm.spark.apply import TempViews
from dbt_ivm.spark.changelog import create_change_view
from dbt_ivm.spark.iceberg import current_snapshot_id
from dbt_ivm.spark.runner import run_stream_table
from dbt_ivm.spec import RefreshResult
from dbt_ivm.sqltext import WEIGHT
from tests.spark.oracle import make_spec, refresh_and_check

pytestmark = pytest.mark.spark

CALL = "CALL spark_catalog.system"


class Streams:
    """The stream tables over one schema's `orders` and `regions`."""

    def __init__(self, spark: Any, schema: str, partitioned: bool = False, properties: str = "") -> None:
        self.spark, self.s = spark, schema
        s = schema
        partitioning = "PARTITIONED BY (region)" if partitioned else ""
        spark.sql(
            f"CREATE TABLE {s}.orders (id int NOT NULL, region string, amount int, note string) "
            f"USING iceberg {partitioning} TBLPROPERTIES ('dbt_ivm.primary_key'='id'{properties})"
        )
        spark.sql(f"CREATE TABLE {s}.regions (name string, manager string) USING iceberg")
        spark.sql(f"INSERT INTO {s}.regions VALUES ('n', 'ann'), ('s', 'sam'), ('e', 'eve')")
        for first in (1, 4, 7):  # three commits, three files
            rows = ", ".join(f"({i}, '{'nse'[i % 3]}', {i * 10}, 'x')" for i in range(first, first + 3))
            spark.sql(f"INSERT INTO {s}.orders VALUES {rows}")
        self.queries = {
            "totals": f"SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY region",
            "big": f"SELECT id, region, amount FROM {s}.orders WHERE amount >= 20",
            "managed": f"SELECT o.id, r.manager FROM {s}.orders o JOIN {s}.regions r ON o.region = r.name",
        }
        self.refresh("create", "CREATE")

    def refresh(self, step: str, action: str, reason: str = "", **others: str) -> dict[str, RefreshResult]:
        """Refresh every stream table; each must have done `action` (`others`: by name, another)."""
        done = {}
        for name, sql in self.queries.items():
            result = refresh_and_check(self.spark, self.s, name, sql, step, refresh_mode="differential")
            assert result.action == others.get(name, action), (step, name, result.summary())
            if name not in others:
                assert reason in (result.reason or ""), (step, name, result.summary())
            done[name] = result
        return done

    def table(self) -> str:
        return f"{self.s}.orders"


def test_compaction_changes_no_row(spark: Any, spark_schema: str) -> None:
    streams = Streams(spark, spark_schema)
    t = streams.table()
    spark.sql(f"UPDATE {t} SET amount = amount + 1 WHERE id = 2")
    before = current_snapshot_id(spark, t)
    spark.sql(f"{CALL}.rewrite_data_files(table => '{t}', options => map('rewrite-all', 'true'))")
    assert current_snapshot_id(spark, t) != before  # a replace snapshot
    done = streams.refresh("update, then compaction", "DIFFERENTIAL")
    assert done["totals"].rows_updated == 1
    spark.sql(f"{CALL}.rewrite_manifests('{t}')")
    spark.sql(f"{CALL}.rewrite_data_files(table => '{t}', options => map('rewrite-all', 'true'))")
    done = streams.refresh("compactions only", "DIFFERENTIAL")
    assert all(r.rows_inserted + r.rows_updated + r.rows_deleted == 0 for r in done.values())
    spark.sql(f"DELETE FROM {t} WHERE id = 4")
    streams.refresh("delete after compaction", "DIFFERENTIAL")


def test_lost_history_is_a_full_refresh_and_rollback_a_diff(spark: Any, spark_schema: str) -> None:
    streams = Streams(spark, spark_schema)
    t = streams.table()
    first = current_snapshot_id(spark, t)
    spark.sql(f"INSERT INTO {t} VALUES (20, 'n', 5, 'y')")
    spark.sql(f"UPDATE {t} SET region = 's' WHERE id = 1")
    streams.refresh("writes", "DIFFERENTIAL")
    applied = current_snapshot_id(spark, t)

    # Back to before the frontier: the changes are the difference of the two states.
    spark.sql(f"{CALL}.rollback_to_snapshot('{t}', {first})")
    streams.refresh("rolled back", "DIFFERENTIAL", "snapshot diff")
    spark.sql(f"{CALL}.set_current_snapshot('{t}', {applied})")
    streams.refresh("set forward again", "DIFFERENTIAL")  # a descendant of the frontier: its changelog

    # The frontier's snapshot expires: nothing to read the changes from.
    spark.sql(f"INSERT INTO {t} VALUES (21, 'e', 7, 'z')")
    spark.sql(f"INSERT INTO {t} VALUES (22, 'e', 8, 'z')")
    spark.sql(
        f"{CALL}.expire_snapshots(table => '{t}', older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)"
    )
    streams.refresh("expired", "FULL", "no longer in its history")
    spark.sql(f"DELETE FROM {t} WHERE id = 21")
    streams.refresh("after the full refresh", "DIFFERENTIAL")


def test_schema_evolution(spark: Any, spark_schema: str) -> None:
    streams = Streams(spark, spark_schema)
    t = streams.table()
    # Columns the queries do not read come, go and change: the changes are read as ever.
    spark.sql(f"ALTER TABLE {t} ADD COLUMN channel string")
    spark.sql(f"INSERT INTO {t} VALUES (30, 'n', 300, 'w', 'web')")
    streams.refresh("unread column added", "DIFFERENTIAL")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN note TO remark")
    spark.sql(f"UPDATE {t} SET amount = 1 WHERE id = 30")
    streams.refresh("unread column renamed", "DIFFERENTIAL")
    spark.sql(f"ALTER TABLE {t} DROP COLUMN remark")
    spark.sql(f"DELETE FROM {t} WHERE id = 5")
    streams.refresh("unread column dropped", "DIFFERENTIAL")
    # A column read is widened: the stored column must widen too (`managed` does not read it).
    spark.sql(f"ALTER TABLE {t} ALTER COLUMN amount TYPE bigint")
    spark.sql(f"INSERT INTO {t} VALUES (31, 's', 3000000000, 'app')")
    done = streams.refresh("read column widened", "REBUILD", "columns", managed="DIFFERENTIAL")
    assert (
        "bigint"
        in dict(spark.sql(f"DESCRIBE {spark_schema}.big").select("col_name", "data_type").collect())["amount"]
    ), done
    spark.sql(f"UPDATE {t} SET amount = amount + 1 WHERE id = 31")
    streams.refresh("after the rebuild", "DIFFERENTIAL")
    # A column read is dropped and added again, with no write since: no new snapshot, yet every row
    # now reads NULL there (another Iceberg field). Then two names are swapped, again with no write.
    moved = "name other Iceberg fields"
    spark.sql(f"ALTER TABLE {t} DROP COLUMN region")
    spark.sql(f"ALTER TABLE {t} ADD COLUMNS (region string)")
    streams.refresh("read column dropped and added again", "FULL", moved)
    streams.refresh("nothing since", "SKIP")
    spark.sql(f"UPDATE {t} SET region = 'n' WHERE id < 5")
    streams.refresh("a write after the full refresh", "DIFFERENTIAL")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN region TO swapping")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN channel TO region")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN swapping TO channel")
    streams.refresh("read column swapped with another", "FULL", moved)
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    spark.sql(f"INSERT INTO {t} VALUES (32, 5, 's', 'e')")  # (id, amount, region, channel)
    streams.refresh("writes after the swap", "DIFFERENTIAL")
    # Dropped and added again with a write in between: the changes alone would miss the old values.
    spark.sql(f"ALTER TABLE {t} DROP COLUMN region")
    spark.sql(f"ALTER TABLE {t} ADD COLUMNS (region string)")
    spark.sql(f"UPDATE {t} SET region = 'e' WHERE id = 32")
    streams.refresh("dropped, added again, written", "FULL", moved)
    # A column read is renamed: the query no longer runs, and the error says which model.
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN amount TO value")
    with pytest.raises(InvalidQuery, match="model big"):
        run_stream_table(spark, make_spec(spark_schema, "big", streams.queries["big"], refresh_mode="auto"))


def test_partition_evolution_branches_and_every_dml(spark: Any, spark_schema: str) -> None:
    streams = Streams(spark, spark_schema, partitioned=True)
    t = streams.table()
    spark.sql(f"ALTER TABLE {t} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(f"INSERT INTO {t} VALUES (40, 'n', 400, 'p'), (41, 'e', 410, 'p')")
    spark.sql(f"UPDATE {t} SET amount = 2 WHERE id IN (1, 40)")
    streams.refresh("partition field added", "DIFFERENTIAL")

    # A branch's writes are not main's until main moves to them.
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH audit")
    spark.sql(f"INSERT INTO {t}.branch_audit VALUES (50, 's', 500, 'b')")
    spark.sql(f"DELETE FROM {t}.branch_audit WHERE id = 2")
    streams.refresh("written to a branch", "SKIP")
    spark.sql(f"{CALL}.fast_forward('{t}', 'main', 'audit')")
    streams.refresh("branch published", "DIFFERENTIAL")

    spark.sql(
        f"MERGE INTO {t} AS o USING (SELECT 3 AS id, 99 AS amount UNION ALL SELECT 60, 600) AS c "
        "ON o.id = c.id WHEN MATCHED THEN UPDATE SET amount = c.amount "
        "WHEN NOT MATCHED THEN INSERT (id, region, amount, note) VALUES (c.id, 'e', c.amount, 'm')"
    )
    streams.refresh("merge into", "DIFFERENTIAL")
    spark.sql(
        f"INSERT OVERWRITE {t} PARTITION (region = 'n') SELECT id, amount, note FROM {t} WHERE region = 'n' AND id > 10"
    )
    streams.refresh("static overwrite", "DIFFERENTIAL")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.sql(f"INSERT OVERWRITE {t} SELECT 70, 's', 700, 'd'")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    streams.refresh("dynamic overwrite", "DIFFERENTIAL")
    spark.sql(f"TRUNCATE TABLE {t}")
    streams.refresh("truncate", "DIFFERENTIAL")


@pytest.mark.parametrize("granularity", ["file", "partition"])
def test_merge_on_read_sources(spark: Any, spark_schema: str, granularity: str) -> None:
    """Row-level writes with delete files, and the compactions that fold them away: every refresh
    reads the files the writes touched (never a snapshot diff of the whole table). A file-scoped
    delete file names its one data file in its metadata; a partition-scoped one (the UPDATE of ids 1
    and 7, two files of partition 's') names rows of several, found by a job over it."""
    modes = ", ".join(f"'{k}'='merge-on-read'" for k in MERGE_ON_READ)
    modes += f", 'write.delete.granularity'='{granularity}'"
    streams = Streams(spark, spark_schema, partitioned=True, properties=f", {modes}")
    t = streams.table()

    def refresh(step: str, action: str = "DIFFERENTIAL") -> None:
        for name, result in streams.refresh(step, action).items():
            assert "snapshot diff" not in (result.reason or ""), (step, name, result.summary())

    spark.sql(f"DELETE FROM {t} WHERE id = 4")
    spark.sql(f"UPDATE {t} SET amount = amount + 1, region = 's' WHERE id IN (1, 7)")
    with_deletes = spark.sql(f"SELECT count(*) FROM {t}.delete_files").first()
    assert with_deletes is not None and with_deletes[0] > 0
    refresh("delete and update")
    spark.sql(
        f"MERGE INTO {t} AS o USING (SELECT 2 AS id, 5 AS amount UNION ALL SELECT 80, 800) AS c "
        "ON o.id = c.id WHEN MATCHED THEN UPDATE SET amount = c.amount "
        "WHEN NOT MATCHED THEN INSERT (id, region, amount, note) VALUES (c.id, 'n', c.amount, 'm')"
    )
    spark.sql(f"DELETE FROM {t} WHERE id = 80")
    refresh("merge, then a delete of the row it inserted")
    spark.sql(f"{CALL}.rewrite_position_delete_files(table => '{t}', options => map('rewrite-all', 'true'))")
    refresh("delete files compacted")
    spark.sql(f"UPDATE {t} SET note = 'z' WHERE id = 5")
    spark.sql(f"{CALL}.rewrite_data_files(table => '{t}', options => map('rewrite-all', 'true'))")
    spark.sql(f"DELETE FROM {t} WHERE id = 8")
    refresh("update, compaction, delete")


MERGE_ON_READ = {
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}


@pytest.mark.parametrize("properties", [{}, MERGE_ON_READ], ids=["copy_on_write", "merge_on_read"])
def test_the_stream_tables_own_maintenance(spark: Any, spark_schema: str, properties: dict[str, str]) -> None:
    """A merge-on-read stream table (the model's `tblproperties`) is written with delete files; the
    user's compaction jobs on a stream table leave its frontier known; DML by hand on it does not."""
    s = spark_schema
    spark.sql(
        f"CREATE TABLE {s}.orders (id int NOT NULL, region string, amount int) USING iceberg "
        "TBLPROPERTIES ('dbt_ivm.primary_key'='id')"
    )
    spark.sql(f"INSERT INTO {s}.orders SELECT id, concat('r', id % 5), id FROM range(1, 200) AS t(id)")
    queries = {
        "totals": f"SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY region",
        "big": f"SELECT id, region, amount FROM {s}.orders WHERE amount >= 20",
    }

    def refresh(step: str, action: str, reason: str = "") -> None:
        for name, sql in queries.items():
            result = refresh_and_check(
                spark, s, name, sql, step, refresh_mode="differential", table_properties=properties
            )
            assert result.action == action and reason in (result.reason or ""), (step, name, result.summary())

    refresh("create", "CREATE")
    for name in queries:
        held = dict(spark.sql(f"SHOW TBLPROPERTIES {s}.{name}").collect())
        assert all(held.get(k) == v for k, v in properties.items()), held
    spark.sql(f"UPDATE {s}.orders SET amount = amount + 1 WHERE id % 7 = 0")
    spark.sql(f"DELETE FROM {s}.orders WHERE id % 11 = 0")
    refresh("dml", "DIFFERENTIAL")
    for name in queries:
        summary = spark.sql(
            f"SELECT summary FROM {s}.{name}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        deletes = int(summary[0].get("total-position-deletes", "0"))
        assert (deletes > 0) == bool(properties), (name, summary[0])

    # The user's maintenance jobs compact the stream tables: no row changed, the frontier holds.
    for name in queries:
        spark.sql(f"{CALL}.rewrite_data_files(table => '{s}.{name}', options => map('rewrite-all', 'true'))")
        spark.sql(
            f"{CALL}.rewrite_position_delete_files(table => '{s}.{name}', options => map('rewrite-all', 'true'))"
        )
        spark.sql(f"{CALL}.rewrite_manifests('{s}.{name}')")
    refresh("compacted, nothing new", "SKIP")
    spark.sql(f"UPDATE {s}.orders SET region = 'r9' WHERE id < 30")
    refresh("compacted, then changes", "DIFFERENTIAL")

    # DML by hand on a stream table is not a compaction: its frontier is unknown.
    for name in queries:
        spark.sql(f"DELETE FROM {s}.{name} WHERE region = 'r1'")
    refresh("written by hand", "FULL", "no dbt-ivm frontier")


def test_writes_to_a_source_never_replan_a_refresh_s_staged_reads(spark: Any, spark_schema: str) -> None:
    """A write or REFRESH TABLE on a source, from any thread of the application, re-plans every
    cached plan that names the source (Spark's cache manager). A refresh's change set of a
    merge-on-read source reads scan tasks staged in the driver, released once the change set is
    pinned; nothing that names the source may still need them after that, so that neither the write
    nor the refresh fails."""
    t = f"{spark_schema}.events"
    modes = ", ".join(f"'{k}'='merge-on-read'" for k in MERGE_ON_READ)
    spark.sql(f"CREATE TABLE {t} (id int, v int) USING iceberg TBLPROPERTIES ('format-version'='2', {modes})")
    spark.sql(f"INSERT INTO {t} VALUES (1, 1), (2, 2), (3, 3)")
    start = current_snapshot_id(spark, (spark_schema, "events"))
    spark.sql(f"DELETE FROM {t} WHERE id = 2")
    views = TempViews(spark)
    try:
        change = create_change_view(
            spark, (spark_schema, "events"), views.name("raw"), start, read=["id", "v"]
        )
        assert change.path == "touched_files" and change.release is not None, change
        changes = exp.select("id", "v", WEIGHT).from_(exp.table_(str(change.view), quoted=True))
        delta, _ = views.observed("delta", views.frame(changes), [exp.func("COUNT", exp.Star())])
        assert spark.sql(f"SELECT id, {WEIGHT} FROM {delta.sql('spark')}").collect() == [(2, -1)]
        change.release()  # the interleaving: released while the cached plan is still registered
        spark.sql(f"REFRESH TABLE {t}")
        spark.sql(f"INSERT INTO {t} VALUES (4, 4)")
        assert spark.sql(f"SELECT count(*) FROM {t}").first() == (3,)
    finally:
        views.drop()
