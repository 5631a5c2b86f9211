"""A stream table's state as the report colours it, from what `dbt-ivm status` knows.

>>> from dbt_ivm.status import StreamTableStatus
>>> def st(**kw): return StreamTableStatus("s.t", kw.pop("exists", True), "auto", ["s.a"], **kw)
>>> [state_of(s).name for s in (
...     st(last_action="DIFFERENTIAL", last_status="OK", staleness_seconds=30.0, target_lag_seconds=60.0),
...     st(last_action="DIFFERENTIAL", last_status="OK", staleness_seconds=90.0, target_lag_seconds=60.0),
...     st(last_action="FAILED", last_status="FAILED"),
...     st(),
...     st(exists=False, last_action="CREATE", last_status="OK"),
... )]
['fresh', 'stale', 'failing', 'never', 'missing']
"""

from __future__ import annotations

from dataclasses import dataclass

from dbt_ivm.status import StreamTableStatus


@dataclass(frozen=True)
class State:
    name: str
    meaning: str  # the legend's words
    fill: str
    stroke: str


FRESH = State("fresh", "fresh: within its target lag (or none set)", "#e6f4ea", "#2e7d32")
STALE = State("stale", "stale: older than its target lag", "#fff4e0", "#e65100")
FAILING = State("failing", "failing: its last refresh failed", "#fde7e9", "#c62828")
NEVER = State("never", "never refreshed", "#eef2fb", "#3f51b5")
MISSING = State("missing", "registered, but its table is gone (dbt-ivm gc)", "#f1f1f1", "#757575")
STATES = (FRESH, STALE, FAILING, NEVER, MISSING)


def state_of(status: StreamTableStatus) -> State:
    if not status.exists:
        return MISSING
    if status.last_status not in (None, "OK"):
        return FAILING
    if status.last_action is None:
        return NEVER
    lag, staleness = status.target_lag_seconds, status.staleness_seconds
    if lag is not None and staleness is not None and staleness > lag:
        return STALE
    return FRESH
