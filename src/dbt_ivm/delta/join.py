"""Delta rule for an n-way inner join, by inclusion–exclusion over the sources that changed.

With new states S' = S + ΔS, expanding the product gives

    Δ(S1 ⋈ … ⋈ Sn) = Σ over non-empty subsets T of changed sources of
                     (−1)^(|T|+1) · (⋈_{i∈T} ΔSi) ⋈ (⋈_{i∉T} Si')

For two sources that is the familiar ΔL ⋈ R' + L' ⋈ ΔR − ΔL ⋈ ΔR, correct when both sides change
in one batch. Only changed sources expand, so a batch touching one table yields one term.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.plan.nodes import Join, Scan
>>> o, c = Scan(0, "o", TableInfo("public", "orders", ())), Scan(1, "c", TableInfo("public", "customers", ()))
>>> both = Bindings({"public.orders": "o", "public.customers": "c"},
...                 {"public.orders": "do", "public.customers": "dc"})
>>> [(t.sign, [d for _, d in t.reads]) for t in delta_join(Join((o, c)), both).terms]
[(1, [True, False]), (1, [False, True]), (-1, [True, True])]
"""

from __future__ import annotations

from itertools import combinations

from dbt_ivm.delta.terms import Bindings, DeltaUnion, Term
from dbt_ivm.plan.nodes import Join


def delta_join(join: Join, bindings: Bindings) -> DeltaUnion:
    changed = [i for i, scan in enumerate(join.inputs) if bindings.changed(scan.table)]
    terms: list[Term] = []
    for size in range(1, len(changed) + 1):
        for subset in combinations(changed, size):
            reads = tuple((scan, i in subset) for i, scan in enumerate(join.inputs))
            terms.append(Term(reads=reads, sign=1 if size % 2 == 1 else -1))
    return DeltaUnion(tuple(terms))
