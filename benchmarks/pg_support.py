"""Shared plumbing for the PostgreSQL benchmarks: a tuned throwaway server, fresh databases, timing.

The benchmarks run by hand (`python benchmarks/bench_postgres.py --help`); nothing here is a test.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2

from dbt_ivm.embedded import postgres_server

# A modest server configuration for a 2-core, 23 GB machine; the defaults (128 MB shared_buffers,
# 4 MB work_mem) would make every large sort and hash spill to disk.
SERVER_SETTINGS = {
    "shared_buffers": "1GB",
    "work_mem": "64MB",
    "maintenance_work_mem": "512MB",
    "max_wal_size": "8GB",
}


def start_server(data_dir: Path, bin_dir: str | None = None, fast: bool = True) -> postgres_server.PgServer:
    """Start (or reuse) the cluster in `data_dir` with SERVER_SETTINGS applied (restarting once if needed)."""
    server = postgres_server.start(data_dir, bin_dir=bin_dir, fast=fast)
    conn = connect(server.dsn())
    with conn.cursor() as cur:
        for name, value in SERVER_SETTINGS.items():
            cur.execute(f"ALTER SYSTEM SET {name} = %s", (value,))
        cur.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)
        cur.execute("SELECT COALESCE(bool_or(pending_restart), false) FROM pg_settings")
        pending = bool(cur.fetchone()[0])
    conn.close()
    if pending:
        postgres_server.stop(data_dir)
        server = postgres_server.start(data_dir, bin_dir=bin_dir, fast=fast)
    return server


def connect(dsn: str) -> Any:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def fresh_database(server: postgres_server.PgServer, name: str) -> Any:
    """Drop and recreate database `name`; return an autocommit connection to it."""
    admin = connect(server.dsn())
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    return connect(server.dsn(name))


@contextmanager
def scratch_database(name: str) -> Iterator[tuple[postgres_server.PgServer, Any]]:
    """A server on a new temporary cluster and an autocommit connection to a fresh database `name`
    on it; the server is stopped afterwards."""
    data = Path(tempfile.mkdtemp(prefix=f"bench_{name}_")) / "pg"
    server = start_server(data)
    try:
        yield server, fresh_database(server, name)
    finally:
        postgres_server.stop(data)


def drop_database(server: postgres_server.PgServer, name: str) -> None:
    admin = connect(server.dsn())
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """Wall-clock seconds of `action()` as seen by the client, and its result."""
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def fmt_seconds(seconds: float) -> str:
    """Human scale: µs below 1 ms, ms below 1 s, else seconds."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine_description(server: postgres_server.PgServer) -> str:
    """CPU, memory, PostgreSQL version and the settings that matter for the numbers."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages * page_size / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    conn = connect(server.dsn())
    with conn.cursor() as cur:
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
        names = ["fsync", "synchronous_commit", "full_page_writes", "jit", *SERVER_SETTINGS]
        settings = []
        for name in names:
            cur.execute(f"SHOW {name}")
            settings.append(f"{name}={cur.fetchone()[0]}")
    conn.close()
    return (
        f"{os.cpu_count()} × {cpu}{memory}; {platform.system()} {platform.release()}; "
        f"PostgreSQL {version} ({', '.join(settings)})"
    )
