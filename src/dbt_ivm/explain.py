"""What `dbt-ivm explain` says about a model: whether a batch refreshes it differentially, and if so
how: the operator tree with what each operator keeps or recomputes, the stored table's layout, and
the sources whose changes are read. Built from the plan alone; nothing is created.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.layout import layout_of
>>> from dbt_ivm.plan import build_plan
>>> from dbt_ivm.target import POSTGRES
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> plan = build_plan(POSTGRES, "SELECT customer, SUM(amount) AS total, MAX(amount) AS top FROM orders "
...                   "WHERE amount > 0 GROUP BY customer", StaticCatalog([orders]), "totals")
>>> print(explained(plan, layout_of(plan), None, None, "postgres").text())
differential: a batch is applied as its changes, not recomputed
stored as: one row per group, keyed by customer
reads the changes of: public.orders
operators:
  aggregate GROUP BY customer: SUM kept as running state per group; MAX recomputed for the groups a batch touches
    filter "orders"."amount" > 0
      scan public.orders AS orders
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlglot import exp

from dbt_ivm import cost
from dbt_ivm.explain_terms import SourceTerms
from dbt_ivm.layout import Layout
from dbt_ivm.lifecycle import threshold_reason
from dbt_ivm.plan.nodes import (
    Aggregate,
    Derived,
    Filter,
    Join,
    Plan,
    Project,
    Relation,
    Rows,
    Scan,
    SetOp,
    TopK,
    UnionAll,
    Window,
    scans_in,
    unknown_node,
)
from dbt_ivm.spec import StreamTableSpec

STORED_AS = {
    "keyed": "one row per key",
    "aggregate": "one row per group",
    "multiset": "rows counted by value (no key: equal rows are one row with a count)",
}


@dataclass(frozen=True)
class Forecast:
    """What `auto` would do with a batch of `changes` changed rows, decided as a refresh decides
    before it reads them (`forecast`)."""

    changes: int
    action: str  # DIFFERENTIAL or FULL
    reason: str

    def text(self) -> str:
        return f"a batch of {self.changes} changed rows: {self.action}: {self.reason}"


@dataclass
class Explanation:
    """What `explain` found; `text()` for people, `asdict` for `--json`."""

    differential: bool
    reason: str | None  # why not (or why AUTO recomputes anyway)
    stored_as: str | None = None
    sources: list[str] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)  # the tree, two spaces per level
    # By source: what a batch that changes it alone runs (dbt_ivm.explain_terms).
    terms: dict[str, SourceTerms] = field(default_factory=dict)
    batch: Forecast | None = None  # asked for with `--changes N`

    def text(self) -> str:
        if not self.differential:
            lines = [f"not differential: every refresh recomputes the whole query\n  why: {self.reason}"]
        else:
            lines = ["differential: a batch is applied as its changes, not recomputed"]
            if self.reason:
                lines.append(f"but AUTO recomputes it: {self.reason}")
            lines += [
                f"stored as: {self.stored_as}",
                f"reads the changes of: {', '.join(self.sources)}",
                "operators:",
                *(f"  {line}" for line in self.operators),
                *_terms_lines(self.terms),
            ]
        if self.batch is not None:
            lines.append(self.batch.text())
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def explained(
    plan: Plan | None,
    layout: Layout | None,
    unsupported: object | None,
    whole_input: str | None,
    dialect: str,
    terms: dict[str, SourceTerms] | None = None,
) -> Explanation:
    """The explanation of a compiled query: `plan` and `layout` (None: not maintainable, `unsupported`
    says why), `whole_input`: why every batch recomputes an input anyway (AUTO then refreshes FULL),
    `terms`: what a batch on each source runs."""
    if plan is None or layout is None:
        return Explanation(False, str(unsupported) if unsupported is not None else "not planned")
    return Explanation(
        True,
        whole_input,
        _stored_as(layout),
        sorted({s.table.qualified for s in scans_in(plan)}),
        list(_plan_lines(plan, 0, dialect)),
        terms or {},
    )


def _terms_lines(terms: dict[str, SourceTerms]) -> Iterator[str]:
    """Per source: how often a batch on it alone reads its change, with what, and the SQL's size.

    >>> print("\\n".join(_terms_lines({"s.a": SourceTerms(["Δ s.a ⋈ s.b", "Δ s.a", "Δ s.a"], 1234)})))
    a batch that changes only s.a: its change is read 3 times (1,234 characters of SQL)
      Δ s.a ⋈ s.b
      Δ s.a (2 times)
    """
    for source, found in terms.items():
        if not found.terms:
            yield f"a batch that changes only {source}: changes nothing in the stream table"
            continue
        times = "once" if len(found.terms) == 1 else f"{len(found.terms)} times"
        yield (
            f"a batch that changes only {source}: its change is read {times} "
            f"({found.characters:,} characters of SQL)"
        )
        for reads, count in Counter(found.terms).items():
            yield f"  {reads}" + (f" ({count} times)" if count > 1 else "")


def _stored_as(layout: Layout) -> str:
    kind = STORED_AS.get(layout.kind, layout.kind)
    if layout.kind == "aggregate" and not layout.key:
        kind = "one row (a global aggregate)"
    keyed = f", keyed by {', '.join(layout.key)}" if layout.key and layout.kind != "multiset" else ""
    hidden = f"; hidden state: {', '.join(layout.hidden)}" if layout.hidden else ""
    return f"{kind}{keyed}{hidden}"


def _plan_lines(plan: Plan, depth: int, dialect: str) -> Iterator[str]:
    pad = "  " * depth
    match plan:
        case Project():
            many = " (a set-returning call: several rows per input row)" if plan.multiplies else ""
            yield f"{pad}project {', '.join(o.name for o in plan.outputs)}{many}"
            yield from _relation_lines(plan.input, depth + 1, dialect)
        case Aggregate():
            yield f"{pad}{_aggregate(plan, dialect)}"
            yield from _relation_lines(plan.input, depth + 1, dialect)
        case UnionAll():
            yield f"{pad}union all: each branch's changes, renamed"
            for branch in plan.inputs:
                yield from _plan_lines(branch, depth + 1, dialect)
        case SetOp():
            yield f"{pad}{plan.kind}{' all' if plan.all else ''}: each touched value's counts on both sides"
            yield from _plan_lines(plan.left, depth + 1, dialect)
            yield from _plan_lines(plan.right, depth + 1, dialect)
        case TopK():
            order = ", ".join(o.sql(dialect) for o in plan.order)
            yield f"{pad}top {plan.limit} by {order}: rows entering or leaving the top re-ranked"
            yield from _plan_lines(plan.input, depth + 1, dialect)
        case Window():
            over = f"partition by {', '.join(plan.partition_by)}" if plan.partition_by else "no PARTITION BY"
            yield f"{pad}window ({over}): the partitions a batch touches recomputed"
            yield from _plan_lines(plan.input, depth + 1, dialect)
        case Rows():
            yield f"{pad}values: rows written in the query (no batch changes them)"
        case _:
            unknown_node(plan)


def _aggregate(plan: Aggregate, dialect: str) -> str:
    groups = ", ".join(_shown(g, dialect) for g in plan.group_by) or "nothing (one row)"
    kept = sorted({str(c.original.key).upper() for c in plan.calls if c.func != "recomputed"})
    redone = sorted({_name(c.original) for c in plan.calls if c.func == "recomputed"})
    parts = []
    if kept:
        parts.append(f"{', '.join(kept)} kept as running state per group")
    if redone:
        parts.append(f"{', '.join(redone)} recomputed for the groups a batch touches")
    return f"aggregate GROUP BY {groups}: {'; '.join(parts) or 'group counts kept'}"


def _name(call: exp.Expr) -> str:
    return call.name.upper() if isinstance(call, exp.Anonymous) else str(call.key).upper()


def _shown(expression: exp.Expr, dialect: str) -> str:
    return expression.name if isinstance(expression, exp.Column) else expression.sql(dialect)


def _relation_lines(relation: Relation, depth: int, dialect: str) -> Iterator[str]:
    pad = "  " * depth
    match relation:
        case Scan():
            yield f"{pad}scan {relation.table.qualified} AS {relation.alias}"
        case Derived():
            yield f"{pad}subquery AS {relation.alias}"
            yield from _plan_lines(relation.plan, depth + 1, dialect)
        case Filter():
            yield f"{pad}filter {relation.predicate.sql(dialect)}"
            yield from _relation_lines(relation.input, depth + 1, dialect)
        case Join():
            on = f" ON {relation.condition.sql(dialect)}" if relation.condition is not None else ""
            yield f"{pad}{relation.kind} join{on}"
            yield from _relation_lines(relation.left, depth + 1, dialect)
            yield from _relation_lines(relation.right, depth + 1, dialect)
        case _:
            unknown_node(relation)


def forecast(
    explanation: Explanation,
    spec: StreamTableSpec,
    changes: int,
    rows_read: float,
    history: Sequence[cost.PastRefresh],
) -> Explanation:
    """`explanation` with what `auto` would do with a batch of `changes` changed rows: `rows_read`
    is what a recompute reads now (every source's rows), `history` the stream table's recent
    refreshes (none before it is created).

    >>> from dbt_ivm.cost import PastRefresh
    >>> spec = StreamTableSpec(model="m", schema="s", name="m", sql="select 1")
    >>> known = Explanation(True, None, sources=["public.orders"])
    >>> print(forecast(known, spec, 600, 1000.0, []).batch.text())
    a batch of 600 changed rows: FULL: 600 changes to public.orders exceed full_refresh_threshold=0.5 of the ~1000 rows the query reads
    >>> print(forecast(known, spec, 10, 1000.0, []).batch.text())
    a batch of 10 changed rows: DIFFERENTIAL: within full_refresh_threshold=0.5 of the ~1000 rows the query reads; nothing measured yet: the threshold decides, and the refresh measures
    >>> past = [PastRefresh("DIFFERENTIAL", 4.1, 10), PastRefresh("FULL", 1.2)]
    >>> forecast(known, spec, 10, 1000.0, past).batch.action
    'FULL'
    """
    spec = replace(spec, refresh_mode="auto")
    if not explanation.differential or explanation.reason:
        why = explanation.reason or "the query is not maintained differentially"
        return replace(explanation, batch=Forecast(changes, "FULL", why))
    too_many = threshold_reason(spec, ", ".join(explanation.sources), changes, rows_read)
    if too_many is not None:
        return replace(explanation, batch=Forecast(changes, "FULL", too_many))
    within = f"within full_refresh_threshold={spec.full_refresh_threshold} of the ~{int(rows_read)} rows the query reads"
    if cost.history_decides(history):
        choice = cost.choose(changes, history)
        return replace(explanation, batch=Forecast(changes, choice.action, f"{within}; {choice.reason}"))
    then = "nothing measured yet: the threshold decides, and the refresh measures"
    return replace(explanation, batch=Forecast(changes, "DIFFERENTIAL", f"{within}; {then}"))
