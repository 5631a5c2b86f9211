"""AUTO's choice by cost: is this batch cheaper applied differentially, or recomputed (FULL)?

A batch under `full_refresh_threshold` is usually cheaper applied differentially, but not always: a
delta may have to recompute groups that span most of a table, or a differential refresh's fixed
cost (reading a changelog, building and planning the delta, an extra commit) may exceed a recompute
of a small table. The backend measures what it can and `choose` weighs it:

- **history**: the stream table's recent refreshes. This batch's differential refresh is estimated
  from past ones without overestimating it (`differential_seconds`), FULL as the median of recent
  FULL refreshes and of the seconds recent CREATEs and REBUILDs took to compute their contents
  (their planning and installing are no part of a FULL refresh). Seconds measured on this very table are the best evidence, so
  they decide whenever there are some of both kinds.
- **planner** (PostgreSQL, where the engine builds the batch's delta anyway: a stream table whose
  refresh function cannot apply it, e.g. one with user triggers): the planner's total cost of what
  each path computes, in the planner's units; it decides when history cannot. Elsewhere a stream
  table's first batch under the threshold is measured, not priced (`differential_limit`). FULL's measured seconds per planner unit turn the
  differential's extra units into seconds (at most `MAX_SECONDS_PER_UNIT` each: a small table's FULL
  time is mostly the fixed cost both paths pay, which its few units would otherwise each carry a
  share of), and that estimate is recorded with the refresh. An estimate is a prior, not a
  measurement: it decides only the FULL refresh it was made at. The next batch (under the threshold)
  is refreshed differentially to measure it, without building a delta to price first, and from then
  on measured seconds decide (a planner that overestimates a tiny delta tenfold would otherwise keep
  a stream table FULL for `RECENT` refreshes).

Only a clear difference switches to FULL: the differential estimate must exceed FULL's by `MARGIN`
and by `MIN_SAVING_SECONDS`. Below that the two are within the noise of a busy machine (a tiny
table's differential refresh easily takes twice its recompute, 30 ms more), and switching would cost
the differential path for nothing. Without evidence, or with refresh_mode='differential' (whose
backends never ask), the threshold rule alone decides. The choice's `reason` names the numbers behind
it either way; backends put it on the refresh's log line and history row.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MARGIN = 1.5  # differential must look this many times FULL's cost before AUTO recomputes instead
MIN_SAVING_SECONDS = 1.0  # and recomputing must save at least this much
SAMPLES = 5  # the most recent refreshes of each kind whose median counts
# Backends read this many recent refreshes (SKIP aside): older ones describe the table as it was.
RECENT = 20
FULL_ACTIONS = ("FULL", "CREATE", "REBUILD")  # each computes the contents from scratch
TINY = 1e-9  # a cost or duration of 0 divides as this
# A planner unit takes 3-24 us of work on a cached table here (an aggregate, a join and a window over
# 10k and 1M rows; benchmarks/bench_planner_units.py); 100 us leaves room for slower disks. Where FULL's
# seconds per unit are above it, they are fixed cost (100 rows: 4 units, a 0.19 s CREATE), not work.
MAX_SECONDS_PER_UNIT = 1e-4


@dataclass(frozen=True)
class PastRefresh:
    """One row of the refresh history: what was done, in how many seconds, reading how many changes;
    and what the planner estimated a differential refresh would have taken, where it was asked."""

    action: str
    seconds: float
    changes: int = 0
    estimated_differential: float | None = None


@dataclass(frozen=True)
class PlannerCosts:
    """The planner's total cost of this batch's differential refresh and of a FULL one."""

    differential: float
    full: float


@dataclass(frozen=True)
class Choice:
    action: Literal["DIFFERENTIAL", "FULL"]
    reason: str | None  # the numbers behind the choice; None: no evidence, the threshold rule stood
    # The planner's estimate of the differential refresh in seconds, for the history row.
    estimated_differential: float | None = None


@dataclass(frozen=True)
class _Sample:
    seconds: float
    changes: int
    estimated: bool  # the planner's estimate, not a measurement


def history_decides(history: Sequence[PastRefresh]) -> bool:
    """Whether `history` holds evidence of both paths, so that the planner need not be asked.

    >>> history_decides([PastRefresh("DIFFERENTIAL", 0.2, 10), PastRefresh("REBUILD", 0.9)])
    True
    >>> history_decides([PastRefresh("CREATE", 0.9)])
    False
    >>> history_decides([PastRefresh("FULL", 2.1, 10, estimated_differential=4.0), PastRefresh("CREATE", 0.9)])
    True
    """
    differential, full = _samples(history)
    return bool(differential and full)


def _samples(history: Sequence[PastRefresh]) -> tuple[list[_Sample], list[PastRefresh]]:
    """The most recent differential refreshes (measured, or estimated by the planner at a FULL one),
    and the most recent refreshes that computed the contents from scratch."""
    measured = [_Sample(p.seconds, p.changes, estimated=False) for p in history if p.action == "DIFFERENTIAL"]
    # A planner's estimate counts only until a differential refresh is measured.
    differential = measured or [
        _Sample(p.estimated_differential, p.changes, estimated=True)
        for p in history
        if p.action == "FULL" and p.estimated_differential is not None
    ]
    # A FULL refresh that the planner priced a differential one for first also paid for that pricing
    # (building the delta, often the bulk of a differential refresh): its seconds are not FULL's.
    full = [p for p in history if p.action in FULL_ACTIONS and p.estimated_differential is None]
    return differential[:SAMPLES], full[:SAMPLES]


def differential_seconds(changes: int, past: Sequence[tuple[float, int]]) -> float:
    """A differential refresh of `changes` estimated from `past` ones (seconds, changes), erring low:
    one of more changes is scaled down in proportion (its fixed cost too), one of fewer is taken as it
    is (more changes never cost less). The median of those, so one disturbed run does not decide.

    >>> differential_seconds(100, [(2.0, 1000), (0.5, 10)])  # 2.0 s scaled to a tenth; 0.5 s as is
    0.35
    >>> differential_seconds(5000, [(2.0, 1000), (0.5, 10)])
    1.25
    """
    return statistics.median(
        seconds * min(1.0, changes / past_changes) if past_changes > 0 else seconds
        for seconds, past_changes in past
    )


def choose(changes: int, history: Sequence[PastRefresh], planner: PlannerCosts | None = None) -> Choice:
    """DIFFERENTIAL or FULL for a batch of `changes`, from `history` (most recent first) and, where
    the backend has one, the `planner`'s costs.

    Past differential refreshes took ~4 s for this many changes, FULL 1.2 s: recompute.

    >>> history = [PastRefresh("DIFFERENTIAL", 4.1, 200), PastRefresh("CREATE", 1.2)]
    >>> print(choose(200, history).reason)
    differential estimated 3.4x the cost of FULL (history: differential ~4.10 s for 200 changes,
    FULL 1.20 s; medians of 1 and 1 recent refreshes)

    Twice FULL's cost, but a saving of 30 ms: not worth a switch.

    >>> choice = choose(200, [PastRefresh("DIFFERENTIAL", 0.06, 200), PastRefresh("CREATE", 0.03)])
    >>> print(choice.action, choice.reason)
    DIFFERENTIAL differential estimated 2.0x the cost of FULL (history: differential ~0.06 s for 200
    changes, FULL 0.03 s; medians of 1 and 1 recent refreshes); saves under 1 s: kept differential

    No differential refresh yet: the planner decides, its units turned into seconds by FULL's history.

    >>> created = [PastRefresh("CREATE", 0.8)]
    >>> choice = choose(10, created, PlannerCosts(differential=41_200, full=17_900))
    >>> print(choice.action, choice.reason)
    FULL differential estimated 2.3x the cost of FULL (planner: 41,200 vs 17,900, i.e. ~1.84 s
    against FULL's recent 0.80 s)
    >>> round(choice.estimated_differential, 2)  # recorded: the next refreshes decide by history
    1.84
    >>> choose(10, created, PlannerCosts(differential=120, full=17_900)).action
    'DIFFERENTIAL'

    A table of a few rows: FULL's 0.8 s are fixed cost, not 4 units' work; 19 units are no saving.

    >>> print(choose(10, created, PlannerCosts(differential=19, full=4)).reason)
    differential estimated 1.0x the cost of FULL (planner: 19 vs 4, a unit at most 100 us, i.e. ~0.80
    s against FULL's recent 0.80 s)

    That estimate decided the FULL refresh it was made at; the next batch measures it.

    >>> history = [PastRefresh("FULL", 2.5, 10, estimated_differential=1.84), *created]
    >>> print(choose(10, history).reason)
    measuring a differential refresh: the planner's ~1.84 s for 10 changes chose the last FULL
    (history: FULL 0.80 s)

    Measured, it decides; the estimate no longer counts.

    >>> history = [PastRefresh("DIFFERENTIAL", 0.03, 10), *history]
    >>> print(choose(10, history).reason)
    differential estimated 0.04x the cost of FULL (history: differential ~0.03 s for 10 changes, FULL
    0.80 s; medians of 1 and 1 recent refreshes)

    No evidence at all: the threshold rule stands.

    >>> choose(10, [])
    Choice(action='DIFFERENTIAL', reason=None, estimated_differential=None)
    """
    differential, full = _samples(history)
    full_seconds = statistics.median(p.seconds for p in full) if full else None
    recorded = None
    if differential and full_seconds is not None and differential[0].estimated:
        prior = differential[0]
        return Choice(
            "DIFFERENTIAL",
            f"measuring a differential refresh: the planner's ~{prior.seconds:.2f} s for {prior.changes} "
            f"changes chose the last FULL (history: FULL {full_seconds:.2f} s)",
        )
    if differential and full_seconds is not None:
        estimate = differential_seconds(changes, [(d.seconds, d.changes) for d in differential])
        numbers = (
            f"history: differential ~{estimate:.2f} s for {changes} changes, FULL "
            f"{full_seconds:.2f} s; medians of {len(differential)} and {len(full)} recent refreshes"
        )
        ratio = estimate / max(full_seconds, TINY)
    elif planner is not None:
        numbers = f"planner: {planner.differential:,.0f} vs {planner.full:,.0f}"
        if full_seconds is None:
            ratio = planner.differential / max(planner.full, TINY)
            estimate = None  # no seconds to weigh a saving in: not switching on units alone
            numbers += ", no FULL refresh timed yet"
        else:
            per_unit = full_seconds / max(planner.full, TINY)
            if per_unit > MAX_SECONDS_PER_UNIT:
                per_unit = MAX_SECONDS_PER_UNIT
                numbers += f", a unit at most {MAX_SECONDS_PER_UNIT * 1e6:.0f} us"
            # Both paths pay FULL's fixed cost; the differential's extra units are its own.
            estimate = recorded = max(full_seconds + (planner.differential - planner.full) * per_unit, 0.0)
            ratio = estimate / max(full_seconds, TINY)
            numbers += f", i.e. ~{estimate:.2f} s against FULL's recent {full_seconds:.2f} s"
    else:
        return Choice("DIFFERENTIAL", None)
    saves = (
        estimate is not None and full_seconds is not None and estimate - full_seconds >= MIN_SAVING_SECONDS
    )
    clear = ratio > MARGIN and saves
    reason = f"differential estimated {_times(ratio)} the cost of FULL ({numbers})"
    if ratio > MARGIN and not clear:
        reason += f"; saves under {MIN_SAVING_SECONDS:g} s: kept differential"
    return Choice("FULL" if clear else "DIFFERENTIAL", reason, recorded)


def differential_limit(history: Sequence[PastRefresh], ceiling: int) -> int:
    """The largest batch `choose` keeps differential on `history` alone, up to `ceiling`: a backend
    that applies batches with statements planned earlier applies one this large or smaller without
    planning or pricing it. `choose` never prefers FULL for fewer changes than a batch it keeps
    differential, so a search finds it. With no differential refresh measured yet, `choose` keeps
    any batch differential (the threshold rule stands): the first one under the threshold is measured,
    not priced by a planner's estimate (which was off 60-fold on a tiny delta, issue 60).

    >>> history = [PastRefresh("DIFFERENTIAL", 3.0, 1000), PastRefresh("CREATE", 1.0)]
    >>> differential_limit(history, 10**9)  # 3 s per 1000 changes, FULL 1 s: FULL saves 1 s from 667
    666
    >>> choose(666, history).action, choose(667, history).action
    ('DIFFERENTIAL', 'FULL')
    >>> differential_limit([PastRefresh("DIFFERENTIAL", 0.05, 10), PastRefresh("CREATE", 1.0)], 10**9)
    1000000000
    >>> differential_limit([PastRefresh("CREATE", 1.0)], 10**9)  # nothing measured: measure one
    1000000000
    """
    if choose(ceiling, history).action == "DIFFERENTIAL":
        return ceiling
    kept, recomputed = 0, ceiling  # choose(kept) is DIFFERENTIAL, choose(recomputed) FULL
    while recomputed - kept > 1:
        middle = (kept + recomputed) // 2
        if choose(middle, history).action == "DIFFERENTIAL":
            kept = middle
        else:
            recomputed = middle
    return kept


def _times(ratio: float) -> str:
    """A cost ratio for people: at most two significant figures.

    >>> [_times(r) for r in (23.4, 2.34, 0.234, 0.0234, 0.0001)]
    ['23x', '2.3x', '0.23x', '0.02x', '<0.01x']
    """
    if ratio >= 10:
        return f"{ratio:.0f}x"
    if ratio >= 1:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x" if ratio >= 0.01 else "<0.01x"
