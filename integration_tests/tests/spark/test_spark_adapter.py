"""The `ivm_spark` adapter itself: plugin wiring, credentials, file_format iceberg by default (seeds,
tables, incremental merge), atomic table replacement, views that follow their SQL, hidden
bookkeeping columns in docs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dbt.adapters.ivm_spark import IvmSparkAdapter, IvmSparkCredentials, Plugin
from dbt.include import ivm
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.util import get_artifact, read_file, run_dbt, run_dbt_and_capture, write_file

from dbt_ivm.spark.iceberg import current_version
from dbt_ivm.spark.refresh_steps import REWRITTEN

pytestmark = pytest.mark.spark


def test_plugin_wiring() -> None:
    assert Plugin.adapter is IvmSparkAdapter
    assert Plugin.credentials is IvmSparkCredentials
    assert Plugin.dependencies == ["spark"]
    assert Path(Plugin.include_path) == Path(ivm.PACKAGE_PATH)  # type: ignore[attr-defined]
    assert IvmSparkAdapter.type() == "ivm_spark"
    assert IvmSparkAdapter.ConnectionManager.TYPE == "ivm_spark"
    info = IvmSparkAdapter.get_adapter_run_info(None)  # type: ignore[arg-type]
    assert info.adapter_name == "ivm_spark" and info.adapter_version


def test_session_credentials_need_no_host(tmp_path: Path) -> None:
    credentials = IvmSparkCredentials.from_dict(
        {"method": "session", "schema": "analytics", "warehouse": str(tmp_path), "master": "local[3]"}
    )
    assert credentials.type == "ivm_spark"
    settings = credentials.session_settings()
    assert (settings.warehouse_path(), settings.master) == (tmp_path.resolve(), "local[3]")
    assert settings.conf["spark.sql.ansi.enabled"] == "false"  # dbt-spark's server-side default
    assert "warehouse" in credentials._connection_keys()


SEED = "id,name\n1,alice\n2,bob\n"
TABLE_MODEL = "select id, name, 1 as {{ 'generation' }} from {{ ref('people') }}"
VIEW_MODEL = "select id from {{ ref('people_table') }} where id = 1"
INCREMENTAL_MODEL = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy='merge') }}
select id, name from {{ ref('people') }}
"""
HIDDEN_MODEL = "{{ config(materialized='table') }} select 1 as id, 7 as __ivm_weight"
# A table over the seed that tests change by hand, as a source of stream tables.
PEOPLE_SOURCE_MODEL = "{{ config(materialized='table') }} select id, name from {{ ref('people') }}"
PARQUET_MODEL = "{{ config(materialized='table', file_format='parquet') }} select 1 as id"
# A stream table with a hidden row count per group.
NAME_COUNTS_MODEL = "{{ config(materialized='stream_table') }} select name, sum(id) as total from {{ ref('people') }} group by name"


class TestIcebergByDefault:
    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"people.csv": SEED}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "people_table.sql": "{{ config(materialized='table') }} " + TABLE_MODEL,
            "people_view.sql": VIEW_MODEL,
            "people_incremental.sql": INCREMENTAL_MODEL,
            "hidden.sql": HIDDEN_MODEL,
            "people_parquet.sql": PARQUET_MODEL,
            "name_counts.sql": NAME_COUNTS_MODEL,
        }

    def describe(self, project: Any, name: str) -> dict[str, str]:
        rows = project.run_sql(f"describe table extended {project.test_schema}.{name}", fetch="all")
        return {str(r[0]): str(r[1]) for r in rows}

    def test_seeds_tables_and_views(self, project: Any, spark: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run"])
        for name in ("people", "people_table", "people_incremental", "hidden"):
            assert self.describe(project, name)["Provider"] == "iceberg", name
        assert self.describe(project, "people_view")["Type"] == "VIEW"
        assert self.describe(project, "people_parquet")["Provider"] == "parquet"  # explicit config wins
        schema = project.adapter.Relation.create(schema=project.test_schema).without_identifier()
        with project.adapter.connection_named("_check"):
            listed = project.adapter.list_relations_without_caching(schema)  # what a run starts from
        by_name = {r.identifier: r for r in listed}
        assert by_name["people_table"].is_iceberg and by_name["people"].is_iceberg
        assert by_name["people_view"].is_view and not by_name["people_view"].is_iceberg

        # A table model is replaced in place (CREATE OR REPLACE): the same Iceberg table, new snapshot.
        table = f"{project.test_schema}.people_table"
        before = current_version(spark, table)
        run_dbt(["run", "--select", "people_table"])
        after = current_version(spark, table)
        assert after.table_uuid == before.table_uuid and after.snapshot_id != before.snapshot_id

        # A view model whose SQL changed shows the new SQL.
        assert project.run_sql(f"select id from {project.test_schema}.people_view", fetch="all") == [(1,)]
        write_file(VIEW_MODEL.replace("id = 1", "id = 2"), project.project_root, "models", "people_view.sql")
        run_dbt(["run", "--select", "people_view"])
        assert project.run_sql(f"select id from {project.test_schema}.people_view", fetch="all") == [(2,)]

        # Incremental merge (file_format iceberg by default): a second run upserts, no duplicates.
        run_dbt(["run", "--select", "people_incremental"])
        count = project.run_sql(f"select count(*) from {project.test_schema}.people_incremental", fetch="one")
        assert count[0] == 2

    def test_docs_hide_bookkeeping_columns(self, project: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["docs", "generate"])
        catalog = json.loads((Path(project.project_root) / "target" / "catalog.json").read_text())
        nodes = {key.split(".")[-1]: node for key, node in catalog["nodes"].items()}
        # Only a stream table's own bookkeeping is left out: a table model's column named like it is
        # a column of that table.
        assert list(nodes["hidden"]["columns"]) == ["id", "__ivm_weight"]
        assert list(nodes["name_counts"]["columns"]) == ["name", "total"]
        assert set(nodes["people_table"]["columns"]) == {"id", "name", "generation"}
        assert nodes["people_view"]["metadata"]["type"] == "view"


def thrift_target(port: int) -> dict[str, Any]:
    """A profile target reaching the test session's Thrift server."""
    return {"type": "ivm_spark", "method": "thrift", "host": "127.0.0.1", "port": port, "user": "dbt"}


class TestThriftMethodIvmSpark(BaseSimpleMaterializations):
    """`method: thrift` works as in dbt-spark: here against a Spark Thrift server on the test session,
    so seeds and table models land in the same Iceberg catalog (file_format iceberg by default)."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, thrift_server: int) -> dict[str, Any]:
        return {**thrift_target(thrift_server), "threads": 1, "poll_interval": 0}

    def test_base(self, project: Any) -> None:
        super().test_base(project)
        rows = project.run_sql(f"describe table extended {project.test_schema}.swappable", fetch="all")
        assert {str(r[0]): str(r[1]) for r in rows}["Provider"] == "iceberg"


class TestThriftStreamTablesNeedTheMetastore:
    """A stream table through `method: thrift` without `metastore_uris` fails naming what to add."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, thrift_server: int) -> dict[str, Any]:
        return thrift_target(thrift_server)

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {"kept.sql": "{{ config(materialized='stream_table') }} select 1 as id"}

    def test_run_names_the_missing_setting(self, project: Any) -> None:
        results = run_dbt(["run"], expect_pass=False)
        message = str(results.results[0].message)
        assert "metastore_uris" in message and "method: thrift" in message, message


def test_thrift_credentials_describe_the_refresh_driver(tmp_path: Path) -> None:
    credentials = IvmSparkCredentials.from_dict(
        {
            "method": "thrift",
            "host": "thrift.internal",
            "schema": "analytics",
            "warehouse": str(tmp_path),
            "master": "spark://master.internal:7077",
            "metastore_uris": "thrift://metastore.internal:9083",
            "server_side_parameters": {"spark.sql.shuffle.partitions": "8"},
            "refresh_driver_conf": {"spark.executor.memory": "2g"},
        }
    )
    assert credentials.has_refresh_driver
    settings = credentials.session_settings()
    assert (settings.master, settings.metastore_uris) == (
        "spark://master.internal:7077",
        "thrift://metastore.internal:9083",
    )
    # server_side_parameters belong to the Thrift server's sessions, not to the refresh driver.
    assert dict(settings.conf) == {"spark.executor.memory": "2g"}
    without = IvmSparkCredentials.from_dict({"method": "thrift", "host": "h", "schema": "analytics"})
    assert not without.has_refresh_driver


class TestDifferentialIsJudgedAtCompile:
    """refresh_mode='differential' on a query the engine cannot maintain fails `dbt compile`."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"people.csv": SEED}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        config = "{{ config(materialized='stream_table', refresh_mode='differential') }} "
        return {
            "top_people.sql": config + "select id, name from {{ ref('people') }} limit 1",  # no ORDER BY
            "people_kept.sql": config + "select id, name from {{ ref('people') }} where id > 1",
        }

    def test_compile_fails_naming_the_construct(self, project: Any) -> None:
        run_dbt(["seed"])
        with pytest.raises(Exception, match="LIMIT") as refused:
            run_dbt(["compile", "--select", "top_people"])
        assert "top_people" in str(refused.value)
        run_dbt(["compile", "--select", "people_kept"])


class TestImmediateIsRefusedAtCompile:
    """Spark has no triggers: refresh_mode='immediate' fails `dbt compile`, saying so."""

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "right_now.sql": "{{ config(materialized='stream_table', refresh_mode='immediate') }} select 1 as id",
        }

    def test_compile_fails_naming_the_reason(self, project: Any) -> None:
        with pytest.raises(Exception, match="no triggers") as refused:
            run_dbt(["compile", "--select", "right_now"])
        assert "right_now" in str(refused.value) and "refresh_mode='immediate'" in str(refused.value)


STREAM_TABLE = "{{ config(materialized='stream_table') }} "


class OverPeopleSource:
    """A project over the `people` seed, with a table model over it that tests change by hand."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"people.csv": SEED}


class TestStreamTablesOutliveSchemaChanges(OverPeopleSource):
    """Through dbt, as a user meets them: `select *` over a source that gains a column, a column of the
    stream table renamed by hand, a date function — each run succeeds (rebuilding, with the reason,
    when the table cannot be kept), and the table equals its query; a job failing in the JVM is
    reported with Spark's own message; dbt-spark's `tblproperties` config reaches the table."""

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        config = STREAM_TABLE
        return {
            "people_source.sql": PEOPLE_SOURCE_MODEL,
            "everyone.sql": config + "select * from {{ ref('people_source') }}",
            "ages.sql": config
            + "select id, datediff(date'2024-03-01', date'2024-01-01') + id as days from {{ ref('people_source') }}",
            "merged_on_read.sql": "{{ config(materialized='stream_table', "
            "tblproperties={'write.merge.mode': 'merge-on-read', 'write.delete.mode': 'merge-on-read'}) }} "
            "select id, name from {{ ref('people_source') }} where id > 1",
            "guarded.sql": config
            + "select id, case when id < 3 then name else raise_error('id out of range') end as name "
            "from {{ ref('people_source') }}",
        }

    def same(self, project: Any, model: str, query: str) -> None:
        s = project.test_schema
        expected = project.run_sql(query.format(s=s), fetch="all")
        columns = ", ".join(f"`{c}`" for c in expected[0].asDict()) if expected else "*"
        stored = project.run_sql(f"select {columns} from {s}.{model}", fetch="all")
        assert sorted(map(tuple, stored)) == sorted(map(tuple, expected)), (model, stored, expected)

    def test_runs_succeed_and_match(self, project: Any) -> None:
        s = project.test_schema
        run_dbt(["seed"])
        run_dbt(["run"])
        self.same(project, "everyone", "select * from {s}.people_source")
        self.same(project, "ages", "select id, 60 + id as days from {s}.people_source")
        held = dict(project.run_sql(f"show tblproperties {s}.merged_on_read", fetch="all"))
        assert held["write.merge.mode"] == "merge-on-read" and held["format-version"] == "2", held
        # A source gains a column, as a hand-run migration would add it (not through dbt).
        project.run_sql(f"alter table {s}.people_source add column city string")
        project.run_sql(f"insert into {s}.people_source values (3, 'carol', 'oslo')")
        run_dbt(["run", "--select", "everyone", "ages"])
        # A job that fails in the JVM: the run summary carries Spark's message, not py4j's.
        results = run_dbt(["run", "--select", "guarded"], expect_pass=False)
        message = str(results[0].message)
        assert "model guarded" in message and "id out of range" in message, message
        assert "An error occurred while calling" not in message, message
        self.same(project, "everyone", "select * from {s}.people_source")
        self.same(project, "ages", "select id, 60 + id as days from {s}.people_source")
        run_dbt(["run", "--select", "everyone"])
        # Someone renames a column of the stream table itself.
        project.run_sql(f"alter table {s}.everyone rename column name to full_name")
        run_dbt(["run", "--select", "everyone"])
        self.same(project, "everyone", "select * from {s}.people_source")
        run_dbt(["run", "--select", "everyone"])


class TestRunsReadLikeDbtModels(OverPeopleSource):
    """On Spark as on PostgreSQL: adapter_response fields, NO-OP, dbt's invocation_id in the history,
    --empty keeping a stream table's rows (and building an empty table for a new one), a contract's
    types checked."""

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        config = STREAM_TABLE
        return {
            "people_source.sql": PEOPLE_SOURCE_MODEL,
            "named.sql": config + "select id, upper(name) as name from {{ ref('people_source') }}",
            "later.sql": config + "select id, name from {{ ref('people_source') }} where id > 1",
            "schema.yml": "version: 2\nmodels:\n  - name: later\n    config:\n      contract: {enforced: true}\n"
            "    columns:\n      - name: id\n        data_type: bigint\n      - name: name\n        data_type: string\n",
        }

    def test_responses_history_empty_and_contract(self, project: Any) -> None:
        s = project.test_schema
        run_dbt(["seed"])
        run_dbt(["run", "--select", "people_source"])
        created = run_dbt(["run", "--select", "named"]).results[0].adapter_response
        assert (created["code"], created["action"], created["rows_inserted"]) == ("CREATE", "CREATE", 2)
        invocation = get_artifact(project.project_root, "target", "run_results.json")["metadata"][
            "invocation_id"
        ]
        history = project.run_sql(
            f"select action, invocation_id from dbt_ivm.refresh_history where stream_table = '{s}.named'",
            fetch="all",
        )
        assert [tuple(r) for r in history] == [("CREATE", invocation)]
        nothing = run_dbt(["run", "--select", "named"]).results[0]
        assert nothing.adapter_response["code"] == "NO-OP" and nothing.message.startswith("NO-OP")
        # Its history row waited for the end of the run (no Iceberg commit of its own), then was appended.
        actions = project.run_sql(
            f"select action from dbt_ivm.refresh_history where stream_table = '{s}.named' order by refresh_id",
            fetch="all",
        )
        assert [r[0] for r in actions] == ["CREATE", "SKIP"], actions

        project.run_sql(f"insert into {s}.people_source values (3, 'carol')")
        project.run_sql(f"delete from {s}.people_source where id = 1")
        changed = run_dbt(["run", "--select", "named"]).results[0].adapter_response
        # 2 changes to 2 rows pass the threshold: FULL; nothing reads `named`, so every row is rewritten
        # in one overwrite, and the response counts the rows written and removed.
        counts = (changed["rows_inserted"], changed["rows_deleted"], changed["changes_read"])
        assert counts == (2, 2, 2) and REWRITTEN in changed["_message"], changed
        ran = read_file(project.project_root, "target", "run", "test", "models", "named.sql")
        assert "VERSION AS OF" in ran, ran[:2000]  # the sources as of the batch's end

        # --empty: the stream table keeps its rows; a new one is an empty table until the next run.
        kept = run_dbt(["run", "--select", "named", "later", "--empty"]).results
        by_model = {r.node.name: r for r in kept}
        assert by_model["named"].adapter_response["code"] == "NO-OP"
        assert project.run_sql(f"select count(*) from {s}.named", fetch="one")[0] == 2
        assert project.run_sql(f"select count(*) from {s}.later", fetch="one")[0] == 0
        built = run_dbt(["run", "--select", "named", "later"]).results
        codes = {r.node.name: r.adapter_response["code"] for r in built}
        assert codes == {"named": "NO-OP", "later": "REBUILD"}, codes
        stored = sorted(map(tuple, project.run_sql(f"select id, name from {s}.later", fetch="all")))
        assert stored == [(2, "bob"), (3, "carol")], stored

        # The contract's declared types are checked on every run.
        yml = read_file(project.project_root, "models", "schema.yml")
        write_file(
            yml.replace("data_type: string", "data_type: int"), project.project_root, "models", "schema.yml"
        )
        failed = run_dbt(["run", "--select", "later"], expect_pass=False).results[0]
        assert "contract" in failed.message.lower() and "data type mismatch" in failed.message, failed.message
        write_file(yml, project.project_root, "models", "schema.yml")

        # A stream-table model deleted from the project: the next run of the project unregisters it
        # (#58 item 5), keeping its table.
        (Path(project.project_root) / "models" / "named.sql").unlink()
        _, logs = run_dbt_and_capture(["run", "--select", "later"])
        assert f"stream table {s}.named: unregistered, no enabled model of project" in logs, logs
        registered = project.run_sql("select table_name from dbt_ivm.stream_tables", fetch="all")
        assert "named" not in {r[0] for r in registered}, registered
        assert project.run_sql(f"select count(*) from {s}.named", fetch="one")[0] == 2
