"""What creating a PostgreSQL stream table costs, and how much of it is planning in Python: every
shared query shape (tests/shapes.py) created DIFFERENTIAL, and the first N as IMMEDIATE, then each
run again with nothing changed; timed on the client (wall) and in this process (CPU: planning and
rendering; the server's work is not in it).

    python benchmarks/bench_create.py                      # this work tree
    python benchmarks/bench_create.py --against HEAD~3     # side by side with another commit
    python benchmarks/bench_create.py --against HEAD~3 --rounds 2 --png create.png

With --against, each round runs both trees one after the other on one server (a child process
each, importing that tree's `src`), so a ratio is measured under the same load. Prints a Markdown
table; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("differential", "immediate")
# Each stream table created, then run again with nothing changed (a `dbt run` that finds nothing to do).
PHASES = ("create", "run again")


def child(dsn: str, immediate_shapes: int, without: list[str]) -> None:
    """Create every shape in the empty database `dsn`; print seconds per mode as JSON."""
    sys.path.append(str(ROOT))  # tests.shapes; dbt_ivm comes from PYTHONPATH, the tree measured
    import random

    import psycopg2
    from tests.shapes import Workload, create_statements, streams

    from dbt_ivm.postgres.runner import run_stream_table
    from dbt_ivm.spec import StreamTableSpec

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        for statement in create_statements("public", "postgres"):
            cur.execute(statement)
        for statement in Workload("public", random.Random(1)).seed():
            cur.execute(statement)
    shapes = {n: q for n, q in streams("public").items() if n not in without}
    totals: dict[str, dict[str, float]] = {}
    for mode in MODES:
        names = list(shapes) if mode == "differential" else list(shapes)[:immediate_shapes]
        specs = [
            StreamTableSpec(
                model=n, schema="public", name=f"{n}_{mode[:3]}", sql=shapes[n], refresh_mode=mode
            )
            for n in names
        ]
        created = []
        for phase in PHASES:
            wall = cpu = 0.0
            for spec in specs if phase == "create" else created:
                started, started_cpu = time.perf_counter(), time.process_time()
                try:
                    run_stream_table(conn, spec)
                except Exception:  # refused for IMMEDIATE: not what is measured
                    continue
                wall += time.perf_counter() - started
                cpu += time.process_time() - started_cpu
                if phase == "create":
                    created.append(spec)
            totals[f"{mode}, {phase}"] = {"wall": wall, "cpu": cpu, "tables": len(created)}
    conn.close()
    import dbt_ivm

    print(json.dumps({"source": dbt_ivm.__file__, **totals}))


def run_tree(src: Path, dsn: str, immediate_shapes: int, without: str) -> dict[str, dict[str, float]]:
    environment = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--dsn",
            dsn,
            "--immediate",
            str(immediate_shapes),
            "--without",
            without,
        ],
        check=True,
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
    ).stdout
    measured = json.loads(out.strip().splitlines()[-1])
    assert measured.pop("source").startswith(str(src)), f"{src} was not the tree measured"
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", default=None, help="another commit, measured side by side")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--immediate", type=int, default=20, help="shapes also created as IMMEDIATE")
    parser.add_argument("--png", default=None)
    parser.add_argument(
        "--without", default="", help="shapes left out (comma separated): those one tree lacks"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.dsn, args.immediate, args.without.split(","))
        return
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pg_support import fresh_database

    from dbt_ivm.embedded import postgres_server

    trees = {"this tree": ROOT / "src"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            other = Path(tmp) / "against"
            subprocess.run(
                ["git", "worktree", "add", "-q", "--detach", str(other), args.against], check=True, cwd=ROOT
            )
            trees = {args.against: other / "src", **trees}
        data_dir = Path(tmp) / "pg"
        server = postgres_server.start(data_dir, fast=True)
        results: dict[str, list[dict[str, dict[str, float]]]] = {label: [] for label in trees}
        try:
            for round_ in range(args.rounds):
                for index, (label, src) in enumerate(trees.items()):
                    database = f"create_{round_}_{index}"
                    fresh_database(server, database).close()
                    results[label].append(run_tree(src, server.dsn(database), args.immediate, args.without))
        finally:
            postgres_server.stop(data_dir)
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(Path(tmp) / "against")], cwd=ROOT)
    print("| tree | mode | tables | wall s (best) | Python CPU s (best) | CPU per table ms |")
    print("|---|---|---:|---:|---:|---:|")
    cases = [f"{mode}, {phase}" for mode in MODES for phase in PHASES]
    for label, runs in results.items():
        for mode in cases:
            wall = min(r[mode]["wall"] for r in runs)
            cpu = min(r[mode]["cpu"] for r in runs)
            tables = runs[0][mode]["tables"]
            print(f"| {label} | {mode} | {tables:.0f} | {wall:.1f} | {cpu:.1f} | {cpu / tables * 1000:.0f} |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(results)
        for offset, (label, runs) in enumerate(results.items()):
            values = [min(r[case]["cpu"] for r in runs) for case in cases]
            axis.bar([i + offset * width for i in range(len(cases))], values, width, label=label)
        axis.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(cases))], cases, fontsize=7)
        axis.set_ylabel("Python CPU seconds, all shapes")
        axis.set_title("Creating the shared shapes on PostgreSQL")
        axis.legend()
        figure.tight_layout()
        figure.savefig(args.png)


if __name__ == "__main__":
    main()
