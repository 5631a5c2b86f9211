"""Model config -> `StreamTableSpec`, and `RefreshResult` -> plain fields for Jinja.

Kept free of any connection so a future adapter (Spark) can share the same validation.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast, get_args

from dbt.adapters.base.relation import BaseRelation
from dbt.adapters.contracts.connection import AdapterResponse
from dbt_common.exceptions import DbtRuntimeError

if TYPE_CHECKING:
    import agate

from dbt_ivm import cron
from dbt_ivm.spec import OnConfigurationChange, RefreshMode, RefreshResult, StreamTableSpec, UserTriggers
from dbt_ivm.unused import Project, RegisteredTable, owned_orphans, unused

DEFAULT_CATALOG_SCHEMA = "dbt_ivm"
DEFAULT_FULL_REFRESH_THRESHOLD = 0.5


def _choice(model: str, key: str, value: Any, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    # dbt hands enum configs (on_configuration_change) over as StrEnum members; str() is their value.
    text = str(value).strip().lower()
    if text not in allowed:
        raise DbtRuntimeError(
            f"model {model}: config {key}={value!r} is not one of {', '.join(repr(a) for a in allowed)}"
        )
    return text


def _threshold(model: str, value: Any) -> float:
    if value is None:
        return DEFAULT_FULL_REFRESH_THRESHOLD
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise DbtRuntimeError(
            f"model {model}: config full_refresh_threshold={value!r} must be a fraction between 0 and 1"
        )
    return number


DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")  # '300', '5 minutes', '2h'
LAG_UNITS = {"s": 1, "second": 1, "m": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def target_lag_seconds(model: str, value: Any) -> float | None:
    """The `target_lag` config in seconds: a number of seconds, or '30 seconds', '5 minutes', '2h'…

    >>> target_lag_seconds("m", "5 minutes"), target_lag_seconds("m", 90), target_lag_seconds("m", "2h")
    (300.0, 90.0, 7200.0)
    """
    if value is None:
        return None
    found = DURATION.fullmatch(str(value).strip().lower())
    unit = found.group(2) if found else "?"
    unit = unit[:-1] if len(unit) > 1 and unit.endswith("s") else unit  # "minutes" -> "minute"
    seconds = float(found.group(1)) * LAG_UNITS[unit or "s"] if found and (unit or "s") in LAG_UNITS else -1.0
    if seconds <= 0:
        raise DbtRuntimeError(
            f"model {model}: config target_lag={value!r} is not a duration: use seconds (300) or "
            "'<number> seconds|minutes|hours|days' ('5 minutes')"
        )
    return seconds


def schedule_of(model: str, schedule: Any, target_lag: Any) -> tuple[float | None, str | None]:
    """(target_lag in seconds, cron expression) from the `schedule` and `target_lag` configs: a
    `schedule` that reads as a duration is a target lag, anything else must be a cron expression.

    >>> schedule_of("m", "5 minutes", None), schedule_of("m", None, 90)
    ((300.0, None), (90.0, None))
    >>> schedule_of("m", "0 6 * * mon-fri Europe/Paris", None)
    (None, '0 6 * * mon-fri Europe/Paris')
    >>> schedule_of("m", "0 25 * * *", None)
    Traceback (most recent call last):
    ...
    dbt_common.exceptions.base.DbtRuntimeError: Runtime Error
      model m: config schedule='0 25 * * *' is neither a duration ('5 minutes') nor a cron expression: cron hour field '25': values run from 0 to 23
    """
    if schedule is not None and target_lag is not None:
        raise DbtRuntimeError(
            f"model {model}: configs schedule={schedule!r} and target_lag={target_lag!r} both say when "
            "`dbt-ivm refresh` refreshes it: keep one"
        )
    if schedule is None:
        return target_lag_seconds(model, target_lag), None
    if isinstance(schedule, int | float) or DURATION.fullmatch(str(schedule).strip().lower()):
        return target_lag_seconds(model, schedule), None
    try:
        return None, cron.parse(str(schedule)).text
    except ValueError as error:
        raise DbtRuntimeError(
            f"model {model}: config schedule={schedule!r} is neither a duration ('5 minutes') nor a cron "
            f"expression: {error}"
        ) from error


def build_spec(
    relation: BaseRelation, sql: str, config: dict[str, Any], full_refresh: bool, model_name: str
) -> StreamTableSpec:
    """The engine's description of one stream table, from the model's relation, SQL and config."""
    if relation.schema is None or relation.identifier is None:
        raise DbtRuntimeError(f"model {model_name}: stream table relation {relation} has no schema or name")
    notify_channel = config.get("notify_channel")
    lag, cron_schedule = schedule_of(model_name, config.get("schedule"), config.get("target_lag"))
    return StreamTableSpec(
        model=model_name,
        schema=relation.schema,
        name=relation.identifier,
        sql=sql,
        refresh_mode=cast(
            RefreshMode,
            _choice(model_name, "refresh_mode", config.get("refresh_mode"), get_args(RefreshMode), "auto"),
        ),
        catalog_schema=str(config.get("ivm_catalog_schema") or DEFAULT_CATALOG_SCHEMA),
        on_configuration_change=cast(
            OnConfigurationChange,
            _choice(
                model_name,
                "on_configuration_change",
                config.get("on_configuration_change"),
                get_args(OnConfigurationChange),
                "apply",
            ),
        ),
        full_refresh=bool(full_refresh),
        full_refresh_threshold=_threshold(model_name, config.get("full_refresh_threshold")),
        user_triggers=cast(
            UserTriggers,
            _choice(model_name, "user_triggers", config.get("user_triggers"), get_args(UserTriggers), "auto"),
        ),
        notify_channel=str(notify_channel) if notify_channel else None,
        initiated_by="dbt",
        invocation_id=str(config["invocation_id"]) if config.get("invocation_id") else None,
        dbt_project=str(config["dbt_project"]) if config.get("dbt_project") else None,
        table_properties=_table_properties(model_name, config.get("tblproperties")),
        target_lag_seconds=lag,
        schedule=cron_schedule,
    )


def _table_properties(model: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DbtRuntimeError(
            f"model {model}: config tblproperties={value!r} must be a mapping of property names to values"
        )
    return {str(k): str(v) for k, v in value.items()}


def naming_the_model(model: str, text: str) -> str:
    """`text` for dbt's log or error, naming the stream table model once (engine messages often do).

    >>> naming_the_model("totals", "model totals: the defining query changed")
    'model totals: the defining query changed'
    >>> naming_the_model("totals", "no such column x")
    'stream table model totals: no such column x'
    """
    return text if model in text else f"stream table model {model}: {text}"


@dataclass
class StreamTableResponse(AdapterResponse):
    """A stream table run in run_results.json's `adapter_response`: dbt's code, message and rows
    affected, and what the engine did, field by field."""

    action: str = ""
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    changes_read: int = 0
    reason: str | None = None
    refresh_id: int | None = None


def shown_summary(result: RefreshResult) -> str:
    """The line `dbt run` prints for the model: NO-OP when nothing changed, else the engine's summary."""
    if result.action == "SKIP":
        return f"{result.shown_action} in {result.seconds:.2f}s"
    return result.summary()


def reporting_statements(spec: StreamTableSpec) -> tuple[StreamTableSpec, list[str]]:
    """`spec` keeping each engine statement as it is sent, and the list they are kept in (for
    target/run and dbt's debug log: `log_statements`)."""
    sent: list[str] = []
    return dataclasses.replace(spec, on_statement=sent.append), sent


def log_statements(model: str, statements: list[str], log: Callable[[str], None]) -> None:
    """The statements one run sent, as one debug event: dbt scrubs secrets from and serializes every
    event, which cost ~20 ms a refresh as one event per statement."""
    if statements:
        log(f"stream table model {model}, engine SQL:\n" + ";\n".join(s.strip() for s in statements))


def result_fields(result: RefreshResult, statements: list[str]) -> dict[str, Any]:
    """Everything the materialization shows or returns about one run: its adapter response, and the
    engine's statements as one SQL text (what the materialization writes to target/run)."""
    fields = asdict(result)
    fields["statements"] = "".join(f"{sql.strip().rstrip(';')};\n\n" for sql in statements)
    fields["rows_changed"] = result.rows_changed
    fields["summary"] = shown_summary(result)
    fields["response"] = StreamTableResponse(
        _message=fields["summary"],
        code=result.shown_action,
        rows_affected=result.rows_changed,
        action=result.action,
        rows_inserted=result.rows_inserted,
        rows_updated=result.rows_updated,
        rows_deleted=result.rows_deleted,
        changes_read=result.changes_read,
        reason=result.reason,
        refresh_id=result.refresh_id,
    )
    return fields


# (invocation, catalog schema) pairs already looked at for unused registrations in this process.
_unused_checked: set[tuple[str, str]] = set()
_unused_lock = threading.Lock()


def tend_unused_registrations(
    invocation_id: str,
    catalog_schema: str,
    project: Project,
    relations: Callable[[], list[RegisteredTable]],
    unregister: Callable[[str], object],
    consequence: str,
) -> list[tuple[str, str]]:
    """Once per dbt invocation and catalog schema: unregister (`unregister`, keeping the table) each
    stream table this project registered that none of its enabled models builds any more, and warn
    about those another project, or no recorded project, registered in its schemas (dbt_ivm.unused);
    `relations` lists the registrations. Returns ("info" or "warn", message) pairs, one per stream
    table. Nothing here fails the model that ran it: a check or an unregistration that fails is a
    warning:

    >>> def unreadable() -> list[RegisteredTable]:
    ...     raise PermissionError("permission denied for table stream_tables")
    >>> tend_unused_registrations("run-1", "dbt_ivm", Project.of([], []), unreadable, print, "")
    [('warn', 'could not look for stream tables in dbt_ivm that no model builds: permission denied for table stream_tables')]
    >>> tend_unused_registrations("run-1", "dbt_ivm", Project.of([], []), unreadable, print, "")
    []
    """
    with _unused_lock:
        if (invocation_id, catalog_schema) in _unused_checked:
            return []
        _unused_checked.add((invocation_id, catalog_schema))
    try:
        registered = relations()
    except Exception as error:  # a warning's check must never fail the model that ran it
        return [
            (
                "warn",
                f"could not look for stream tables in {catalog_schema} that no model builds: {_first_line(error)}",
            )
        ]
    owned = set(owned_orphans(registered, project))
    messages: list[tuple[str, str]] = []
    for name in unused(registered, project):
        if name not in owned:
            messages.append(
                (
                    "warn",
                    _foreign_orphan(name, catalog_schema, _who_registered(registered, name), consequence),
                )
            )
            continue
        gone = f"no enabled model of project {project.name} builds it any more (deleted, disabled or renamed)"
        try:
            unregister(name)
        except Exception as error:  # as above: warned, and tried again by the next run
            messages.append(
                ("warn", f"stream table {name}: could not unregister it ({gone}): {_first_line(error)}")
            )
            continue
        messages.append(
            ("info", f"stream table {name}: unregistered, {gone}; its table was kept as a plain table")
        )
    return messages


def _foreign_orphan(name: str, catalog_schema: str, registered_by: str, consequence: str) -> str:
    return (
        f"stream table {name} is registered in {catalog_schema} but no enabled model of this project "
        f"builds it (deleted, disabled or renamed), and {registered_by}: {consequence}. Unregister it "
        f"with `dbt-ivm drop {name} --keep-table` (or `dbt-ivm gc --manifest target/manifest.json`), or "
        "enable its model again"
    )


def _who_registered(registered: list[RegisteredTable], name: str) -> str:
    project = next(r.project for r in registered if r.key == name)
    if project is None:
        return "no dbt run recorded its project (it was registered before projects were)"
    return f"dbt project {project!r} registered it"


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


HIDDEN_COLUMN_PREFIX = "__ivm_"


def stream_table_names(relation_configs: Iterable[Any]) -> set[tuple[str, str]]:
    """(schema, table), case-folded, of the project's stream-table models among dbt's nodes."""
    return {
        (str(node.schema).casefold(), str(getattr(node, "alias", None) or node.name).casefold())
        for node in relation_configs
        if getattr(getattr(node, "config", None), "materialized", None) == "stream_table"
    }


def without_bookkeeping(catalog: agate.Table, stream_tables: set[tuple[str, str]]) -> agate.Table:
    """The catalog without the engine's `__ivm_` columns of stream tables; every other relation (a
    table or snapshot that selected them, a source that has such a column) keeps all of its own."""

    def shown(row: Any) -> bool:
        hidden = str(row["column_name"] or "").startswith(HIDDEN_COLUMN_PREFIX)
        return (
            not hidden
            or (
                str(row["table_schema"]).casefold(),
                str(row["table_name"]).casefold(),
            )
            not in stream_tables
        )

    return catalog.where(shown)


class CatalogOfStreamTables:
    """Adapter mixin: `dbt docs generate` shows a stream table with the model's columns only."""

    def get_filtered_catalog(
        self, relation_configs: Iterable[Any], used_schemas: Any, relations: Any = None
    ) -> tuple[agate.Table, list[Exception]]:
        configs = list(relation_configs)
        catalog, errors = super().get_filtered_catalog(configs, used_schemas, relations)  # type: ignore[misc]
        return without_bookkeeping(catalog, stream_table_names(configs)), errors
