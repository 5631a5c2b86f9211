"""Profile credentials and connection manager: dbt-postgres's, under the `ivm_postgres` type name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg2
from dbt.adapters.postgres.connections import PostgresConnectionManager, PostgresCredentials

ADAPTER_TYPE = "ivm_postgres"


@dataclass
class IvmPostgresCredentials(PostgresCredentials):
    @property
    def type(self) -> str:
        return ADAPTER_TYPE


class IvmPostgresConnectionManager(PostgresConnectionManager):
    TYPE = ADAPTER_TYPE


def connect_for_engine(credentials: PostgresCredentials) -> Any:
    """A separate autocommit connection for the engine, opened exactly as dbt-postgres opens its own.

    The engine issues its own BEGIN/COMMIT, so it must not share dbt's transactional connection.
    """
    options: dict[str, Any] = {}
    if credentials.keepalives_idle:
        options["keepalives_idle"] = credentials.keepalives_idle
    if credentials.search_path:
        escaped = credentials.search_path.replace(" ", "\\ ")
        options["options"] = f"-c search_path={escaped}"
    for key in ("sslmode", "sslcert", "sslkey", "sslrootcert"):
        value = getattr(credentials, key)
        if value is not None:
            options[key] = value
    if credentials.application_name:
        options["application_name"] = f"{credentials.application_name}-ivm"
    conn = psycopg2.connect(
        dbname=credentials.database,
        user=credentials.user,
        host=credentials.host,
        password=credentials.password,
        port=credentials.port,
        connect_timeout=credentials.connect_timeout,
        **options,
    )
    conn.autocommit = True
    if credentials.role:
        with conn.cursor() as cursor:
            # Same statement as dbt-postgres, so both connections act as the same role.
            cursor.execute(f"set role {credentials.role}")
    return conn
