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
dbt-ivm explain MODEL [--json]   # whether a model refreshes differentially, and how
dbt-ivm report --html FILE [--refreshes 200]   # a page: the graph by state, refreshes over time

Each of the last seven takes [--catalog-schema dbt_ivm] and a connection: by default the dbt project's
profile, found as dbt finds it ([--project-dir DIR] [--profiles-dir DIR] [--target NAME], or
$DBT_PROJECT_DIR, $DBT_PROFILES_DIR, $DBT_TARGET: dbt_ivm.profiles). Given instead: PostgreSQL --dsn
(else $DBT_IVM_PG_DSN; with no project either, libpq's defaults: PGHOST, PGPORT, PGUSER, ...); Spark
--spark-warehouse DIR (else $DBT_IVM_SPARK_WAREHOUSE) and, when the profile has them, --metastore-uris
(else $DBT_IVM_SPARK_METASTORE_URIS): an embedded Spark driver on that warehouse, as dbt's ivm_spark
starts it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dbt_ivm.cli.commands import add_registration_commands
from dbt_ivm.cli.explain import add_explain_command
from dbt_ivm.cli.pg_server import add_pg_commands, postgres_output, write_profile
from dbt_ivm.cli.report import add_report_command

__all__ = ["build_parser", "main", "postgres_output", "write_profile"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dbt-ivm", description="dbt-ivm helper commands")
    commands = parser.add_subparsers(dest="command", required=True)
    add_pg_commands(commands)
    add_registration_commands(commands)
    add_explain_command(commands)
    add_report_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except RuntimeError as exc:
        print(f"dbt-ivm: {exc}", file=sys.stderr)
        return 1
