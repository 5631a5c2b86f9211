"""What an aggregate function declares so the delta rules can maintain it.

Its state is a few columns per group. `weighted` gives each state column's contribution of a Z-set
of input rows (summed per group), so the same form builds state from scratch (weights 1), folds a
batch's changes into it (weights ±1) and takes them out again. `merge` adds two states, `finalize`
turns a state into the function's value, `from_scratch` computes the state over plain rows.
`inexact_types` are argument types whose running state would drift (a float sum), refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp


def plus(old: exp.Expr, delta: exp.Expr) -> exp.Expr:
    """old + delta, either side possibly NULL (no state yet, or no change)."""
    zero = exp.Literal.number(0)
    return exp.Add(this=exp.func("COALESCE", old, zero), expression=exp.func("COALESCE", delta, zero.copy()))


def non_null_weight(argument: exp.Expr, weight: exp.Expr) -> exp.Expr:
    """The weight of a row whose argument is not NULL (NULLs count for nothing)."""
    return exp.Case(
        ifs=[exp.If(this=exp.Is(this=argument, expression=exp.Null()), true=exp.Literal.number(0))],
        default=weight,
    )


@dataclass(frozen=True)
class Aggregator:
    name: str
    states: tuple[str, ...]  # suffixes of the state columns (COUNT(*) shares the group's count)
    weighted: Callable[[exp.Expr | None, exp.Expr], list[exp.Expr]]  # summed per group
    merge: Callable[[list[exp.Expr], list[exp.Expr]], list[exp.Expr]]
    finalize: Callable[[list[exp.Expr], exp.Expr, exp.DataType | None], exp.Expr]  # states, count, type
    from_scratch: Callable[[exp.Expr | None], list[exp.Expr]]
    inexact_types: frozenset[str] = frozenset()
    # The call the planner maintains with it (None: chosen otherwise, COUNT(*) as the group's count).
    call: type[exp.Expr] | None = None
