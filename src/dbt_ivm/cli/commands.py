"""`dbt-ivm status|history|drop|gc|refresh`: the registered stream tables seen, refreshed and removed
without dbt, and their options."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbt_ivm.cli.connection import connection_options, with_backend
from dbt_ivm.cli.tables import duration, next_text, pending_text, print_table

if TYPE_CHECKING:
    from dbt_ivm.operations import Operations


def _list(args: argparse.Namespace) -> int:
    def work(backend: Operations) -> int:
        found = backend.status(args.catalog_schema)
        if args.json:
            listed = [
                {
                    "stream_table": r.stream_table,
                    "exists": r.exists,
                    "refresh_mode": r.refresh_mode,
                    "sources": r.sources,
                    "pending": r.pending,
                    "pending_total": r.pending_total,
                    "refreshed_at": r.refreshed_at.isoformat() if r.refreshed_at else None,
                    "staleness_seconds": r.staleness_seconds,
                    "target_lag_seconds": r.target_lag_seconds,
                    "schedule": r.schedule,
                    "last_action": r.last_action,
                    "last_status": r.last_status,
                    "next_action": r.next_action,
                    "next_reason": r.next_reason,
                }
                for r in found
            ]
            print(json.dumps(listed, indent=2))
            return 0
        if not found:
            print(f"no stream tables are registered in catalog schema {args.catalog_schema!r}")
            return 0
        header = (
            "STREAM TABLE",
            "EXISTS",
            "MODE",
            "SOURCES",
            "PENDING CHANGES",
            "LAST REFRESH",
            "STALE FOR",
            "SCHEDULE",
            "NEXT REFRESH",
        )
        lines = [
            (
                r.stream_table,
                "yes" if r.exists else "NO",
                r.refresh_mode,
                ", ".join(r.sources) or "-",
                pending_text(r.pending),
                f"{r.last_action} {r.last_status}" if r.last_action else "never",
                duration(r.staleness_seconds),
                r.schedule or (f"lag {duration(r.target_lag_seconds)}" if r.target_lag_seconds else "-"),
                next_text(r),
            )
            for r in found
        ]
        print_table(header, lines)
        recomputed = [r for r in found if r.next_reason]
        if recomputed:
            print("\nrecomputed at the next refresh:")
            for r in recomputed:
                print(f"  {r.stream_table}: {r.next_action}, {r.next_reason}")
        missing = [r.stream_table for r in found if not r.exists]
        if missing:
            print(
                f"\n{len(missing)} stream table(s) without a table keep their sources' change buffers from "
                "being cleaned up; run: dbt-ivm gc"
            )
        return 0

    return with_backend(args, work)


def _history(args: argparse.Namespace) -> int:
    def work(backend: Operations) -> int:
        found = backend.history(args.catalog_schema, args.stream_table, args.limit)
        if args.json:
            print(
                json.dumps(
                    [{**vars(r), "finished_at": r.finished_at and r.finished_at.isoformat()} for r in found]
                )
            )
            return 0
        header = (
            "REFRESH ID",
            "STREAM TABLE",
            "ACTION",
            "STATUS",
            "ROWS",
            "CHANGES",
            "SECONDS",
            "FINISHED",
            "BY",
            "WHY",
        )
        lines = [
            (
                str(r.refresh_id),
                r.stream_table,
                r.action,
                r.status,
                f"+{r.rows_inserted} ~{r.rows_updated} -{r.rows_deleted}",
                str(r.changes_read),
                "-" if r.duration_seconds is None else f"{r.duration_seconds:.3f}",
                r.finished_at.isoformat(sep=" ", timespec="seconds") if r.finished_at else "-",
                r.initiated_by or "-",
                r.reason.splitlines()[0] if r.reason else "",
            )
            for r in found
        ]
        print_table(header, lines)
        return 0

    return with_backend(args, work)


def _drop(args: argparse.Namespace) -> int:
    def work(backend: Operations) -> int:
        name = args.stream_table
        if not backend.drop(args.catalog_schema, name, drop_table=not args.keep_table):
            hint = "" if "." in name else f" (name it schema.table, e.g. {backend.example})"
            print(
                f"dbt-ivm: no stream table {name!r} is registered in catalog schema "
                f"{args.catalog_schema!r}{hint}; see: dbt-ivm list",
                file=sys.stderr,
            )
            return 1
        kept = "its table was kept" if args.keep_table else "its table was dropped"
        print(f"unregistered stream table {name} ({kept})")
        return 0

    return with_backend(args, work)


def _gc(args: argparse.Namespace) -> int:
    from dbt_ivm import unused

    project = None
    if args.manifest is not None:
        try:
            project = unused.project_of_manifest(json.loads(Path(args.manifest).read_text()))
        except (OSError, ValueError) as exc:
            print(f"dbt-ivm: cannot read the manifest {args.manifest}: {exc}", file=sys.stderr)
            return 1

    def work(backend: Operations) -> int:
        removed = backend.gc(args.catalog_schema)
        for name in removed:
            print(f"unregistered {name}: its table no longer exists")
        orphans = [] if project is None else unused.unused(backend.relations(args.catalog_schema), project)
        for name in orphans:
            backend.drop(args.catalog_schema, name, drop_table=False)
            print(f"unregistered {name}: no enabled model of the project builds it (its table was kept)")
        if not removed and not orphans:
            print("every registered stream table has its table and its model; nothing to unregister")
        return 0

    return with_backend(args, work)


# A refresh's fields in `dbt-ivm refresh --json` (None for a stream table not due, or failed).
REFRESH_FIELDS = ("action", "rows_inserted", "rows_updated", "rows_deleted", "seconds", "reason")


def _refresh_lines(outcomes: list[Any]) -> list[tuple[str, ...]]:
    """One line per stream table: what was done, the rows, why."""
    lines: list[tuple[str, ...]] = []
    for outcome in outcomes:
        if outcome.error is not None:
            lines.append((outcome.stream_table, "FAILED", "", outcome.error.splitlines()[0]))
        elif outcome.result is None:
            lines.append((outcome.stream_table, "not due", "", outcome.waiting or ""))
        else:
            r = outcome.result
            counts = f"+{r.rows_inserted} ~{r.rows_updated} -{r.rows_deleted} in {r.seconds:.3f}s"
            lines.append((outcome.stream_table, r.shown_action, counts, r.reason or ""))
    return lines


def _refresh(args: argparse.Namespace) -> int:
    from dbt_ivm.errors import IvmError

    def once(backend: Operations) -> int:
        try:
            outcomes = backend.refresh(args.catalog_schema, args.stream_tables)
        except IvmError as error:
            print(f"dbt-ivm: {error}", file=sys.stderr, flush=True)
            return 1
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "stream_table": o.stream_table,
                            **{name: getattr(o.result, name, None) for name in REFRESH_FIELDS},
                            "error": o.error,
                        }
                        for o in outcomes
                    ]
                ),
                flush=True,
            )
        else:
            print_table(("STREAM TABLE", "DID", "ROWS", "REASON"), _refresh_lines(outcomes))
        return 1 if any(o.error for o in outcomes) else 0

    if args.watch is None:
        return with_backend(args, once)

    def watch(backend: Operations) -> int:
        while True:  # until interrupted; a failing stream table is reported and tried again
            once(backend)
            time.sleep(args.watch)

    try:
        return with_backend(args, watch)
    except KeyboardInterrupt:
        return 0


def add_registration_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = connection_options(
        commands.add_parser(
            "status",
            aliases=["list"],
            help="each stream table: mode, sources, pending changes, last refresh and outcome, staleness, lag",
        )
    )
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=_list)

    drop = connection_options(
        commands.add_parser(
            "drop", help="unregister a stream table, drop its table, remove capture nobody else needs"
        )
    )
    drop.add_argument("stream_table", metavar="STREAM_TABLE", help="schema.table, as `dbt-ivm list` shows it")
    drop.add_argument("--keep-table", action="store_true", help="unregister only; keep the table")
    drop.set_defaults(handler=_drop)

    gc = connection_options(
        commands.add_parser(
            "gc",
            help="unregister stream tables whose table no longer exists (and with --manifest, "
            "those no model of the project builds)",
        )
    )
    gc.add_argument(
        "--manifest",
        default=None,
        metavar="PATH",
        help="a dbt project's target/manifest.json: also unregister stream tables in its schemas that "
        "none of its enabled models builds (deleted, disabled or renamed models); their tables are kept",
    )
    gc.set_defaults(handler=_gc)

    history = connection_options(commands.add_parser("history", help="the newest refreshes, newest first"))
    history.add_argument("stream_table", nargs="?", metavar="STREAM_TABLE", help="schema.table; default: all")
    history.add_argument("--limit", type=int, default=20, help="how many rows (default 20)")
    history.add_argument("--json", action="store_true", help="print a JSON list")
    history.set_defaults(handler=_history)

    refresh = connection_options(
        commands.add_parser(
            "refresh",
            help="refresh stream tables without dbt, from what dbt run stored, in dependency order",
        )
    )
    refresh.add_argument(
        "stream_tables",
        nargs="*",
        metavar="STREAM_TABLE",
        help="schema.table; default: every stream table whose target_lag has passed (all without one)",
    )
    refresh.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        default=None,
        help="refresh again every SECONDS until stopped",
    )
    refresh.add_argument("--json", action="store_true", help="print one JSON list per pass")
    refresh.set_defaults(handler=_refresh)
