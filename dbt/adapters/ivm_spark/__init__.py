"""The `ivm_spark` dbt adapter: dbt-spark, on an embedded Spark + Apache Iceberg session by default."""

from dbt.adapters.base.plugin import AdapterPlugin
from dbt.adapters.ivm_common import compile_check
from dbt.adapters.ivm_spark.connections import IvmSparkConnectionManager, IvmSparkCredentials
from dbt.adapters.ivm_spark.impl import IvmSparkAdapter
from dbt.include import ivm

Plugin = AdapterPlugin(
    adapter=IvmSparkAdapter,  # type: ignore[arg-type]
    credentials=IvmSparkCredentials,
    include_path=ivm.PACKAGE_PATH,  # type: ignore[attr-defined, unused-ignore]
    dependencies=["spark"],
)

compile_check.install()

__all__ = ["IvmSparkAdapter", "IvmSparkConnectionManager", "IvmSparkCredentials", "Plugin"]
