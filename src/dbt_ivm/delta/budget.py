"""A bound on how many terms one delta is built of, so planning stays bounded for any query.

A join's delta over inputs that cannot be read as they were before the batch is an inclusion–
exclusion sum: up to 2ᵏ − 1 terms for k changed inputs, and SQL that grows with them. A CTE of nine
joined tables read twice made 11 MB of SQL in 143 s, with 0.8 GB of Python memory; nineteen never
finished. TPC-H's largest, Q8 over every one of its eight inputs, makes 1,079 products.

    with budget.bounded():        # a delta built inside raises TooManyTerms past MAX_PRODUCTS
        ...

A caller that catches `TooManyTerms` refreshes the batch FULL instead, saying why (`reason`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

MAX_PRODUCTS = 2_000  # term products one delta may make (`Term.times`); ~2× TPC-H Q8's

_spent: ContextVar[list[int] | None] = ContextVar("dbt_ivm_delta_budget", default=None)


class TooManyTerms(Exception):
    """A delta needed more than `MAX_PRODUCTS` term products; it was not built."""

    def __init__(self, limit: int) -> None:
        super().__init__(reason(limit))
        self.limit = limit


def reason(limit: int = MAX_PRODUCTS) -> str:
    """Why such a delta is recomputed instead.

    >>> reason(2000)
    'its delta over the changed sources would join more than 2,000 terms (an inclusion-exclusion sum over joined inputs that all change)'
    """
    return (
        f"its delta over the changed sources would join more than {limit:,} terms "
        "(an inclusion-exclusion sum over joined inputs that all change)"
    )


@contextmanager
def bounded(limit: int = MAX_PRODUCTS) -> Iterator[None]:
    """Deltas built inside may make at most `limit` term products together."""
    token = _spent.set([0, limit])
    try:
        yield
    finally:
        _spent.reset(token)


def charge() -> None:
    """One term product made; raises TooManyTerms past the bound in force (none: no bound)."""
    spent = _spent.get()
    if spent is None:
        return
    spent[0] += 1
    if spent[0] > spent[1]:
        raise TooManyTerms(spent[1])
