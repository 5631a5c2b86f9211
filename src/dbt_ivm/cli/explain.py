"""`dbt-ivm explain MODEL`: whether a batch refreshes a model of the project differentially, and how
(dbt_ivm.explain), from its SQL as dbt compiled it (`target/manifest.json`), planned against the
database or warehouse the profile names. Nothing is created or changed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbt_ivm.cli.connection import connection_options, with_backend
from dbt_ivm.profiles import PROJECT_DIR_ENV
from dbt_ivm.spec import StreamTableSpec

if TYPE_CHECKING:
    from dbt_ivm.operations import Operations


class NoModel(Exception):
    """The model or its compiled SQL is not in the manifest; the message says what to run."""


def model_spec(manifest: dict[str, Any], model: str, path: Path) -> tuple[StreamTableSpec, str]:
    """The model named `model` in `manifest` (read from `path`) as a spec, and how it is
    materialized today."""
    nodes = [n for n in manifest.get("nodes", {}).values() if n.get("resource_type") == "model"]
    found = [n for n in nodes if n.get("name") == model]
    if not found:
        raise NoModel(f"{path} has no model named {model!r}")
    node = found[0]
    sql = node.get("compiled_code") or node.get("compiled_sql")
    if not sql:
        raise NoModel(
            f"model {model} has no compiled SQL in {path}: run `dbt compile --select {model}` first"
        )
    relation = (str(node["schema"]), str(node.get("alias") or node["name"]))
    spec = StreamTableSpec(
        model=model, schema=relation[0], name=relation[1], sql=str(sql), refresh_mode="auto"
    )
    threshold = (node.get("config") or {}).get("full_refresh_threshold")
    if threshold is not None:
        spec = dataclasses.replace(spec, full_refresh_threshold=float(threshold))
    return spec, str((node.get("config") or {}).get("materialized") or "?")


def _explain(args: argparse.Namespace) -> int:
    project = Path(args.project_dir or os.environ.get(PROJECT_DIR_ENV) or ".")
    path = Path(args.manifest) if args.manifest else project / "target" / "manifest.json"
    try:
        spec, materialized = model_spec(json.loads(path.read_text()), args.model, path)
    except (OSError, ValueError) as exc:
        print(
            f"dbt-ivm: cannot read the manifest {path} ({exc}): run `dbt compile` in the project",
            file=sys.stderr,
        )
        return 1
    except NoModel as exc:
        print(f"dbt-ivm: {exc}", file=sys.stderr)
        return 1

    def work(backend: Operations) -> int:
        explanation = backend.explain(spec, args.changes)
        if args.json:
            shown = {
                "model": spec.model,
                "relation": f"{spec.schema}.{spec.name}",
                "materialized": materialized,
            }
            print(json.dumps({**shown, **explanation.as_json()}, indent=2))
            return 0
        today = "" if materialized == "stream_table" else f" (materialized='{materialized}' today)"
        print(f"model {spec.model} ({spec.schema}.{spec.name}){today}")
        print(explanation.text())
        return 0

    return with_backend(args, work)


def add_explain_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = connection_options(
        commands.add_parser(
            "explain",
            help="whether a model refreshes differentially and how (operators, stored layout, sources)",
        )
    )
    explain.add_argument("model", metavar="MODEL", help="a model of the project, by name")
    explain.add_argument(
        "--manifest", default=None, metavar="PATH", help="default: the project's target/manifest.json"
    )
    explain.add_argument("--json", action="store_true", help="print a JSON object")
    explain.add_argument(
        "--changes",
        type=int,
        default=None,
        metavar="N",
        help="also say what `auto` would do with a batch of N changed rows (from the sources' sizes "
        "and the stream table's refresh history)",
    )
    explain.set_defaults(handler=_explain)
