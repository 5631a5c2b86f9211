"""dbt-ivm engine: incremental view maintenance for stream tables.

The engine imports nothing from dbt. It can be driven from plain Python with a DB-API
connection (PostgreSQL) or a SparkSession (Spark). Flow: parse -> plan -> delta -> render -> apply.
"""

from dbt_ivm.errors import IvmError, UnsupportedQuery
from dbt_ivm.spec import RefreshResult, StreamTableSpec

__all__ = ["IvmError", "RefreshResult", "StreamTableSpec", "UnsupportedQuery"]
__version__ = "0.1.0"
