"""A defining query compiled against a PostgreSQL database: its plan and layout, the types its
aggregates and stored columns take there, and the stored table's shape, which every refresh compares
(`shape_change`) to tell a table it can keep maintaining from one it must rebuild."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dbt_ivm.catalog import TableInfo, views_digest
from dbt_ivm.delta import stream
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.terms import Bindings, Context
from dbt_ivm.errors import InvalidQuery, IvmError, UnsupportedQuery
from dbt_ivm.layout import Layout, key_never_null, layout_of
from dbt_ivm.plan import build_plan
from dbt_ivm.plan.nodes import Aggregate, Plan, scans_in
from dbt_ivm.postgres.catalog import PostgresCatalog, base_types, describe, describe_many
from dbt_ivm.postgres.db import Db
from dbt_ivm.reserved import BOOKKEEPING_DIFFERS, is_reserved, source_relation
from dbt_ivm.spec import StreamTableSpec
from dbt_ivm.sqltext import qn
from dbt_ivm.target import POSTGRES, Target

UNDEFINED_FUNCTION = "42883"  # what hashing a type without an extended hash function raises
# Types without an equality operator: rows holding them cannot be compared or diffed.
INCOMPARABLE_TYPES = {"json", "xml", "point", "line", "lseg", "box", "path", "polygon", "circle"}
# A running sum of floating-point values drifts as rows come and go (1e10 + 0.5 − 1e10 is not 0.5).
INEXACT_TYPES = {"double precision", "real"}


@dataclass
class Compiled:
    """A defining query resolved against the database: plan, layout, and what refreshing it needs."""

    plan: Plan | None  # None: the query cannot be maintained differentially
    layout: Layout | None
    sources: list[TableInfo]
    unsupported: UnsupportedQuery | None
    call_types: dict[int, dict[int, str]]  # by id() of the Aggregate node, then call index
    output_types: list[tuple[str, str]]
    views_digest: str = ""  # the views the planner expanded (dbt_ivm.catalog.views_digest)
    # False when a key column's type has no hash function: rows are matched on the key alone.
    hashed: bool = True
    equal_keys: bool = False  # no key column can be NULL: rows are found by `=` on the key
    shape: str = ""  # the table's columns, types and row key as JSON (compared at every refresh)
    views: list[str] = dataclasses.field(default_factory=list)  # the views the query reads, quoted
    functions: list[int] = dataclasses.field(default_factory=list)  # the user functions it calls (oids)

    @property
    def target(self) -> Target:
        return dataclasses.replace(POSTGRES, hashes_keys=self.hashed, equal_keys=self.equal_keys)


def compile_query(db: Db, spec: StreamTableSpec, sql: str) -> Compiled:
    """Plan `sql` inside the caller's transaction. Invalid SQL raises InvalidQuery naming the model."""
    try:
        output_types = describe(db, sql)
    except IvmError:
        raise
    except Exception as error:
        message = str(getattr(error, "pgerror", None) or error).strip()
        raise InvalidQuery(spec.model, message) from error
    reserved = [n for n, _ in output_types if is_reserved(n)]
    if reserved:
        raise UnsupportedQuery(
            spec.model,
            f"output column `{reserved[0]}` (names starting with `__ivm_` are dbt-ivm's bookkeeping columns)",
            "give it another alias",
        )
    incomparable = [f"`{n}` ({t})" for n, t in output_types if t.removesuffix("[]") in INCOMPARABLE_TYPES]
    if incomparable:
        # No refresh of any kind can compare such rows: refuse up front, whatever the mode.
        raise UnsupportedQuery(
            spec.model,
            f"column {', '.join(incomparable)} without an equality operator",
            "cast it to jsonb or text",
        )
    catalog = PostgresCatalog(db)
    try:
        plan = build_plan(POSTGRES, sql, catalog, spec.model, [n for n, _ in output_types])
        sources = list({s.table.qualified: s.table for s in scans_in(plan)}.values())
        layout = layout_of(plan)
        # Every column's type (hidden ones too), and the aggregate calls' result types.
        ctx = Context(current_bindings(sources))
        probes = stream.call_probes(plan, ctx)
        contents = stream.contents(plan, layout, ctx).sql("postgres")
        described = describe_many(db, [contents, *(p.sql("postgres") for _, p in probes)])
        call_types = _call_types(spec, probes, described[1:])
    except UnsupportedQuery as unsupported:
        if spec.refresh_mode in ("differential", "immediate"):
            raise
        compiled = Compiled(
            None, None, [], unsupported, {}, output_types, views_digest(catalog.seen, catalog.function_bodies)
        )
        compiled.shape = json.dumps({"kind": "plain", "columns": output_types, "repeats": REPEATS})
    else:
        compiled = Compiled(
            plan,
            layout,
            sources,
            None,
            call_types,
            output_types,
            views_digest(catalog.seen, catalog.function_bodies),
        )
        _add_shape(db, compiled, dict(described[0]))
    compiled.views = [qn(t.schema, t.name) for t in catalog.seen if t.kind == "view"]
    compiled.functions = catalog.function_oids
    return compiled


def _add_shape(db: Db, compiled: Compiled, types: dict[str, str]) -> None:
    """The table's columns with their `types`, its row key, and whether the key can be hashed."""
    assert compiled.layout is not None
    layout = compiled.layout
    key_types = base_types(db, [types[k] for k in layout.key]) if layout.key else []
    compiled.hashed = _hashable(db, key_types)
    assert compiled.plan is not None
    compiled.equal_keys = key_never_null(compiled.plan, layout) and _orderable(db, key_types)
    compiled.shape = json.dumps(
        {
            "kind": layout.kind,
            "columns": [[c, types[c]] for c in layout.columns],
            "key": list(layout.key),
            "hashed": compiled.hashed,
            # Rows are found through an index on the key, or on its hash when a key column can be NULL
            # (before: a stored __ivm_hash column, then a hash index for every key).
            "key_lookup": "key index" if compiled.equal_keys else "hash index",
            **({"repeats": REPEATS} if layout.kind == "multiset" else {}),
        }
    )


# How a multiset holds a value that repeats (before: one row per copy plus an ordinal, __ivm_dup).
REPEATS = "copies"

LOOKUPS = {
    "key index": "an index on its key (no key column can be NULL)",
    "hash index": "an index on its key's hash",
}


def _orderable(db: Db, types: list[str]) -> bool:
    """Can a btree index hold every key of these (base) types: each has a default ordering and a fixed
    width (a btree entry holds at most 2,704 bytes; a long text key fits only the hash index)?"""
    row = ", ".join(f"NULL::{t}" for t in types)
    if not db.attempt(f"SELECT ROW({row}) < ROW({row})", UNDEFINED_FUNCTION):
        return False
    widths = "SELECT bool_and(t.typlen > 0) FROM unnest(%s::text[]) AS u(name) JOIN pg_type t ON t.oid = u.name::regtype"
    return bool(db.value(widths, (types,)))


def _hashable(db: Db, types: list[str]) -> bool:
    """Can PostgreSQL hash a row of these (base) types? (Hashing a NULL looks the hash function up too.)"""
    if not types:
        return True
    row = ", ".join(f"NULL::{t}" for t in types)
    return db.attempt(f"SELECT hash_record_extended(ROW({row}), 0)", UNDEFINED_FUNCTION)


def shape_change(registered: str, current: str) -> str | None:
    """Why a table built for the `registered` shape cannot be maintained for the `current` one."""
    if registered == current:
        return None
    if not registered:
        return "the stream table was built by an earlier version of dbt-ivm"
    before, after = json.loads(registered), json.loads(current)
    kinds = before.get("kind"), after.get("kind")
    if kinds[0] != kinds[1] and "plain" in kinds:  # a FULL-only table (no key, no bookkeeping)
        if kinds[0] == "plain":
            return "its query can be maintained differentially now"
        return "its query can no longer be maintained differentially (every refresh is FULL)"
    if before.get("key_lookup") != after.get("key_lookup"):
        return (
            f"this version of dbt-ivm finds the stream table's rows through {LOOKUPS[after['key_lookup']]}, "
            f"not {LOOKUPS.get(before.get('key_lookup'), 'a stored __ivm_hash column')}"
        )
    if before.get("repeats") != after.get("repeats") and before.get("kind") == after.get("kind"):
        return (
            "this version of dbt-ivm keeps the stream table's bookkeeping columns differently "
            "(identical rows are stored as copies, without the ordinal __ivm_dup)"
        )
    old_columns, new_columns = dict(map(tuple, before["columns"])), dict(map(tuple, after["columns"]))
    changed = [
        f"{name} {old_columns.get(name, '(none)')} → {new_columns.get(name, '(none)')}"
        for name in list(old_columns) + [n for n in new_columns if n not in old_columns]
        if old_columns.get(name) != new_columns.get(name)
    ]
    if changed and all(is_reserved(c.split(" ", 1)[0]) for c in changed):
        return f"{BOOKKEEPING_DIFFERS} ({'; '.join(changed[:5])})"
    if changed:
        return f"the columns of its query or sources changed ({'; '.join(changed[:5])})"
    return (
        "the row key of the stream table changed (a source's primary key, a key's hashability, or the "
        "sources whose keys identify a join's rows)"
    )


def _call_types(
    spec: StreamTableSpec, probes: list[tuple[Aggregate, Any]], described: list[list[tuple[str, str]]]
) -> dict[int, dict[int, str]]:
    """Every aggregate call's result type (to finalize AVG exactly); refuses inexact running sums."""
    call_types: dict[int, dict[int, str]] = {}
    for (aggregate, _), probed in zip(probes, described, strict=True):
        types = call_types.setdefault(id(aggregate), {})
        for (_, type_), call in zip(probed, aggregate.calls, strict=True):
            types[call.index] = type_
            if call.func == "recomputed":
                continue  # recomputed from its rows: exact whatever its type
            if type_ in REGISTRY[call.func].inexact_types or (
                type_ in INEXACT_TYPES and call.func != "count"
            ):
                raise UnsupportedQuery(
                    spec.model,
                    f"aggregate `{call.original.sql('postgres')}` over {type_}",
                    "cast the argument to numeric, or use refresh_mode='full'",
                )
    return call_types


def context(compiled: Compiled, bindings: Bindings) -> Context:
    """A rendering context with the compiled aggregate result types (an enum's or a domain's name too)."""
    types = {
        node: {index: exp.DataType.build(t, dialect=bindings.dialect, udt=True) for index, t in calls.items()}
        for node, calls in compiled.call_types.items()
    }
    return Context(bindings, call_types=types)


def current_bindings(sources: list[TableInfo]) -> Bindings:
    return Bindings(POSTGRES, current={t.qualified: source_relation(t) for t in sources})
