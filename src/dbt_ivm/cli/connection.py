"""The backend a `dbt-ivm` command works on: the connection its options, the environment or the dbt
project's profile name."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from dbt_ivm.cli.tables import first_lines

if TYPE_CHECKING:
    from dbt_ivm.operations import Operations

DSN_ENV = "DBT_IVM_PG_DSN"
SPARK_WAREHOUSE_ENV = "DBT_IVM_SPARK_WAREHOUSE"
SPARK_METASTORE_ENV = "DBT_IVM_SPARK_METASTORE_URIS"
DEFAULT_CATALOG = "dbt_ivm"


def with_backend(args: argparse.Namespace, work: Callable[[Operations], int]) -> int:
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
                print(f"dbt-ivm: {first_lines(str(exc))}", file=sys.stderr)
                return 1
    except operations.CannotConnect as exc:
        print(f"dbt-ivm: {exc}{source}", file=sys.stderr)
        return 1


def connection_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with the options that name a command's connection and catalog schema."""
    dbt = parser.add_argument_group("the dbt project's profile (used unless a connection is given)")
    dbt.add_argument("--project-dir", default=None, metavar="DIR", help="default: $DBT_PROJECT_DIR, else .")
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
