"""Errors the engine raises. Every message names the model, the construct and the fix."""

from __future__ import annotations


class IvmError(Exception):
    """Any error dbt-ivm reports to the user."""


class UnsupportedQuery(IvmError):
    """The defining query uses something the delta algebra cannot maintain incrementally."""

    def __init__(self, model: str, construct: str, fix: str = "") -> None:
        self.model = model
        self.construct = construct
        self.fix = fix
        message = f"{construct} in model {model} is not supported incrementally"
        if fix:
            message += f"; {fix}"
        super().__init__(message)


class InvalidQuery(IvmError):
    """The defining query is not a valid SELECT (syntax error, unknown table or column)."""

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        super().__init__(f"model {model} is not a valid query: {detail}")
