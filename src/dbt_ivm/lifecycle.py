"""The refresh lifecycle, written once for every backend.

One run of a stream table decides between five things: CREATE it (no table or no registration),
REBUILD it (--full-refresh, a changed query, an interrupted rebuild), FAIL (a changed stream-table
config such as refresh_mode under on_configuration_change='fail'), CONTINUE with the registered config
(a changed config under 'continue'), or REFRESH it (with a changed config under 'apply'). A refresh is SKIP, DIFFERENTIAL or FULL; why it is FULL is
decided here too (`full_reason`), before the backend adds what only it can know (a truncated
source, a source without change history, a batch over AUTO's threshold or dearer applied than
recomputed: `dbt_ivm.cost`). Every run, failed or not, leaves one history row with its duration.

A backend (PostgreSQL, Spark; IMMEDIATE mode later) supplies the storage-specific steps behind
`Backend`: serialize runs of one table, read its registration, build it from scratch, refresh it,
write a history row. The engine's planner, delta rules and renderers are shared below that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from dbt_ivm import run_settings
from dbt_ivm.errors import IvmError
from dbt_ivm.spec import RefreshMode, RefreshResult, StreamTableSpec


def fingerprint(sql: str) -> str:
    """The identity of a defining query: its text with whitespace runs collapsed.

    >>> fingerprint("select 1") == fingerprint("select   1\\n")
    True
    """
    return hashlib.sha256(" ".join(sql.split()).encode()).hexdigest()


@dataclass(frozen=True)
class Registered:
    """What the backend's registry holds about a stream table that the lifecycle decides on."""

    defining_query: str
    fingerprint: str
    refresh_mode: str = ""  # "": unknown (nothing to compare the model's with)
    run_settings: str | dict[str, Any] | None = None  # the model's, as its last dbt run kept them


class Backend(Protocol):
    """The storage-specific steps of one run of one stream table."""

    spec: StreamTableSpec

    def serialized(self) -> AbstractContextManager[None]:
        """Held for the whole run: two runs of one stream table never overlap."""
        ...

    def registered(self) -> Registered | None:
        """The registration, or None when the stream table was never built (or was forgotten)."""
        ...

    def table_exists(self) -> bool: ...

    def interrupted_build(self, registered: Registered) -> str | None:
        """Why the stored table is not the registered query's (a rebuild died half-way), or None."""
        ...

    def build(self, sql: str, action: str, reason: str | None, started: float) -> RefreshResult:
        """Create or replace the table with `sql`'s rows, register it, write the history row."""
        ...

    def refresh(self, sql: str, started: float) -> RefreshResult:
        """Bring the table up to date with the registered `sql` (it may rebuild: view or shape
        changes), write the history row."""
        ...

    def record(self, fields: dict[str, object]) -> int | None:
        """Write a history row as part of the run's own write; returns its refresh id."""
        ...

    def record_failure(self, fields: dict[str, object]) -> None:
        """Write a failed run's history row on its own (best effort: the run's error is what matters)."""
        ...


def record(backend: Backend, result: RefreshResult, changes_read: int, started: float) -> None:
    """The history row of a run that did `result` (its duration so far included)."""
    result.seconds = time.monotonic() - started
    spec = backend.spec
    result.changes_read = changes_read
    result.refresh_id = backend.record(
        result.history_fields(spec.initiated_by, changes_read, spec.invocation_id)
    )


def run(backend: Backend) -> RefreshResult:
    """Create the stream table or bring it up to date; returns what was done."""
    spec = backend.spec
    started = time.monotonic()
    with backend.serialized():
        try:
            result = _decide(backend, started)
        except Exception as error:
            backend.record_failure(
                RefreshResult.failure_fields(
                    error, time.monotonic() - started, spec.initiated_by, spec.invocation_id
                )
            )
            raise
    if spec.refresh_mode == "differential" and result.action == "FULL":
        result.warnings.append(f"model {spec.model}: differential refresh fell back to FULL: {result.reason}")
    result.seconds = time.monotonic() - started
    return result


def _decide(backend: Backend, started: float) -> RefreshResult:
    spec = backend.spec
    registered = backend.registered()
    exists = backend.table_exists()
    if registered is None or not exists:
        action = "CREATE" if not exists else "REBUILD"
        return backend.build(spec.sql, action, None if action == "CREATE" else "first run", started)
    if spec.full_refresh:
        return backend.build(spec.sql, "REBUILD", "--full-refresh", started)
    interrupted = backend.interrupted_build(registered)
    if interrupted is not None:
        return backend.build(registered.defining_query, "REBUILD", interrupted, started)
    if registered.fingerprint != fingerprint(spec.sql):
        return backend.build(spec.sql, "REBUILD", "defining query changed", started)
    changed = configuration_changes(spec, registered)
    if changed and spec.on_configuration_change == "fail":
        raise IvmError(
            f"model {spec.model}: its configuration changed ({'; '.join(changed)}) and "
            "on_configuration_change='fail'; run with --full-refresh to apply it, or set "
            "on_configuration_change='apply'"
        )
    if changed and spec.on_configuration_change == "continue":
        backend.spec = run_settings.applied(
            dataclasses.replace(spec, refresh_mode=cast(RefreshMode, registered.refresh_mode)),
            registered.run_settings,
        )
    result = backend.refresh(registered.defining_query, started)
    if changed and spec.on_configuration_change == "continue":
        result.warnings.append(
            f"model {spec.model}: its configuration changed ({'; '.join(changed)}); "
            "on_configuration_change='continue' keeps the previous configuration until --full-refresh"
        )
    return result


def configuration_changes(spec: StreamTableSpec, registered: Registered) -> list[str]:
    """What a dbt run's model config changes in the registered stream table (a refresh without dbt runs
    with the registered config, so changes nothing).

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", refresh_mode="full")
    >>> configuration_changes(spec, Registered("select 1", "f", "auto"))
    ["refresh_mode: 'auto' -> 'full'"]
    """
    if spec.initiated_by != run_settings.KEEPER or not registered.refresh_mode:
        return []
    return run_settings.changes(spec, registered.refresh_mode, registered.run_settings)


def full_reason(
    spec: StreamTableSpec, unsupported: object | None, frontier_known: bool, whole_input: str | None = None
) -> str | None:
    """Why a refresh must be FULL whatever its batch holds (None: the batch decides). `whole_input`:
    why a differential refresh would cost a recompute anyway (AUTO then refreshes FULL).

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1", refresh_mode="auto")
    >>> full_reason(spec, "model m: `LIMIT` is not supported", True)
    'model m: `LIMIT` is not supported'
    >>> full_reason(spec, None, False)
    'no frontier recorded'
    """
    if spec.refresh_mode == "full":
        return "refresh_mode='full'"
    if unsupported is not None:
        return str(unsupported)
    if not frontier_known:
        return "no frontier recorded"
    if spec.refresh_mode == "auto" and whole_input is not None:
        return whole_input
    return None


def threshold_reason(spec: StreamTableSpec, changed: str, changes: int, rows_read: float) -> str | None:
    """AUTO's fallback: a batch larger than `full_refresh_threshold` of what a recompute reads (the
    rows of every source the query reads, not only of those that changed: a star schema's small
    dimension changes by a large fraction of itself all the time) refreshes FULL. `changed`: the
    changed sources, named.

    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1")
    >>> threshold_reason(spec, "public.t", 600, 1000.0)
    '600 changes to public.t exceed full_refresh_threshold=0.5 of the ~1000 rows the query reads'
    >>> threshold_reason(spec, "public.store", 2, 1_000_001.0) is None  # one store renamed, 1M sales
    True
    """
    if spec.refresh_mode != "auto" or rows_read <= 0:
        return None
    if changes <= spec.full_refresh_threshold * rows_read:
        return None
    return (
        f"{changes} changes to {changed} exceed full_refresh_threshold="
        f"{spec.full_refresh_threshold} of the ~{int(rows_read)} rows the query reads"
    )
