"""Errors the engine raises. Every message names the model, the construct and the fix."""

from __future__ import annotations


class IvmError(Exception):
    """Any error dbt-ivm reports to the user."""


class UnsupportedQuery(IvmError):
    """The defining query uses something the delta algebra cannot maintain incrementally."""

    def __init__(
        self, model: str, construct: str, fix: str = "", position: tuple[int, int] | None = None
    ) -> None:
        self.model = model
        self.construct = construct
        self.fix = fix
        self.position = position  # (line, column) in the model's SQL as compiled, where known
        message = f"{construct} in model {model} is not supported incrementally"
        if position is not None:
            message += f" (line {position[0]}, column {position[1]} of its compiled SQL)"
        if fix:
            message += f"; {fix}"
        super().__init__(message)


class InvalidQuery(IvmError):
    """The defining query is not a valid SELECT (syntax error, unknown table or column)."""

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        super().__init__(f"model {model} is not a valid query: {detail}")


class IncomparableColumn(IvmError):
    """A result column whose type the engine cannot compare (Spark: a map): rows cannot be matched."""

    def __init__(self, model: str, column: str, type_name: str) -> None:
        self.model = model
        super().__init__(
            f"model {model}: column {column} of type {type_name} cannot be compared (Spark has no "
            "equality or ordering for maps), and a stream table matches its rows by value; select "
            f"to_json({column}) or array_sort(map_entries({column})) instead, or materialize the "
            "model as a table"
        )


class KeyNotUnique(IvmError):
    """A source's declared key (one nothing enforces) holds a value twice."""

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        super().__init__(
            f"model {model}: {detail}, so the stream table, which holds each key once, would lose rows "
            "(it was left as it was). Remove the duplicate rows, or drop the declaration (ALTER TABLE … "
            "DROP IDENTIFIER FIELDS, or UNSET TBLPROPERTIES ('dbt_ivm.primary_key')): the next run then "
            "rebuilds the stream table without that key"
        )


class TriggerNameTaken(IvmError):
    """A table dbt-ivm puts a trigger on (a source, a stream table) has a trigger of the user's own
    under that name: creating ours (CREATE OR REPLACE TRIGGER) would replace it without a word."""

    def __init__(self, model: str, table: str, triggers: list[str]) -> None:
        self.model = model
        names = ", ".join(triggers)
        super().__init__(
            f"model {model}: {table} has a trigger of its own named {names}, a name dbt-ivm gives its "
            "own triggers (the __ivm_ prefix is reserved); rename that trigger (ALTER TRIGGER … ON … "
            "RENAME TO …) and run again"
        )


class MissingPrivilege(IvmError):
    """The dbt role lacks a privilege dbt-ivm needs on a table (TRIGGER on a source, for capture)."""

    def __init__(self, model: str, privilege: str, tables: list[str], role: str, purpose: str) -> None:
        self.model = model
        listed = ", ".join(tables)
        grants = "; ".join(f"GRANT {privilege} ON {t} TO {role}" for t in tables)
        super().__init__(
            f"model {model}: the dbt role {role} lacks the {privilege} privilege on source {listed}, "
            f"which {purpose}; have the table's owner run {grants} (or use refresh_mode='full')"
        )


class SparkFailed(IvmError):
    """Spark failed while refreshing: the JVM's message instead of py4j's wrapper (spark/failures.py)."""

    def __init__(self, model: str, message: str) -> None:
        self.model = model
        super().__init__(f"model {model}: Spark failed: {message}")
