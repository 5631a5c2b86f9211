"""A Spark standalone cluster on loopback, from the pyspark distribution: a master and its workers,
a Hive metastore service and a Spark Thrift server, each a JVM of its own, started with the
distribution's `spark-class` launcher."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from dbt_ivm.spark.java import find_java, use_java
from dbt_ivm.spark.session import (
    FAST_START_JVM_OPTIONS,
    SessionSettings,
    find_iceberg_runtime_jar,
    spark_conf,
)
from tests.spark.sessions import free_port

STARTUP_SECONDS = 120
# What an application on a loopback cluster needs beside dbt_ivm's settings: executors reach the
# driver on 127.0.0.1, and each application (the Thrift server, dbt's refresh driver) runs two
# executors of one core and 1 GB, one on each worker, leaving room for the other.
CLUSTER_CONF = {
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.sql.shuffle.partitions": "4",
}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _environment(java_options: str = "") -> dict[str, str]:
    """Every JVM of the cluster (and the executors its workers start, which inherit it) runs with the
    product's fast-start JIT and GC: each runs a few minutes of small tasks, where C2's compiling
    costs more than it saves on a machine whose two cores are shared with the rest of the suite."""
    use_java(find_java())
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "JAVA_TOOL_OPTIONS": " ".join([*FAST_START_JVM_OPTIONS, java_options]).strip(),
    }


def _launch(command: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """`spark-class` with `command`, in a process group of its own, output to `log`, working in
    `log`'s directory: Derby and Hive drop files (derby.log, metastore_db) into the working
    directory, which must not be the checkout other tests run in."""
    with log.open("wb") as output:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *command],
            env=env,
            cwd=log.parent,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if ready():
            return
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited at startup; see {log}")
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not start within {STARTUP_SECONDS}s; see {log}")


def _listening(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    return ready


@contextmanager
def standalone_cluster(
    directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[str]:
    """A master and `workers` workers (each offering `cores` cores and `memory`), logs and work
    directories under `directory`; yields the master URL once every worker registered."""
    env = _environment()
    port = str(free_port())
    master = f"spark://127.0.0.1:{port}"
    master_class, worker_class = (
        "org.apache.spark.deploy.master.Master",
        "org.apache.spark.deploy.worker.Worker",
    )
    commands = [[master_class, "--host", "127.0.0.1", "--port", port, "--webui-port", str(free_port())]]
    for number in range(workers):
        work = directory / f"worker{number}"
        work.mkdir(parents=True, exist_ok=True)
        offer = ["--cores", str(cores), "--memory", memory, "--work-dir", str(work)]
        commands.append(
            [worker_class, master, "--host", "127.0.0.1", *offer, "--webui-port", str(free_port())]
        )
    processes: list[subprocess.Popen[bytes]] = []
    master_log = directory / "master.log"
    try:
        for number, command in enumerate(commands):
            log = master_log if number == 0 else directory / f"worker{number - 1}.log"
            processes.append(_launch(command, log, env))
        _wait_for_workers(master_log, workers, processes)
        yield master
    finally:
        for process in processes:
            _stop(process)


@contextmanager
def hive_metastore(directory: Path) -> Iterator[str]:
    """A Hive metastore service (Hive 2.3, from the pyspark distribution) on an embedded Derby
    database under `directory`; yields its URI (thrift://127.0.0.1:PORT).

    Iceberg locks a table in the metastore around each commit, and the metastore keeps its locks in
    transaction tables that only a test-mode start creates. That mode also refuses the locks Iceberg
    asks for, so a first start creates the tables (its compactor thread opens the transaction store)
    and a second, plain start serves."""
    directory.mkdir(parents=True, exist_ok=True)
    # Hive writes its log under java.io.tmpdir; spark-class passes no option variable to this class.
    options = f"-Djava.io.tmpdir={directory} -Dderby.stream.error.file={directory / 'derby.log'}"
    env = _environment(java_options=options)
    port = free_port()
    settings = {
        "hive.async.log.enabled": "false",  # its async logger needs a jar pyspark does not ship
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
    }

    def command(extra: Mapping[str, str]) -> list[str]:
        options = [
            arg for key, value in {**settings, **extra}.items() for arg in ("--hiveconf", f"{key}={value}")
        ]
        return ["org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port), *options]

    preparing_log = directory / "metastore-prepare.log"
    preparing = _launch(
        command({"hive.in.tez.test": "true", "hive.compactor.initiator.on": "true"}), preparing_log, env
    )
    try:
        _wait(_transaction_store_opened(directory), preparing, "the metastore (preparing)", preparing_log)
    finally:
        _stop(preparing)
    log = directory / "metastore.log"
    serving = _launch(command({}), log, env)
    try:
        _wait(_listening(port), serving, "the metastore", log)
        yield f"thrift://127.0.0.1:{port}"
    finally:
        _stop(serving)


def _transaction_store_opened(directory: Path) -> Callable[[], bool]:
    def ready() -> bool:
        # The compactor's Initiator logs only after it opened (and so created) the transaction store.
        return any(
            re.search(r"compactor\.Initiator:", log.read_text(errors="replace"))
            for log in directory.rglob("hive.log")
        )

    return ready


@contextmanager
def thrift_server(directory: Path, settings: SessionSettings) -> Iterator[int]:
    """A Spark Thrift server, a driver with the catalog `settings` describe (dbt_ivm's own Spark
    settings: what docs/spark.md tells users to give theirs); yields its port."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = spark_conf(settings, find_iceberg_runtime_jar())
    command = [
        "org.apache.spark.deploy.SparkSubmit",
        "--class",
        "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
        *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
        "spark-internal",
        "--hiveconf",
        f"hive.server2.thrift.port={port}",
        "--hiveconf",
        "hive.server2.thrift.bind.host=127.0.0.1",
    ]
    log = directory / "thrift-server.log"
    process = _launch(command, log, _environment())
    try:
        _wait(_listening(port), process, "the Thrift server", log)
        yield port
    finally:
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
