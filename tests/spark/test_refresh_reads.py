"""What a Spark refresh learns without a query of its own: counts and key spans observed while the
rows are pinned (`observed`), and the registry and history read once per snapshot of their tables
(`snapshot_cache`). Each must answer exactly what a query of its own would."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F
from sqlglot import exp

from dbt_ivm.spark import observed, registry, snapshot_cache
from dbt_ivm.spark.apply import TempViews
from dbt_ivm.spark.runner import run_stream_table
from tests.spark.oracle import assert_matches_query, make_spec, refresh_and_check

pytestmark = pytest.mark.spark

COUNTS = [exp.func("COUNT", exp.Star()), exp.func("SUM", exp.column("v")), exp.func("MAX", exp.column("v"))]


def totals_over_orders(spark: Any, s: str) -> str:
    """`orders` (id, customer, amount) with two rows; the query of a stream table of totals over it."""
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 'a', 10), (2, 'b', 20)")
    return f"SELECT customer, SUM(amount) AS total FROM {s}.orders GROUP BY customer"


def copy_of_orders(spark: Any, s: str) -> str:
    """An empty `orders` (id, amount); the query of a stream table copying it."""
    spark.sql(f"CREATE TABLE {s}.orders (id int, amount int) USING iceberg")
    return f"SELECT id, amount FROM {s}.orders"


def test_metrics_come_out_of_the_pin(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each pin's metrics arrive with its job, every one of them: no query of their own follows.
    answers: list[dict[str, Any] | None] = []
    delivered = observed._delivered

    def recorded(observation: Any, names: list[str]) -> dict[str, Any] | None:
        answers.append(delivered(observation, names))
        return answers[-1]

    monkeypatch.setattr(observed, "_delivered", recorded)
    views = TempViews(spark)
    try:
        some, values = views.observed("some", views.frame("SELECT id AS v FROM range(1, 11)"), COUNTS)
        assert values == (10, 55, 10)
        assert spark.sql(f"SELECT count(*) FROM {some.sql('spark')}").first()[0] == 10
        _, none = views.observed("none", views.frame("SELECT id AS v FROM range(5) WHERE id > 9"), COUNTS)
        assert none == (0, None, None)
        assert [sorted(a or {}) for a in answers] == [["m0", "m1", "m2"]] * 2
    finally:
        views.drop()


def test_metrics_that_never_arrive_are_computed_from_the_pinned_rows(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An observation whose frame never ran: its listener never answers, the wait gives up.
    monkeypatch.setattr(observed, "WAIT_SECONDS", 0.2)
    idle = Observation("never_run")
    spark.range(3).observe(idle, F.count(F.lit(1)))
    assert observed._delivered(idle, ["count(1)"]) is None
    # Then a pin whose metrics do not arrive, or arrive without them (an empty row), answers from a
    # query over the rows it kept.
    for delivered in (None, {}):
        monkeypatch.setattr(observed, "_delivered", lambda observation, names, answer=delivered: answer)
        views = TempViews(spark)
        try:
            _, values = views.observed("late", views.frame("SELECT id AS v FROM range(1, 5)"), COUNTS)
            assert values == (4, 10, 4)
        finally:
            views.drop()


def test_pinned_rows_are_freed_when_a_refresh_ends(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    sql = totals_over_orders(spark, s)
    refresh_and_check(spark, s, "totals", sql, "create", refresh_mode="differential")

    def pinned_rdds() -> set[int]:  # by id: the JVM's cleaner may free earlier ones meanwhile
        return {int(rdd_id) for rdd_id in spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray()}

    before = pinned_rdds()
    spark.sql(f"UPDATE {s}.orders SET amount = 11 WHERE id = 1")
    spark.sql(f"INSERT INTO {s}.orders VALUES (3, 'c', 5)")
    result = run_stream_table(spark, make_spec(s, "totals", sql, refresh_mode="differential"))
    assert result.action == "DIFFERENTIAL"
    assert pinned_rdds() - before == set()  # a long PySpark application keeps no refresh's rows
    assert_matches_query(spark, s, "totals", sql)


def test_registrations_follow_writes_from_anywhere(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    sql = copy_of_orders(spark, s)
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 10)")
    catalog = make_spec(s, "copy", sql).catalog_schema
    refresh_and_check(spark, s, "copy", sql, "create")
    found = registry.lookup(spark, catalog, f"{s}.copy")
    assert found is not None and found.refresh_mode == "auto"
    found.sources.append("changed by the caller")  # a copy: the registry's own is untouched
    assert registry.lookup(spark, catalog, f"{s}.copy").sources == [f"{s}.orders"]  # type: ignore[union-attr]
    # Written by SQL, as another process would: the next lookup reads the new snapshot.
    spark.sql(f"UPDATE {catalog}.stream_tables SET refresh_mode = 'full' WHERE stream_table = '{s}.copy'")
    assert registry.lookup(spark, catalog, f"{s}.copy").refresh_mode == "full"  # type: ignore[union-attr]
    spark.sql(f"DELETE FROM {catalog}.stream_tables WHERE stream_table = '{s}.copy'")
    assert registry.lookup(spark, catalog, f"{s}.copy") is None


def test_recent_refreshes_match_the_history_table(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    sql = totals_over_orders(spark, s)
    catalog = make_spec(s, "totals", sql).catalog_schema
    name = f"{s}.totals"

    def fresh() -> list[Any]:
        registry._RECENT.forget()
        return registry.recent_refreshes(spark, catalog, name)

    # 'differential': on a busy machine AUTO may weigh a batch FULL, and the test names the actions.
    mode = "differential"
    refresh_and_check(spark, s, "totals", sql, "create", refresh_mode=mode)
    for step in range(3):
        spark.sql(f"INSERT INTO {s}.orders VALUES ({10 + step}, 'c', {step})")
        refresh_and_check(spark, s, "totals", sql, f"batch {step}", refresh_mode=mode)
        refresh_and_check(
            spark, s, "totals", sql, f"nothing new {step}", refresh_mode=mode
        )  # SKIP: not weighed
        kept = registry.recent_refreshes(spark, catalog, name)
        assert kept == fresh() and [r.action for r in kept] == ["DIFFERENTIAL"] * (step + 1) + ["CREATE"]
    # A row another process appended is read, not missed.
    spark.sql(
        f"INSERT INTO {catalog}.refresh_history VALUES (9000000000000000, '{name}', 'FULL', 0, 0, 0, 0, "
        "1.5, 'OK', NULL, NULL, 'elsewhere', current_timestamp(), current_timestamp(), NULL, NULL)"
    )
    newest = registry.recent_refreshes(spark, catalog, name)
    assert newest[0].action == "FULL" and newest[0].seconds == 1.5 and newest == fresh()


def test_a_history_row_is_appended_once_when_the_bookkeeping_after_it_fails(
    spark: Any, spark_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spark_schema
    sql = copy_of_orders(spark, s)
    catalog = make_spec(s, "copy", sql).catalog_schema
    name = f"{s}.copy"
    refresh_and_check(spark, s, "copy", sql, "create")
    registry.recent_refreshes(spark, catalog, name)  # kept, so the append's bookkeeping runs

    def lookup_fails(*_: Any) -> Any:  # as a metastore would, right after the commit
        raise RuntimeError("CommitFailedException: the metastore went away")

    monkeypatch.setattr(snapshot_cache, "load_table", lookup_fails)
    values = {"action": "FULL", "status": "OK", "duration_seconds": 2.5, "reason": "by the test"}
    registry.record(spark, catalog, name, values)
    monkeypatch.undo()
    appended = spark.sql(f"SELECT count(*) FROM {catalog}.refresh_history WHERE reason = 'by the test'")
    assert appended.first()[0] == 1  # not retried as a conflict
    assert registry.recent_refreshes(spark, catalog, name)[0].seconds == 2.5  # read afresh


def test_registrations_this_process_wrote_are_kept_as_stored(spark: Any, spark_schema: str) -> None:
    """A create appends its registration and a rebuild merges it; either way the registration this
    process keeps afterwards is the row a fresh read finds, and the next run reads no registry."""
    s = spark_schema
    sql = copy_of_orders(spark, s)
    catalog = make_spec(s, "copy", sql).catalog_schema
    name = f"{s}.copy"

    def fresh() -> Any:
        registry._REGISTRATIONS.forget()
        return registry.lookup(spark, catalog, name)

    for step, query in enumerate((sql, f"{sql} WHERE amount > 0")):  # a create, then a rebuild
        run_stream_table(spark, make_spec(s, "copy", query, refresh_mode="differential"))
        kept = registry.lookup(spark, catalog, name)
        assert kept is not None and kept.defining_query == query
        assert kept == fresh(), step
        statements: list[str] = []
        spark.sql(f"INSERT INTO {s}.orders VALUES ({step}, 5)")
        run_stream_table(
            spark, make_spec(s, "copy", query, refresh_mode="differential", on_statement=statements.append)
        )
        assert not [t for t in statements if "stream_tables" in t and t.lstrip().startswith("SELECT")]
        assert_matches_query(spark, s, "copy", query)
    assert spark.sql(f"SELECT count(*) FROM {catalog}.stream_tables").first()[0] == 1


def test_a_source_is_described_again_only_when_its_description_can_have_changed(
    spark: Any, spark_schema: str
) -> None:
    """New rows leave a source's description as it was (no DESCRIBE); a column added, its key
    declared anew, or the table replaced are described again, and followed."""
    s = spark_schema
    sql = f"SELECT * FROM {s}.orders"
    copy_of_orders(spark, s)
    refresh_and_check(spark, s, "copy", sql, "create", refresh_mode="differential")

    def described(write: str) -> tuple[bool, Any]:
        spark.sql(write)
        statements: list[str] = []
        spec = make_spec(s, "copy", sql, refresh_mode="differential", on_statement=statements.append)
        result = run_stream_table(spark, spec)
        assert_matches_query(spark, s, "copy", sql, result.summary())
        return any(t.startswith("DESCRIBE") and "orders" in t for t in statements), result

    assert described(f"INSERT INTO {s}.orders VALUES (1, 10), (2, 20)")[0] is False
    again, result = described(f"ALTER TABLE {s}.orders ADD COLUMN note string")
    assert again and result.action == "REBUILD"  # `select *` reads the new column
    again, result = described(f"ALTER TABLE {s}.orders SET TBLPROPERTIES ('dbt_ivm.primary_key'='id')")
    assert again and result.action in ("FULL", "REBUILD")  # rows now found by their key
    assert described(f"UPDATE {s}.orders SET amount = 11 WHERE id = 1")[0] is False
    spark.sql(f"DROP TABLE {s}.orders PURGE")
    again, result = described(f"CREATE TABLE {s}.orders (id int, amount int, note string) USING iceberg")
    assert again and result.action in ("FULL", "REBUILD")


def test_a_dbt_refresh_that_finds_nothing_commits_nothing_of_its_own(spark: Any, spark_schema: str) -> None:
    """Its history row rides along with the next row appended (one commit, in order), and whatever
    reads the history here (status, `dbt-ivm history`, the end of the dbt run) appends it first."""
    from dbt_ivm.spark import registrations
    from dbt_ivm.spark.iceberg import load_table

    s = spark_schema
    sql = copy_of_orders(spark, s)
    catalog = make_spec(s, "copy", sql).catalog_schema
    name = f"{s}.copy"
    refresh_and_check(spark, s, "copy", sql, "create", refresh_mode="differential")

    def commits() -> int:
        return len(list(load_table(spark, (catalog, "refresh_history")).snapshots()))

    def actions() -> list[str]:
        rows = spark.sql(f"SELECT action FROM {catalog}.refresh_history ORDER BY refresh_id").collect()
        return [r.action for r in rows]

    before = commits()
    for _ in range(2):
        assert (
            refresh_and_check(spark, s, "copy", sql, "nothing new", refresh_mode="differential").action
            == "SKIP"
        )
    assert commits() == before and actions() == ["CREATE"]
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 10)")
    refresh_and_check(spark, s, "copy", sql, "a batch", refresh_mode="differential")
    assert commits() == before + 1 and actions() == ["CREATE", "SKIP", "SKIP", "DIFFERENTIAL"]
    # Read back here: appended first (history, status); a refresh by PySpark appends its own at once.
    refresh_and_check(spark, s, "copy", sql, "nothing new", refresh_mode="differential")
    assert [h.action for h in registrations.history(spark, catalog, name, 10)][:2] == ["SKIP", "DIFFERENTIAL"]
    refresh_and_check(
        spark, s, "copy", sql, "nothing new", refresh_mode="differential", initiated_by="pyspark"
    )
    assert actions()[-1] == "SKIP" and commits() == before + 3
    refresh_and_check(spark, s, "copy", sql, "nothing new", refresh_mode="differential")
    registry.flush_all(spark)  # what the adapter's cleanup at the end of a dbt run does
    assert actions() == ["CREATE", "SKIP", "SKIP", "DIFFERENTIAL", "SKIP", "SKIP", "SKIP"]
