"""Run the whole suite as pytest jobs on two lanes, and report what each cost.

    .venv/bin/python scripts/suite.py            # CI's suite (scripts/test.sh runs this)
    .venv/bin/python scripts/suite.py --quick    # the inner loop: docs/testing.md says what it covers

A job is one pytest process. Two lanes (the machine has two cores) each take the next job from one
queue, longest first by the minutes CI last measured (`JOBS`), so the lanes end close together.
Each job's log is printed when it ends; at the end, each lane's minutes, every job's minutes, the 15
slowest tests and the seconds per test module (from each job's JUnit report) — so growth shows in
every CI log. pytest's exit 5 (no test selected) counts as success. Stdlib only: it runs before
anything is imported from the project.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG15_BIN = Path("/usr/lib/postgresql/15/bin")
LANES = 2
NO_TESTS_SELECTED = 5

# The long Spark modules, split between two jobs (each its own JVM) so no one job holds a lane for
# half the run. Every other Spark module runs in SPARK_REST: nothing is listed twice or left out.
SPARK_ORACLE = [
    "tests/spark/test_shapes.py",
    "tests/spark/test_tpch.py",
    "tests/spark/test_randomized.py",
    "tests/spark/test_repeating_rows.py",
    "tests/spark/test_grouped_apply.py",
    "tests/spark/test_decimal_sums.py",
]
SPARK_PROCESSES = ["tests/spark/test_cluster.py", "tests/spark/test_kill.py"]
# The engine's Spark tests run without adaptive query execution: it re-plans every stage of a
# refresh over rows that fit one partition anyway (twelve shapes 7-13 % faster, docs/testing.md).
# The cluster, the kill points and the dbt/PySpark jobs keep the session users get (AQE on).
ENGINE_SPARK_ENV = {"DBT_IVM_TEST_SPARK_CONF": "spark.sql.adaptive.enabled=false"}


@dataclass
class Job:
    key: str  # short: log files and the report's columns
    name: str
    minutes: float  # what CI last measured (docs/testing.md): the queue takes the longest first
    args: list[str]
    log: Path = field(default=Path())
    exit_code: int = -1
    seconds: float = 0.0
    lane: int = 0
    env: dict[str, str] = field(default_factory=dict)  # over the environment (a setting given wins)


def ci_jobs() -> list[Job]:
    others = [f"--ignore={path}" for path in SPARK_ORACLE + SPARK_PROCESSES]
    postgres = ["--backend=postgres", "--ignore=tests/spark", "--ignore=integration_tests/tests/spark"]
    jobs = [
        Job("pg18", "every PostgreSQL and backend-free test, PostgreSQL 18", 16.7, postgres),
        Job(
            "spark-oracle",
            "Spark: query shapes, TPC-H, randomized",
            17.7,
            ["--backend=spark", *SPARK_ORACLE],
            env=ENGINE_SPARK_ENV,
        ),
        Job("spark-procs", "Spark: a cluster, kill points", 5.4, ["--backend=spark", *SPARK_PROCESSES]),
        Job(
            "spark-rest",
            "Spark: the other engine tests",
            14.0,
            ["--backend=spark", "tests/spark", *others],
            env=ENGINE_SPARK_ENV,
        ),
        Job(
            "spark-dbt",
            "Spark: dbt-spark, PySpark",
            4.9,
            ["--backend=spark", "integration_tests/tests/spark"],
        ),
    ]
    if (PG15_BIN / "postgres").exists():
        version = ["tests/postgres", "-m", "server_version", f"--pg-bin={PG15_BIN}"]
        jobs.append(Job("pg15", "what depends on the server version, PostgreSQL 15", 4.2, version))
    return jobs


def quick_jobs() -> list[Job]:
    shapes = ["--backend=postgres", "tests/test_doctests.py", "tests/postgres/test_shapes.py"]
    return [
        Job("pg18", "doctests, query shapes, PostgreSQL 18", 3, shapes),
        Job("spark", "Spark: one smoke refresh", 2, ["--backend=spark", "tests/spark/test_smoke.py"]),
    ]


def run_job(job: Job, logs: Path, extra: list[str]) -> None:
    job.log = logs / f"{job.key}.log"
    report = logs / f"{job.key}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *job.args,
        *extra,
        "-p",
        "no:cacheprovider",
        "--durations=15",
        f"--junitxml={report}",
    ]
    started = time.monotonic()
    with job.log.open("w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        environment = {**job.env, **os.environ}
        job.exit_code = subprocess.call(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=environment
        )
    job.seconds = time.monotonic() - started
    if job.exit_code == NO_TESTS_SELECTED:
        job.exit_code = 0


def run(jobs: list[Job], extra: list[str]) -> int:
    logs = Path(tempfile.mkdtemp(prefix="dbt_ivm_suite_"))
    todo: queue.Queue[Job] = queue.Queue()
    for job in sorted(jobs, key=lambda j: -j.minutes):
        todo.put(job)
    printing = threading.Lock()
    started = time.monotonic()

    def lane(number: int) -> None:
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            job.lane = number
            run_job(job, logs, extra)
            with printing:
                print(
                    f"\n== {job.key} ({job.name}): exit {job.exit_code}, {job.seconds / 60:.1f} min (lane {number})"
                )
                print(job.log.read_text(errors="replace"), flush=True)

    threads = [threading.Thread(target=lane, args=(n,)) for n in range(1, LANES + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report(jobs, logs, time.monotonic() - started)
    shutil.rmtree(logs, ignore_errors=True)  # every log was printed
    return next((job.exit_code for job in jobs if job.exit_code != 0), 0)


def report(jobs: list[Job], logs: Path, wall: float) -> None:
    print(f"\n== the suite: {wall / 60:.1f} min wall")
    for number in range(1, LANES + 1):
        mine = [j for j in jobs if j.lane == number]
        print(f"lane {number}: {sum(j.seconds for j in mine) / 60:.1f} min")
        for job in mine:
            print(f"  {job.seconds / 60:5.1f} min  exit {job.exit_code}  {job.key}: {job.name}")
    tests: list[tuple[float, str]] = []
    modules: dict[str, float] = defaultdict(float)
    for xml in logs.glob("*.xml"):
        try:
            cases = list(ET.parse(xml).getroot().iter("testcase"))
        except ET.ParseError:  # a job that died while writing it: its log says why
            continue
        for case in cases:
            seconds = float(case.get("time", 0))
            module = case.get("classname", "").split(".")
            name = f"{'.'.join(module)}::{case.get('name')}"
            tests.append((seconds, f"{xml.stem:12} {name}"))
            modules[f"{xml.stem:12} {_module(module)}"] += seconds
    print("\n15 slowest tests (setup, call and teardown):")
    for seconds, name in sorted(tests, reverse=True)[:15]:
        print(f"  {seconds:7.1f} s  {name}")
    print("\nseconds per test module (job, module):")
    for name, seconds in sorted(modules.items(), key=lambda item: -item[1]):
        print(f"  {seconds:7.1f} s  {name}")


def _module(parts: list[str]) -> str:
    """tests.postgres.test_shapes (the JUnit classname may end in a test class)."""
    for index, part in enumerate(parts):
        if part.startswith("test_"):
            return ".".join(parts[: index + 1])
    return ".".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="the inner loop (about 5 minutes)")
    options, pytest_args = parser.parse_known_args()  # the rest goes to every job's pytest
    os.chdir(ROOT)
    return run(quick_jobs() if options.quick else ci_jobs(), pytest_args)


if __name__ == "__main__":
    sys.exit(main())
