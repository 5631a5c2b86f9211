"""Where a `dbt-ivm` command connects when neither `--dsn` nor `--spark-warehouse` (nor their
environment variables) says: the dbt project's profile, found as dbt finds it.

The project is `--project-dir`, else `$DBT_PROJECT_DIR`, else the current directory; its
`dbt_project.yml` names the profile. `profiles.yml` is read from `--profiles-dir`, else
`$DBT_PROFILES_DIR`, else the project directory or the current directory when one holds it, else
`~/.dbt`. The target is `--target`, else `$DBT_TARGET`, else the profile's `target:`. Values may use
`{{ env_var('NAME') }}` and `{{ env_var('NAME', 'default') }}` as in dbt.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> _ = (root / "dbt_project.yml").write_text("name: shop\\nprofile: shop\\n")
>>> _ = (root / "profiles.yml").write_text(
...     "shop:\\n  target: dev\\n  outputs:\\n    dev:\\n      type: ivm_postgres\\n      host: db\\n"
...     "      port: \\"{{ env_var('SHOP_PORT', '5433') }}\\"\\n      user: dbt\\n      pass: s3cret\\n"
...     "      dbname: shop\\n      schema: analytics\\n")
>>> found = locate(str(root), None, None, environ={})
>>> found.dsn
'host=db port=5433 user=dbt password=s3cret dbname=shop'
>>> found.description == f"profile 'shop', target 'dev' in {root / 'profiles.yml'}"
True
>>> locate(str(root), None, "prod", environ={})
Traceback (most recent call last):
...
dbt_ivm.profiles.ProfileError: profile 'shop' in ... has no target 'prod' (it has: dev)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR_ENV = "DBT_PROJECT_DIR"
PROFILES_DIR_ENV = "DBT_PROFILES_DIR"
TARGET_ENV = "DBT_TARGET"
# An output's settings that make a libpq connection string (dbt-postgres's names on the left).
LIBPQ_SETTINGS = {
    "host": "host",
    "port": "port",
    "user": "user",
    "password": "password",
    "pass": "password",
    "dbname": "dbname",
    "database": "dbname",
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "connect_timeout": "connect_timeout",
}


class ProfileError(Exception):
    """The profile cannot be found or used; the message names what was tried."""


@dataclass(frozen=True)
class Found:
    """A target of a profile, as the connection a command needs: a libpq `dsn` (ivm_postgres) or a
    Spark warehouse and its metastore (ivm_spark). `description` names where it came from."""

    description: str
    dsn: str | None = None
    spark_warehouse: str | None = None
    metastore_uris: str | None = None
    spark_master: str | None = None


def locate(
    project_dir: str | None,
    profiles_dir: str | None,
    target: str | None,
    environ: Mapping[str, str] = os.environ,
) -> Found | None:
    """The connection of the project's profile; None when no project was named and the current
    directory holds none (the command then uses libpq's defaults, as before profiles were read)."""
    named = project_dir or environ.get(PROJECT_DIR_ENV)
    project = Path(named) if named else Path.cwd()
    project_file = project / "dbt_project.yml"
    if not project_file.exists():
        if named or profiles_dir or target:
            raise ProfileError(
                f"no dbt_project.yml in {project.absolute()} (the dbt project to read the profile of)"
            )
        return None
    profile = _yaml(project_file).get("profile")
    if not profile:
        raise ProfileError(f"{project_file} names no profile (its `profile:`)")
    path = _profiles_file(project, profiles_dir or environ.get(PROFILES_DIR_ENV))
    entry = _yaml(path).get(str(profile))
    if not isinstance(entry, dict):
        raise ProfileError(f"{path} has no profile {str(profile)!r} (named by {project_file})")
    rendered = _rendered(entry, environ, f"profile {str(profile)!r} in {path}")
    chosen = str(target or environ.get(TARGET_ENV) or rendered.get("target") or "default")
    outputs = rendered.get("outputs") or {}
    if chosen not in outputs:
        raise ProfileError(
            f"profile {str(profile)!r} in {path} has no target {chosen!r} (it has: {', '.join(outputs) or 'none'})"
        )
    return _connection(outputs[chosen], f"profile {str(profile)!r}, target {chosen!r} in {path}")


def _profiles_file(project: Path, named: str | None) -> Path:
    usual = [project, Path.cwd(), Path.home() / ".dbt"]
    candidates = [Path(named)] if named else list(dict.fromkeys(usual))
    for directory in candidates:
        if (directory / "profiles.yml").exists():
            return directory / "profiles.yml"
    tried = ", ".join(str(d.absolute()) for d in candidates)
    raise ProfileError(f"no profiles.yml in {tried}")


def _yaml(path: Path) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped, unused-ignore]

    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ProfileError(f"cannot read {path}: {str(error).splitlines()[0]}") from error
    return loaded if isinstance(loaded, dict) else {}


def _rendered(value: Any, environ: Mapping[str, str], where: str) -> Any:
    """`value` with each string rendered as dbt renders profiles (only `env_var` is offered)."""
    if isinstance(value, dict):
        return {k: _rendered(v, environ, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_rendered(v, environ, where) for v in value]
    if not isinstance(value, str) or "{" not in value:
        return value
    from jinja2.sandbox import SandboxedEnvironment

    def env_var(name: str, default: str | None = None) -> str:
        if name in environ:
            return environ[name]
        if default is not None:
            return str(default)
        raise ProfileError(f"{where} reads the environment variable {name}, which is not set")

    return SandboxedEnvironment().from_string(value).render(env_var=env_var)


def _connection(output: Any, description: str) -> Found:
    if not isinstance(output, dict):
        raise ProfileError(f"{description} is not a mapping of settings")
    kind = str(output.get("type", ""))
    if kind in ("ivm_postgres", "postgres"):
        settings = {
            LIBPQ_SETTINGS[k]: str(v)
            for k, v in output.items()
            if k in LIBPQ_SETTINGS and v not in (None, "")
        }
        dsn = " ".join(f"{k}={_libpq_value(v)}" for k, v in settings.items())
        return Found(description, dsn=dsn)
    if kind == "ivm_spark":
        warehouse = output.get("warehouse")
        if not warehouse:
            raise ProfileError(
                f"{description} has no `warehouse`: the Spark warehouse its stream tables live in"
            )
        uris, master = output.get("metastore_uris"), output.get("master")
        return Found(
            description,
            spark_warehouse=str(warehouse),
            metastore_uris=str(uris) if uris else None,
            spark_master=str(master) if master else None,
        )
    raise ProfileError(
        f"{description} is of type {kind or 'unknown'!r}: dbt-ivm reads ivm_postgres and ivm_spark targets"
    )


def _libpq_value(value: str) -> str:
    r"""A value in a libpq connection string: quoted when it has spaces, quotes or backslashes.

    >>> _libpq_value("db"), _libpq_value("it's a pass")
    ('db', "'it\\'s a pass'")
    """
    if value and not any(c in value for c in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
