"""The physical shape of a stream table: user columns, hidden bookkeeping columns, and its row key.

Three kinds of stream table:

* ``aggregate`` — one row per group; key = the group keys; hidden state lets every aggregate be
  updated from its old value and the delta (a reference count, sums, non-NULL counts). State an
  output already holds is kept there (`Layout.shown_states`): a bare ``COUNT(*)`` is the reference
  count, a bare ``COUNT(x)`` the non-NULL count of x, a bare ``SUM(x)`` its sum; states of one
  quantity share a column. SUM's own non-NULL count is kept nowhere: recounted for the few groups a
  batch may leave without a value; nor is the row count where a sum or a count of values can prove
  a group still has rows: recounted for the few groups a batch may empty (`Layout.recounted`,
  `delta/recount.py`). A recomputed
  aggregate (MIN, MAX, HAVING …, see `Aggregate.recomputed`) keeps no state: its touched groups are
  recomputed from their rows.
* ``keyed`` — a select/project/join over items that all have keys (a table's primary key, a
  derived table's group keys when it shows them, `item_keys`); every result row is identified by
  the keys of the rows it came from, less those the others determine (an order joined on its
  customer's key is identified by the order alone, `plan.determined`). Each key column is stored as
  the query's own column when it selects it as it is, else as a hidden ``__ivm_k*`` column (NULL
  for the missing partner of an outer join, which still leaves the row's key unique).
  A window or a TopK is keyed by its input's key when it shows it: each of its rows is one row of
  its input (``row_number() … = 1``, the latest order per customer, is keyed by the order). A
  UNION, INTERSECT or EXCEPT without ALL holds each row once: its columns are its key.
* ``multiset`` — anything else (a table without a primary key, a derived table without a key, a
  set operation with ALL): identical rows may repeat, stored as identical copies; rows are
  identified by their values (`apply/multiset`).

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> lay = layout_of(plan)
>>> lay.kind, lay.key, lay.hidden, lay.recounted
('aggregate', ('customer',), (), ('__ivm_count', '__ivm_a0_nn'))
>>> distinct = build_plan(POSTGRES, "SELECT DISTINCT customer FROM orders", StaticCatalog([orders]), "buyers")
>>> layout_of(distinct).hidden  # nothing proves a group still has rows: its count is kept
('__ivm_count',)
>>> counted = build_plan(POSTGRES, "SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer",
...                      StaticCatalog([orders]), "order_counts")
>>> layout_of(counted).hidden, layout_of(counted).stored(COUNT)
((), 'n')
>>> shared = build_plan(POSTGRES, "SELECT customer, AVG(amount) AS mean, SUM(amount) AS total, COUNT(amount) AS n, "
...                     "COUNT(*) AS orders FROM orders GROUP BY customer", StaticCatalog([orders]), "stats")
>>> layout_of(shared).hidden, layout_of(shared).stored("__ivm_a0_sum"), layout_of(shared).stored("__ivm_a0_nn")
((), 'total', 'n')
>>> customers = TableInfo("public", "customers", (Column("id", "int"), Column("name", "text")), ("id",))
>>> plan = build_plan(POSTGRES, "SELECT o.id AS order_id, c.name FROM orders o JOIN customers c ON o.customer = c.name",
...                   StaticCatalog([orders, customers]), "order_names")
>>> lay = layout_of(plan)  # the order's key is a column of the query; the customer's is not
>>> lay.kind, lay.key, lay.hidden
('keyed', ('order_id', '__ivm_k1_1'), ('__ivm_k1_1',))
>>> plan = build_plan(POSTGRES, "SELECT o.id AS order_id, c.name FROM orders o JOIN customers c ON o.id = c.id",
...                   StaticCatalog([orders, customers]), "order_names")
>>> layout_of(plan).key, layout_of(plan).hidden  # on the customer's key: one customer per order
(('order_id',), ())
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.aggregates.avg import AVG
from dbt_ivm.delta.aggregates.count import COUNT as COUNT_NON_NULL
from dbt_ivm.delta.aggregates.count_star import COUNT_STAR
from dbt_ivm.delta.aggregates.sum import SUM
from dbt_ivm.plan.aggregation import agg_placeholder, group_placeholder
from dbt_ivm.plan.determined import identifying_items
from dbt_ivm.plan.nodes import (
    AggCall,
    Aggregate,
    Derived,
    Item,
    Plan,
    Project,
    Relation,
    Rows,
    Scan,
    SetOp,
    TopK,
    UnionAll,
    Window,
    items_of,
    never_null,
    padded_aliases,
    unknown_node,
)
from dbt_ivm.reserved import internal_column

Kind = Literal["aggregate", "keyed", "multiset"]
COUNT = "__ivm_count"
HASH = "__ivm_hash"


@dataclass(frozen=True)
class Layout:
    kind: Kind
    user: tuple[str, ...]  # the query's output columns, in order
    hidden: tuple[str, ...]  # bookkeeping columns the delta computes (not HASH)
    key: tuple[str, ...]  # columns that identify a row (multiset: all user columns)
    group_columns: tuple[str, ...] = ()  # aggregate: the column holding each group key, by index
    # aggregate: state kept in a column the query shows (COUNT(*) AS n: the row count is n), as
    # (state, column) pairs; any other state is in the hidden column named like it
    shown_states: tuple[tuple[str, str], ...] = ()
    # aggregate: counts kept nowhere (the row count, SUM's non-NULL counts), recounted per group
    # where a batch may empty them (`delta/recount.py`)
    recounted: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """Columns a row delta carries (user + hidden), in table order."""
        return self.user + self.hidden

    def stored(self, state: str) -> str:
        """The column that holds an aggregate's `state` (COUNT, or one of `state_columns`)."""
        return dict(self.shown_states).get(state, state)

    @property
    def is_global_aggregate(self) -> bool:
        return self.kind == "aggregate" and not self.key


def state_columns(call: AggCall) -> tuple[str, ...]:
    """Hidden columns that hold one aggregate's state (COUNT(*) shares the group's reference count)."""
    return tuple(f"__ivm_a{call.index}_{suffix}" for suffix in REGISTRY[call.func].states)


def key_column(scan_position: int, pk_index: int) -> str:
    """The hidden column holding a scan's `pk_index`-th primary key column (1-based). Positional: key
    names of up to 63 bytes would be cut to one name when prefixed."""
    return f"__ivm_k{scan_position}_{pk_index}"


def layout_of(plan: Plan) -> Layout:
    user = tuple(plan.names)
    if isinstance(plan, Aggregate):
        return _aggregate_layout(plan, user)
    if isinstance(plan, Project):
        keys = tuple(name for _, _, name in stored_keys(plan))
        if keys:
            return Layout("keyed", user, tuple(k for k in keys if k not in user), keys)
    elif key := plan_key(plan):  # a window or TopK showing its input's key, a distinct set operation
        return Layout("keyed", user, (), key)
    return Layout("multiset", user, (), user)


def key_never_null(plan: Plan, layout: Layout) -> bool:
    """No row of the table can hold a NULL in its key: each group key, or each primary key column, is
    a NOT NULL or primary-key column of a source that no outer join pads. Such rows are found by `=`
    on the key itself, which a plain index (and a hash join) serves."""
    if not layout.key:
        return False
    if layout.kind == "aggregate" and isinstance(plan, Aggregate):  # its key is its group columns
        return all(never_null(key, plan.input) for key in plan.group_by)
    if layout.kind == "keyed" and isinstance(plan, Project):
        padded = padded_aliases(plan.input)
        # A derived table's group key may be NULL (a group of NULLs).
        return not any(isinstance(item, Derived) or item.alias in padded for item, _, _ in stored_keys(plan))
    return False


def item_keys(relation: Relation) -> dict[str, tuple[str, ...]] | None:
    """Per item alias (FROM order), the columns that identify its rows as conditions name them: a
    table's primary key, a derived table's `plan_key`. None: some item's rows may repeat."""
    keys = {}
    for item in items_of(relation):
        key = (
            tuple(internal_column(item.table, pk) for pk in item.table.primary_key) or None
            if isinstance(item, Scan)
            else plan_key(item.plan)
        )
        if key is None:
            return None
        keys[item.alias] = key
    return keys


def plan_key(plan: Plan) -> tuple[str, ...] | None:
    """Output columns no two of the plan's rows share (empty: at most one row): an aggregate's group
    keys, when it shows them all; a keyed projection's key, when it shows all of it; a distinct set
    operation's columns; a window's or TopK's input key, when it passes it on. None: unknown."""
    match plan:
        case Aggregate():
            names = tuple(_output_of(plan, group_placeholder(i)) for i in range(len(plan.group_by)))
            return None if any(n is None for n in names) else tuple(n for n in names if n is not None)
        case Project():
            keys = [column for _, _, column in stored_keys(plan)]
            return tuple(keys) if keys and all(k in plan.names for k in keys) else None
        case SetOp():  # UNION / INTERSECT / EXCEPT without ALL: each row once
            return None if plan.all else plan.names
        case TopK():  # some of its input's rows: their key, when it shows it
            key = plan_key(plan.input)
            return None if key is None or any(k in plan.hidden for k in key) else key
        case Window():  # one row per input row: the input's key, when passed through
            key = plan_key(plan.input)
            passed = {o.expression.name: o.name for o in plan.outputs if isinstance(o.expression, exp.Column)}
            return None if key is None or any(k not in passed for k in key) else tuple(passed[k] for k in key)
        case UnionAll() | Rows():  # a bag: rows may repeat
            return None
        case _:
            unknown_node(plan)


def stored_keys(plan: Project) -> list[tuple[Item, str, str]]:
    """The key columns (as conditions name them) of each item that identifies a keyed projection's
    rows — not those the others determine (`determined.identifying_items`) — with the stream-table
    column that holds each: the query's own output when it selects the key column as it is, else a
    hidden one. Empty: the projection's rows have no key."""
    if plan.multiplies:  # several rows per input row: no input key identifies them
        return []
    keys = item_keys(plan.input)
    if keys is None:
        return []
    items = {i.alias: i for i in items_of(plan.input)}
    shown = frozenset(alias for alias, key in keys.items() if all(_shown_as(plan, alias, c) for c in key))
    found = []
    for alias in identifying_items(plan.input, keys, _derived_key_types(items.values()), shown):
        item = items[alias]
        for index, name in enumerate(keys[alias], 1):
            found.append((item, name, _shown_as(plan, alias, name) or key_column(item.position, index)))
    return found


def _derived_key_types(items: Iterable[Item]) -> dict[tuple[str, str], exp.DataType]:
    """The type of each derived aggregate's group key column (a decorrelated subquery's columns
    carry none), for `identifying_items` to compare a join's two sides."""
    types = {}
    for item in items:
        if isinstance(item, Derived) and isinstance(item.plan, Aggregate):
            for index, group in enumerate(item.plan.group_by):
                name = _output_of(item.plan, group_placeholder(index))
                if name is not None and group.type is not None:
                    types[(item.alias, name)] = group.type
    return types


def _shown_as(plan: Project, alias: str, name: str) -> str | None:
    """The output that is the item's column `name` as it is."""
    return next(
        (
            o.name
            for o in plan.outputs
            if isinstance(o.expression, exp.Column)
            and o.expression.table == alias
            and o.expression.name == name
        ),
        None,
    )


def _aggregate_layout(plan: Aggregate, user: tuple[str, ...]) -> Layout:
    group_columns: list[str] = []
    hidden: list[str] = []
    for index in range(len(plan.group_by)):
        column = _output_of(plan, group_placeholder(index))
        if column is None:
            column = f"__ivm_g{index}"
            hidden.append(column)
        group_columns.append(column)
    shown: dict[str, str] = {}
    recounted: tuple[str, ...] = ()
    if not plan.recomputed:  # a recomputed group's rows are read again; it keeps no state
        shown = _shown_states(plan)
        recounted = _recounted_states(plan, shown)
        hidden.extend(
            state
            for state in (COUNT, *(s for call in plan.calls for s in state_columns(call)))
            if state not in shown and state not in recounted
        )
    return Layout(
        "aggregate",
        user,
        tuple(hidden),
        tuple(group_columns),
        tuple(group_columns),
        tuple(shown.items()),
        recounted,
    )


def _recounted_states(plan: Aggregate, shown: dict[str, str]) -> tuple[str, ...]:
    """Counts kept nowhere, recounted per group where a batch may have emptied them
    (`delta/recount.py`): SUM's non-NULL counts that no column the query shows holds and no other
    call reads (AVG divides by it, COUNT(x) is it); and the group's row count, where no column shows
    it, no output reads its value (COUNT(*) + 1) and a SUM, AVG or COUNT(x) can prove a group still
    has rows (a sum other than 0, a count of values above 0), so that only groups left without that
    proof are read. A global aggregate keeps its counts: recounting them would read the whole input."""
    if not plan.group_by:
        return ()
    counts = {state_columns(c)[1]: c.argument for c in plan.calls if c.func == SUM.name}
    counted_elsewhere = [c.argument for c in plan.calls if c.func != SUM.name]
    recounted = [
        state
        for state, argument in counts.items()
        if shown.get(state, state) in counts and argument not in counted_elsewhere
    ]
    reads_rows = any(c.func == COUNT_STAR.name for c in plan.calls) or COUNT in shown.values()
    if COUNT not in shown and not reads_rows and any(c.func in PROVING for c in plan.calls):
        recounted.insert(0, COUNT)
    return tuple(recounted)


# Calls whose state after a batch can prove that a group still has rows (`delta/recount.py`).
PROVING = (SUM.name, AVG.name, COUNT_NON_NULL.name)


# What each state of an aggregate holds: the sum of its argument, or how many rows have it non-NULL.
_STATE_KINDS = {
    COUNT_NON_NULL.name: ("non_null",),
    SUM.name: ("sum", "non_null"),
    AVG.name: ("sum", "non_null"),
}
# The output of a bare call that holds one of those quantities as it is.
_SHOWN_KIND = {COUNT_NON_NULL.name: "non_null", SUM.name: "sum"}


def _shown_states(plan: Aggregate) -> dict[str, str]:
    """Where each state is kept when a column already holds it, by state. A bare COUNT(*) holds the
    row count; a bare COUNT(x) the non-NULL count of x, and the row count when x cannot be NULL; a
    bare SUM(x) its sum. States of the same quantity share one column (AVG(x) beside SUM(x) and
    COUNT(x) keeps nothing of its own); the others get the hidden column named like them."""
    holders: list[tuple[str, exp.Expr | None, str]] = []  # (quantity, argument, column)

    def quantity(kind: str, argument: exp.Expr | None) -> tuple[str, exp.Expr | None]:
        if kind == "non_null" and _never_null(plan, argument):
            return "rows", None
        return kind, argument

    def holder(kind: str, argument: exp.Expr | None) -> str | None:
        return next((c for k, a, c in holders if (k, a) == (kind, argument)), None)

    for call in plan.calls:
        output = _output_of(plan, agg_placeholder(call.index))
        if output is None:
            continue
        if call.func == COUNT_STAR.name:
            holders.append(("rows", None, output))
        elif call.func in _SHOWN_KIND:
            holders.append((*quantity(_SHOWN_KIND[call.func], call.argument), output))
    shown: dict[str, str] = {}
    rows = holder("rows", None)
    if rows is not None:
        shown[COUNT] = rows
    else:
        holders.append(("rows", None, COUNT))
    for call in plan.calls:
        for state, kind in zip(state_columns(call), _STATE_KINDS.get(call.func, ()), strict=True):
            wanted = quantity(kind, call.argument)
            column = holder(*wanted)
            if column is None:
                holders.append((*wanted, state))
            else:
                shown[state] = column
    return shown


def _output_of(plan: Aggregate, placeholder: str) -> str | None:
    """The output that is `placeholder` as it is."""
    wanted = exp.column(placeholder, quoted=True)
    return next((o.name for o in plan.outputs if o.expression == wanted), None)


def _never_null(plan: Aggregate, argument: exp.Expr | None) -> bool:
    """Is `argument` a literal, or a NOT NULL column of the aggregate's only table (no outer join can
    null it)?"""
    if isinstance(argument, exp.Literal):  # COUNT(1)
        return True
    items = items_of(plan.input)
    if not isinstance(argument, exp.Column) or len(items) != 1 or not isinstance(items[0], Scan):
        return False
    scan = items[0]
    return any(
        internal_column(scan.table, c.name) == argument.name
        and argument.table == scan.alias
        and not c.nullable
        for c in scan.table.columns
    )
