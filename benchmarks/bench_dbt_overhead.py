"""What `dbt run` adds per stream table when nothing changed, next to a `table` model (issue 14, item 3):
a project with N stream-table models and N table models over one small seed, on the embedded
PostgreSQL 18. Each repeat runs `dbt run` (in-process, dbt's own programmatic runner) selecting 1 and
then N models of each kind, alternating the kinds; the cost per model is (N-model run − 1-model run) ÷
(N − 1), so dbt's start-up and parsing cancel out.

    python benchmarks/bench_dbt_overhead.py [--models 20] [--repeats 5] [--png docs/img/bench_dbt_overhead.png]

Prints a markdown table; nothing here is a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pg_support import fmt_seconds, fresh_database, markdown_table, median, start_server

DATABASE = "dbt_overhead"
QUERY = "select customer_id, sum(amount) as total, count(*) as order_count from {{ ref('orders') }} group by customer_id"


def write_project(root: Path, models: int, server: Any) -> None:
    (root / "models").mkdir(parents=True)
    (root / "seeds").mkdir()
    rows = "\n".join(f"{i},{i % 50},{i % 97}" for i in range(1, 1001))
    (root / "seeds" / "orders.csv").write_text(f"id,customer_id,amount\n{rows}\n")
    for n in range(models):
        (root / "models" / f"stream_{n}.sql").write_text(
            "{{ config(materialized='stream_table', tags=['streams']) }}\n" + QUERY
        )
        (root / "models" / f"table_{n}.sql").write_text(
            "{{ config(materialized='table', tags=['tables']) }}\n" + QUERY
        )
    project = {"name": "overhead", "version": "1.0", "profile": "overhead", "config-version": 2}
    (root / "dbt_project.yml").write_text(yaml.safe_dump(project))
    output = {
        "type": "ivm_postgres",
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "pass": "",
        "dbname": DATABASE,
        "schema": "public",
        "threads": 1,
    }
    (root / "profiles.yml").write_text(
        yaml.safe_dump({"overhead": {"target": "pg", "outputs": {"pg": output}}})
    )


def dbt(root: Path, *args: str) -> float:
    """Seconds of one in-process dbt invocation (it must succeed)."""
    from dbt.cli.main import dbtRunner

    started = time.perf_counter()
    result = dbtRunner().invoke([*args, "--project-dir", str(root), "--profiles-dir", str(root), "--quiet"])
    seconds = time.perf_counter() - started
    if not result.success:
        raise SystemExit(f"dbt {' '.join(args)} failed: {result.exception}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--png", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dbt-overhead-") as scratch:
        root = Path(scratch)
        server = start_server(root / "pg")
        fresh_database(server, DATABASE).close()
        write_project(root / "project", args.models, server)
        project = root / "project"
        dbt(project, "seed")
        dbt(project, "run")  # creates both kinds; later stream-table runs find nothing changed
        selections = {
            ("streams", 1): "stream_0",
            ("streams", args.models): "tag:streams",
            ("tables", 1): "table_0",
            ("tables", args.models): "tag:tables",
        }
        samples: dict[tuple[str, int], list[float]] = {key: [] for key in selections}
        for repeat in range(args.repeats):
            order = list(selections.items())
            if repeat % 2:
                order.reverse()
            for key, select in order:
                samples[key].append(dbt(project, "run", "--select", select))
        lines = []
        per_model: dict[str, float] = {}
        for kind, label in (("streams", "stream_table, nothing changed"), ("tables", "table (rebuilt)")):
            one, many = median(samples[(kind, 1)]), median(samples[(kind, args.models)])
            per_model[kind] = (many - one) / (args.models - 1)
            lines.append([label, fmt_seconds(one), fmt_seconds(many), fmt_seconds(per_model[kind])])
        print(
            markdown_table(
                ["model", "dbt run, 1 model", f"dbt run, {args.models} models", "added per model"], lines
            )
        )
        ratio = per_model["streams"] / per_model["tables"]
        print(f"\nper stream table ÷ per table model: {ratio:.2f}× (target < 1)")
        if args.png:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            figure, axis = plt.subplots(figsize=(5, 3.2))
            names = ["stream_table\n(nothing changed)", "table\n(rebuilt)"]
            values = [per_model["streams"] * 1e3, per_model["tables"] * 1e3]
            axis.bar(names, values, color=["tab:blue", "tab:gray"])
            axis.set_ylabel("ms added per model to dbt run")
            axis.set_title(f"dbt run, {args.models} models, median of {args.repeats}")
            figure.tight_layout()
            figure.savefig(args.png, dpi=120)
        from dbt_ivm.embedded import postgres_server

        postgres_server.stop(root / "pg")


if __name__ == "__main__":
    main()
