"""The dialects a defining query is read in.

sqlglot reads PostgreSQL's `date_part('month', ts)` as `EXTRACT(MONTH FROM ts)`, but the two differ in
type (double precision vs numeric), so a stream table would store another type than its query yields.
Reading `date_part` as a plain call keeps the user's spelling, and its type, through every rule.

>>> import sqlglot
>>> sqlglot.parse_one("SELECT date_part('year', d) FROM t", read=read_dialect("postgres")).sql("postgres")
"SELECT DATE_PART('year', d) FROM t"
"""

from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.postgres import Postgres


class IvmPostgres(Postgres):
    class Parser(Postgres.Parser):  # type: ignore[misc,valid-type]  # sqlglot builds it at import
        FUNCTION_PARSERS = {
            name: parse for name, parse in Postgres.Parser.FUNCTION_PARSERS.items() if name != "DATE_PART"
        }


def read_dialect(name: str) -> Dialect:
    """The dialect to parse a query written for database `name` with."""
    if name == "postgres":
        return IvmPostgres()
    return Dialect.get_or_raise(name)
