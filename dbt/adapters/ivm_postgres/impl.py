"""`IvmPostgresAdapter`: dbt-postgres, plus the engine calls the `stream_table` materialization makes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import import_module
from typing import Any, TypeVar

import psycopg2
from dbt.adapters.base.meta import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo, BaseRelation
from dbt.adapters.contracts.relation import RelationConfig
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.ivm_common import compile_check
from dbt.adapters.ivm_common.engine_calls import EngineCalls
from dbt.adapters.ivm_common.stream_table_config import CatalogOfStreamTables
from dbt.adapters.ivm_postgres import indexes as index_changes
from dbt.adapters.ivm_postgres.connections import (
    ADAPTER_TYPE,
    IvmPostgresConnectionManager,
    connect_for_engine,
)
from dbt.adapters.postgres.impl import PostgresAdapter
from dbt_common.exceptions import DbtDatabaseError

from dbt_ivm.errors import IvmError
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from dbt_ivm.unused import RegisteredTable

T = TypeVar("T")

logger = AdapterLogger("IvmPostgres")

# Bookkeeping columns the engine adds to stream tables; dbt docs never show them.
HIDDEN_COLUMN_PREFIX = "__ivm_"

# The columns of one ordinary or partitioned table, in table order (no rows: no such table).
_RELATION_COLUMNS_SQL = """
select a.attname
from pg_catalog.pg_attribute a
join pg_catalog.pg_class c on c.oid = a.attrelid
join pg_catalog.pg_namespace n on n.oid = c.relnamespace
where n.nspname = %s and c.relname = %s and c.relkind in ('r', 'p')
  and a.attnum > 0 and not a.attisdropped
order by a.attnum
"""


class IvmPostgresAdapter(EngineCalls, CatalogOfStreamTables, PostgresAdapter):
    ConnectionManager = IvmPostgresConnectionManager
    connections: IvmPostgresConnectionManager

    def __init__(self, config: Any, mp_context: Any) -> None:
        super().__init__(config, mp_context)
        # One engine connection per dbt thread, opened on first use (never at parse time).
        self._engine_connections: dict[int, Any] = {}
        # Stream tables dbt dropped or renamed, per thread, unregistered once that thread's dbt
        # connection is released (see ivm_forget_stream_table).
        self._pending_forgets: dict[int, list[tuple[str, str, str]]] = {}
        self._engine_lock = threading.Lock()

    @classmethod
    def type(cls) -> str:
        return ADAPTER_TYPE

    @classmethod
    def get_adapter_run_info(cls, config: RelationConfig) -> AdapterTrackingRelationInfo:
        # The base class derives `dbt.adapters.ivmpostgres` from the class name; that module does not exist.
        return AdapterTrackingRelationInfo(  # type: ignore[abstract]
            adapter_name=ADAPTER_TYPE,
            base_adapter_version=import_module("dbt.adapters.__about__").version,
            adapter_version=import_module("dbt.adapters.ivm_postgres.__version__").version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    # -- engine connection ----------------------------------------------------------------------

    def _engine_connection(self) -> Any:
        key = threading.get_ident()
        with self._engine_lock:
            conn = self._engine_connections.get(key)
        if conn is None or conn.closed:
            conn = connect_for_engine(self.config.credentials)
            with self._engine_lock:
                self._engine_connections[key] = conn
        return conn

    def _discard_engine_connection(self) -> None:
        with self._engine_lock:
            conn = self._engine_connections.pop(threading.get_ident(), None)
        if conn is not None and not conn.closed:
            conn.close()

    def release_connection(self) -> None:
        super().release_connection()
        self._forget_pending()

    def cleanup_connections(self) -> None:
        super().cleanup_connections()
        self._forget_pending(every_thread=True)
        with self._engine_lock:
            conns = list(self._engine_connections.values())
            self._engine_connections.clear()
        for conn in conns:
            if not conn.closed:
                conn.close()

    def _commit_dbt_transaction(self) -> None:
        """Commit dbt's own open transaction so the engine never waits on locks dbt's connection holds."""
        connection = self.connections.get_if_exists()
        if connection is None or connection.state != "open":
            return
        if connection.transaction_open:
            self.connections.commit()  # type: ignore[no-untyped-call]
        elif not connection.credentials.autocommit:
            # psycopg2 opens a transaction implicitly even for statements dbt ran without BEGIN
            # (e.g. drop_relation): a no-op when idle.
            connection.handle.commit()

    # -- calls from the materialization ---------------------------------------------------------

    @available.parse(lambda *args, **kwargs: "")
    def ivm_commit_open_transaction(self) -> str:
        """Commit dbt's transaction if one is open (e.g. after post-hooks); '' so Jinja can call it."""
        self._commit_dbt_transaction()
        return ""

    # -- the engine, for the materialization's calls (EngineCalls) -------------------------------

    UNUSED_COST = "its sources' changes are still captured and kept for it"

    def _on_engine(self, work: Callable[[Any], T]) -> T:
        """`work` on this thread's engine connection, which a failure discards (it may be mid-transaction)."""
        try:
            return work(self._engine_connection())
        except (IvmError, psycopg2.Error):
            self._discard_engine_connection()
            raise

    def _engine_refresh(self, spec: StreamTableSpec) -> RefreshResult:
        from dbt_ivm.postgres.runner import run_stream_table

        self._commit_dbt_transaction()
        try:
            return self._on_engine(lambda connection: run_stream_table(connection, spec))
        except psycopg2.Error as exc:
            raise DbtDatabaseError(f"stream table model {spec.model}: {str(exc).strip()}") from exc

    def _engine_registered(self, catalog_schema: str) -> list[RegisteredTable]:
        from dbt_ivm.postgres.db import Db
        from dbt_ivm.postgres.registrations import registered_relations

        return self._on_engine(lambda connection: registered_relations(Db(connection), catalog_schema))

    def _engine_unregister(self, catalog_schema: str, stream_table: str) -> None:
        from dbt_ivm.postgres.db import Db
        from dbt_ivm.postgres.registrations import drop_registration

        self._on_engine(
            lambda connection: drop_registration(Db(connection), catalog_schema, stream_table, False)
        )

    def _engine_check(self, spec: StreamTableSpec) -> None:
        from dbt_ivm.postgres.runner import check_differential

        compile_check.judge(lambda: self._on_engine(lambda connection: check_differential(connection, spec)))

    @available.parse_none
    def ivm_stream_table_user_columns(self, relation: BaseRelation) -> list[str] | None:
        """The model's columns of `relation`, in table order, if it is a stream table; else None.

        A stream table is a table with hidden `__ivm_` columns. Grants on one give SELECT on these
        columns only (see `ivm_postgres__apply_grants` and dbt_ivm.postgres.privileges). Read on dbt's
        own connection, like dbt's other catalog queries.
        """
        if relation.schema is None or relation.identifier is None:
            return None
        if relation.type is not None and not relation.is_table:
            return None
        _, cursor = self.connections.add_query(
            _RELATION_COLUMNS_SQL, bindings=(relation.schema, relation.identifier)
        )
        names = [str(row[0]) for row in cursor.fetchall()]
        user = [name for name in names if not name.startswith(HIDDEN_COLUMN_PREFIX)]
        return user if len(user) < len(names) else None

    @available.parse(lambda *args, **kwargs: {})
    def ivm_index_changes(
        self, relation: BaseRelation, indexes: list[dict[str, Any]], catalog_schema: str
    ) -> dict[str, Any]:
        """The `indexes` config against the table's indexes (dbt.adapters.ivm_postgres.indexes): which
        configured ones to create, which of its own to drop (names), and a description of both."""
        from dbt_ivm.postgres.db import Db
        from dbt_ivm.postgres.registrations import registered_relations

        wanted = []
        for raw in indexes:
            parsed = self.parse_index(raw)
            wanted.append(index_changes.configured(parsed.columns, parsed.unique, parsed.type))
        _, cursor = self.connections.add_query(
            index_changes.EXISTING_INDEXES_SQL, bindings=(relation.schema, relation.identifier)
        )
        existing = [
            index_changes.Index(tuple(columns), bool(unique), str(method), str(name), bool(constraint))
            for name, method, unique, columns, constraint in cursor.fetchall()
        ]
        found = index_changes.changes(wanted, existing)
        # Only a stream table has a config to compare with (a plain table is rebuilt anyway): asked
        # of the registrations, whether or not it has hidden columns, and only when something differs.
        differs = bool(found.create or found.drop)
        if differs:
            try:
                differs = (relation.schema, relation.identifier) in {
                    (schema, table)
                    for _, schema, table, _ in registered_relations(
                        Db(self._engine_connection()), catalog_schema
                    )
                }
            except psycopg2.Error:
                self._discard_engine_connection()
                raise
        return {
            "any": differs,
            "create": [indexes[n] for n in found.create],
            "drop": [index.name for index in found.drop],
            "described": found.describe(),
        }

    @available.parse(lambda *args, **kwargs: "")
    def ivm_forget_stream_table(self, relation: BaseRelation, catalog_schema: str) -> str:
        """Note that dbt is dropping or renaming `relation`; it is unregistered after dbt's transaction.

        Not now: unregistering may remove capture triggers from the sources, which waits for the locks
        dbt's still-open transaction holds on them, while this thread waits for the engine.
        """
        if relation.schema is None or relation.identifier is None:
            return ""
        with self._engine_lock:
            pending = self._pending_forgets.setdefault(threading.get_ident(), [])
            pending.append((relation.schema, relation.identifier, catalog_schema))
        return ""

    def _forget_pending(self, every_thread: bool = False) -> None:
        """Unregister the stream tables dbt dropped or renamed; its connections hold no locks by now."""
        with self._engine_lock:
            if every_thread:
                forgets = [item for items in self._pending_forgets.values() for item in items]
                self._pending_forgets.clear()
            else:
                forgets = self._pending_forgets.pop(threading.get_ident(), [])
        if not forgets:
            return
        from dbt_ivm.postgres.runner import drop_stream_table

        for schema, name, catalog_schema in dict.fromkeys(forgets):
            try:
                drop_stream_table(self._engine_connection(), schema, name, catalog_schema)
            except psycopg2.Error as exc:
                self._discard_engine_connection()
                logger.warning(f"could not unregister stream table {schema}.{name}: {str(exc).strip()}")
