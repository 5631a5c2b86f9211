"""Delta rule for a filter: filter the delta. σ(ΔR) = Δσ(R), since the predicate looks at one row.

    Δ(σ_{amount > 10} orders)  =  SELECT * FROM <orders' changes> WHERE amount > 10

>>> from sqlglot import exp
>>> from dbt_ivm.delta.terms import Read, Term
>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.plan.nodes import Scan
>>> t = Term((Read(Scan(0, "o", TableInfo("public", "orders", ())), "delta"),))
>>> [p.sql() for term in filtered([t], exp.condition("o.amount > 10")) for p in term.predicates]
['o.amount > 10']
"""

from __future__ import annotations

from sqlglot import exp

from dbt_ivm.delta.terms import Term


def filtered(terms: list[Term], predicate: exp.Expr) -> list[Term]:
    return [t.where(predicate) for t in terms]
