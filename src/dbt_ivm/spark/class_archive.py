"""A class-data archive of the embedded Spark's classes (the JDK's class data sharing), made once.

Loading, verifying and linking Spark's, Hive's and Iceberg's ~19,000 classes is most of the CPU a
short JVM spends before its first query. The first session started with a given Java and class path
records the classes it loads (``-XX:DumpLoadedClassList``); once its JVM has exited, a detached,
low-priority helper process (``python -m dbt_ivm.spark.class_archive``) dumps them into an archive
(``java -Xshare:dump``) under a temporary name and renames it into place. Later sessions map the
archive (``-XX:SharedArchiveFile``) and start in about half the time. Nobody waits for the dump; an
archive that does not match (another Java, other jars) is silently ignored by the JVM.

Archives live in ``$DBT_IVM_CACHE_DIR`` (default ``~/.cache/dbt-ivm``), under ``class-archives/``,
named by a hash of everything they depend on. ``DBT_IVM_CLASS_ARCHIVE=0`` turns the mechanism off;
``DBT_IVM_CLASS_ARCHIVE=require`` makes a JVM whose archive cannot be mapped fail to start (a check).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dbt_ivm.spark.java import JavaRuntime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Archive use is best effort: never print the JVM's notes about an unusable archive.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
# A dump that has not finished in this time was killed: its files may be removed.
STALE_SECONDS = 3600.0
DUMP_TIMEOUT_SECONDS = 1800.0


@dataclass(frozen=True)
class Archive:
    """The archive for one Java + class path, and whether this process records classes for it."""

    path: Path
    recording: bool  # True: no archive yet; this process lists its classes for the dump
    required: bool = False  # map it or fail (-Xshare:on) instead of ignoring a mismatch

    @property
    def class_list(self) -> Path:
        return self.path.with_suffix(".classlist")

    @property
    def lock(self) -> Path:
        return self.path.with_suffix(".lock")

    @property
    def temporary(self) -> Path:
        return self.path.with_suffix(".tmp")

    @property
    def jvm_options(self) -> tuple[str, ...]:
        if self.recording:
            return (f"-XX:DumpLoadedClassList={self.class_list}",)
        if self.required:
            return (f"-XX:SharedArchiveFile={self.path}", "-Xshare:on")
        return (f"-XX:SharedArchiveFile={self.path}", QUIET)


def _setting() -> str:
    return os.environ.get("DBT_IVM_CLASS_ARCHIVE", "1").strip().lower()


def enabled() -> bool:
    return _setting() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    configured = os.environ.get("DBT_IVM_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dbt-ivm"


def _stamp(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return f"{path}:missing"
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def archive_key(java: JavaRuntime, jar: Path) -> str:
    """Everything an archive depends on: the JVM build and every jar on the class path."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    home = java.home.resolve()
    parts = [
        _stamp(home / "lib" / "server" / "libjvm.so"),
        _stamp(home / "lib" / "modules"),
        _stamp(jar.resolve()),
        *(_stamp(p) for p in sorted(spark_jars.glob("*.jar"))),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def plan(java: JavaRuntime, jar: Path) -> Archive | None:
    """The archive to use, or one to record for; None when there is neither (another process is
    recording, the cache directory is not writable, or archives are turned off)."""
    if not enabled():
        return None
    directory = cache_dir() / "class-archives"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    archive = Archive(
        directory / f"spark-{archive_key(java, jar)}.jsa", recording=False, required=_setting() == "require"
    )
    if archive.path.is_file() and archive.path.stat().st_size > 0:
        return archive
    if not _take_lock(archive.lock):
        return None
    return Archive(archive.path, recording=True)


def _take_lock(lock: Path) -> bool:
    """One recorder per archive; a lock older than STALE_SECONDS belonged to a killed recorder."""
    with contextlib.suppress(OSError):
        if time.time() - lock.stat().st_mtime > STALE_SECONDS:
            lock.unlink()
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return False
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    return True


def start_dump_after_exit(session: SparkSession, archive: Archive, java: JavaRuntime) -> None:
    """Hand the dump to a detached helper that waits for this session's JVM to exit."""
    from pyspark import SparkContext

    if not archive.recording:
        return
    process = getattr(SparkContext._gateway, "proc", None)
    jvm = session.sparkContext._jvm
    if process is None or jvm is None:
        archive.lock.unlink(missing_ok=True)
        return
    class_path = str(jvm.System.getProperty("java.class.path"))
    subprocess.Popen(
        [
            sys.executable,
            "-m",
            __name__,
            str(process.pid),
            str(java.java),
            str(archive.path),
            class_path,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives this process and its process group
        close_fds=True,
    )


def _wait_for_exit(pid: int) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.5)


def dump(jvm_pid: int, java: str, archive_path: Path, class_path: str) -> bool:
    """Wait for the recording JVM to exit, dump its classes, publish the archive. True on success."""
    archive = Archive(archive_path, recording=True)
    try:
        _wait_for_exit(jvm_pid)
        with contextlib.suppress(OSError):
            os.nice(10)  # never compete with the next dbt run
        completed = subprocess.run(
            [
                java,
                "-Xshare:dump",
                f"-XX:SharedClassListFile={archive.class_list}",
                f"-XX:SharedArchiveFile={archive.temporary}",
                QUIET,
                "-cp",
                class_path,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=DUMP_TIMEOUT_SECONDS,
            check=False,
        )
        if completed.returncode == 0 and archive.temporary.is_file():
            os.replace(archive.temporary, archive.path)
            return True
        return False
    finally:
        for leftover in (archive.temporary, archive.class_list, archive.lock):
            with contextlib.suppress(OSError):
                leftover.unlink()


if __name__ == "__main__":
    sys.exit(0 if dump(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]) else 1)
