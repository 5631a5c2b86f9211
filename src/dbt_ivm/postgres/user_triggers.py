"""User triggers on a stream table: detect them each refresh, pick the apply path, NOTIFY afterwards.

``user_triggers`` (StreamTableSpec / model config):

* ``auto`` — explicit DELETE / UPDATE / INSERT when the table has user triggers, one MERGE otherwise;
* ``on`` — always explicit DML;
* ``off`` — one MERGE with the user triggers disabled by name for the refresh transaction
  (``ALTER TABLE ... DISABLE TRIGGER``: a SHARE ROW EXCLUSIVE lock on the stream table until commit).

User triggers are the table's enabled, non-internal triggers on INSERT, UPDATE or DELETE, except ours
(``__ivm_capture_*`` and ``__ivm_immediate_*``, present when the stream table is itself a source of
another stream table, and ``__ivm_guard``, postgres.outside_writes).
``DISABLE TRIGGER USER`` and ``session_replication_role`` would also silence those, so neither is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlglot import exp

from dbt_ivm.apply import explicit, multiset
from dbt_ivm.catalog import qualified_name
from dbt_ivm.errors import IvmError
from dbt_ivm.layout import Layout
from dbt_ivm.postgres import outside_writes
from dbt_ivm.postgres.capture import IMMEDIATE_TRIGGER_PREFIX, TRIGGER_PREFIX
from dbt_ivm.postgres.db import Db
from dbt_ivm.spec import RefreshResult, StreamTableSpec, UserTriggers
from dbt_ivm.sqltext import lit, q
from dbt_ivm.target import Target

# pg_trigger.tgtype bits (PostgreSQL's TRIGGER_TYPE_* in catalog/pg_trigger.h).
ROW, BEFORE, ON_INSERT, ON_DELETE, ON_UPDATE = 1, 2, 4, 8, 16
DML_EVENTS = ON_INSERT | ON_DELETE | ON_UPDATE
# How a trigger that `off` disabled is enabled again, by its pg_trigger.tgenabled.
ENABLE_FORMS = {"O": "ENABLE TRIGGER", "A": "ENABLE ALWAYS TRIGGER", "R": "ENABLE REPLICA TRIGGER"}
MAX_CHANNEL_BYTES = 63  # NAMEDATALEN - 1
# Trigger names that are dbt-ivm's, not the user's.
OURS = (TRIGGER_PREFIX, IMMEDIATE_TRIGGER_PREFIX, outside_writes.TRIGGER)


@dataclass(frozen=True)
class UserTrigger:
    name: str
    enabled: str  # pg_trigger.tgenabled: O (origin), A (always) or R (replica)
    tgtype: int

    @property
    def row_level(self) -> bool:
        return bool(self.tgtype & ROW)

    @property
    def changes_rows(self) -> bool:
        """A BEFORE row trigger can change NEW or skip the row."""
        return self.row_level and bool(self.tgtype & BEFORE)


def enabled_condition(relation: str, alias: str = "t") -> str:
    """SQL: pg_trigger row `alias` is an enabled user trigger on INSERT/UPDATE/DELETE of `relation`
    (an expression naming the table's oid): not internal, not one of ours."""
    return (
        f"{alias}.tgrelid = {relation} AND NOT {alias}.tgisinternal AND {alias}.tgenabled <> 'D' "
        f"AND ({alias}.tgtype & {DML_EVENTS}) <> 0 "
        + "".join(f"AND NOT pg_catalog.starts_with({alias}.tgname, {lit(p)}) " for p in OURS)
    ).rstrip()


def find(db: Db, relation: str) -> list[UserTrigger]:
    """The stream table's enabled user triggers on INSERT/UPDATE/DELETE (ours excluded), by name."""
    rows = db.rows(
        "SELECT t.tgname, t.tgenabled, t.tgtype FROM pg_catalog.pg_trigger t "
        f"WHERE {enabled_condition('%s::regclass')} ORDER BY t.tgname",
        (relation,),
    )
    return [UserTrigger(str(name), str(enabled), int(tgtype)) for name, enabled, tgtype in rows]


def find_existing(db: Db, relation: str) -> list[UserTrigger]:
    """Like `find`, for a table that may not exist yet (none then)."""
    if not db.value("SELECT to_regclass(%s) IS NOT NULL", (relation,)):
        return []
    return find(db, relation)


def dropped_warning(relation: str, triggers: list[UserTrigger]) -> list[str]:
    """A rebuild drops and recreates the table, and its triggers with it: say which ones."""
    if not triggers:
        return []
    names = ", ".join(t.name for t in triggers)
    return [
        f"rebuilding {relation} dropped its user triggers ({names}); create them again, e.g. in a "
        "post-hook with CREATE OR REPLACE TRIGGER"
    ]


@dataclass
class TriggerChoice:
    """What one refresh found on the stream table and how it will apply its changes."""

    model: str
    relation: str
    mode: UserTriggers
    triggers: list[UserTrigger] = field(default_factory=list)

    @property
    def explicit(self) -> bool:
        return self.mode == "on" or (self.mode == "auto" and bool(self.triggers))

    @property
    def suppress(self) -> bool:
        return self.mode == "off" and bool(self.triggers)

    @property
    def apply_path(self) -> str:
        if self.explicit:
            return "explicit"
        return "merge_triggers_off" if self.suppress else "merge"

    @property
    def check_read_back(self) -> bool:
        return self.explicit and any(t.changes_rows for t in self.triggers)

    def record(self, result: RefreshResult) -> None:
        """Note the apply path on the result, and warn (once per run) when user triggers were found."""
        result.apply_path = self.apply_path
        if not self.triggers:
            return
        names = ", ".join(t.name for t in self.triggers)
        if self.explicit:
            how = "changes applied as DELETE, UPDATE, INSERT so they fire once per changed row"
        else:
            how = "changes applied with one MERGE and these triggers disabled for the refresh: they did not fire"
        result.warnings.append(
            f"user triggers on {self.relation} ({names}); {how} (user_triggers='{self.mode}')"
        )


def choose(db: Db, spec: StreamTableSpec, relation: str) -> TriggerChoice:
    """Detect user triggers now (they may have been added since the last refresh)."""
    return TriggerChoice(spec.model, relation, spec.user_triggers, find(db, relation))


@contextmanager
def suppressed(db: Db, choice: TriggerChoice | None) -> Iterator[None]:
    """With `off`: disable the user triggers by name around the MERGE, in the refresh transaction.

    The ALTER TABLE takes SHARE ROW EXCLUSIVE on the stream table until commit: readers go on, other
    writers wait. If the refresh fails, the rollback restores the triggers with everything else.
    """
    if choice is None or not choice.suppress:
        yield
        return
    disable = ", ".join(f"DISABLE TRIGGER {q(t.name)}" for t in choice.triggers)
    db.execute(f"ALTER TABLE {choice.relation} {disable}")
    yield
    enable = ", ".join(f"{ENABLE_FORMS[t.enabled]} {q(t.name)}" for t in choice.triggers)
    db.execute(f"ALTER TABLE {choice.relation} {enable}")


def write_keyed(
    db: Db,
    choice: TriggerChoice,
    layout: Layout,
    rows: exp.Table,
    table: exp.Table,
    target: Target,
    counts: tuple[int, int, int],
    result: RefreshResult,
) -> None:
    """Explicit DML for keyed/aggregate layouts; a statement with nothing to do is not run at all
    (so statement-level triggers fire only for statements that change rows)."""
    inserted, updated, deleted = counts
    dml = explicit.keyed_dml(layout, rows, table, target)
    if deleted:
        db.execute(dml.delete.sql(target.dialect))
    if updated and dml.update is not None:
        db.execute(dml.update.sql(target.dialect))
    if inserted:
        db.execute(dml.insert.sql(target.dialect))
    if choice.check_read_back:
        _warn_if_changed(
            db, choice, explicit.keyed_mismatches(layout, rows, table, target).sql(target.dialect), result
        )


def write_multiset(
    db: Db,
    choice: TriggerChoice,
    layout: Layout,
    counted: exp.Table,
    table: exp.Table,
    target: Target,
    counts: tuple[int, int],
    result: RefreshResult,
) -> None:
    """Explicit DML for multiset layouts: DELETE the copies that go, INSERT those that come
    (`counted`: `multiset.counted_rows`)."""
    inserted, deleted = counts
    dml = explicit.multiset_dml(layout, counted, table, target)
    if deleted:
        db.execute(dml.delete.sql(target.dialect))
    if inserted:
        db.execute(dml.insert.sql(target.dialect))
    if choice.check_read_back:
        _warn_if_changed(
            db, choice, multiset.mismatches(layout, counted, table, target).sql(target.dialect), result
        )


def _warn_if_changed(db: Db, choice: TriggerChoice, mismatches_sql: str, result: RefreshResult) -> None:
    differing = int(db.value(mismatches_sql) or 0)
    if differing:
        before = ", ".join(t.name for t in choice.triggers if t.changes_rows)
        result.warnings.append(
            f"{differing} row(s) written to {choice.relation} read back different from the query's result: "
            f"a BEFORE trigger ({before}) changed or skipped them, so the table no longer equals its "
            "query (until a later refresh writes those rows again)"
        )


def notify(db: Db, spec: StreamTableSpec, result: RefreshResult) -> None:
    """NOTIFY `spec.notify_channel` with a JSON summary; call inside the refresh transaction, after the
    history row, so listeners hear about a refresh only once it committed."""
    channel = spec.notify_channel
    if not channel or result.rows_changed == 0:
        return
    if len(channel.encode()) > MAX_CHANNEL_BYTES:
        raise IvmError(
            f"model {spec.model}: notify_channel {channel!r} is longer than {MAX_CHANNEL_BYTES} bytes"
        )
    payload = {
        "stream_table": qualified_name(spec.schema, spec.name),
        "model": spec.model,
        "mode": result.action,
        "rows_inserted": result.rows_inserted,
        "rows_updated": result.rows_updated,
        "rows_deleted": result.rows_deleted,
        "refresh_id": result.refresh_id,
        "apply_path": result.apply_path,
    }
    db.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps(payload)))
