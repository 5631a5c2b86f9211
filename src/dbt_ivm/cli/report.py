"""`dbt-ivm report --html FILE`: the registered stream tables as one static page (dbt_ivm.report.page):
their graph coloured by state, and each one's refreshes over time."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dbt_ivm.cli.connection import connection_options, with_backend

if TYPE_CHECKING:
    from dbt_ivm.operations import Operations

DEFAULT_REFRESHES = 200


def _report(args: argparse.Namespace) -> int:
    from dbt_ivm.report.page import render

    def work(backend: Operations) -> int:
        statuses = backend.status(args.catalog_schema)
        histories = {
            s.stream_table: backend.history(args.catalog_schema, s.stream_table, args.refreshes)
            for s in statuses
        }
        where = f"catalog schema {args.catalog_schema}"
        page = render(statuses, histories, where, datetime.now())
        Path(args.html).write_text(page, encoding="utf-8")
        print(
            f"wrote {args.html}: {len(statuses)} stream table(s), {sum(map(len, histories.values()))} refreshes"
        )
        return 0

    return with_backend(args, work)


def add_report_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = connection_options(
        commands.add_parser(
            "report",
            help="write one static HTML page: the graph of stream tables coloured by state, and each "
            "one's refreshes over time",
        )
    )
    report.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    report.add_argument(
        "--refreshes",
        type=int,
        default=DEFAULT_REFRESHES,
        metavar="N",
        help=f"the newest N refreshes of each stream table to plot (default {DEFAULT_REFRESHES})",
    )
    report.set_defaults(handler=_report)
