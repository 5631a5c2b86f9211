"""The aggregate functions the delta rules maintain: one module per function, each defining an
`Aggregator` (`base.py`) at module level. They are found here by looking through this package, so
adding one is adding a module: its `name` is the planner's name for it, its `call` the SQL call
(a sqlglot class) the planner maintains with it."""

from __future__ import annotations

import importlib
import pkgutil

from sqlglot import exp

from dbt_ivm.delta.aggregates.base import Aggregator


def _aggregators() -> list[Aggregator]:
    found: list[Aggregator] = []
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"):
        loaded = importlib.import_module(f"{__name__}.{module}")
        found += [value for value in vars(loaded).values() if isinstance(value, Aggregator)]
    return found


REGISTRY: dict[str, Aggregator] = {a.name: a for a in _aggregators()}
# The calls the planner maintains with a running state, by sqlglot class (any other is recomputed).
MAINTAINED_CALLS: dict[type[exp.Expr], str] = {
    a.call: a.name for a in REGISTRY.values() if a.call is not None
}

__all__ = ["MAINTAINED_CALLS", "REGISTRY", "Aggregator"]
