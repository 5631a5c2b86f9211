"""A relation's rows as a Z-set: a union of terms, each a product of its items read one of four ways.

A term is ``sign · factors · (R1 × R2 × …) WHERE predicates`` where each Ri is an item read as its
change set (``delta``: rows with ``__ivm_weight`` ±1), its current contents (``current``: weight 1),
its contents before the batch (``before``: weight 1; only where the backend can read an earlier
state, see `Bindings.before`), a subquery's contents before the batch as a Z-set where it
cannot (``undone``: its rows now at weight +1 and its change with the weights negated, in one
relation), or as an absent partner (``null``: one row of NULLs, the padding of an outer join). A
row's weight is the sign times the delta and undone weights times the factors (Z-set
multiplication). Every delta rule takes and returns lists of terms, so rules compose by nesting;
`term_select` renders one term as a sqlglot SELECT.

>>> from dbt_ivm.catalog import TableInfo
>>> from dbt_ivm.plan.nodes import Scan
>>> o = Scan(0, "o", TableInfo("public", "orders", ()))
>>> from dbt_ivm.target import POSTGRES
>>> ctx = Context(Bindings.named(POSTGRES, {"public.orders": "public.orders"}, {"public.orders": "d"}))
>>> t = Term((Read(o, "delta"),), predicates=(exp.condition('"o"."amount" > 10'),))
>>> term_select(t, [exp.column("amount", "o", quoted=True)], ctx).sql("postgres")
'SELECT "o"."amount", "o"."__ivm_weight" AS "__ivm_weight" FROM d AS "o" WHERE "o"."amount" > 10'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from sqlglot import exp

from dbt_ivm.catalog import TableInfo
from dbt_ivm.delta import budget, sideways
from dbt_ivm.plan.nodes import Aggregate, Derived, Item, scans_in
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

Mode = Literal["current", "delta", "before", "undone", "null"]
WEIGHTED = ("delta", "undone")  # reads whose rows carry a weight column


@dataclass(frozen=True)
class Bindings:
    """How this refresh names relations: each source's current state, and its delta if it changed,
    as FROM items (a table, or a subquery) of the backend's `dialect`."""

    target: Target  # the engine rendered for, and what it can do
    current: dict[str, exp.Expr]  # table.qualified -> relation
    delta: dict[str, exp.Expr] = field(default_factory=dict)  # absent: unchanged in this batch
    # Each changed source's state before the batch (Iceberg: the frontier snapshot). None: the backend
    # has no earlier state to read, and rules derive it as current − delta.
    before: dict[str, exp.Expr] | None = None
    # Changed sources whose change set the backend found to hold insertions only (all weights +1):
    # no row of theirs leaves in this batch (`recount` then has no group in doubt).
    inserted_only: set[str] = field(default_factory=set)

    @staticmethod
    def named(
        target: Target,
        current: dict[str, str],
        delta: dict[str, str] | None = None,
        before: dict[str, str] | None = None,
    ) -> Bindings:
        """Bindings to plain table names (examples and tests)."""

        def tables(names: dict[str, str]) -> dict[str, exp.Expr]:
            return {k: exp.to_table(v) for k, v in names.items()}

        return Bindings(
            target, tables(current), tables(delta or {}), before=None if before is None else tables(before)
        )

    @property
    def dialect(self) -> str:
        return self.target.dialect

    def changed(self, table: TableInfo) -> bool:
        return table.qualified in self.delta

    def only_insertions(self, tables: Sequence[TableInfo]) -> bool:
        """No row of `tables` leaves in this batch: each is unchanged or gained rows only."""
        return all(t.qualified not in self.delta or t.qualified in self.inserted_only for t in tables)

    def as_before(self) -> Bindings:
        """Bindings whose current state is this batch's before state (no changes); always the same
        object, so that what was rendered against it is found again (`Context.rendered`)."""
        return self._before_state

    @cached_property
    def _before_state(self) -> Bindings:
        assert self.before is not None
        return Bindings(self.target, {**self.current, **self.before}, {}, {})


@dataclass
class Context:
    """What rendering needs: the bindings, and a way to render derived items (set by `plans`)."""

    bindings: Bindings
    # (item, mode, ctx, restriction, whether a sealed item may be computed ahead: `read_relation`)
    render_derived: Callable[[Derived, Mode, Context, exp.Exists | None, bool], exp.Expr] | None = None
    # Result types of aggregate calls, by id() of their Aggregate node and call index (AVG's cast).
    call_types: dict[int, dict[int, exp.DataType]] = field(default_factory=dict)
    # Computes a query now and returns a relation holding its rows: a backend whose planner would
    # otherwise re-plan a subquery read twice (Spark) sets it; None keeps the query inline.
    pin: Callable[[exp.Query], exp.Expr] | None = None
    # As `pin`, also giving how many of the query's rows have its boolean column (named) true.
    pin_counted: Callable[[exp.Query, str], tuple[exp.Expr, int]] | None = None
    # Derived items already rendered in this refresh, by (id of the item, mode, restriction, ahead):
    # many terms read one, and building its SQL for each was most of a refresh's Python time. The
    # bindings rendered against are kept with it (alive, so their id cannot be reused).
    rendered: dict[tuple[int, str, str, bool], tuple[Bindings, exp.Expr]] = field(default_factory=dict)

    def item_changed(self, item: Item) -> bool:
        return any(self.bindings.changed(s.table) for s in scans_in(item))

    def pinned(self, query: exp.Query) -> exp.Expr:
        """`query`, computed once where the backend can; else the query itself."""
        return query if self.pin is None else self.pin(query)

    def pinned_counting(self, query: exp.Query, flag: str) -> tuple[exp.Expr, int | None]:
        """`query` as `pinned`, and how many of its rows have the boolean column `flag` true, where
        the backend pins and counts (None: unknown)."""
        if self.pin_counted is None:
            return self.pinned(query), None
        return self.pin_counted(query, flag)

    def as_before(self) -> Context:
        """A context whose current state is the state before the batch."""
        return replace(self, bindings=self.bindings.as_before())


def memoized_pin(dialect: str, compute: Callable[[str], exp.Expr]) -> Callable[[exp.Query], exp.Expr]:
    """A `Context.pin` that computes each distinct query once per refresh: `compute` gets its `dialect`
    text (rendered once: the key, and what runs)."""
    pinned: dict[str, exp.Expr] = {}

    def pin(query: exp.Query) -> exp.Expr:
        sql = query.sql(dialect)  # `query` may share subtrees with other statements: not rewritten here
        if sql not in pinned:
            pinned[sql] = compute(sql)
        return pinned[sql].copy()

    return pin


@dataclass(frozen=True)
class Computed:
    """Rows a rule computes for itself from the batch (its changes grouped by join key), read as is."""

    alias: str
    query: exp.Query


@dataclass(frozen=True)
class Read:
    item: Item | Computed
    mode: Mode

    @property
    def from_batch(self) -> bool:
        """Its rows come from the batch (a change set, or rows a rule computed from one): few."""
        return self.mode == "delta" or isinstance(self.item, Computed)


@dataclass(frozen=True)
class Term:
    reads: tuple[Read, ...]
    sign: int = 1
    predicates: tuple[exp.Expr, ...] = ()
    factors: tuple[exp.Expr, ...] = ()  # extra weight factors (an existence flip)

    def where(self, *predicates: exp.Expr) -> Term:
        return replace(self, predicates=self.predicates + tuple(predicates))

    def times(self, other: Term) -> Term:
        """The product of two terms (a join of their reads; `other`'s predicates added)."""
        budget.charge()
        return Term(
            self.reads + other.reads,
            self.sign * other.sign,
            self.predicates + other.predicates,
            self.factors + other.factors,
        )

    def negated(self) -> Term:
        return replace(self, sign=-self.sign)

    def scaled(self, factor: exp.Expr) -> Term:
        return replace(self, factors=(*self.factors, factor))

    def padded(self, items: Sequence[Item]) -> Term:
        """The term with `items` read as NULL partners (an outer join's unmatched side)."""
        return replace(self, reads=self.reads + tuple(Read(i, "null") for i in items))

    @property
    def is_delta(self) -> bool:
        return any(r.mode == "delta" for r in self.reads)

    def weight(self) -> exp.Expr:
        factors: list[exp.Expr] = [
            exp.column(WEIGHT, r.item.alias, quoted=True) for r in self.reads if r.mode in WEIGHTED
        ]
        factors += [exp.paren(f.copy(), copy=False) for f in self.factors]
        product: exp.Expr = factors[0] if factors else exp.Literal.number(1)
        for factor in factors[1:]:
            product = exp.Mul(this=product, expression=factor)
        return exp.Neg(this=exp.paren(product, copy=False)) if self.sign < 0 else product


@dataclass(frozen=True)
class Side:
    """One input of a join over the batch: its change, its rows after the batch and, where the
    backend can read them, before it; and the items it reads (an outer join pads them with NULLs).
    `undone`: its rows before the batch as a Z-set where the backend cannot read them and the input
    is items under filters and inner joins (`relation.undone`; None: otherwise)."""

    delta: list[Term]
    after: list[Term]
    before: list[Term] | None
    items: tuple[Item, ...]
    undone: list[Term] | None = None

    @property
    def before_terms(self) -> list[Term]:
        """Its rows before the batch, for a rule linear in them: read as such, undone, or as
        after − delta (a Z-set difference of as many terms as delta has, plus one: down a chain of
        joins they double with every changed input)."""
        if self.before is not None:
            return self.before
        if self.undone is not None:
            return self.undone
        return self.after + [t.negated() for t in self.delta]


def aliased(relation: exp.Expr, alias: str) -> exp.Expr:
    """`relation AS alias`. A query is wrapped as it is, not copied: a rule's queries are built
    for the statement that reads them (copying each one at every level made the copies most of a
    stream table's planning time). Anything else is copied, since its alias is set on it."""
    if isinstance(relation, exp.Query):
        return exp.Subquery(this=relation, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    relation = relation.copy()
    relation.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    return relation


def read_relation(read: Read, ctx: Context, term: Term | None = None) -> exp.Expr:
    """The relation a read stands for, aliased as its item (a grouped subquery restricted to the
    groups `term` can join, `sideways`)."""
    item = read.item
    mode: Mode = "current" if read.mode == "null" else read.mode
    if mode == "undone":
        return aliased(_undone(read, ctx, term), item.alias)
    if isinstance(item, Derived) and term is not None and read.mode != "null":
        relation = _derived(item, mode, ctx, _reachable(term, read, ctx), True).copy()
    else:
        relation = _relation(read, ctx)
    if read.mode == "null":
        # No rows, the item's columns and types: LEFT JOINed ON TRUE it pads a row with NULLs.
        relation = exp.select("*").from_(aliased(relation, item.alias)).where(exp.false(), copy=False)
    return aliased(relation, item.alias)


def _relation(read: Read, ctx: Context) -> exp.Expr:
    """The relation a read stands for, unaliased."""
    item = read.item
    mode: Mode = "current" if read.mode == "null" else read.mode
    if isinstance(item, Computed):
        return item.query.copy()
    if mode == "undone":  # never a state of its own (`_derived` would render it as current)
        return _undone(read, ctx, None)
    if isinstance(item, Derived):  # a NULL partner's columns: computing it ahead would be wasted
        return _derived(item, mode, ctx, None, False).copy()
    name = item.table.qualified
    if mode == "delta":
        return ctx.bindings.delta[name].copy()
    if mode == "before" and ctx.bindings.before is not None and name in ctx.bindings.before:
        return ctx.bindings.before[name].copy()
    return ctx.bindings.current[name].copy()


def _undone(read: Read, ctx: Context, term: Term | None) -> exp.Query:
    """A changed subquery's rows before the batch as a Z-set: its rows now at weight +1 and its
    change with the weights negated (a row the batch deleted: +1; one it inserted: +1 − 1). Exact
    wherever the rows are only joined, filtered and projected before their weights are summed."""
    item = read.item
    assert isinstance(item, Derived)
    now = read_relation(Read(item, "current"), ctx, term)
    change = read_relation(Read(item, "delta"), ctx, term)
    columns = [exp.column(name, item.alias, quoted=True) for name in item.plan.names]
    # Both weights `int`, a literal 1's type: a wider one widens the sums over it (a count in
    # `numeric` hashes unlike the stored `bigint`), and unequal types keep PostgreSQL from
    # flattening the union into the join.
    one = exp.cast(exp.Literal.number(1), exp.DataType.Type.INT)
    negated = exp.cast(exp.Neg(this=exp.column(WEIGHT, item.alias, quoted=True)), exp.DataType.Type.INT)
    return union_all(
        [
            exp.select(*columns, exp.alias_(one, WEIGHT, quoted=True)).from_(now),
            exp.select(*[c.copy() for c in columns], exp.alias_(negated, WEIGHT, quoted=True)).from_(change),
        ]
    )


def _reachable(term: Term, read: Read, ctx: Context) -> exp.Exists | None:
    found = sideways.reachable_groups(term, read)
    if found is None:
        return None
    assert isinstance(read.item, Derived) and isinstance(read.item.plan, Aggregate)
    return sideways.restriction(found, read.item.plan, lambda r, alias: aliased(_relation(r, ctx), alias))


def _derived(item: Derived, mode: Mode, ctx: Context, restrict: exp.Exists | None, ahead: bool) -> exp.Expr:
    """A derived item's relation (only the groups `restrict` keeps; a sealed one computed `ahead`),
    rendered once per item, mode, restriction and bindings."""
    assert ctx.render_derived is not None
    key = (id(item), mode, "" if restrict is None else restrict.sql(ctx.bindings.dialect), ahead)
    found = ctx.rendered.get(key)
    if found is not None and found[0] is ctx.bindings:
        return found[1]
    relation = ctx.render_derived(item, mode, ctx, restrict, ahead)
    ctx.rendered[key] = (ctx.bindings, relation)
    return relation


def term_from(term: Term, query: exp.Select, ctx: Context, outer: Term | None = None) -> exp.Select:
    """`query` with the term's FROM (non-null reads joined, null reads left-joined) and WHERE. `outer`:
    the term whose rows this one is correlated to (a subquery's), whose change sets and equalities
    also say which groups a grouped item can join (`sideways`)."""
    real = [r for r in term.reads if r.mode != "null"]
    assert real, "a term reads at least one item"
    scope = term if outer is None else term.times(outer)
    query = query.from_(read_relation(real[0], ctx, scope), copy=False)
    for read in real[1:]:
        query = query.join(read_relation(read, ctx, scope), join_type="cross", copy=False)
    for read in term.reads:
        if read.mode == "null":
            query = query.join(read_relation(read, ctx), on=exp.true(), join_type="left", copy=False)
    condition = conjunction(without_padding_tests(term))
    if condition is not None:
        query = query.where(condition.copy(), copy=False)
    return query


def without_padding_tests(term: Term) -> list[exp.Expr]:
    """The term's conditions, less each `p.c IS NULL` over a read `p` that pads with NULLs (true of
    every row). Kept, it would make PostgreSQL expect almost no rows (it reads the null fraction of
    the column's table, not of the padding), and probe an index per row of a whole table where a hash
    join wins (jaffle_shop's payments without an order: 231,846 probes, 388 ms).

    >>> from dbt_ivm.plan.nodes import Scan
    >>> padded = Scan(1, "o", TableInfo("public", "orders", ()))
    >>> term = Term((Read(Scan(0, "p", TableInfo("public", "payments", ())), "current"), Read(padded, "null")),
    ...     predicates=(exp.condition("(o.customer_id IS NULL) AND p.amount > 0"),))
    >>> [c.sql() for c in without_padding_tests(term)]
    ['p.amount > 0']
    """
    aliases = [r.item.alias for r in term.reads]
    padded = {r.item.alias for r in term.reads if r.mode == "null" and aliases.count(r.item.alias) == 1}
    if not padded:
        return list(term.predicates)
    kept: list[exp.Expr] = []
    for predicate in term.predicates:
        for conjunct in predicate.flatten() if isinstance(predicate, exp.And) else [predicate]:
            test = conjunct.unnest()
            if (
                isinstance(test, exp.Is)
                and isinstance(test.expression, exp.Null)
                and isinstance(test.this, exp.Column)
                and test.this.table in padded
            ):
                continue
            kept.append(conjunct)
    return kept


def term_select(
    term: Term, projections: Sequence[exp.Expr], ctx: Context, weighted: bool = True
) -> exp.Select:
    """SELECT projections (plus the term's weight as ``__ivm_weight``) over one term."""
    columns = [p.copy() for p in projections]
    if weighted:
        columns.append(exp.alias_(term.weight(), WEIGHT, quoted=True))
    return term_from(term, exp.select(*columns), ctx)


def conjunction(predicates: Sequence[exp.Expr]) -> exp.Expr | None:
    if not predicates:
        return None
    result = predicates[0]
    for predicate in predicates[1:]:
        result = exp.and_(result, predicate, copy=False)
    return result


def union_all(queries: Sequence[exp.Query]) -> exp.Query:
    result = queries[0]
    for query in queries[1:]:
        result = exp.union(result, query, distinct=False, copy=False)
    return result
