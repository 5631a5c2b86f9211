"""A Spark standalone cluster on loopback, from the pyspark distribution: a master and its workers,
each a JVM of its own, started with the distribution's `spark-class` launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dbt_ivm.spark.java import find_java, use_java
from tests.spark.sessions import free_port

STARTUP_SECONDS = 120


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@contextmanager
def standalone_cluster(
    directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[str]:
    """A master and `workers` workers (each offering `cores` cores and `memory`), logs and work
    directories under `directory`; yields the master URL once every worker registered."""
    use_java(find_java())
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    port = str(free_port())
    master = f"spark://127.0.0.1:{port}"
    launcher = str(home / "bin" / "spark-class")
    master_class, worker_class = (
        "org.apache.spark.deploy.master.Master",
        "org.apache.spark.deploy.worker.Worker",
    )
    commands = [
        [launcher, master_class, "--host", "127.0.0.1", "--port", port, "--webui-port", str(free_port())]
    ]
    for number in range(workers):
        work = directory / f"worker{number}"
        work.mkdir(parents=True, exist_ok=True)
        offer = ["--cores", str(cores), "--memory", memory, "--work-dir", str(work)]
        commands.append(
            [launcher, worker_class, master, "--host", "127.0.0.1", *offer, "--webui-port", str(free_port())]
        )
    processes: list[subprocess.Popen[bytes]] = []
    master_log = directory / "master.log"
    try:
        for number, command in enumerate(commands):
            log = master_log if number == 0 else directory / f"worker{number - 1}.log"
            with log.open("wb") as output:
                processes.append(
                    subprocess.Popen(
                        command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        _wait_for_workers(master_log, workers, processes)
        yield master
    finally:
        for process in processes:
            _stop(process)


def _wait_for_workers(master_log: Path, workers: int, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if master_log.read_text(errors="replace").count("Registering worker") >= workers:
            return
        exited = [p.args for p in processes if p.poll() is not None]
        if exited:
            raise RuntimeError(f"a cluster process exited at startup: {exited}; see {master_log.parent}")
        time.sleep(0.5)
    raise RuntimeError(f"{workers} workers did not register within {STARTUP_SECONDS}s; see {master_log}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
