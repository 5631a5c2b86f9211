"""What `dbt-ivm status` and `dbt-ivm history` show of a stream table, the same on every backend: each
backend's registrations module fills these from its own catalog, the CLI prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class StreamTableStatus:
    """One registered stream table at a glance."""

    stream_table: str
    exists: bool  # its table is still there
    refresh_mode: str
    sources: list[str]
    # Changes its frontier does not cover yet, per source (None: unknown). PostgreSQL counts buffered
    # rows; Spark the row images of the source's snapshots after the frontier.
    pending: dict[str, int | None] = field(default_factory=dict)
    refreshed_at: datetime | None = None
    staleness_seconds: float | None = None  # since the data it reflects was taken
    target_lag_seconds: float | None = None  # the model's target_lag (dbt-ivm refresh)
    last_action: str | None = None  # the newest history row's action and status
    last_status: str | None = None
    schedule: str | None = None  # or its cron schedule
    # The next refresh recomputes the table (FULL, or REBUILD for IMMEDIATE), and why: what the
    # catalog already knows (a write by hand, a TRUNCATE, lost capture), before planning the query.
    next_action: str | None = None
    next_reason: str | None = None

    @property
    def pending_total(self) -> int | None:
        """Every source's pending changes, None when one is unknown.

        >>> StreamTableStatus("s.t", True, "auto", ["s.a", "s.b"], {"s.a": 3, "s.b": 2}).pending_total
        5
        """
        counts = list(self.pending.values())
        if any(c is None for c in counts):
            return None
        return sum(c for c in counts if c is not None)


@dataclass
class HistoryRow:
    """One refresh, as the refresh history recorded it."""

    refresh_id: int
    stream_table: str
    action: str
    status: str
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    changes_read: int
    duration_seconds: float | None
    finished_at: datetime | None
    initiated_by: str | None
    reason: str | None  # why (FULL, a rebuild), or the error of a failed run
