"""How a refusal shows the construct it names: in the SQL of the engine the model is written for
(`uuid()` on Spark, not PostgreSQL's `GEN_RANDOM_UUID()`). The planner sets the dialect once per
query; what it names is shown in it.

>>> import sqlglot
>>> call = sqlglot.parse_one("SELECT uuid() AS u", read="spark").selects[0].this
>>> shown(call)
'GEN_RANDOM_UUID()'
>>> with written_in("spark"):
...     shown(call)
'UUID()'
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlglot import exp

_DIALECT: ContextVar[str] = ContextVar("dbt_ivm_message_dialect", default="postgres")


@contextmanager
def written_in(dialect: str) -> Iterator[None]:
    """Show constructs in `dialect` until the block ends."""
    token = _DIALECT.set(dialect)
    try:
        yield
    finally:
        _DIALECT.reset(token)


def shown(node: exp.Expr, **options: Any) -> str:
    return node.sql(_DIALECT.get(), **options)


def excerpt(node: exp.Expr, limit: int = 80) -> str:
    """A construct's SQL for a message, cut at a word boundary (never inside an identifier).

    >>> import sqlglot
    >>> excerpt(sqlglot.parse_one("SELECT customer_identifier FROM orders WHERE amount > 10"), 40)
    'SELECT customer_identifier FROM orders …'
    """
    text = " ".join(shown(node).split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit] + " …"
