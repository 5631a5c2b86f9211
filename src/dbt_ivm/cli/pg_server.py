"""`dbt-ivm pg start|env|stop`: the embedded PostgreSQL server for a dbt project, and the profile
that points dbt at it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_PG_DIR = ".ivm/pg"
DEFAULT_PROFILE = "dbt_ivm"
POSTGRES_TARGET = "postgres"


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


def add_pg_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
