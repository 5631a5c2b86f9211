"""The SQL engine a stream table lives on, as the planner, the delta rules and the apply strategies see
it: the sqlglot dialect they render, how a defining query is read, and each way the engines differ as
a named capability. Every backend declares its own once (`POSTGRES`, `SPARK`); nothing in plan/,
delta/ or apply/ compares engine names, a rule asks a capability:

>>> [name for name, value in vars(POSTGRES).items() if value is True]
['hashes_keys', 'index_probes', 'splits_nullable_matches', 'non_finite_numerics', 'keyword_values']
>>> [name for name, value in vars(SPARK).items() if value is True]
['rewrites_in_values']

A stream table's own `Target` may differ from its backend's in how its rows are found
(`equal_keys`, `dbt_ivm.keys`).

PostgreSQL is read with one change to sqlglot's dialect: sqlglot reads `date_part('month', ts)` as
`EXTRACT(MONTH FROM ts)`, but the two differ in type (double precision vs numeric), so a stream table
would store another type than its query yields. Reading `date_part` as a plain call keeps the user's
spelling, and its type, through every rule:

>>> import sqlglot
>>> sqlglot.parse_one("SELECT date_part('year', d) FROM t", read=POSTGRES.read).sql("postgres")
"SELECT DATE_PART('year', d) FROM t"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.spark import Spark


class IvmPostgres(Postgres):
    class Parser(Postgres.Parser):  # type: ignore[misc,valid-type]  # sqlglot builds it at import
        FUNCTION_PARSERS = {
            name: parse for name, parse in Postgres.Parser.FUNCTION_PARSERS.items() if name != "DATE_PART"
        }


@dataclass(frozen=True)
class Target:
    """Where a stream table lives: the dialect its SQL is rendered in, and what that engine can do."""

    # sqlglot's name of the dialect every statement is rendered in.
    dialect: str
    # How a defining query written for this engine is parsed.
    read: Dialect
    # Rows are found through an index on their key's hash (PostgreSQL: `a IS NOT DISTINCT FROM b`
    # drives neither a hash join nor an index scan); else the null-safe comparison is itself a join key.
    hashes_keys: bool
    # A correlated `LATERAL (… LIMIT 1)` lookup by key is an index probe, cheaper than a join that
    # hashes the whole stored table for a batch touching a few of its rows (PostgreSQL).
    index_probes: bool = False
    # A match on nullable columns is written as `=` for the non-NULL rows UNION ALL the NULL ones,
    # which the planner can hash or probe by index; else as one null-safe comparison (Spark's `<=>`).
    splits_nullable_matches: bool = False
    # A numeric sum can hold NaN or ±Infinity, which no running total can take back (PostgreSQL's
    # numeric; Spark's decimal has neither).
    non_finite_numerics: bool = False
    # Value keywords (CURRENT_DATE, …) parse as identifiers that qualification would take for unknown
    # columns: refused by name before it (PostgreSQL).
    keyword_values: bool = False
    # `IN (subquery)` used as a value (not tested for truth) is rewritten by the engine into an existence
    # join that shows false where SQL has NULL (Spark 3.5): such a query is refused, not maintained.
    rewrites_in_values: bool = False
    # Columns every table has that a compaction or a rewrite moves without a write to capture, and what
    # moves them (named in the refusal).
    system_columns: tuple[str, ...] = ()
    system_columns_moved_by: str = ""
    # No key column of this stream table can be NULL (`layout.key_never_null`): matched by `=` on the
    # key and an index on it, not by its hash (set per stream table).
    equal_keys: bool = False

    def hashed(self, key: Sequence[str]) -> bool:
        """Are rows keyed by `key` found by their hash? (Without a key there is one row: nothing to find.)"""
        return self.hashes_keys and not self.equal_keys and bool(key)


POSTGRES = Target(
    "postgres",
    IvmPostgres(),
    hashes_keys=True,
    index_probes=True,
    splits_nullable_matches=True,
    non_finite_numerics=True,
    keyword_values=True,
    system_columns=("ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"),
    system_columns_moved_by="VACUUM FULL and CLUSTER move",
)
SPARK = Target(
    "spark",
    Spark(),
    hashes_keys=False,
    rewrites_in_values=True,
    system_columns=("_file", "_pos", "_spec_id", "_partition", "_deleted", "_row_id"),
    system_columns_moved_by="a compaction moves",
)
