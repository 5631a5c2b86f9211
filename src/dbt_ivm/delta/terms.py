"""A delta in the making: a union of join terms, each reading every source as its delta or its current state.

A term is ``sign * (R1 ⋈ R2 ⋈ ...) WHERE predicate`` where each Ri is a scan read either as its
change set (rows with ``__ivm_weight`` ±1) or as its current contents (weight 1). A term's row weight
is the sign times the product of the delta weights (Z-set multiplication).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.plan.nodes import Scan
from dbt_ivm.sqltext import WEIGHT, expr_sql, q


@dataclass(frozen=True)
class Bindings:
    """How this refresh names relations: each source's current state, and its delta if it changed."""

    current: dict[str, str]  # table.qualified -> SQL relation text
    delta: dict[str, str] = field(default_factory=dict)  # absent: unchanged in this batch

    def changed(self, table: TableInfo) -> bool:
        return table.qualified in self.delta


@dataclass(frozen=True)
class Term:
    reads: tuple[tuple[Scan, bool], ...]  # (scan, read its delta?)
    sign: int = 1
    predicate: exp.Expr | None = None

    def with_predicate(self, predicate: exp.Expr) -> Term:
        combined = predicate if self.predicate is None else exp.and_(self.predicate, predicate)
        return replace(self, predicate=combined)

    def weight_sql(self) -> str:
        factors = [f"{q(scan.alias)}.{q(WEIGHT)}" for scan, is_delta in self.reads if is_delta]
        product = " * ".join(factors) if factors else "1"
        return product if self.sign == 1 else f"-({product})"

    def from_sql(self, bindings: Bindings) -> str:
        items = []
        for scan, is_delta in self.reads:
            source = bindings.delta if is_delta else bindings.current
            items.append(f"{source[scan.table.qualified]} AS {q(scan.alias)}")
        return ", ".join(items)

    def where_sql(self) -> str:
        return "" if self.predicate is None else f" WHERE {expr_sql(self.predicate)}"


@dataclass(frozen=True)
class DeltaUnion:
    terms: tuple[Term, ...]

    @property
    def empty(self) -> bool:
        return not self.terms
