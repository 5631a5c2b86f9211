"""PostgreSQL: the `stream_table` materialization through dbt, shaped like dbt-tests-adapter's `MaterializedViewBasic`.

Every class gets its own schema (dbt-tests-adapter's `project` fixture) on the session's server.
"""

from __future__ import annotations

from typing import Any

import pytest
from dbt.tests.util import get_artifact, read_file, run_dbt, run_dbt_and_capture, write_file

pytestmark = pytest.mark.postgres

CATALOG = "dbt_ivm"

SEED_CSV = """
id,customer_id,amount
1,1,10
2,1,20
3,2,30
""".lstrip()

CUSTOMER_TOTALS_SQL = """
{{ config(materialized='stream_table') }}
select customer_id, sum(amount) as total, count(*) as order_count
from {{ ref('orders') }}
group by customer_id
"""

ORDERS_COPY_SQL = """
{{ config(materialized='stream_table') }}
select id, customer_id, amount from {{ ref('orders') }}
"""

PLAIN_TABLE_SQL = """
{{ config(materialized='table') }}
select id, amount from {{ ref('orders') }}
"""

PLAIN_VIEW_SQL = """
{{ config(materialized='view') }}
select id, amount from {{ ref('orders') }}
"""


def get_model_file(project: Any, name: str) -> str:
    return str(read_file(project.project_root, "models", f"{name}.sql"))


def set_model_file(project: Any, name: str, sql: str) -> None:
    write_file(sql, project.project_root, "models", f"{name}.sql")


def relation_kind(project: Any, name: str) -> str | None:
    rows = project.run_sql(
        "select c.relkind from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        f"where n.nspname = '{{schema}}' and c.relname = '{name}'",
        fetch="all",
    )
    return {"r": "table", "v": "view", "m": "materialized_view"}.get(rows[0][0]) if rows else None


def is_registered(project: Any, name: str) -> bool:
    rows = project.run_sql(
        f'select count(*) from "{CATALOG}"."stream_tables" '
        f"where schema_name = '{{schema}}' and table_name = '{name}'",
        fetch="one",
    )
    return int(rows[0]) == 1


def user_columns(project: Any, name: str) -> list[str]:
    rows = project.run_sql(
        "select column_name from information_schema.columns "
        f"where table_schema = '{{schema}}' and table_name = '{name}' "
        "and column_name not like '\\_\\_ivm\\_%' order by ordinal_position",
        fetch="all",
    )
    return [row[0] for row in rows]


def all_columns(project: Any, name: str) -> list[str]:
    rows = project.run_sql(
        "select column_name from information_schema.columns "
        f"where table_schema = '{{schema}}' and table_name = '{name}' order by ordinal_position",
        fetch="all",
    )
    return [row[0] for row in rows]


def differences(project: Any, name: str, query: str) -> int:
    """Rows the stream table and its query disagree on, both ways, counting duplicates."""
    columns = ", ".join(f'"{c}"' for c in user_columns(project, name))
    stored = f'select {columns} from "{project.test_schema}"."{name}"'
    fresh = f"select {columns} from ({query}) as q"
    total = 0
    for left, right in ((stored, fresh), (fresh, stored)):
        row = project.run_sql(f"select count(*) from ({left} except all {right}) as d", fetch="one")
        total += int(row[0])
    return total


def customer_totals_query(project: Any) -> str:
    return (
        f'select customer_id, sum(amount) as total, count(*) as order_count from "{project.test_schema}"."orders" '
        "group by customer_id"
    )


def only_result(results: Any) -> Any:
    assert len(results.results) == 1
    return results.results[0]


class TestStreamTableBasic:
    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "customer_totals.sql": CUSTOMER_TOTALS_SQL,
            "was_table.sql": PLAIN_TABLE_SQL,
            "was_view.sql": PLAIN_VIEW_SQL,
            "becomes_table.sql": ORDERS_COPY_SQL,
        }

    @pytest.fixture(scope="class", autouse=True)
    def seeded(self, project: Any) -> None:
        run_dbt(["seed"])

    def test_create_rerun_and_full_refresh(self, project: Any) -> None:
        created = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert created.adapter_response["code"] == "CREATE"
        assert "CREATE +2" in created.message
        assert relation_kind(project, "customer_totals") == "table"
        assert is_registered(project, "customer_totals")
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0

        # A re-run with no source changes writes nothing.
        again = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert again.adapter_response["rows_affected"] == 0

        # Source changes reach the stream table on the next run, and only they are written.
        project.run_sql(f'insert into "{project.test_schema}"."orders" values (4, 3, 40)')
        project.run_sql(f'update "{project.test_schema}"."orders" set amount = 25 where id = 2')
        project.run_sql(f'delete from "{project.test_schema}"."orders" where id = 3')
        refreshed = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert refreshed.adapter_response["code"] in ("FULL", "DIFFERENTIAL")
        assert refreshed.adapter_response["rows_affected"] == 3  # customer 1 updated, 2 deleted, 3 inserted
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0

        # --full-refresh rebuilds from scratch.
        rebuilt = only_result(run_dbt(["run", "--select", "customer_totals", "--full-refresh"]))
        assert rebuilt.adapter_response["code"] == "REBUILD"
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0

        history = project.run_sql(
            f'select action, status from "{CATALOG}"."refresh_history" '
            "where stream_table = '{schema}.customer_totals' order by refresh_id",
            fetch="all",
        )
        actions = [row[0] for row in history]
        assert actions[0] == "CREATE"
        assert actions[-1] == "REBUILD"
        assert all(row[1] == "OK" for row in history)

    @pytest.mark.parametrize("model", ["was_table", "was_view"])
    def test_replaces_table_and_view(self, project: Any, model: str) -> None:
        run_dbt(["run", "--select", model])
        before = relation_kind(project, model)
        assert before in ("table", "view")
        original = get_model_file(project, model)
        set_model_file(
            project, model, original.replace(f"materialized='{before}'", "materialized='stream_table'")
        )
        try:
            result = only_result(run_dbt(["run", "--select", model]))
            assert result.adapter_response["code"] in ("CREATE", "REBUILD")
            assert relation_kind(project, model) == "table"
            assert is_registered(project, model)
            query = f'select id, amount from "{project.test_schema}"."orders"'
            assert differences(project, model, query) == 0
        finally:
            set_model_file(project, model, original)

    @pytest.mark.parametrize("replacement", ["table", "view"])
    def test_table_and_view_replace_stream_table(self, project: Any, replacement: str) -> None:
        run_dbt(["run", "--select", "becomes_table"])
        assert is_registered(project, "becomes_table")
        original = get_model_file(project, "becomes_table")
        set_model_file(
            project,
            "becomes_table",
            original.replace("materialized='stream_table'", f"materialized='{replacement}'"),
        )
        try:
            run_dbt(["run", "--select", "becomes_table"])
            assert relation_kind(project, "becomes_table") == replacement
            assert not is_registered(project, "becomes_table")
        finally:
            set_model_file(project, "becomes_table", original)
        # And back: the stream table is created afresh.
        result = only_result(run_dbt(["run", "--select", "becomes_table"]))
        assert result.adapter_response["code"] in ("CREATE", "REBUILD")
        assert relation_kind(project, "becomes_table") == "table"
        assert is_registered(project, "becomes_table")


def totals_model(setting: str) -> str:
    return CUSTOMER_TOTALS_SQL.replace(
        "materialized='stream_table'", f"materialized='stream_table', on_configuration_change='{setting}'"
    )


class TestOnConfigurationChange:
    """dbt's meaning of on_configuration_change: a changed query always rebuilds; a changed
    stream-table config (here refresh_mode) is applied, kept as registered with a warning, or fails.

    One model per setting, in one project, so one `dbt run` exercises all three.
    """

    settings = ("apply", "continue", "fail")

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {f"{setting}_totals.sql": totals_model(setting) for setting in self.settings}

    @staticmethod
    def query(project: Any, filtered: bool) -> str:
        query = customer_totals_query(project)
        return query.replace("group by", "where amount > 15 group by") if filtered else query

    def edit_models(self, project: Any, old: str, new: str) -> None:
        for setting in self.settings:
            original = get_model_file(project, f"{setting}_totals")
            set_model_file(project, f"{setting}_totals", original.replace(old, new))

    def test_changed_sql_and_changed_config(self, project: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run"])
        # A changed query: rebuilt, whatever the setting.
        self.edit_models(project, "group by", "where amount > 15 group by")
        results = run_dbt(["run"])
        for result in results.results:
            assert result.adapter_response["code"] == "REBUILD", result.node.name
            assert differences(project, result.node.name, self.query(project, filtered=True)) == 0

        # A changed config.
        self.edit_models(
            project, "materialized='stream_table'", "materialized='stream_table', refresh_mode='full'"
        )
        project.run_sql(f'insert into "{project.test_schema}"."orders" values (4, 3, 40)')
        results, logs = run_dbt_and_capture(["run"], expect_pass=False)
        by_model = {result.node.name: result for result in results.results}
        # apply: refreshed as refresh_mode='full' from now on
        assert by_model["apply_totals"].adapter_response["code"] == "FULL"
        assert differences(project, "apply_totals", self.query(project, filtered=True)) == 0
        # continue: a warning naming the change, and the registered mode still refreshes it
        assert "refresh_mode: 'auto' -> 'full'" in logs and "on_configuration_change='continue'" in logs
        assert "model continue_totals: model continue_totals" not in logs  # named once
        assert by_model["continue_totals"].adapter_response["code"] == "DIFFERENTIAL"
        assert differences(project, "continue_totals", self.query(project, filtered=True)) == 0
        # fail: an error naming the model and the change; the table is left as it was
        failed = by_model["fail_totals"]
        assert failed.status == "error"
        assert "fail_totals" in failed.message and "refresh_mode: 'auto' -> 'full'" in failed.message
        assert "on_configuration_change='fail'" in failed.message
        assert differences(project, "fail_totals", self.query(project, filtered=True)) > 0

        # --full-refresh applies the config whatever the setting; later runs have nothing to refuse.
        run_dbt(["run", "--full-refresh"])
        results = run_dbt(["run"])
        for result in results.results:
            assert differences(project, result.node.name, self.query(project, filtered=True)) == 0


DOCS_SCHEMA_YML = """
version: 2
sources:
  - name: shop
    schema: "{{ target.schema }}"
    tables:
      - name: orders
models:
  - name: source_totals
    columns:
      - name: customer_id
        description: The customer.
"""

SOURCE_TOTALS_SQL = """
{{ config(materialized='stream_table') }}
select o.customer_id, sum(o.amount) as total, count(*) as order_count, max(c.amount) as largest
from {{ source('shop', 'orders') }} as o
join {{ ref('orders') }} as c on c.id = o.id
group by o.customer_id
"""


class TestStreamTableDocsGenerate:
    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "source_totals.sql": SOURCE_TOTALS_SQL,
            "schema.yml": DOCS_SCHEMA_YML,
            # A table that selected a stream table's bookkeeping (as `select *` from one would).
            "copied.sql": "{{ config(materialized='table') }} select 1 as id, 2 as __ivm_count",
        }

    def test_docs_generate(self, project: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["docs", "generate"])

        manifest = get_artifact(project.project_root, "target", "manifest.json")
        node = manifest["nodes"]["model.test.source_totals"]
        assert node["config"]["materialized"] == "stream_table"
        assert "source.test.shop.orders" in node["depends_on"]["nodes"]
        assert "seed.test.orders" in node["depends_on"]["nodes"]

        catalog = get_artifact(project.project_root, "target", "catalog.json")
        entry = catalog["nodes"]["model.test.source_totals"]
        assert entry["metadata"]["type"] == "BASE TABLE"
        assert sorted(entry["columns"]) == ["customer_id", "largest", "order_count", "total"]
        # The catalog hides the engine's bookkeeping columns (if this layout has any) and nothing else.
        hidden = [c for c in all_columns(project, "source_totals") if c.startswith("__ivm_")]
        assert set(all_columns(project, "source_totals")) - set(hidden) == set(entry["columns"])
        # Any other relation keeps every column it has, named like ours or not.
        assert list(catalog["nodes"]["model.test.copied"]["columns"]) == ["id", "__ivm_count"]


class TestStreamTableInvalidQuery:
    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "broken_totals.sql": (
                "{{ config(materialized='stream_table') }}\n"
                "select customer_id, sum(no_such_column) as total from {{ ref('orders') }} group by customer_id\n"
            )
        }

    def test_invalid_query_names_the_model(self, project: Any) -> None:
        run_dbt(["seed"])
        results = run_dbt(["run"], expect_pass=False)
        result = only_result(results)
        assert result.status == "error"
        assert "broken_totals" in result.message
        assert "no_such_column" in result.message
        assert relation_kind(project, "broken_totals") is None


class TestDifferentialIsJudgedAtCompile:
    """refresh_mode='differential' on a query the engine cannot maintain fails `dbt compile`, naming
    the model and the construct; the same query in 'auto' compiles (and refreshes FULL)."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        body = "select id, amount from {{ ref('orders') }} limit 2\n"  # LIMIT without ORDER BY
        return {
            "top_orders.sql": "{{ config(materialized='stream_table', refresh_mode='differential') }}\n"
            + body,
            "top_orders_auto.sql": "{{ config(materialized='stream_table') }}\n" + body,
            "orders_left.sql": (
                "{{ config(materialized='stream_table', refresh_mode='differential') }}\n"
                "select o.id, t.total from {{ ref('orders') }} o left join "
                "(select customer_id, sum(amount) as total from {{ ref('orders') }} group by customer_id) t "
                "on t.customer_id = o.customer_id\n"
            ),
        }

    def test_compile_fails_naming_the_construct(self, project: Any) -> None:
        run_dbt(["seed"])
        # dbt compile stops at the first node that fails to compile.
        with pytest.raises(Exception, match="LIMIT") as refused:
            run_dbt(["compile", "--select", "top_orders"])
        assert "top_orders" in str(refused.value) and "Compilation Error" in str(refused.value)
        failed = only_result(run_dbt(["run", "--select", "top_orders"], expect_pass=False))
        assert failed.status == "error" and "LIMIT" in failed.message
        assert relation_kind(project, "top_orders") is None
        run_dbt(["compile", "--select", "top_orders_auto", "orders_left"])
        run_results = run_dbt(["run", "--select", "orders_left", "top_orders_auto"])
        assert {r.node.name: r.status for r in run_results} == {
            "orders_left": "success",
            "top_orders_auto": "success",
        }


class TestStreamTablesSharingASource:
    """Two stream tables over one source, created by one `dbt run` on two threads."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {"customer_totals.sql": CUSTOMER_TOTALS_SQL, "orders_copy.sql": ORDERS_COPY_SQL}

    def test_concurrent_create_and_refresh(self, project: Any) -> None:
        run_dbt(["seed"])
        created = run_dbt(["run", "--threads", "2"])
        assert sorted(r.adapter_response["code"] for r in created.results) == ["CREATE", "CREATE"]
        project.run_sql('insert into "{schema}"."orders" values (4, 3, 40)')
        run_dbt(["run", "--threads", "2"])
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0
        copy_query = 'select id, customer_id, amount from "{schema}"."orders"'
        assert differences(project, "orders_copy", copy_query.format(schema=project.test_schema)) == 0


class TestImmediateStreamTable:
    """refresh_mode='immediate' through dbt: the writer's own transaction sees the change; a later
    `dbt run` only checks the installed maintenance (SKIP); a query it cannot maintain fails compile."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        config = "{{ config(materialized='stream_table', refresh_mode='immediate') }}\n"
        return {
            "customer_totals.sql": CUSTOMER_TOTALS_SQL.replace(
                "{{ config(materialized='stream_table') }}", config.strip()
            ),
            "top_orders.sql": config + "select id, amount from {{ ref('orders') }} limit 2\n",
        }

    def test_maintained_in_the_writers_transaction(self, project: Any) -> None:
        run_dbt(["seed"])
        with pytest.raises(Exception, match="LIMIT"):
            run_dbt(["compile", "--select", "top_orders"])
        created = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert created.status == "success" and created.message.startswith("CREATE")
        orders = f'"{project.test_schema}"."orders"'
        totals = f'"{project.test_schema}"."customer_totals"'
        # One transaction: the insert and the read of the stream table, then a rollback.
        seen = project.run_sql(
            f"begin; insert into {orders} values (4, 2, 5); select total from {totals} where customer_id = 2",
            fetch="one",
        )
        project.run_sql("rollback")
        assert float(seen[0]) == 35
        project.run_sql(f"insert into {orders} values (5, 3, 7); delete from {orders} where id = 1")
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0
        again = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert again.message.startswith("NO-OP"), again.message


CONTRACT_YML = """
version: 2
models:
  - name: typed_totals
    config:
      contract: {enforced: true}
    columns:
      - name: customer_id
        data_type: integer
      - name: total
        data_type: bigint
        constraints: [{type: not_null}]
      - name: order_count
        data_type: bigint
"""


class TestRunsReadLikeDbtModels:
    """What dbt shows and keeps of a stream table run: adapter_response fields, NO-OP for a run with
    nothing to do, dbt's invocation_id in the history; --empty keeps a stream table's rows (and builds
    an empty table for a new one); configs of other materializations warn by name; a contract's types
    are checked."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        keyed = (
            "{{ config(materialized='stream_table', unique_key='customer_id', on_schema_change='fail', "
            "target_lag='5 minutes') }}"
        )
        return {
            "customer_totals.sql": CUSTOMER_TOTALS_SQL,
            "keyed_totals.sql": CUSTOMER_TOTALS_SQL.replace(
                "{{ config(materialized='stream_table') }}", keyed
            ),
            "typed_totals.sql": CUSTOMER_TOTALS_SQL,
            "schema.yml": CONTRACT_YML,
        }

    def history(self, project: Any, name: str) -> list[tuple[str, str | None]]:
        rows = project.run_sql(
            f'select action, invocation_id from "{CATALOG}"."refresh_history" '
            f"where stream_table = '{{schema}}.{name}' order by refresh_id",
            fetch="all",
        )
        return [(row[0], row[1]) for row in rows]

    def test_responses_history_and_empty(self, project: Any) -> None:
        run_dbt(["seed"])
        created = only_result(run_dbt(["run", "--select", "customer_totals"]))
        invocation = get_artifact(project.project_root, "target", "run_results.json")["metadata"][
            "invocation_id"
        ]
        response = created.adapter_response
        assert (response["code"], response["action"], response["rows_inserted"]) == ("CREATE", "CREATE", 2)
        assert self.history(project, "customer_totals") == [("CREATE", invocation)]

        nothing = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert nothing.message.startswith("NO-OP"), nothing.message
        assert (nothing.adapter_response["code"], nothing.adapter_response["action"]) == ("NO-OP", "SKIP")

        project.run_sql(f'update "{project.test_schema}"."orders" set amount = 25 where id = 2')
        project.run_sql(f'insert into "{project.test_schema}"."orders" values (4, 3, 40)')
        results, debug_log = run_dbt_and_capture(["--debug", "run", "--select", "customer_totals"])
        changed = only_result(results).adapter_response
        assert changed["code"] in ("DIFFERENTIAL", "FULL"), changed
        assert (changed["rows_inserted"], changed["rows_updated"], changed["rows_deleted"]) == (1, 1, 0)
        assert changed["rows_affected"] == 2 and changed["refresh_id"] is not None
        if changed["code"] == "DIFFERENTIAL":
            assert changed["changes_read"] == 3  # the update's old and new rows, the insert
        # The SQL the engine ran: in target/run and in dbt's debug log (a batch the stream table's
        # installed refresh function applies, as this first one: the call, whose body holds the MERGE).
        ran = read_file(project.project_root, "target", "run", "test", "models", "customer_totals.sql")
        assert "refresh_history" in ran and 'SELECT * FROM "dbt_ivm"."refresh_' in ran, ran[:2000]
        assert "stream table model customer_totals, engine SQL:" in debug_log

        # --empty reads every ref as no rows: the stream table keeps its rows and is not rebuilt.
        kept = only_result(run_dbt(["run", "--select", "customer_totals", "--empty"]))
        assert kept.adapter_response["code"] == "NO-OP" and "--empty" in kept.message
        assert differences(project, "customer_totals", customer_totals_query(project)) == 0
        after = only_result(run_dbt(["run", "--select", "customer_totals"]))
        assert after.adapter_response["code"] == "NO-OP", after.message
        assert len(self.history(project, "customer_totals")) == 4  # --empty wrote no history row

        # A model never run before: --empty makes an empty table with its columns; the next run builds.
        run_dbt(["run", "--select", "keyed_totals", "--empty"])
        assert user_columns(project, "keyed_totals") == ["customer_id", "total", "order_count"]
        assert not is_registered(project, "keyed_totals")
        results, logs = run_dbt_and_capture(["run", "--select", "keyed_totals"])
        assert only_result(results).adapter_response["code"] == "REBUILD"
        assert differences(project, "keyed_totals", customer_totals_query(project)) == 0
        for config in ("unique_key", "on_schema_change"):
            assert f"stream table model keyed_totals: config {config} does not apply" in logs, logs
        # What `dbt-ivm refresh` needs of the config is kept with the registration.
        kept = project.run_sql(
            f'select run_settings from "{CATALOG}"."stream_tables" where stream_table = \'{{schema}}.keyed_totals\'',
            fetch="one",
        )[0]
        assert kept["target_lag_seconds"] == 300 and kept["user_triggers"] == "auto", kept

    def test_contract_types_are_checked(self, project: Any) -> None:
        run_dbt(["seed"])
        # sum(integer) is bigint, count(*) bigint: the declared types hold. (dbt itself warns, when it
        # parses the project, that a stream table does not create the not_null constraint.)
        created = only_result(run_dbt(["run", "--select", "typed_totals"]))
        assert created.adapter_response["code"] in ("CREATE", "REBUILD", "NO-OP")
        yml = read_file(project.project_root, "models", "schema.yml")
        write_file(
            yml.replace("data_type: bigint\n        constraints", "data_type: text\n        constraints"),
            project.project_root,
            "models",
            "schema.yml",
        )
        failed = only_result(run_dbt(["run", "--select", "typed_totals"], expect_pass=False))
        message = failed.message.lower()
        assert failed.status == "error" and "contract" in message and "| total" in message, failed.message
        assert "text" in message and "data type mismatch" in message, failed.message


class TestScheduleConfig:
    """`schedule`: a cron expression is kept with the registration for `dbt-ivm refresh`; one that
    cannot fire, or a schedule beside a target_lag, fails the model by name."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        def scheduled(config: str) -> str:
            return CUSTOMER_TOTALS_SQL.replace(
                "materialized='stream_table'", f"materialized='stream_table', {config}"
            )

        return {
            "weekday_totals.sql": scheduled("schedule='0 6 * * mon-fri'"),
            "never_totals.sql": scheduled("schedule='0 0 30 feb *'"),
            "both_totals.sql": scheduled("schedule='@hourly', target_lag='5 minutes'"),
        }

    def test_kept_or_refused(self, project: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run", "--select", "weekday_totals"])
        kept = project.run_sql(
            f'select run_settings from "{CATALOG}"."stream_tables" '
            "where stream_table = '{schema}.weekday_totals'",
            fetch="one",
        )[0]
        assert kept["schedule"] == "0 6 * * mon-fri UTC" and kept["target_lag_seconds"] is None, kept
        never = only_result(run_dbt(["run", "--select", "never_totals"], expect_pass=False))
        assert "model never_totals: config schedule='0 0 30 feb *'" in never.message, never.message
        assert "never fires" in never.message, never.message
        both = only_result(run_dbt(["run", "--select", "both_totals"], expect_pass=False))
        assert "model both_totals: configs schedule='@hourly' and target_lag='5 minutes'" in both.message


REFUNDS_CSV = """
id,amount
1,5
2,7
""".lstrip()

REFUND_TOTAL_SQL = """
{{ config(materialized='stream_table') }}
select count(*) as refunds, sum(amount) as refunded from {{ ref('refunds') }}
"""


class TestUnusedRegistrations:
    """#58 item 5. A stream-table model deleted from the project leaves its table and registration
    (and its sources' capture): the next dbt run unregisters it when this project registered it (one
    line logged, the table kept plain, capture no one needs removed) and warns, once per run, about
    one another project registered; `dbt-ivm gc --manifest` unregisters that one."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV, "refunds.csv": REFUNDS_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {
            "customer_totals.sql": CUSTOMER_TOTALS_SQL,
            "old_totals.sql": CUSTOMER_TOTALS_SQL,
            "refund_total.sql": REFUND_TOTAL_SQL,
            "orders_copy.sql": ORDERS_COPY_SQL,
        }

    def test_unregistered_or_warned_then_collected(
        self, project: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from pathlib import Path

        from dbt_ivm import cli

        run_dbt(["seed"])
        run_dbt(["run"])
        name = project.adapter.config.project_name
        kept = project.run_sql(
            f'select count(*) from "{CATALOG}"."stream_tables" '
            f"where schema_name = '{{schema}}' and run_settings ->> 'dbt_project' = '{name}'",
            fetch="one",
        )
        assert kept[0] == 4, kept
        refund_capture = "select count(*) from pg_trigger where tgrelid = '{schema}.refunds'::regclass"
        assert project.run_sql(refund_capture, fetch="one")[0] > 0
        _, logs = run_dbt_and_capture(["run"])
        assert "no enabled model" not in logs
        # As if another project (sharing the schema) had run old_totals last.
        project.run_sql(
            f'update "{CATALOG}"."stream_tables" set run_settings = '
            "jsonb_set(run_settings, '{{dbt_project}}', '\"another_project\"') "
            "where schema_name = '{schema}' and table_name = 'old_totals'"
        )
        for model in ("old_totals", "refund_total"):
            (Path(project.project_root) / "models" / f"{model}.sql").unlink()
        _, logs = run_dbt_and_capture(["run"])  # two stream-table models run: each line once
        unregistered = f"stream table {project.test_schema}.refund_total: unregistered, no enabled model"
        assert logs.count(unregistered) == 1, logs
        assert (
            not is_registered(project, "refund_total") and relation_kind(project, "refund_total") == "table"
        )
        assert project.run_sql(refund_capture, fetch="one")[0] == 0  # nobody reads refunds any more
        project.run_sql("delete from {schema}.refund_total")  # a plain table now: nothing notes it
        warning = (
            f"stream table {project.test_schema}.old_totals is registered in {CATALOG} but no enabled model"
        )
        assert logs.count(warning) == 1, logs
        assert "dbt project 'another_project' registered it" in logs and "dbt-ivm drop" in logs
        assert is_registered(project, "old_totals")

        credentials = project.adapter.config.credentials
        dsn = (
            f"host={credentials.host} port={credentials.port} user={credentials.user} "
            f"dbname={credentials.database} password={credentials.password}"
        )
        manifest = str(Path(project.project_root) / "target" / "manifest.json")
        assert cli.main(["gc", "--dsn", dsn, "--manifest", manifest]) == 0
        out = capsys.readouterr().out
        assert f"unregistered {project.test_schema}.old_totals: no enabled model" in out, out
        assert not is_registered(project, "old_totals") and relation_kind(project, "old_totals") == "table"
        assert is_registered(project, "customer_totals") and is_registered(project, "orders_copy")
        _, logs = run_dbt_and_capture(["run"])
        assert "no enabled model" not in logs and "outside dbt-ivm" not in logs


RANDOM_PICK_SQL = """
{{ config(materialized='stream_table') }}
select id, random() as luck from {{ ref('orders') }}
"""


class TestExplain:
    """#62 items 1 and 2: `dbt-ivm explain MODEL` in a dbt project connects through the project's
    profile (as dbt-tests-adapter wrote it) and says, from the compiled SQL, whether the model
    refreshes differentially and how; nothing is created."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {"customer_totals.sql": CUSTOMER_TOTALS_SQL, "random_pick.sql": RANDOM_PICK_SQL}

    def test_explain_through_the_profile(self, project: Any, capsys: pytest.CaptureFixture[str]) -> None:
        import json

        from dbt_ivm import cli

        run_dbt(["seed"])
        run_dbt(["compile"])
        capsys.readouterr()  # dbt's own output
        where = ["--project-dir", str(project.project_root), "--profiles-dir", str(project.profiles_dir)]
        assert cli.main(["explain", "customer_totals", *where]) == 0
        out = capsys.readouterr().out
        assert out.startswith("model customer_totals (") and "differential: a batch is applied" in out, out
        assert "aggregate GROUP BY customer_id: COUNT, SUM kept as running state per group" in out, out
        assert f"reads the changes of: {project.test_schema}.orders" in out, out
        # What a batch on each source runs: its change read, and how big the SQL is.
        assert f"a batch that changes only {project.test_schema}.orders: its change is read" in out, out
        assert f"  Δ {project.test_schema}.orders" in out, out
        assert cli.main(["explain", "random_pick", *where, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["differential"] is False and "random()" in found["reason"].lower(), found
        assert "(line 2, column 12 of its compiled SQL)" in found["reason"], found  # where random() is
        assert relation_kind(project, "customer_totals") is None  # explained, not built
        assert cli.main(["explain", "no_such_model", *where]) == 1
        assert "has no model named 'no_such_model'" in capsys.readouterr().err
        # What `auto` would do with a batch of N changed rows: the threshold against the 3 seeded rows.
        project.run_sql(f"analyze {project.test_schema}.orders")
        assert cli.main(["explain", "customer_totals", *where, "--changes", "1"]) == 0
        out = capsys.readouterr().out
        assert (
            "a batch of 1 changed rows: DIFFERENTIAL: within full_refresh_threshold=0.5 of the ~3 rows" in out
        )
        assert cli.main(["explain", "customer_totals", *where, "--changes", "2", "--json"]) == 0
        batch = json.loads(capsys.readouterr().out)["batch"]
        assert (
            batch["action"] == "FULL"
            and "exceed full_refresh_threshold=0.5 of the ~3 rows" in batch["reason"]
        )
        assert cli.main(["explain", "random_pick", *where, "--changes", "1"]) == 0
        assert "a batch of 1 changed rows: FULL: " in capsys.readouterr().out


def indexed_model(indexes: str, setting: str) -> str:
    return CUSTOMER_TOTALS_SQL.replace(
        "materialized='stream_table'",
        f"materialized='stream_table', indexes={indexes}, on_configuration_change='{setting}'",
    )


class TestIndexesConfig:
    """dbt-postgres's `indexes` config on a stream table: created with the table, and a changed config
    applied, kept with a warning, or refused, as on_configuration_change says; the engine's own indexes
    are never touched."""

    @pytest.fixture(scope="class")
    def seeds(self) -> dict[str, str]:
        return {"orders.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    def models(self) -> dict[str, str]:
        return {"indexed.sql": indexed_model("[{'columns': ['customer_id']}]", "fail")}

    def indexes(self, project: Any) -> list[str]:
        rows = project.run_sql(
            "select indexdef from pg_indexes where schemaname = '{schema}' and tablename = 'indexed' order by 1",
            fetch="all",
        )
        return [row[0].split(" USING ", 1)[1] for row in rows]

    def test_created_then_changed(self, project: Any) -> None:
        run_dbt(["seed"])
        run_dbt(["run"])
        before = self.indexes(project)
        assert "btree (customer_id)" in before, before
        engine = [i for i in before if "__ivm_" in i]

        changed = "[{'columns': ['order_count'], 'unique': False}]"
        set_model_file(project, "indexed", indexed_model(changed, "fail"))
        failed = only_result(run_dbt(["run"], expect_pass=False))
        assert failed.status == "error" and "its indexes config changed" in failed.message, failed.message
        assert "create btree index on (order_count)" in failed.message
        assert "drop btree index on (customer_id)" in failed.message
        assert self.indexes(project) == before

        set_model_file(project, "indexed", indexed_model(changed, "continue"))
        _, logs = run_dbt_and_capture(["run"])
        assert "on_configuration_change='continue' keeps the table's indexes" in logs
        assert self.indexes(project) == before

        set_model_file(project, "indexed", indexed_model(changed, "apply"))
        run_dbt(["run"])
        after = self.indexes(project)
        assert "btree (order_count)" in after and "btree (customer_id)" not in after, after
        assert [i for i in after if "__ivm_" in i] == engine
        assert differences(project, "indexed", customer_totals_query(project)) == 0
        run_dbt(["run"])  # nothing left to change
        assert self.indexes(project) == after
