"""The `ivm_postgres` dbt adapter: dbt-postgres plus the `stream_table` materialization."""

from dbt.adapters.base.plugin import AdapterPlugin
from dbt.adapters.ivm_common import compile_check
from dbt.adapters.ivm_postgres.connections import IvmPostgresConnectionManager, IvmPostgresCredentials
from dbt.adapters.ivm_postgres.impl import IvmPostgresAdapter
from dbt.include import ivm

Plugin = AdapterPlugin(
    adapter=IvmPostgresAdapter,  # type: ignore[arg-type]
    credentials=IvmPostgresCredentials,
    include_path=ivm.PACKAGE_PATH,  # type: ignore[attr-defined, unused-ignore]
    dependencies=["postgres"],
)

compile_check.install()

__all__ = ["IvmPostgresAdapter", "IvmPostgresConnectionManager", "IvmPostgresCredentials", "Plugin"]
