"""Iceberg change sources on real tables: every path of `create_change_view`, each checked by the
Z-set law: the rows at the start snapshot plus the weighted changes are exactly the rows at the end."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from sqlglot import exp

from dbt_ivm.delta.compact import compacted
from dbt_ivm.spark.changelog import SEQ, WEIGHT, ChangeView, create_change_view
from dbt_ivm.spark.iceberg import (
    TableVersion,
    create_state_view,
    current_snapshot_id,
    current_version,
    is_iceberg_table,
    load_table,
    snapshots,
    snapshots_after,
)

pytestmark = pytest.mark.spark


def rows_at(spark: Any, table: str, snapshot_id: int | None) -> Counter[tuple[Any, ...]]:
    if snapshot_id is None:
        return Counter()
    return Counter(
        tuple(r) for r in spark.sql(f"SELECT * FROM {table} VERSION AS OF {snapshot_id}").collect()
    )


def changes(spark: Any, view: str) -> list[tuple[Any, ...]]:
    """(row..., weight, seq) in change order."""
    return [tuple(r) for r in spark.sql(f"SELECT * FROM `{view}` ORDER BY `{SEQ}`").collect()]


def assert_z_set_law(spark: Any, change: ChangeView) -> None:
    """start + changes == end, as multisets; and the view's shape is the table's columns + weight, seq."""
    assert change.view is not None
    table = change.table
    schema = spark.table(f"`{change.view}`").schema
    assert [f.name for f in schema.fields] == [*change.columns, WEIGHT, SEQ]
    assert schema[WEIGHT].dataType.simpleString() == "int"
    assert schema[SEQ].dataType.simpleString() == "bigint"
    state = rows_at(spark, table, change.start_snapshot_id)
    for *row, weight, _seq in changes(spark, change.view):
        assert weight in (1, -1)
        state[tuple(row)] += weight
        assert state[tuple(row)] >= 0, f"{row} removed more often than it existed"
    assert +state == rows_at(spark, table, change.end_snapshot_id)


def test_copy_on_write_dml_reads_the_changelog(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.orders"
    spark.sql(f"CREATE TABLE {t} (id INT, amount INT, note STRING) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')")
    start = current_snapshot_id(spark, t)
    spark.sql(f"INSERT INTO {t} VALUES (4, 40, 'd')")
    spark.sql(f"UPDATE {t} SET amount = 21 WHERE id = 2")
    spark.sql(f"DELETE FROM {t} WHERE id = 3")
    spark.sql(
        f"MERGE INTO {t} AS o USING (SELECT 4 AS id, 41 AS amount, 'D' AS note UNION ALL "
        "SELECT 5, 50, 'e') AS s ON o.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    change = create_change_view(spark, t, "orders_changes", start)
    assert change.path == "changelog", change.reason
    assert change.reason is None
    assert change.columns == ("id", "amount", "note")
    assert change.end_snapshot_id == current_snapshot_id(spark, t)
    # The raw changelog also has the rows copy-on-write carried over unchanged into rewritten files,
    # as −1/+1 pairs of one row; compaction (weights summed per row image) cancels them.
    assert len(changes(spark, "orders_changes")) > 7  # the 7 real changes + carried-over pairs
    net = sorted([(2, 20, "b", -1), (2, 21, "b", 1), (3, 30, "c", -1), (4, 41, "D", 1), (5, 50, "e", 1)])
    summed = compacted(exp.table_("orders_changes", quoted=True), ["id", "amount", "note"])
    rows = spark.sql(summed.sql("spark")).collect()
    assert sorted(tuple(r) for r in rows) == net
    assert_z_set_law(spark, change)


def test_seq_orders_commits_and_puts_removals_first(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.k"
    spark.sql(f"CREATE TABLE {t} (id INT, v INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1, 75)")
    start = current_snapshot_id(spark, t)
    spark.sql(f"UPDATE {t} SET v = 10 WHERE id = 1")
    spark.sql(f"UPDATE {t} SET v = 20 WHERE id = 1")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    change = create_change_view(spark, t, "k_changes", start)
    assert change.path == "changelog"
    # Following the key through the batch: -75 +10 -10 +20 -20, strictly ordered by seq.
    ordered = changes(spark, "k_changes")
    assert [(r[1], r[2]) for r in ordered] == [(75, -1), (10, 1), (10, -1), (20, 1), (20, -1)]
    seqs = [r[3] for r in ordered]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert_z_set_law(spark, change)


def test_duplicate_rows_without_a_key(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.events"
    spark.sql(f"CREATE TABLE {t} (kind STRING, v INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES ('a', 1), ('a', 1), ('a', 1), ('b', 2)")
    start = current_snapshot_id(spark, t)
    spark.sql(f"INSERT INTO {t} VALUES ('a', 1)")
    spark.sql(f"DELETE FROM {t} WHERE kind = 'b'")
    spark.sql(f"UPDATE {t} SET v = NULL WHERE kind = 'a'")
    change = create_change_view(spark, t, "events_changes", start)
    assert change.path == "changelog"
    assert_z_set_law(spark, change)


def test_no_new_snapshot_is_an_empty_change(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.quiet"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    now = current_snapshot_id(spark, t)
    change = create_change_view(spark, t, "quiet_changes", now)
    assert (change.path, change.start_snapshot_id, change.end_snapshot_id) == ("changelog", now, now)
    assert changes(spark, "quiet_changes") == []


def test_table_never_written(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.empty"
    spark.sql(f"CREATE TABLE {t} (id INT, name STRING) USING iceberg")
    assert current_snapshot_id(spark, t) is None
    change = create_change_view(spark, t, "empty_changes", None)
    assert change.path == "changelog" and change.end_snapshot_id is None
    assert change.columns == ("id", "name")
    assert changes(spark, "empty_changes") == []


def test_start_without_snapshot_reads_everything_as_new(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.fresh"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1), (2), (2)")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    change = create_change_view(spark, t, "fresh_changes", None)
    assert change.path == "snapshot_diff"
    assert "no snapshot at the start" in (change.reason or "")
    assert sorted(r[:2] for r in changes(spark, "fresh_changes")) == [(2, 1), (2, 1)]
    assert_z_set_law(spark, change)


MERGE_ON_READ = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)


@pytest.mark.parametrize("granularity", ["partition", "file"])
def test_merge_on_read_reads_only_the_files_the_range_touched(
    spark: Any, spark_schema: str, granularity: str
) -> None:
    """Delete files scoped to a partition name their data files only inside them (read from the
    delete file); file-scoped ones name it in their metadata. Either way only touched files are read."""
    t = f"{spark_schema}.mor_{granularity}"
    spark.sql(
        f"CREATE TABLE {t} (id INT, v STRING, day INT) USING iceberg PARTITIONED BY (day) "
        f"TBLPROPERTIES ({MERGE_ON_READ}, 'write.delete.granularity'='{granularity}')"
    )
    for day in range(4):  # four files of 50 rows, one per partition
        spark.sql(f"INSERT INTO {t} SELECT id, 'x', {day} FROM range({day * 50}, {day * 50 + 50}) AS r(id)")
    start = current_snapshot_id(spark, t)
    spark.sql(f"DELETE FROM {t} WHERE id IN (3, 4)")
    spark.sql(f"UPDATE {t} SET v = 'B' WHERE id = 60")
    spark.sql(f"INSERT INTO {t} VALUES (1000, 'd', 3)")
    spark.sql(f"DELETE FROM {t} WHERE id = 60")  # the updated row again, now in the UPDATE's file
    assert any(s.has_delete_files for s in snapshots(spark, t).values())
    change = create_change_view(spark, t, f"mor_{granularity}_changes", start)
    assert change.path == "touched_files", change.reason
    # the UPDATE's file and the INSERT's, at the end (their records, deleted or not), and the 4
    # positions the delete files name (3 and 4 in day 0's file, 60 in day 1's and in the UPDATE's);
    # the files of days 0 and 1 are scanned for those positions only
    assert change.row_images == 1 + 1 + 4, change.row_images
    # no row read twice: the view holds exactly the net change
    assert sorted(r[:4] for r in changes(spark, f"mor_{granularity}_changes")) == [
        (3, "x", 0, -1),
        (4, "x", 0, -1),
        (60, "x", 1, -1),
        (1000, "d", 3, 1),
    ]
    assert_z_set_law(spark, change)
    change.release and change.release()


def test_merge_on_read_through_compactions(spark: Any, spark_schema: str) -> None:
    """A compaction inside the range moves rows between files: those files are touched too."""
    t = f"{spark_schema}.mor_compacted"
    spark.sql(f"CREATE TABLE {t} (id INT, v STRING) USING iceberg TBLPROPERTIES ({MERGE_ON_READ})")
    for first in (0, 10, 20):
        spark.sql(f"INSERT INTO {t} SELECT id, 'x' FROM range({first}, {first + 10}) AS r(id)")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    start = current_snapshot_id(spark, t)
    spark.sql(f"DELETE FROM {t} WHERE id = 11")
    spark.sql(
        f"CALL spark_catalog.system.rewrite_position_delete_files(table => '{t}', options => map('rewrite-all', 'true'))"
    )
    spark.sql(f"UPDATE {t} SET v = 'y' WHERE id = 21")
    spark.sql(
        f"CALL spark_catalog.system.rewrite_data_files(table => '{t}', options => map('rewrite-all', 'true'))"
    )
    spark.sql(f"DELETE FROM {t} WHERE id = 2")
    change = create_change_view(spark, t, "mor_compacted_changes", start)
    assert change.path == "touched_files", change.reason
    assert_z_set_law(spark, change)
    net: Counter[tuple[Any, ...]] = Counter()
    for *row, weight, _seq in changes(spark, "mor_compacted_changes"):
        net[tuple(row)] += weight
    assert {row: w for row, w in net.items() if w} == {
        (2, "x"): -1,
        (11, "x"): -1,
        (21, "x"): -1,
        (21, "y"): 1,
    }


def test_merge_on_read_delete_files_from_before_the_range(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.mor_old"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    # One data file, so deleting one of its rows writes a delete file (not a metadata-only delete).
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM VALUES (1), (2) AS v(id)")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    start = current_snapshot_id(spark, t)
    assert start is not None and snapshots(spark, t)[start].has_delete_files
    spark.sql(f"INSERT INTO {t} VALUES (3)")  # an append, but the delete file is still live
    change = create_change_view(spark, t, "mor_old_changes", start)
    assert change.path == "touched_files", change.reason
    assert [r[:2] for r in changes(spark, "mor_old_changes")] == [(3, 1)]  # only the appended file is read
    assert_z_set_law(spark, change)


def test_merge_on_read_delete_file_removed_brings_rows_back(spark: Any, spark_schema: str) -> None:
    """Rows whose delete file went away without a replacement are live again: read with +1. A
    DELETE that merges the earlier delete file into its own counts only its new positions."""
    t = f"{spark_schema}.mor_revived"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg TBLPROPERTIES ({MERGE_ON_READ})")
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ id FROM range(1, 7) AS r(id)")
    spark.sql(f"DELETE FROM {t} WHERE id = 3")
    start = current_snapshot_id(spark, t)
    spark.sql(f"DELETE FROM {t} WHERE id = 5")  # replaces the delete file of 3 with one of 3 and 5
    loaded = load_table(spark, t)
    merged = list(loaded.currentSnapshot().addedDeleteFiles(loaded.io()))
    assert len(merged) == 1 and merged[0].recordCount() == 2
    loaded.newRowDelta().removeDeletes(merged[0]).commit()  # 3 and 5 are back
    assert snapshots(spark, t)[current_snapshot_id(spark, t)].operation != "replace"
    spark.sql(f"DELETE FROM {t} WHERE id = 6")
    change = create_change_view(spark, t, "mor_revived_changes", start)
    assert change.path == "touched_files", change.reason
    assert sorted(r[:2] for r in changes(spark, "mor_revived_changes")) == [(3, 1), (6, -1)]
    assert_z_set_law(spark, change)
    change.release and change.release()


def test_expired_start_snapshot_needs_a_full_refresh(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.expiring"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    start = current_snapshot_id(spark, t)
    spark.sql(f"INSERT INTO {t} VALUES (2)")
    spark.sql(f"INSERT INTO {t} VALUES (3)")
    end = current_snapshot_id(spark, t)
    spark.sql(
        f"CALL spark_catalog.system.expire_snapshots(table => '{t}', "
        "older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)"
    )
    assert start not in snapshots(spark, t)
    change = create_change_view(spark, t, "expiring_changes", start)
    assert change.needs_full_refresh and change.view is None
    assert change.end_snapshot_id == end
    assert "no longer in its history" in (change.reason or "")
    assert str(start) in (change.reason or "")


def test_replaced_table_falls_back_to_a_snapshot_diff(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.replaced"
    spark.sql(f"CREATE TABLE {t} USING iceberg AS SELECT 1 AS id, 'a' AS v UNION ALL SELECT 2, 'b'")
    before = current_version(spark, t)
    spark.sql(
        f"CREATE OR REPLACE TABLE {t} USING iceberg AS SELECT 2 AS id, 'b' AS v UNION ALL SELECT 3, 'c'"
    )
    after = current_version(spark, t)
    assert after.table_uuid == before.table_uuid  # same table, history kept, but a new lineage
    assert before.snapshot_id is not None and after.snapshot_id is not None
    assert snapshots_after(snapshots(spark, t), before.snapshot_id, after.snapshot_id) is None
    change = create_change_view(
        spark, t, "replaced_changes", before.snapshot_id, expected_table_uuid=before.table_uuid
    )
    assert change.path == "snapshot_diff"
    assert "not an ancestor" in (change.reason or "")
    assert sorted(r[:3] for r in changes(spark, "replaced_changes")) == [(1, "a", -1), (3, "c", 1)]
    assert_z_set_law(spark, change)


def test_dropped_and_recreated_table_needs_a_full_refresh(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.recreated"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    before = current_version(spark, t)
    spark.sql(f"DROP TABLE {t}")
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    change = create_change_view(
        spark, t, "recreated_changes", before.snapshot_id, expected_table_uuid=before.table_uuid
    )
    assert change.needs_full_refresh
    assert "dropped and re-created" in (change.reason or "")
    # Without the uuid, the unknown start snapshot still says FULL.
    assert create_change_view(spark, t, "recreated_changes", before.snapshot_id).needs_full_refresh


def test_schema_change_needs_a_full_refresh(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.evolving"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    start = current_snapshot_id(spark, t)
    spark.sql(f"ALTER TABLE {t} ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO {t} VALUES (2, 'x')")
    change = create_change_view(spark, t, "evolving_changes", start)
    assert change.needs_full_refresh
    assert "columns" in (change.reason or "")


def test_non_iceberg_source_needs_a_full_refresh(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.plain"
    spark.sql(f"CREATE TABLE {t} USING parquet AS SELECT 1 AS id")
    assert not is_iceberg_table(spark, t)
    change = create_change_view(spark, t, "plain_changes", None)
    assert change.needs_full_refresh
    assert "not an Iceberg table" in (change.reason or "")


def test_quoted_names(spark: Any, spark_schema: str) -> None:
    # The Hive metastore only takes letters, digits and _ in table names; columns are freer.
    parts = (spark_schema, "select")
    spark.sql(f"CREATE TABLE `{spark_schema}`.`select` (`the id` INT, `v.w` STRING) USING iceberg")
    spark.sql(f"INSERT INTO `{spark_schema}`.`select` VALUES (1, 'x')")
    start = current_snapshot_id(spark, parts)
    spark.sql(f"UPDATE `{spark_schema}`.`select` SET `v.w` = 'y'")
    change = create_change_view(spark, parts, "odd changes", start)
    assert change.path == "changelog", change.reason
    assert change.columns == ("the id", "v.w")
    assert sorted(r[:3] for r in changes(spark, "odd changes")) == [(1, "x", -1), (1, "y", 1)]


def test_versions_and_time_travel_views(spark: Any, spark_schema: str) -> None:
    t = f"{spark_schema}.versions"
    spark.sql(f"CREATE TABLE {t} (id INT) USING iceberg")
    first = current_version(spark, t)
    assert first.snapshot_id is None
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    second = current_version(spark, t)
    spark.sql(f"INSERT INTO {t} VALUES (2)")
    third = current_version(spark, t)
    assert isinstance(third, TableVersion) and third.table_uuid == first.table_uuid
    assert second.snapshot_id is not None and third.snapshot_id is not None
    assert snapshots(spark, t)[third.snapshot_id].parent_id == second.snapshot_id
    create_state_view(spark, t, second.snapshot_id, "as_of_second")
    create_state_view(spark, t, None, "before_anything")
    assert [tuple(r) for r in spark.sql("SELECT * FROM as_of_second").collect()] == [(1,)]
    assert spark.sql("SELECT * FROM before_anything").collect() == []
