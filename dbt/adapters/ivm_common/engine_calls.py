"""`EngineCalls`: what the stream_table materialization asks the engine, written once for every
dbt-ivm adapter. An adapter is the small difference: how it reaches its engine (a PostgreSQL
connection of its own, a Spark session) and what that engine's own errors are, in five hooks.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dbt.adapters.base.meta import AdapterMeta, available
from dbt.adapters.base.relation import BaseRelation
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.ivm_common import compile_check
from dbt.adapters.ivm_common.stream_table_config import (
    build_spec,
    log_statements,
    naming_the_model,
    reporting_statements,
    result_fields,
    tend_unused_registrations,
)
from dbt_common.exceptions import DbtRuntimeError

from dbt_ivm.errors import IvmError
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.unused import Project, RegisteredTable

logger = AdapterLogger("Ivm")


class EngineCalls(metaclass=AdapterMeta):
    """The materialization's calls (`ivm_run_stream_table`, `ivm_unused_registrations`) and the
    compile-time check (`ivm_check_differential`), over the hooks an adapter implements."""

    # What a registration no model builds still costs on this backend (said in its warning).
    UNUSED_COST: ClassVar[str]

    # -- hooks ---------------------------------------------------------------------------------

    def _engine_refresh(self, spec: StreamTableSpec) -> RefreshResult:
        """Create or refresh `spec` with the engine (its errors: IvmError, or the adapter's own)."""
        raise NotImplementedError

    def _engine_registered(self, catalog_schema: str) -> list[RegisteredTable]:
        raise NotImplementedError

    def _engine_unregister(self, catalog_schema: str, stream_table: str) -> None:
        """Unregister `stream_table`, keeping its table."""
        raise NotImplementedError

    def _engine_check(self, spec: StreamTableSpec) -> None:
        """At compile time: judge a differential model (`compile_check.judge` around each check)."""
        raise NotImplementedError

    def _engine_reachable(self) -> bool:
        """Whether this profile can run the engine at all (Spark through Thrift needs a driver)."""
        return True

    # -- calls ---------------------------------------------------------------------------------

    @available.parse(lambda *args, **kwargs: {})
    def ivm_run_stream_table(
        self,
        relation: BaseRelation,
        sql: str,
        config: dict[str, Any],
        full_refresh: bool,
        model_name: str,
    ) -> dict[str, Any]:
        """Create or refresh one stream table with the engine; the result's fields for Jinja."""
        spec, statements = reporting_statements(build_spec(relation, sql, config, full_refresh, model_name))
        try:
            result = self._engine_refresh(spec)
        except IvmError as exc:
            raise DbtRuntimeError(naming_the_model(model_name, str(exc))) from exc
        finally:
            log_statements(model_name, statements, logger.debug)
        logger.debug(f"stream table {relation}: {result.summary()}")
        for warning in result.warnings:
            logger.warning(naming_the_model(model_name, warning))
        return result_fields(result, statements)

    @available.parse(lambda *args, **kwargs: [])
    def ivm_unused_registrations(
        self,
        invocation_id: str,
        catalog_schema: str,
        stream_tables: list[list[str]],
        schemas: list[str],
        project_name: str | None = None,
    ) -> list[tuple[str, str]]:
        """Once per run: unregister the stream tables in `catalog_schema` this project registered and
        none of its enabled models builds, and warn about other projects' (tend_unused_registrations);
        ("info" or "warn", message) pairs."""
        if not self._engine_reachable():
            return []
        return tend_unused_registrations(
            invocation_id,
            catalog_schema,
            Project.of(stream_tables, schemas, project_name),
            lambda: self._engine_registered(catalog_schema),
            lambda name: self._engine_unregister(catalog_schema, name),
            self.UNUSED_COST,
        )

    def ivm_check_differential(self, node: Any) -> None:
        """At compile time: refuse a differential model the engine cannot maintain (compile_check)."""
        self._engine_check(compile_check.spec_for(self, node))
