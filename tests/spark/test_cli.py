"""`dbt-ivm status|history|refresh|drop|gc --spark-warehouse`: a Spark warehouse's stream tables seen,
refreshed in dependency order and removed without dbt, on real Spark + Iceberg."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dbt_ivm import cli
from dbt_ivm.report.state import FRESH
from dbt_ivm.spark import registrations
from dbt_ivm.spark.commit import UNSTAMPED
from tests.spark.oracle import assert_matches_query, refresh_and_check

pytestmark = pytest.mark.spark

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM {s}.orders GROUP BY customer"
BIG = "SELECT customer, total FROM {s}.totals WHERE total > 25"


@pytest.fixture
def warehouse(spark: Any) -> str:
    return str(spark.conf.get("spark.sql.warehouse.dir"))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _two_stream_tables(spark: Any, s: str) -> None:
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10),(2,'a',20),(3,'b',30)")
    refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "create totals")
    refresh_and_check(spark, s, "big", BIG.format(s=s), "create big")


def test_status_refresh_history_and_report(
    spark: Any, spark_schema: str, warehouse: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = spark_schema
    _two_stream_tables(spark, s)
    spark.sql(f"INSERT INTO {s}.orders VALUES (4,'c',40),(5,'a',1)")
    options = ("--spark-warehouse", warehouse, "--catalog-schema", f"{s}_ivm")

    code, out, _ = _run(capsys, "status", *options, "--json")
    assert code == 0
    status = {r["stream_table"]: r for r in json.loads(out)}
    assert status[f"{s}.totals"]["pending"] == {f"{s}.orders": 2}  # one commit of two rows
    assert status[f"{s}.big"]["pending"] == {f"{s}.totals": 0}
    assert status[f"{s}.totals"]["last_action"] == "CREATE"
    assert status[f"{s}.totals"]["staleness_seconds"] >= 0

    code, out, _ = _run(capsys, "status", *options)
    assert code == 0 and "PENDING CHANGES" in out and f"{s}.totals" in out

    code, out, _ = _run(capsys, "refresh", *options, "--json")
    assert code == 0, out
    outcomes = json.loads(out)
    # totals first, so big sees its new rows in the same pass
    assert [o["stream_table"] for o in outcomes] == [f"{s}.totals", f"{s}.big"]
    # big's batch (2 of totals' 3 rows changed) is over AUTO's threshold: FULL, with the reason
    assert [o["action"] for o in outcomes] == ["DIFFERENTIAL", "FULL"], outcomes
    assert "threshold" in outcomes[1]["reason"]
    assert_matches_query(spark, s, "totals", TOTALS.format(s=s), "after dbt-ivm refresh")
    assert_matches_query(spark, s, "big", BIG.format(s=s), "after dbt-ivm refresh")
    assert spark.sql(f"SELECT customer FROM {s}.big ORDER BY customer").collect()[-1][0] == "c"

    code, out, _ = _run(capsys, "history", f"{s}.totals", *options, "--json")
    assert code == 0
    history = json.loads(out)
    assert [(h["action"], h["initiated_by"]) for h in history][:1] == [("DIFFERENTIAL", "dbt-ivm refresh")]
    assert history[-1]["action"] == "CREATE"

    code, out, _ = _run(capsys, "refresh", *options, f"{s}.nothing")
    assert code == 1  # an unknown name is refused by name

    page = tmp_path / "report.html"  # the page (tests/postgres/test_report.py opens one in a browser)
    code, out, _ = _run(capsys, "report", *options, "--html", str(page))
    assert code == 0 and "2 stream table(s), 4 refreshes" in out, out
    text = page.read_text()
    graph = text[text.index('<svg class="graph"') : text.index("</svg>")]
    fills = dict(re.findall(r"<title>([\w.]+)</title><rect[^>]*fill=\"(#\w+)\"", graph))
    assert fills == {f"{s}.orders": "#ffffff", f"{s}.totals": FRESH.fill, f"{s}.big": FRESH.fill}
    assert graph.count('class="edge"') == 2  # orders -> totals -> big
    # A dot per refresh in each of the two panels (seconds, changes read).
    assert text.count('<svg class="refreshes"') == 2 and text.count("<circle") == 2 * 4


def test_status_through_the_dbt_profile(
    spark: Any, spark_schema: str, warehouse: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """#62 item 1: in a dbt project whose target is ivm_spark, `dbt-ivm` reads its warehouse from
    the profile (no --spark-warehouse)."""
    s = spark_schema
    _two_stream_tables(spark, s)
    (tmp_path / "dbt_project.yml").write_text("name: shop\nprofile: shop\n")
    spark_output = {"type": "ivm_spark", "method": "session", "host": "localhost", "warehouse": warehouse}
    profile = {"shop": {"target": "local", "outputs": {"local": {**spark_output, "schema": s}}}}
    (tmp_path / "profiles.yml").write_text(json.dumps(profile))
    code, out, err = _run(
        capsys, "status", "--project-dir", str(tmp_path), "--catalog-schema", f"{s}_ivm", "--json"
    )
    assert code == 0, err
    assert {r["stream_table"] for r in json.loads(out)} == {f"{s}.totals", f"{s}.big"}


def test_explain_a_model_of_a_manifest(
    spark: Any, spark_schema: str, warehouse: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """#62 item 2 on Spark: a model's compiled SQL from a manifest, planned on the warehouse."""
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    node = {"resource_type": "model", "name": "totals", "schema": s, "alias": "totals"}
    nodes = {
        "model.shop.totals": {
            **node,
            "compiled_code": TOTALS.format(s=s),
            "config": {"materialized": "stream_table"},
        },
        "model.shop.ranked": {
            **node,
            "name": "ranked",
            "alias": "ranked",
            "compiled_code": f"SELECT id, ROW_NUMBER() OVER (ORDER BY amount) AS r FROM {s}.orders",
        },
    }
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"nodes": nodes}))
    options = ("--manifest", str(manifest), "--spark-warehouse", warehouse)
    code, out, err = _run(capsys, "explain", "totals", *options)
    assert code == 0, err
    assert "differential: a batch is applied" in out and "aggregate GROUP BY customer" in out, out
    assert f"a batch that changes only {s}.orders: its change is read" in out and f"  Δ {s}.orders" in out, (
        out
    )
    code, out, err = _run(capsys, "explain", "ranked", *options, "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["differential"] is True and "no PARTITION BY" in found["reason"], found
    assert found["materialized"] == "?" and not spark.catalog.tableExists(f"{s}.totals")
    # What `auto` would do with a batch of N changed rows: the threshold against the rows read.
    spark.sql(f"INSERT INTO {s}.orders VALUES (1, 'a', 10), (2, 'b', 20)")
    code, out, err = _run(capsys, "explain", "totals", *options, "--changes", "1")
    assert code == 0 and "a batch of 1 changed rows: DIFFERENTIAL: within full_refresh_threshold" in out, (
        out,
        err,
    )
    code, out, err = _run(capsys, "explain", "totals", *options, "--changes", "2", "--json")
    batch = json.loads(out)["batch"]
    assert batch["action"] == "FULL" and "of the ~2 rows the query reads" in batch["reason"], batch


def test_status_says_why_the_next_refresh_recomputes(spark: Any, spark_schema: str) -> None:
    s = spark_schema
    _two_stream_tables(spark, s)
    catalog = f"{s}_ivm"

    def next_refresh() -> dict[str, tuple[str | None, str | None]]:
        return {
            r.stream_table: (r.next_action, r.next_reason)
            for r in registrations.list_registrations(spark, catalog)
        }

    assert set(next_refresh().values()) == {(None, None)}
    spark.sql(f"INSERT INTO {s}.totals VALUES ('z', 1, 1)")  # by hand
    assert next_refresh()[f"{s}.totals"] == ("FULL", UNSTAMPED)
    # The refresh does what status said, in the same words.
    result = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "after a write by hand")
    assert (result.action, result.reason) == ("FULL", UNSTAMPED)

    # The snapshot of orders that totals' frontier names expires.
    spark.sql(f"INSERT INTO {s}.orders VALUES (6,'d',6)")
    spark.sql(f"INSERT INTO {s}.orders VALUES (7,'d',7)")
    spark.sql(
        f"CALL spark_catalog.system.expire_snapshots(table => '{s}.orders', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    )
    action, why = next_refresh()[f"{s}.totals"]
    assert action == "FULL" and why is not None and "is no longer in its history" in why
    result = refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "after the frontier expired")
    assert (result.action, result.reason) == (action, why)
    assert next_refresh()[f"{s}.totals"] == (None, None)


def test_drop_and_gc(
    spark: Any, spark_schema: str, warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = spark_schema
    _two_stream_tables(spark, s)
    catalog = f"{s}_ivm"
    options = ("--spark-warehouse", warehouse, "--catalog-schema", catalog)

    code, out, _ = _run(capsys, "drop", f"{s}.big", *options, "--keep-table")
    assert code == 0 and "kept" in out
    assert spark.catalog.tableExists(f"{s}.big")
    assert [r.stream_table for r in registrations.list_registrations(spark, catalog)] == [f"{s}.totals"]

    code, _, err = _run(capsys, "drop", "big", *options)
    assert code == 1 and "schema.table" in err

    spark.sql(f"DROP TABLE {s}.totals")  # by hand: its registration stays until gc
    code, out, _ = _run(capsys, "status", *options)
    assert "NO" in out and "dbt-ivm gc" in out
    code, out, _ = _run(capsys, "gc", *options)
    assert code == 0 and f"unregistered {s}.totals" in out
    assert registrations.list_registrations(spark, catalog) == []


def test_a_cron_schedule_holds_a_refresh_back(
    spark: Any, spark_schema: str, warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = spark_schema
    spark.sql(f"CREATE TABLE {s}.orders (id int, customer string, amount int) USING iceberg")
    spark.sql(f"INSERT INTO {s}.orders VALUES (1,'a',10)")
    refresh_and_check(spark, s, "totals", TOTALS.format(s=s), "create", schedule="@yearly")
    spark.sql(f"INSERT INTO {s}.orders VALUES (2,'b',20)")
    options = ("--spark-warehouse", warehouse, "--catalog-schema", f"{s}_ivm")

    code, out, _ = _run(capsys, "status", *options, "--json")
    assert code == 0 and json.loads(out)[0]["schedule"] == "@yearly", out
    # Refreshed just now (Spark's naive local timestamps): the next 1 January is ahead.
    code, out, _ = _run(capsys, "refresh", *options)
    assert code == 0 and "not due" in out and "its schedule (0 0 1 1 * UTC) next fires at" in out, out
    code, out, _ = _run(capsys, "refresh", *options, f"{s}.totals", "--json")
    assert code == 0 and json.loads(out)[0]["action"] == "DIFFERENTIAL", out
    assert_matches_query(spark, s, "totals", TOTALS.format(s=s), "after a named refresh")
