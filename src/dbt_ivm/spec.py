"""What a caller (the dbt materialization, a test, a script) asks the engine to maintain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

RefreshMode = Literal["auto", "full", "differential", "immediate"]
OnConfigurationChange = Literal["apply", "continue", "fail"]
UserTriggers = Literal["auto", "on", "off"]
# What a refresh did, as recorded in the history table.
Action = Literal["CREATE", "FULL", "DIFFERENTIAL", "SKIP", "REBUILD"]


@dataclass(frozen=True)
class StreamTableSpec:
    """One stream table: where it lives, its defining query, and how to refresh it."""

    model: str  # the dbt model name, used in every message
    schema: str
    name: str
    sql: str  # the compiled defining query (a single SELECT)
    refresh_mode: RefreshMode = "auto"
    catalog_schema: str = "dbt_ivm"
    on_configuration_change: OnConfigurationChange = "apply"
    full_refresh: bool = False  # dbt --full-refresh: rebuild from scratch
    # AUTO falls back to FULL when a batch holds more changed rows than this fraction of the source.
    full_refresh_threshold: float = 0.5
    user_triggers: UserTriggers = "auto"
    notify_channel: str | None = None
    initiated_by: str = "dbt"
    # The dbt invocation that ran it (dbt's `invocation_id`), kept in its history row.
    invocation_id: str | None = None
    # The dbt project of its model (dbt_project.yml's `name`), kept with its registration: a later run
    # of that project unregisters it once no enabled model builds it (dbt_ivm.unused).
    dbt_project: str | None = None
    # Spark: the stream table's Iceberg table properties (dbt-spark's `tblproperties` config), e.g.
    # write.merge.mode=merge-on-read; set at create and whenever they differ from the table's.
    table_properties: dict[str, str] = field(default_factory=dict)
    # `dbt-ivm refresh` refreshes the stream table once its data is older than this (None: every time).
    target_lag_seconds: float | None = None
    # Or a cron expression (dbt_ivm.cron): refreshed once one of its fire times has passed since.
    schedule: str | None = None
    # Called with each SQL statement the engine sends, before it runs (dbt's debug log and target/run).
    on_statement: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class RefreshResult:
    """What one run of the materialization did; recorded in the history table and logged by dbt."""

    action: Action
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    seconds: float = 0.0
    reason: str | None = None  # why AUTO/DIFFERENTIAL did FULL, why a rebuild happened, ...
    # AUTO's planner estimate of the differential refresh (dbt_ivm.cost), kept as evidence for later.
    estimated_differential_seconds: float | None = None
    # CREATE / REBUILD: the seconds its contents took to compute and write, which stand for a FULL
    # refresh's cost in AUTO's history (the rest of such a run is planning and installing).
    contents_seconds: float | None = None
    warnings: list[str] = field(default_factory=list)
    refresh_id: int | None = None
    changes_read: int = 0  # the batch's net changed source rows (as in the history)
    # How rows were written: 'merge', 'explicit' (DELETE/UPDATE/INSERT for user triggers) or
    # 'merge_triggers_off' (user_triggers='off'); None when nothing was applied.
    apply_path: str | None = None

    @property
    def shown_action(self) -> str:
        """The action as users read it: NO-OP for a run that found nothing to do (the history's SKIP)."""
        return "NO-OP" if self.action == "SKIP" else self.action

    @property
    def rows_changed(self) -> int:
        return self.rows_inserted + self.rows_updated + self.rows_deleted

    def history_fields(
        self, initiated_by: str, changes_read: int, invocation_id: str | None = None
    ) -> dict[str, object]:
        """The columns of this run's row in the refresh history table (same on every backend; the
        planner's estimate only where there is one: Spark's history has no such column)."""
        fields: dict[str, object] = {
            "action": self.action,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "changes_read": changes_read,
            "status": "OK",
            "reason": self.reason,
            "initiated_by": initiated_by,
            "invocation_id": invocation_id,
            "duration_seconds": self.seconds,
        }
        if self.estimated_differential_seconds is not None:
            fields["estimated_differential_seconds"] = self.estimated_differential_seconds
        if self.contents_seconds is not None:
            fields["contents_seconds"] = self.contents_seconds
        return fields

    @staticmethod
    def failure_fields(
        error: BaseException, seconds: float, initiated_by: str, invocation_id: str | None = None
    ) -> dict[str, object]:
        """The columns of a failed run's row in the refresh history table."""
        return {
            "action": "FAILED",
            "duration_seconds": seconds,
            "status": "FAILED",
            "error_text": str(error)[:4000],
            "initiated_by": initiated_by,
            "invocation_id": invocation_id,
        }

    def summary(self) -> str:
        """The one log line per model that `dbt run` prints."""
        text = (
            f"{self.action} +{self.rows_inserted} ~{self.rows_updated} -{self.rows_deleted} "
            f"in {self.seconds:.2f}s"
        )
        if self.reason:
            text += f" ({self.reason})"
        return text
