"""A thin typed layer over a DB-API connection in autocommit mode (the engine runs its own BEGIN/COMMIT)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

Params = Sequence[Any] | Mapping[str, Any] | None


class Db:
    def __init__(self, connection: Any, on_statement: Callable[[str], None] | None = None) -> None:
        self.connection = connection
        self.statements: list[str] = []  # every statement run, for debugging and tests
        self.on_statement = on_statement

    def _sent(self, sql: str) -> None:
        self.statements.append(sql)
        if self.on_statement is not None:
            self.on_statement(sql)

    def execute(self, sql: str, params: Params = None) -> int:
        with self.connection.cursor() as cursor:
            self._sent(sql)
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            self._sent(sql)
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def one(self, sql: str, params: Params = None) -> tuple[Any, ...] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def value(self, sql: str, params: Params = None) -> Any:
        row = self.one(sql, params)
        return None if row is None else row[0]

    def attempt(self, sql: str, tolerated: str) -> bool:
        """Run `sql` inside the caller's transaction; an error with SQLSTATE `tolerated` is rolled back
        to before it (the transaction goes on) and reported as False, any other error is raised.
        One round trip when it succeeds."""
        try:
            self.execute(f"SAVEPOINT __ivm_attempt; {sql}; RELEASE SAVEPOINT __ivm_attempt")
        except Exception as error:
            self.execute("ROLLBACK TO SAVEPOINT __ivm_attempt; RELEASE SAVEPOINT __ivm_attempt")
            if getattr(error, "pgcode", None) != tolerated:
                raise
            return False
        return True

    @contextmanager
    def transaction(self, isolation: str = "READ COMMITTED") -> Iterator[Db]:
        self.execute(f"BEGIN ISOLATION LEVEL {isolation}")
        try:
            yield self
        except BaseException:
            self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")
