"""An aggregate's input rows, reduced to what aggregating needs: each group key as ``__ivm_g<i>``
and each call's argument as ``__ivm_arg<j>``, one SELECT per term, unioned.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.delta.terms import Bindings, Context
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> ctx = Context(Bindings.named(POSTGRES, {"public.orders": "orders"}, {"public.orders": "d"}))
>>> print(input_rows(plan, "delta", ctx).sql("postgres"))
SELECT "orders"."customer" AS "__ivm_g0", "orders"."amount" AS "__ivm_arg0", "orders"."__ivm_weight" AS "__ivm_weight" FROM d AS "orders"
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from sqlglot import exp

from dbt_ivm.delta import relation
from dbt_ivm.delta.aggregates import REGISTRY
from dbt_ivm.delta.terms import Context, Term, aliased, conjunction, term_select, union_all
from dbt_ivm.keys import key_hash
from dbt_ivm.plan.aggregation import agg_placeholder, group_placeholder
from dbt_ivm.plan.nodes import AggCall, Aggregate, Relation, never_null
from dbt_ivm.sqltext import WEIGHT
from dbt_ivm.target import Target

COUNT = "__ivm_count"
Alternatives = tuple[exp.Expr, ...]  # disjoint conditions: a row passes one of them, or none


def arg_column(call: AggCall) -> str:
    return f"__ivm_arg{call.index}"


def input_column(call: AggCall, position: int) -> str:
    """The projected `position`-th column a recomputed call reads."""
    return f"__ivm_arg{call.index}_{position}"


def state_names(call: AggCall) -> list[str]:
    return [f"__ivm_a{call.index}_{suffix}" for suffix in REGISTRY[call.func].states]


def _projections(plan: Aggregate) -> list[exp.Expr]:
    columns = [exp.alias_(k.copy(), group_placeholder(i), quoted=True) for i, k in enumerate(plan.group_by)]
    columns += [
        exp.alias_(c.argument.copy(), arg_column(c), quoted=True)
        for c in plan.calls
        if c.argument is not None
    ]
    columns += [
        exp.alias_(column.copy(), input_column(c, j), quoted=True)
        for c in plan.calls
        for j, column in enumerate(c.columns)
    ]
    # COUNT(*) alone reads no column; Spark has no SELECT without a column.
    return columns or [exp.alias_(exp.Literal.number(1), "__ivm_row", quoted=True)]


def input_names(plan: Aggregate) -> list[str]:
    """The columns of `input_rows` (without the weight)."""
    return [str(p.alias) for p in _projections(plan)]


def input_rows(
    plan: Aggregate,
    which: Literal["after", "before", "delta"],
    ctx: Context,
    restrict: exp.Expr | Alternatives | None = None,
) -> exp.Query | None:
    """The input's rows (after the batch, before it where the backend can read that, or its delta
    with weights), keys and arguments only; `restrict` is added to every term (a correlated filter,
    or disjoint alternatives: each term once per alternative, `restricted`).
    None: no changed rows (delta), or no readable earlier state (before)."""
    if which == "before":
        found = relation.before(plan.input, ctx)
        if found is None:
            return None
        terms: list[Term] = found
    elif which == "after":
        terms = relation.after(plan.input, ctx)
    else:
        terms = relation.delta(plan.input, ctx)
    if not terms:
        return None
    terms = restricted(terms, restrict)
    return union_all([term_select(t, _projections(plan), ctx, weighted=which == "delta") for t in terms])


def input_rows_before(
    plan: Aggregate, ctx: Context, restrict: exp.Expr | Alternatives | None = None
) -> exp.Query:
    """The input's rows before the batch (as `input_rows`). Read where the backend keeps the earlier
    state; else derived as now − batch: both unioned with weights, summed per distinct row, and each
    row with a positive sum repeated that many times."""
    read = input_rows(plan, "before", ctx, restrict)
    if read is not None:
        return read
    after, changes = input_rows(plan, "after", ctx, restrict), input_rows(plan, "delta", ctx, restrict)
    assert after is not None
    return now_minus_batch(after, changes, input_names(plan))


def now_minus_batch(after: exp.Query, changes: exp.Query | None, names: Sequence[str]) -> exp.Select:
    """The rows before a batch derived from the rows after it and the batch's changes (columns
    `names`, plus the weight): both unioned with weights, summed per distinct row, and each row with a
    positive sum repeated that many times."""
    branch, summed, copies = "__ivm_z", "__ivm_summed", "__ivm_copies"

    def columns(table: str) -> list[exp.Expr]:
        return [exp.column(n, table, quoted=True) for n in names]

    weight = exp.column(WEIGHT, branch, quoted=True)
    rows: list[exp.Query] = [
        exp.select(*columns(branch), exp.alias_(exp.Literal.number(1), WEIGHT, quoted=True)).from_(
            aliased(after, branch)
        )
    ]
    if changes is not None:
        undo = exp.alias_(exp.Neg(this=weight), WEIGHT, quoted=True)
        rows.append(exp.select(*columns(branch), undo).from_(aliased(changes, branch)))
    multiplicity = exp.func("SUM", exp.column(WEIGHT, branch, quoted=True))
    net = exp.select(*columns(branch), exp.alias_(multiplicity, WEIGHT, quoted=True))
    net = net.from_(aliased(union_all(rows), branch)).group_by(*columns(branch))
    net = net.having(exp.GT(this=multiplicity.copy(), expression=exp.Literal.number(0)))
    series = exp.ExplodingGenerateSeries(
        start=exp.Literal.number(1), end=exp.column(WEIGHT, summed, quoted=True)
    )
    repeat = exp.Lateral(
        this=series,
        alias=exp.TableAlias(
            this=exp.to_identifier(copies, quoted=True),
            columns=[exp.to_identifier("__ivm_i", quoted=True)],
        ),
    )
    return exp.select(*columns(summed)).from_(aliased(net, summed)).join(repeat, join_type="cross")


def from_scratch(plan: Aggregate, rows: exp.Query, hidden_groups: bool = False) -> exp.Select:
    """The plan's groups over `rows` (`input_rows`), from scratch: its outputs (and, with
    `hidden_groups`, the group keys no output shows, as ``__ivm_g<i>``), HAVING applied."""
    alias = "__ivm_rows"
    outputs = from_scratch_outputs(plan, alias)
    if hidden_groups:
        shown = {o.expression for o in plan.outputs}
        outputs += [
            exp.alias_(column, column.name, quoted=True)
            for column in group_columns(plan, alias)
            if exp.column(column.name, quoted=True) not in shown
        ]
    query = exp.select(*outputs).from_(aliased(rows, alias))
    if plan.group_by:
        query = query.group_by(*group_columns(plan, alias), copy=False)
    if plan.having is not None:
        query = query.having(_substituted(plan.having, _from_scratch_values(plan, alias)), copy=False)
    return query


def group_columns(plan: Aggregate, table: str | None = None) -> list[exp.Column]:
    return [exp.column(group_placeholder(i), table, quoted=True) for i in range(len(plan.group_by))]


def weighted_states(plan: Aggregate, weight: exp.Expr, table: str | None = None) -> list[exp.Expr]:
    """The group's count and every call's state over weighted rows (aliased), to select per group."""
    columns = [exp.alias_(_zero_if_empty(exp.func("SUM", weight.copy())), COUNT, quoted=True)]
    for call in plan.calls:
        argument = exp.column(arg_column(call), table, quoted=True) if call.argument is not None else None
        for name, value in zip(
            state_names(call), REGISTRY[call.func].weighted(argument, weight.copy()), strict=True
        ):
            # A count over no rows is 0; a sum over none stays NULL (as SUM's own value is).
            columns.append(
                exp.alias_(value if name.endswith("_sum") else _zero_if_empty(value), name, quoted=True)
            )
    return columns


def _zero_if_empty(total: exp.Expr) -> exp.Expr:
    return exp.func("COALESCE", total, exp.Literal.number(0))


def finalized_outputs(
    plan: Aggregate, state: str, types: dict[int, exp.DataType], names: Sequence[str] | None = None
) -> list[exp.Expr]:
    """The plan's outputs evaluated over maintained state (relation alias `state`), aliased."""
    replacements: dict[str, exp.Expr] = {}
    for i in range(len(plan.group_by)):
        replacements[group_placeholder(i)] = exp.column(group_placeholder(i), state, quoted=True)
    count = exp.column(COUNT, state, quoted=True)
    for call in plan.calls:
        states: list[exp.Expr] = [exp.column(n, state, quoted=True) for n in state_names(call)]
        value = REGISTRY[call.func].finalize(states, count.copy(), types.get(call.index))
        replacements[agg_placeholder(call.index)] = exp.paren(value, copy=False)
    outputs = []
    for index, output in enumerate(plan.outputs):
        name = names[index] if names is not None else output.name
        outputs.append(exp.alias_(_substituted(output.expression, replacements), name, quoted=True))
    return outputs


def from_scratch_outputs(plan: Aggregate, rows: str) -> list[exp.Expr]:
    """The plan's outputs as written, over `input_rows` (alias `rows`): each call re-aimed at its
    argument column, so the values and types are the query's own."""
    values = _from_scratch_values(plan, rows)
    return [exp.alias_(_substituted(o.expression, values), o.name, quoted=True) for o in plan.outputs]


def call_over(call: AggCall, rows: str) -> exp.Expr:
    """The call as written, reading the columns `input_rows` projects for it (alias `rows`)."""
    original = call.original.copy()
    if call.argument is not None:
        original.set("this", exp.column(arg_column(call), rows, quoted=True))
        return original
    if not call.columns:
        return original
    projected = {
        column: exp.column(input_column(call, j), rows, quoted=True) for j, column in enumerate(call.columns)
    }
    return original.transform(
        lambda n: projected[n].copy() if isinstance(n, exp.Column) and n in projected else n
    )


def _from_scratch_values(plan: Aggregate, rows: str) -> dict[str, exp.Expr]:
    values: dict[str, exp.Expr] = {}
    for i in range(len(plan.group_by)):
        values[group_placeholder(i)] = exp.column(group_placeholder(i), rows, quoted=True)
    for call in plan.calls:
        values[agg_placeholder(call.index)] = call_over(call, rows)
    return values


def _substituted(expression: exp.Expr, values: dict[str, exp.Expr]) -> exp.Expr:
    """`expression` with its placeholder columns replaced by `values`."""

    def substitute(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in values:
            return values[node.name].copy()
        return node

    return expression.copy().transform(substitute)


def touched_groups(plan: Aggregate, changes: exp.Expr) -> exp.Select:
    """The distinct group keys of `changes` (`input_rows` of the delta)."""
    alias = "__ivm_chg"
    return (
        exp.select(*group_columns(plan, alias))
        .from_(aliased(changes.copy(), alias))
        .group_by(*group_columns(plan, alias))
    )


def in_groups(plan: Aggregate, groups: exp.Expr, target: Target) -> Alternatives:
    """An input row's group is among `groups` (`among`)."""
    names = [group_placeholder(i) for i in range(len(plan.group_by))]
    return among(groups, names, list(plan.group_by), plan.input, target)


def among(
    touched: exp.Expr,
    names: Sequence[str],
    values: Sequence[exp.Expr],
    relation: Relation | None,
    target: Target,
) -> Alternatives:
    """The `values` of a row (of `relation`, when they are its columns) are a row of `touched` (its
    columns `names`), NULL matching NULL, as disjoint alternatives (`restricted`). An EXISTS on `=`
    is a semi join an index or a hash join serves, so a batch touching a few groups reads only their
    rows. PostgreSQL can neither hash nor index IS NOT DISTINCT FROM, so where a value may be NULL
    the rows holding a NULL are a second alternative, gated by a test that runs once: is some
    touched key NULL at all? With several values of `relation`, such a row's touched key is found by
    the hash of both (a join PostgreSQL can hash; the touched keys were computed over the same
    columns, so equal rows hash alike), then compared null-safe. Spark's `<=>` is a join key itself:

    >>> from dbt_ivm.target import POSTGRES
    >>> for found in among(exp.to_table("t"), ["g"], [exp.column("k", "o")], None, POSTGRES):
    ...     print(found.sql("postgres"))
    EXISTS(SELECT 1 FROM t AS "__ivm_affected" WHERE "__ivm_affected"."g" = o.k)
    (o.k IS NULL) AND EXISTS(SELECT 1 FROM t AS "__ivm_affected" WHERE "__ivm_affected"."g" IS NULL)
    """
    alias = "__ivm_affected"
    columns = [exp.column(name, alias, quoted=True) for name in names]
    # A group key may be an expression (GROUP BY amount > 1): an operand of = or IS needs parentheses.
    operands = [v if isinstance(v, (exp.Column, exp.Literal)) else exp.paren(v.copy()) for v in values]

    def exists(compare: type[exp.EQ] | type[exp.NullSafeEQ]) -> exp.Exists:
        pairs = [compare(this=c.copy(), expression=v.copy()) for c, v in zip(columns, operands, strict=True)]
        condition = conjunction(pairs)
        assert condition is not None, "at least one value"
        return exp.Exists(this=exp.select("1").from_(aliased(touched.copy(), alias)).where(condition))

    if not target.splits_nullable_matches:
        return (exists(exp.NullSafeEQ),)
    if relation is not None and all(never_null(value, relation) for value in values):
        return (exists(exp.EQ),)
    some_null = exp.or_(*[exp.Is(this=v.copy(), expression=exp.null()) for v in operands])
    null_key = exp.or_(*[exp.Is(this=c.copy(), expression=exp.null()) for c in columns])
    touched_null = exp.Exists(this=exp.select("1").from_(aliased(touched.copy(), alias)).where(null_key))
    holding_null = exp.and_(exp.paren(some_null), touched_null)
    if len(values) > 1:  # (1, NULL) matches only (1, NULL)
        found = exists(exp.NullSafeEQ)
        if relation is not None:  # the touched keys have the values' types: hashes of equal rows agree
            hashed = exp.EQ(this=key_hash(columns), expression=key_hash(values))
            found.this.set("where", exp.Where(this=exp.and_(hashed, found.this.args["where"].this)))
        holding_null = exp.and_(holding_null, found)
    return (exists(exp.EQ), holding_null)


def restricted(terms: list[Term], restrict: exp.Expr | Alternatives | None) -> list[Term]:
    """`terms` under `restrict`: one predicate, or disjoint alternatives (`among`), each term once
    per alternative (their union holds each row once)."""
    if restrict is None:
        return terms
    alternatives = (restrict,) if isinstance(restrict, exp.Expr) else restrict
    return [t.where(a.copy()) for t in terms for a in alternatives]


def restricted_rows(rows: exp.Query, alias: str, alternatives: Alternatives) -> exp.Query:
    """The rows of `rows` (read as `alias`) that one of the disjoint `alternatives` keeps."""
    return union_all(
        [exp.select("*").from_(aliased(rows.copy(), alias)).where(a.copy()) for a in alternatives]
    )


def matching(keys: Sequence[str], left: str, right: str, not_null: Collection[str] = ()) -> exp.Expr:
    """Rows of `left` and `right` whose group keys are equal or both NULL; keys in `not_null` cannot
    be NULL and are compared with `=`, which a hash join can serve (IS NOT DISTINCT FROM cannot)."""
    found = conjunction(
        [
            (exp.EQ if k in not_null else exp.NullSafeEQ)(
                this=exp.column(k, left, quoted=True), expression=exp.column(k, right, quoted=True)
            )
            for k in keys
        ]
    )
    return exp.true() if found is None else found


def left_joined_on_keys(
    query: exp.Select,
    right: exp.Expr,
    keys: Sequence[str],
    aliases: tuple[str, str],
    not_null: Collection[str],
    target: Target,
    same_types: bool = False,
) -> exp.Query:
    """`query` (reading its rows as `aliases[0]`) LEFT JOINed to `right` (as `aliases[1]`) on `keys`
    equal or both NULL (`matching`). PostgreSQL can neither hash nor merge on IS NOT DISTINCT FROM,
    so a nullable key made that a nested loop of every row against every row (6,569 touched groups:
    43M comparisons, 3.3 s). There, rows whose keys are all set join by `=`, and only the rows
    holding a NULL join null-safe, in a branch of their own: on one key, to the right's NULL row; on
    several, by both rows' hash first where the two sides' keys have `same_types`. Spark's `<=>` is a
    join key already:

    >>> from dbt_ivm.target import POSTGRES
    >>> print(left_joined_on_keys(exp.select("c.g").from_("c"), exp.to_table("n"), ["g"], ("c", "n"),
    ...       (), POSTGRES).sql("postgres"))
    SELECT c.g FROM c LEFT JOIN n AS "n" ON "c"."g" = "n"."g" WHERE NOT "c"."g" IS NULL UNION ALL SELECT c.g FROM c LEFT JOIN n AS "n" ON "n"."g" IS NULL WHERE "c"."g" IS NULL
    """
    left, right_alias = aliases
    nullable = [k for k in keys if k not in not_null]
    if not target.splits_nullable_matches or not nullable:
        return query.join(
            aliased(right, right_alias), on=matching(keys, left, right_alias, not_null), join_type="left"
        )
    nulls = [exp.Is(this=exp.column(k, left, quoted=True), expression=exp.null()) for k in nullable]
    equal = query.copy().join(
        aliased(right.copy(), right_alias), on=matching(keys, left, right_alias, keys), join_type="left"
    )
    on: exp.Expr
    if len(keys) == 1:  # the left key is NULL in this branch
        on = exp.Is(this=exp.column(keys[0], right_alias, quoted=True), expression=exp.null())
    else:
        on = matching(keys, left, right_alias, not_null)
        if same_types:
            left_keys = [exp.column(k, left, quoted=True) for k in keys]
            right_keys = [exp.column(k, right_alias, quoted=True) for k in keys]
            on = exp.and_(exp.EQ(this=key_hash(left_keys), expression=key_hash(right_keys)), on)
    null_safe = query.join(aliased(right, right_alias), on=on, join_type="left")
    all_set = exp.and_(*[exp.Not(this=n.copy()) for n in nulls])
    return union_all([equal.where(all_set, copy=False), null_safe.where(exp.or_(*nulls), copy=False)])


def never_null_groups(plan: Aggregate) -> set[str]:
    """The group columns of `plan` whose key cannot be NULL (`never_null`)."""
    return {group_placeholder(i) for i, key in enumerate(plan.group_by) if never_null(key, plan.input)}
