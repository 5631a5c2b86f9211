"""One refresh's batch on Spark: each changed source's net changes since the frontier, pinned.

For every source whose snapshot moved, the raw changes between the frontier snapshot and the batch's
end snapshot (``changelog.create_change_view``) are compacted into their net effect, carried-over
rows cancelled (``compacted``), computed once and kept (``TempViews.observed``: the same job counts
them, for the threshold, AUTO and the history), and bound as the source's delta. Anything that
makes the batch unreadable — an expired start snapshot, a changed schema, too many changes for
``full_refresh_threshold`` — becomes the reason for a FULL refresh.

AUTO mode also weighs what reading the changes would cost before reading them: a copy-on-write
UPDATE of a few rows spread over every file puts every row of the table into the changelog twice
(once removed, once added). When the snapshots' summaries say the changelog holds more row images
than the source has rows, recomputing from the source reads less, so the refresh is FULL, and says so.
Below ``MIN_IMAGES_WORTH_WEIGHING`` either read takes Spark well under a second: no switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dbt_ivm.delta.compact import compacted
from dbt_ivm.delta.terms import Bindings
from dbt_ivm.lifecycle import threshold_reason
from dbt_ivm.reserved import internal_columns
from dbt_ivm.spark.apply import TempViews
from dbt_ivm.spark.catalog import NO_SNAPSHOT, SparkTable, incomparable_columns
from dbt_ivm.spark.changelog import create_change_view, unavailable
from dbt_ivm.spark.iceberg import total_records
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.sqltext import WEIGHT, columns

MIN_IMAGES_WORTH_WEIGHING = 1_000_000


@dataclass(frozen=True)
class Batch:
    full_reason: str | None  # None: every changed source is bound in the bindings' deltas
    changes_read: int  # the net changes of the change sets bound (so far, when full_reason is set)
    slow_paths: tuple[str, ...] = ()  # sources read by a snapshot diff, and why (the refresh's reason)
    rebuild: bool = False  # full_reason calls for building the table anew (a source's columns changed)


def bind(
    spark: Any,
    views: TempViews,
    spec: StreamTableSpec,
    frontier: dict[str, int],
    ends: dict[str, int],
    changed: list[SparkTable],
    bindings: Bindings,
    reads: dict[str, tuple[str, ...]],
    rows_read: int = 0,
) -> Batch:
    """Bind each changed source's compacted changes into `bindings.delta`; `reads`: the columns of
    each source the plan reads (``columns_read``), the only ones its change set carries; `rows_read`:
    what a recompute reads (`rows_read`), which ``full_refresh_threshold`` weighs the batch against."""
    total = 0
    pinned: dict[str, tuple[exp.Table, int]] = {}  # each change set's view and row images
    slow_paths: list[str] = []
    for index, source in enumerate(changed):
        name = source.info.qualified
        table = (source.info.schema, source.info.name)
        start, end = frontier[name], ends[name]
        change = create_change_view(
            spark,
            table,
            views.name(f"raw{index}"),
            None if start == NO_SNAPSHOT else start,
            None if end == NO_SNAPSHOT else end,
            read=reads[name],
        )
        if change.release is not None:
            views.on_drop(change.release)
        if change.view is None:
            return Batch(unavailable(name, change.reason), total, rebuild=change.schema_changed)
        # The view is not computed yet: AUTO can still choose to recompute instead.
        size = total_records(spark, table, end) if spec.refresh_mode == "auto" and end != NO_SNAPSHOT else 0
        if start != NO_SNAPSHOT and _changelog_outweighs(change.row_images, size):
            return Batch(
                f"the changelog of {name} holds {change.row_images} row images (copy-on-write rewrites) "
                f"for a table of {size} rows: recomputing reads less",
                total,
            )
        incomparable = incomparable_columns(source.info, reads[name])
        if change.path == "snapshot_diff":
            if incomparable:
                return Batch(
                    f"changes of {name} can only be read as a snapshot diff ({change.reason}), which "
                    f"cannot compare its column {incomparable[0]}",
                    total,
                )
            slow_paths.append(f"changes of {name} read as a snapshot diff: {change.reason}")
        # The view carries the columns under their internal names already.
        names = internal_columns(source.info, reads[name])
        raw = exp.select(*columns(names), exp.column(WEIGHT, quoted=True)).from_(
            exp.table_(change.view, quoted=True)
        )
        image = _json_image(names) if incomparable else None
        frame = views.frame(compacted(raw, names, image))
        removals = exp.CountIf(
            this=exp.LT(this=exp.column(WEIGHT, quoted=True), expression=exp.Literal.number(0))
        )
        delta, (count, removed) = views.observed(
            f"delta{index}", frame, [exp.func("COUNT", exp.Star()), removals]
        )
        if change.release is not None:
            change.release()  # pinned: the staged scan tasks are read
        bindings.delta[name] = delta
        if not removed:  # an append (or nothing net): no row of this source leaves
            bindings.inserted_only.add(name)
        total += int(count)
        pinned[name] = (delta, int(count))
    changed_names = ", ".join(s.info.qualified for s in changed)
    too_many = threshold_reason(spec, changed_names, total, rows_read)
    if too_many is not None:  # the row images overcount: count the rows changed
        rows = sum(
            _rows_changed(spark, s, reads[s.info.qualified], *pinned[s.info.qualified]) for s in changed
        )
        too_many = threshold_reason(spec, changed_names, rows, rows_read)
    return Batch(too_many, total, tuple(slow_paths))


def rows_read(spark: Any, spec: StreamTableSpec, sources: list[SparkTable], ends: dict[str, int]) -> int:
    """What a recompute reads: the rows of every source at the batch's end (AUTO weighs the batch
    against it; 0 when it does not, or a source has no snapshot summary to count from)."""
    if spec.refresh_mode != "auto":
        return 0
    total = 0
    for source in sources:
        end = ends.get(source.info.qualified, NO_SNAPSHOT)
        if end != NO_SNAPSHOT:
            total += total_records(spark, (source.info.schema, source.info.name), end)
    return total


def _rows_changed(
    spark: Any, source: SparkTable, read: tuple[str, ...], delta: exp.Table, images: int
) -> int:
    """The rows a batch changed (its net row `images` are already over the columns read): an updated
    row is two images, counted once by its key where the source declares one."""
    key = source.info.primary_key
    if not key or any(k not in read for k in key):
        return images
    distinct = exp.Count(this=exp.Distinct(expressions=columns(internal_columns(source.info, key))))
    return int(spark.sql(exp.select(distinct).from_(delta.copy()).sql("spark")).collect()[0][0])


def _json_image(names: list[str]) -> exp.Expr:
    """A row image Spark can partition by when a column (a map) has no ordering: its JSON text."""
    return exp.Anonymous(
        this="to_json", expressions=[exp.Anonymous(this="struct", expressions=columns(names))]
    )


def _changelog_outweighs(row_images: int, rows: int) -> bool:
    """Reading the changelog would read more than the source itself (rows 0: not asked, AUTO only)."""
    return row_images >= MIN_IMAGES_WORTH_WEIGHING and 0 < rows < row_images
