"""`dbt-ivm`: run the embedded PostgreSQL server for a dbt project and write a matching profile;
inspect, refresh and clean up the stream tables registered on a PostgreSQL database or a Spark warehouse.

dbt-ivm pg start [--dir .ivm/pg] [--pg-bin DIR] [--profiles-dir DIR] [--profile NAME]
dbt-ivm pg env   [--dir .ivm/pg]     # shell exports: PGHOST, PGPORT, ..., DBT_IVM_PG_DSN
dbt-ivm pg stop  [--dir .ivm/pg]
dbt-ivm status [--json]   # stream tables at a glance (alias: list)
dbt-ivm history [SCHEMA.TABLE] [--limit 20] [--json]   # the newest refreshes
dbt-ivm drop SCHEMA.TABLE [--keep-table]
dbt-ivm gc [--manifest target/manifest.json]   # unregister stream tables whose table (or model) is gone
dbt-ivm refresh [SCHEMA.TABLE ...] [--watch SECONDS] [--json]   # without dbt, in dependency order

Each of the last five takes [--catalog-schema dbt_ivm] and a connection: by default the dbt project's
profile, found as dbt finds it ([--project-dir DIR] [--profiles-dir DIR] [--target NAME], or
$DBT_PROJECT_DIR, $DBT_PROFILES_DIR, $DBT_TARGET: dbt_ivm.profiles). Given instead: PostgreSQL --dsn
(else $DBT_IVM_PG_DSN; with no project either, libpq's defaults: PGHOST, PGPORT, PGUSER, ...); Spark
--spark-warehouse DIR (else $DBT_IVM_SPARK_WAREHOUSE) and, when the profile has them, --metastore-uris
(else $DBT_IVM_SPARK_METASTORE_URIS): an embedded Spark driver on that warehouse, as dbt's ivm_spark
starts it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dbt_ivm.operations import Operations
    from dbt_ivm.status import StreamTableStatus

DEFAULT_PG_DIR = ".ivm/pg"
DEFAULT_PROFILE = "dbt_ivm"
POSTGRES_TARGET = "postgres"
DEFAULT_CATALOG = "dbt_ivm"
DSN_ENV = "DBT_IVM_PG_DSN"
SPARK_WAREHOUSE_ENV = "DBT_IVM_SPARK_WAREHOUSE"
SPARK_METASTORE_ENV = "DBT_IVM_SPARK_METASTORE_URIS"


def _project_profile_name(project_dir: Path) -> str | None:
    """The `profile:` named in the dbt project in `project_dir`, if there is one."""
    import yaml  # type: ignore[import-untyped, unused-ignore]

    project_file = project_dir / "dbt_project.yml"
    if not project_file.exists():
        return None
    project = yaml.safe_load(project_file.read_text()) or {}
    name = project.get("profile") if isinstance(project, dict) else None
    return str(name) if name else None


def postgres_output(
    host: str, port: int, user: str, database: str, schema: str, threads: int
) -> dict[str, Any]:
    """A dbt profile output for an `ivm_postgres` connection to the embedded server (trust auth)."""
    return {
        "type": "ivm_postgres",
        "host": host,
        "port": port,
        "user": user,
        "pass": "",
        "dbname": database,
        "schema": schema,
        "threads": threads,
    }


def write_profile(profiles_dir: Path, profile: str, target: str, output: dict[str, Any]) -> Path:
    """Add or replace one output of one profile in profiles.yml, keeping everything else in the file."""
    import yaml  # type: ignore[import-untyped, unused-ignore]

    profiles_dir.mkdir(parents=True, exist_ok=True)
    path = profiles_dir / "profiles.yml"
    profiles: dict[str, Any] = {}
    if path.exists():
        loaded = yaml.safe_load(path.read_text())
        if isinstance(loaded, dict):
            profiles = loaded
    entry = profiles.get(profile)
    if not isinstance(entry, dict):
        entry = {}
    outputs = entry.get("outputs")
    if not isinstance(outputs, dict):
        outputs = {}
    outputs[target] = output
    entry["outputs"] = outputs
    entry.setdefault("target", target)
    profiles[profile] = entry
    path.write_text(yaml.safe_dump(profiles, sort_keys=False))
    return path


def _ensure_database(dsn: str, database: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute("select 1 from pg_database where datname = %s", (database,))
            if cursor.fetchone() is None:
                quoted = '"' + database.replace('"', '""') + '"'
                cursor.execute(f"create database {quoted}")
    finally:
        conn.close()


def _pg_start(args: argparse.Namespace) -> int:
    from dbt_ivm.embedded import postgres_server

    server = postgres_server.start(Path(args.dir), bin_dir=args.pg_bin)
    if args.database != "postgres":
        _ensure_database(server.dsn(), args.database)
    profile = args.profile or _project_profile_name(Path.cwd()) or DEFAULT_PROFILE
    output = postgres_output(server.host, server.port, server.user, args.database, args.schema, args.threads)
    path = write_profile(Path(args.profiles_dir), profile, args.target, output)
    print(f"PostgreSQL is running on {server.host}:{server.port} (data in {server.data_dir})")
    print(f"profile {profile!r}, target {args.target!r} (type ivm_postgres) written to {path}")
    return 0


def _pg_stop(args: argparse.Namespace) -> int:
    from dbt_ivm.embedded import postgres_server

    if postgres_server.stop(Path(args.dir)):
        print(f"stopped the PostgreSQL server in {Path(args.dir).absolute()}")
    else:
        print(f"no PostgreSQL server is running in {Path(args.dir).absolute()}")
    return 0


def _pg_env(args: argparse.Namespace) -> int:
    from dbt_ivm.embedded import postgres_server

    server = postgres_server.status(Path(args.dir))
    if server is None:
        print(
            f"no PostgreSQL server is running in {Path(args.dir).absolute()}; run: dbt-ivm pg start",
            file=sys.stderr,
        )
        return 1
    print(f"export PGHOST={server.host}")
    print(f"export PGPORT={server.port}")
    print(f"export PGUSER={server.user}")
    print(f"export PGDATABASE={args.database}")
    print(f"export DBT_IVM_PG_DSN='{server.dsn(args.database)}'")
    return 0


def _add_pg_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pg = commands.add_parser("pg", help="the embedded PostgreSQL server")
    pg_commands = pg.add_subparsers(dest="pg_command", required=True)

    def with_dir(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument(
            "--dir", default=DEFAULT_PG_DIR, help=f"data directory (default {DEFAULT_PG_DIR})"
        )
        parser.add_argument("--database", default="postgres", help="database for dbt (default postgres)")
        return parser

    start = with_dir(pg_commands.add_parser("start", help="start the server and write a dbt profile"))
    start.add_argument("--pg-bin", default=None, help="bin directory of another PostgreSQL build (>= 15)")
    start.add_argument("--profiles-dir", default=".", help="where profiles.yml is written (default .)")
    start.add_argument(
        "--profile", default=None, help=f"profile name (default: the project's, else {DEFAULT_PROFILE})"
    )
    start.add_argument("--target", default=POSTGRES_TARGET, help=f"output name (default {POSTGRES_TARGET})")
    start.add_argument("--schema", default="public", help="dbt's target schema (default public)")
    start.add_argument("--threads", type=int, default=4, help="dbt threads (default 4)")
    start.set_defaults(handler=_pg_start)

    with_dir(pg_commands.add_parser("env", help="print shell exports for the running server")).set_defaults(
        handler=_pg_env
    )
    with_dir(pg_commands.add_parser("stop", help="stop the server")).set_defaults(handler=_pg_stop)


def _with_backend(args: argparse.Namespace, work: Callable[[Operations], int]) -> int:
    """Run `work` on the backend the options name: a Spark warehouse (--spark-warehouse, else
    $DBT_IVM_SPARK_WAREHOUSE) or a PostgreSQL connection string (--dsn, else $DBT_IVM_PG_DSN); else
    the dbt project's profile (dbt_ivm.profiles); else PostgreSQL on libpq's defaults."""
    from dbt_ivm import operations, profiles

    warehouse = args.spark_warehouse or os.environ.get(SPARK_WAREHOUSE_ENV)
    dsn = args.dsn if args.dsn is not None else os.environ.get(DSN_ENV)
    metastore = args.metastore_uris or os.environ.get(SPARK_METASTORE_ENV)
    master, source = args.spark_master, ""
    if not warehouse and dsn is None:
        try:
            found = profiles.locate(args.project_dir, args.profiles_dir, args.target)
        except profiles.ProfileError as exc:
            print(f"dbt-ivm: {exc}", file=sys.stderr)
            return 1
        if found is not None:
            warehouse, dsn, source = found.spark_warehouse, found.dsn, f" ({found.description})"
            metastore, master = metastore or found.metastore_uris, master or found.spark_master
    opened = operations.spark(warehouse, metastore, master) if warehouse else operations.postgres(dsn or "")
    try:
        with opened as backend:
            try:
                return work(backend)
            except backend.errors as exc:
                print(f"dbt-ivm: {_first_lines(str(exc))}", file=sys.stderr)
                return 1
    except operations.CannotConnect as exc:
        print(f"dbt-ivm: {exc}{source}", file=sys.stderr)
        return 1


def _first_lines(text: str, count: int = 3) -> str:
    """An error's first lines (a JVM error carries its stack trace after them)."""
    return "\n".join(text.strip().splitlines()[:count])


def _pending_text(pending: dict[str, int | None]) -> str:
    """`3`, or `5 (public.a=3, public.b=2)` for several sources; `?` when unknown, `-` for none."""
    if not pending:
        return "-"
    counts = {source: "?" if count is None else str(count) for source, count in pending.items()}
    known = [c for c in pending.values() if c is not None]
    total = str(sum(known)) if len(known) == len(pending) else "?"
    if len(pending) == 1:
        return total
    return f"{total} ({', '.join(f'{s}={c}' for s, c in counts.items())})"


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
                _pending_text(r.pending),
                f"{r.last_action} {r.last_status}" if r.last_action else "never",
                _duration(r.staleness_seconds),
                r.schedule or (f"lag {_duration(r.target_lag_seconds)}" if r.target_lag_seconds else "-"),
                _next_text(r),
            )
            for r in found
        ]
        _print_table(header, lines)
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

    return _with_backend(args, work)


def _next_text(status: StreamTableStatus) -> str:
    """What the next refresh will do, as far as the catalog tells: `FULL` or `REBUILD` (its reason is
    printed under the table), `FULL` for refresh_mode='full', else `-` (planning decides)."""
    if status.next_action:
        return f"{status.next_action} (see below)"
    return "FULL" if status.refresh_mode == "full" and status.exists else "-"


def _duration(seconds: float | None) -> str:
    """`42s`, `5m`, `1h30m`, `2d3h`; `-` for none.

    >>> [_duration(s) for s in (None, 42.4, 300, 5400, 183600)]
    ['-', '42s', '5m', '1h30m', '2d3h']
    """
    if seconds is None:
        return "-"
    whole = int(seconds)
    for unit, size, smaller, smaller_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            rest = (whole % size) // smaller_size
            return f"{whole // size}{unit}" + (f"{rest}{smaller}" if rest else "")
    return f"{whole // 60}m" if whole >= 60 else f"{whole}s"


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
        _print_table(header, lines)
        return 0

    return _with_backend(args, work)


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

    return _with_backend(args, work)


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

    return _with_backend(args, work)


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
            _print_table(("STREAM TABLE", "DID", "ROWS", "REASON"), _refresh_lines(outcomes))
        return 1 if any(o.error for o in outcomes) else 0

    if args.watch is None:
        return _with_backend(args, once)

    def watch(backend: Operations) -> int:
        while True:  # until interrupted; a failing stream table is reported and tried again
            once(backend)
            time.sleep(args.watch)

    try:
        return _with_backend(args, watch)
    except KeyboardInterrupt:
        return 0


def _print_table(header: tuple[str, ...], lines: Sequence[tuple[str, ...]]) -> None:
    """Rows as aligned columns under `header`."""
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(),
            flush=True,
        )


def _add_registration_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def connection_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        dbt = parser.add_argument_group("the dbt project's profile (used unless a connection is given)")
        dbt.add_argument(
            "--project-dir", default=None, metavar="DIR", help="default: $DBT_PROJECT_DIR, else ."
        )
        dbt.add_argument(
            "--profiles-dir",
            default=None,
            metavar="DIR",
            help="where profiles.yml is (default: $DBT_PROFILES_DIR, else the project's or the current "
            "directory when it holds one, else ~/.dbt)",
        )
        dbt.add_argument("--target", default=None, help="default: $DBT_TARGET, else the profile's target")
        parser.add_argument(
            "--dsn",
            default=None,
            help=f"libpq connection string (default: ${DSN_ENV}, else the profile, else libpq's defaults)",
        )
        parser.add_argument(
            "--catalog-schema",
            default=DEFAULT_CATALOG,
            help=f"dbt-ivm's catalog schema (default {DEFAULT_CATALOG})",
        )
        spark = parser.add_argument_group("Spark (instead of PostgreSQL)")
        spark.add_argument(
            "--spark-warehouse",
            default=None,
            metavar="DIR",
            help=f"the ivm_spark profile's warehouse (default: ${SPARK_WAREHOUSE_ENV}; unset: PostgreSQL)",
        )
        spark.add_argument(
            "--metastore-uris",
            default=None,
            metavar="URIS",
            help=f"the profile's metastore_uris, when it has them (default: ${SPARK_METASTORE_ENV})",
        )
        spark.add_argument("--spark-master", default=None, metavar="URL", help="default local[2]")
        return parser

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dbt-ivm", description="dbt-ivm helper commands")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_pg_commands(commands)
    _add_registration_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except RuntimeError as exc:
        print(f"dbt-ivm: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
