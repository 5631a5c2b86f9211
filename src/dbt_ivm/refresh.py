"""One refresh of a registered stream table, written once for every backend.

The lifecycle (dbt_ivm.lifecycle) decided that the table exists and its query is the registered
one; this is what bringing it up to date is, whichever engine stores it:

1. REBUILD when the stored table no longer fits the query (a view redefined, its rows' key gone,
   its columns changed by hand): `rebuild_reason`.
2. FULL whatever the batch holds (refresh_mode='full', an unsupported construct, no frontier, writes
   by hand): `full_reason`.
3. The sources that changed since the frontier (`pending`): none → SKIP. A source truncated, or
   written where its changes may be missed, → FULL.
4. The batch read (`read`): each changed source's changes compacted and bound for the delta rules.
   Past `full_refresh_threshold` → FULL; a column the query reads changed type → REBUILD.
5. AUTO weighs the batch: on measured history before any delta work (`choose`), else while the
   delta is built (`delta`, which may abandon it for FULL).
6. The row delta applied (DIFFERENTIAL), or the query recomputed and applied as a diff (FULL); the
   apply itself may find the stored rows at fault (→ REBUILD).
7. `finish`: the new frontier and the history row, committed with the rows.

Follow one row: an order's amount updated from 10 to 12. `pending` finds its source changed; `read`
compacts the update into −(10) +(12) (two changes, weight −1 and +1); AUTO's history says a
differential refresh of 2 changes takes 40 ms against 900 ms recomputed; `delta` pushes the two
rows through the query's operators into the stream table's row delta; `apply_differential` updates
the one stored row; `finish` moves the frontier past the update and writes DIFFERENTIAL, 2 changes.

A backend implements `Steps`; `Delta` is whatever its delta rules produce and its apply consumes.
PostgreSQL's in-database refresh (postgres/procedure.py) is steps 2–7 rendered into PL/pgSQL once,
for the runs that need no planning; whatever needs the engine (a rebuild, AUTO's planner) it hands
back to this sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from dbt_ivm import cost
from dbt_ivm.spec import RefreshResult, StreamTableSpec

Delta = TypeVar("Delta")
Source = TypeVar("Source")


@dataclass
class Batch(Generic[Source]):
    """What is known of the changes a refresh applies, as the steps learn it."""

    changed: Sequence[Source] = ()  # the sources with changes since the frontier
    changes: int = 0  # the changes counted so far (the history row's changes_read)
    full_reason: str | None = None  # why this batch is refreshed FULL (None: differential may go on)
    rebuild: bool = False  # full_reason calls for building the table anew
    notes: list[str] = field(default_factory=list)  # slow paths taken: a differential refresh's reason


class Steps(Protocol[Source, Delta]):
    """A backend's side of one refresh, called in the order of this module's docstring."""

    spec: StreamTableSpec

    def rebuild_reason(self) -> str | None:
        """Why the stored table no longer fits the query though its text is the same (None: it fits)."""
        ...

    def rebuild(self, reason: str) -> RefreshResult:
        """Build the table anew, saying why (the refresh ends there)."""
        ...

    def full_reason(self) -> str | None:
        """Why this refresh is FULL whatever its batch holds (None: the batch decides). The refresh's
        first look at its sources: a backend also prepares here what the later steps read."""
        ...

    def pending(self) -> Batch[Source]:
        """The changed sources (none: nothing to do), with their changes counted where that is cheap."""
        ...

    def read(self, batch: Batch[Source]) -> Batch[Source]:
        """Bind the batch's changes for the delta rules, or say why it is refreshed FULL instead."""
        ...

    def choose(self, batch: Batch[Source]) -> cost.Choice | None:
        """AUTO's choice from measured history; None when history cannot tell (the delta is priced
        as it is built)."""
        ...

    def delta(self, batch: Batch[Source]) -> tuple[Delta | None, cost.Choice | None]:
        """The batch's row delta (None: no changed source reaches the result) and AUTO's choice when
        the delta was priced as it was built (FULL: the delta was abandoned)."""
        ...

    def apply_differential(self, delta: Delta | None, result: RefreshResult) -> str | None:
        """Apply the row delta, counting its rows into `result`; a reason to rebuild instead, or None."""
        ...

    def apply_full(self, result: RefreshResult) -> str | None:
        """Recompute the query and apply the difference; a reason to rebuild instead, or None."""
        ...

    def finish(self, result: RefreshResult, batch: Batch[Source]) -> None:
        """Advance the frontier and write the history row, in the refresh's own commit."""
        ...


def refresh(steps: Steps[Source, Delta]) -> RefreshResult:
    """Bring a registered stream table up to date through `steps`; returns what was done."""
    why = steps.rebuild_reason()
    if why is not None:
        return steps.rebuild(why)
    batch: Batch[Source] = Batch()
    reason = steps.full_reason()
    if reason is None:
        batch = steps.pending()
        reason = batch.full_reason
        if reason is None and not batch.changed:
            result = RefreshResult(action="SKIP", reason="no changes")
            steps.finish(result, batch)
            return result
    if reason is None:
        batch = steps.read(batch)
        reason = batch.full_reason
        if reason is not None and batch.rebuild:
            return steps.rebuild(reason)
    delta: Delta | None = None
    choice: cost.Choice | None = None
    if reason is None and steps.spec.refresh_mode == "auto":
        choice = steps.choose(batch)
    if reason is None and (choice is None or choice.action == "DIFFERENTIAL"):
        delta, priced = steps.delta(batch)
        choice = priced or choice
    if reason is None and choice is not None and choice.action == "FULL":
        reason = choice.reason or "AUTO judged the batch cheaper recomputed"
    if reason is None:
        notes = [*batch.notes, *([choice.reason] if choice is not None and choice.reason else [])]
        result = RefreshResult(action="DIFFERENTIAL", reason="; ".join(notes) or None)
        why = steps.apply_differential(delta, result)
    else:
        result = RefreshResult(action="FULL", reason=reason)
        why = steps.apply_full(result)
    if why is not None:
        return steps.rebuild(why)
    if choice is not None:
        result.estimated_differential_seconds = choice.estimated_differential
    steps.finish(result, batch)
    return result
