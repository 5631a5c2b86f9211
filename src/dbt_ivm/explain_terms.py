"""Which terms a batch on each source runs, for `dbt-ivm explain`: the stream table's delta rendered
as a refresh renders it for a batch that changes that source only, with every relation named by
what it holds, then each SELECT that reads the source's change (a term) described by its reads.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.layout import layout_of
>>> from dbt_ivm.plan import build_plan
>>> from dbt_ivm.target import POSTGRES
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "int")), ("id",))
>>> people = TableInfo("public", "people", (Column("id", "int"), Column("name", "text")), ("id",))
>>> plan = build_plan(POSTGRES, "SELECT o.id, p.name FROM orders o JOIN people p ON o.customer = p.id",
...                   StaticCatalog([orders, people]), "m")
>>> found = terms_by_source(plan, layout_of(plan), POSTGRES, lambda b: Context(b), reads_before=False)
>>> for source, terms in found.items():
...     print(source, terms.terms)
public.orders ['Δ public.orders ⋈ public.people']
public.people ['public.orders ⋈ Δ public.people']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dbt_ivm.delta import stream
from dbt_ivm.delta.terms import Bindings, Context
from dbt_ivm.layout import Layout
from dbt_ivm.plan.nodes import Plan, scans_in
from dbt_ivm.target import Target

STORED = "__ivm_explain_stored"
JOINED = " ⋈ "


@dataclass(frozen=True)
class SourceTerms:
    """What a batch that changes one source runs: each term (the relations it reads, joined), and
    the size of the SQL that computes the stream table's change."""

    terms: list[str]
    characters: int


def _placeholder(kind: str, index: int) -> exp.Table:
    return exp.table_(f"__ivm_explain_{kind}{index}", quoted=True)


def terms_by_source(
    plan: Plan,
    layout: Layout,
    target: Target,
    new_context: Callable[[Bindings], Context],
    reads_before: bool,
) -> dict[str, SourceTerms]:
    """For each source of `plan`, the terms of a batch that changes it alone. `new_context` makes the
    backend's rendering context; `reads_before`: the backend reads a changed source as it was before
    the batch (else rules derive that state from its rows now and its change)."""
    sources = sorted({scan.table.qualified for scan in scans_in(plan)})
    labels: dict[str, str] = {STORED: "the stored rows"}
    current: dict[str, exp.Expr] = {}
    for index, name in enumerate(sources):
        current[name] = _placeholder("now", index)
        labels[current[name].name] = name
    found: dict[str, SourceTerms] = {}
    for index, name in enumerate(sources):
        delta, before = _placeholder("delta", index), _placeholder("before", index)
        labels[delta.name], labels[before.name] = f"Δ {name}", f"{name} before the batch"
        bindings = Bindings(target, current, {name: delta}, before={name: before} if reads_before else None)
        query = stream.row_delta(plan, layout, new_context(bindings), exp.table_(STORED, quoted=True), target)
        if query is None:
            found[name] = SourceTerms([], 0)
            continue
        terms = [
            JOINED.join(_read(item, labels) for item in _from_items(select))
            for select in query.find_all(exp.Select)
            if any(_table_name(item) == delta.name for item in _from_items(select))
        ]
        found[name] = SourceTerms(terms, len(query.sql(target.dialect)))
    return found


def _from_items(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_") or select.args.get("from")
    items = [from_.this] if from_ is not None else []
    return items + [join.this for join in select.args.get("joins") or []]


def _table_name(item: exp.Expr) -> str | None:
    return item.name if isinstance(item, exp.Table) else None


def _read(item: exp.Expr, labels: dict[str, str]) -> str:
    name = _table_name(item)
    if name is not None:
        return labels.get(name, name)
    read = sorted({labels[t.name] for t in item.find_all(exp.Table) if t.name in labels})
    return f"({', '.join(read)})" if read else "(rows computed from the batch)"
