"""From model SQL to a logical plan: parse, resolve names with sqlglot's optimizer, then map clauses
onto operators. Anything the delta rules cannot maintain is refused here, by construct name.

Values that can change between refreshes are refused by `volatility.py`.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> plan = build_plan(POSTGRES, "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> [o.name for o in plan.outputs], [c.func for c in plan.calls]
(['customer', 'total'], ['sum'])
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import NoReturn

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import NormalizationStrategy
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries
from sqlglot.schema import MappingSchema

from dbt_ivm.catalog import Catalog, FunctionCall, TableInfo, qualified_name
from dbt_ivm.errors import InvalidQuery, UnsupportedQuery
from dbt_ivm.plan import generators, passes, rewrites
from dbt_ivm.plan.aggregation import aggregate_of, is_aggregate
from dbt_ivm.plan.correlation import correlated, equalities
from dbt_ivm.plan.hidden_order import ORDER_ALIAS, with_hidden_order
from dbt_ivm.plan.in_values import SPARK_IN_VALUES
from dbt_ivm.plan.internal_names import rename_reserved_columns
from dbt_ivm.plan.join_parentheses import flatten_join_parentheses
from dbt_ivm.plan.messages import excerpt, written_in
from dbt_ivm.plan.nodes import (
    Derived,
    Filter,
    Item,
    Join,
    JoinKind,
    Output,
    Plan,
    Project,
    Relation,
    Rows,
    Scan,
    SetKind,
    SetOp,
    TopK,
    UnionAll,
    Window,
    all_items,
    scans_in,
)
from dbt_ivm.plan.plain_subqueries import is_plain
from dbt_ivm.plan.positions import in_truth_position
from dbt_ivm.plan.row_counts import NoRowCount, row_count
from dbt_ivm.plan.source_positions import position_of
from dbt_ivm.plan.unknown_aggregates import refuse_unknown_aggregates
from dbt_ivm.plan.volatility import refuse_nondeterministic, refuse_value_keywords
from dbt_ivm.reserved import internal_columns
from dbt_ivm.target import Target

MAX_VIEW_DEPTH = 16
ROWS_ALIAS = "__ivm_rows"  # the alias `VALUES` is read under (`_Planner.rows`)
# How to read a source the catalog says is not a plain table (`Catalog.lookup`'s kind), where the
# general fix (read from tables or views) does not say enough.
SOURCE_FIXES = {
    "partition": "read the partitioned table at the root of its tree, filtered to this partition's "
    "rows (a write through a parent fires no statement trigger of a partition, so its changes "
    "cannot be captured), or use refresh_mode='full'",
    "inheritance child": "read the parent table, filtered to this child's rows (a write through the "
    "parent fires no statement trigger of a child, so its changes cannot be captured), or use "
    "refresh_mode='full'",
    "table under row-level security": "run dbt as a role row-level security does not apply to (the "
    "table's owner or a BYPASSRLS role): changes are captured for every row, not for the rows this "
    "role may read; or use refresh_mode='full'",
}


def build_plan(
    target: Target, sql: str, catalog: Catalog, model: str, output_names: Sequence[str] | None = None
) -> Plan:
    """Plan the defining query `sql` of `model`, written for `target`. `output_names` (from the
    database) override aliases."""
    with written_in(target.dialect):
        return _planned(target, sql, catalog, model, output_names)


def _planned(
    target: Target, sql: str, catalog: Catalog, model: str, output_names: Sequence[str] | None
) -> Plan:
    dialect = target.dialect
    tree = _parse(sql, model, target)
    tables = _resolve_tables(tree, catalog, model, target)
    _refuse_unmaintained_clauses(tree, model)
    tree = inline_ctes(tree)
    # sqlglot wants {schema: {table: {column: type}}}
    by_schema: dict[str, dict[str, dict[str, str]]] = {}
    for t in tables.values():
        by_schema.setdefault(t.schema, {})[t.name] = {c.name: c.type for c in t.columns}
    # Catalog names are exact spellings (e.g. "Sales"."Order Items"): only a case-insensitive dialect
    # (Spark) may fold them.
    case_insensitive = target.read.normalization_strategy is NormalizationStrategy.CASE_INSENSITIVE
    schema = MappingSchema(dict[str, object](by_schema), dialect=dialect, normalize=case_insensitive)
    if target.keyword_values:
        refuse_value_keywords(tree, model)  # qualify would take them for unknown columns
    aliases = itertools.count(1)  # derived tables the passes and the planner add: __ivm_s1, …
    setting = passes.Setting(model, target, schema, (f"__ivm_s{n}" for n in aliases))
    try:
        tree = passes.rewritten_query(tree, setting)
    except OptimizeError as error:
        _refuse_system_columns(tree, model, target)
        raise InvalidQuery(model, str(error)) from error
    if not isinstance(tree, exp.Query):
        raise UnsupportedQuery(model, f"top-level `{type(tree).__name__.upper()}`", "write a single SELECT")
    # Before the construct checks: a view left unmerged (a subquery) should be refused for its call.
    refuse_nondeterministic(tree, catalog, schema, model)
    for exists in tree.find_all(exp.Exists):  # the "any row?" idiom, before LIMIT below the top is refused
        if isinstance(exists.this, exp.Select):
            _drop_first_rows_limit(exists.this)
    _refuse_unsupported(tree, model)
    generators.refuse_several_columns(
        list(tree.selects), model, None if output_names is None else len(output_names)
    )
    names = list(output_names) if output_names is not None else [s.alias_or_name for s in tree.selects]
    if len(names) != len(tree.selects):
        raise InvalidQuery(model, f"expected {len(tree.selects)} output names, got {len(names)}")
    rename_reserved_columns(tree, tables)
    refuse_unknown_aggregates(tree, catalog, model)
    set_returning = generators.set_returning_calls(tree, catalog)
    plan = _Planner(tables, setting, aliases, case_insensitive, set_returning).query(tree, tuple(names))
    _refuse_queries_in_expressions(plan, model)
    if next(scans_in(plan), None) is None:
        raise UnsupportedQuery(model, "a query that reads no table", "use a view or table model")
    return plan


def _refuse_queries_in_expressions(node: object, model: str) -> None:
    """A query left inside an expression the plan keeps (`CASE WHEN EXISTS (…)`, `ARRAY(SELECT …)` in
    a select list) would be evaluated per row against its tables as they are, and no rule would
    follow those tables: the stream table would miss their changes. Every subquery the planner
    maintains has become a join by now (`Rows` hold the query that selects them, reading no table)."""
    if isinstance(node, Rows):
        return
    if isinstance(node, exp.Expr):
        found = node.find(exp.Query)
        if found is not None:
            holder = (
                found.parent if isinstance(found.parent, exp.Subquery | exp.Exists | exp.Array) else found
            )
            raise UnsupportedQuery(
                model,
                f"{_subquery_form(holder)} inside an expression",
                "join its table instead (LEFT JOIN … GROUP BY for a per-row lookup), or use refresh_mode='full'",
            )
    elif dataclasses.is_dataclass(node) and not isinstance(node, type | TableInfo):
        for field in dataclasses.fields(node):
            _refuse_queries_in_expressions(getattr(node, field.name), model)
    elif isinstance(node, tuple | list):
        for item in node:
            _refuse_queries_in_expressions(item, model)


def inline_ctes(tree: exp.Expr) -> exp.Expr:
    """Every reference to a CTE as a subquery of its body, so that `merge_subqueries` can merge the
    simple ones (dbt's import CTEs) into plain joins and the rest are planned as subqueries.

    >>> inline_ctes(sqlglot.parse_one("WITH a AS (SELECT x FROM t) SELECT a.x FROM a")).sql()
    'SELECT a.x FROM (SELECT x FROM t) AS a'
    """
    for _ in range(MAX_VIEW_DEPTH):
        withs = [w for w in tree.find_all(exp.With)]
        if not withs:
            return tree
        for with_ in withs:
            scope = with_.parent
            assert scope is not None
            bodies: dict[str, exp.Expr] = {}
            for cte in with_.expressions:  # a CTE may read the ones before it
                bodies[cte.alias_or_name] = _substituted(cte.this, bodies)
            scope.set("with_" if "with_" in scope.args else "with", None)
            _substituted(scope, bodies)
    return tree


def _substituted(node: exp.Expr, bodies: dict[str, exp.Expr]) -> exp.Expr:
    """`node` with references to the CTEs in `bodies` replaced by aliased copies of their bodies."""
    for table in list(node.find_all(exp.Table)):
        if table.db or table.name not in bodies:
            continue
        alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name, quoted=table.this.quoted))
        subquery = exp.Subquery(this=bodies[table.name].copy(), alias=alias)
        if table is node:
            return subquery
        table.replace(subquery)
    return node


def _parse(sql: str, model: str, target: Target) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read=target.read) if s is not None]
    except ParseError as error:
        raise InvalidQuery(model, f"syntax error: {error}") from error
    if len(statements) != 1:
        raise InvalidQuery(model, f"expected one SELECT statement, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise InvalidQuery(
            model, f"a stream table is defined by a SELECT, not `{type(tree).__name__.upper()}`"
        )
    assert isinstance(tree, exp.Expr)
    # A hint (Spark's /*+ BROADCAST(u) */) names relations that are not read, and a delta query has
    # another shape than the one it was written for: each engine plans the rendered queries itself.
    for hint in list(tree.find_all(exp.Hint)):
        hint.pop()
    # Unquoted names fold to the database's case now, so every name below is the catalog's own spelling.
    return flatten_join_parentheses(normalize_identifiers(tree, dialect=target.dialect))


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name for cte in tree.find_all(exp.CTE)}


def _resolve_tables(tree: exp.Expr, catalog: Catalog, model: str, target: Target) -> dict[str, TableInfo]:
    """Look every table up, expanding views in place; strip database names (one database per query)."""
    found: dict[str, TableInfo] = {}
    for _ in range(MAX_VIEW_DEPTH):
        expanded = False
        ctes = _cte_names(tree)
        for table in list(tree.find_all(exp.Table)):
            if not table.args.get("db") and table.name in ctes:
                continue
            if not isinstance(table.this, exp.Identifier):
                if isinstance(table.parent, exp.Join):
                    continue  # a generator beside the table it reads (plan/lateral.py)
                raise UnsupportedQuery(
                    model, f"table function `{table.sql(target.dialect)}`", "select from a table"
                )
            info = catalog.lookup(table.db or None, table.name)
            if info is None:
                raise InvalidQuery(model, f"relation {table.sql(target.dialect)} does not exist")
            if info.kind == "view" and info.view_sql:
                view = _parse(info.view_sql, model, target)
                alias = table.alias_or_name
                table.replace(
                    exp.Subquery(this=view, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
                )
                expanded = True
                continue
            if info.kind != "table":
                fix = SOURCE_FIXES.get(info.kind, "read from tables (or views over tables)")
                raise UnsupportedQuery(model, f"{info.kind} {info.qualified}", fix)
            table.set("catalog", None)
            table.set("db", exp.to_identifier(info.schema, quoted=True))
            found[info.qualified] = info
        if not expanded:
            return found
    raise UnsupportedQuery(model, "views nested more than 16 deep")


def _refuse_unsupported(tree: exp.Expr, model: str) -> None:
    """Constructs no rule maintains, wherever they stand in the query."""
    for node in tree.walk():
        if isinstance(node, exp.Qualify):
            raise UnsupportedQuery(
                model, f"`{excerpt(node)}`", "filter the window function's result in an outer SELECT"
            )
        if _whole_row(node):
            raise UnsupportedQuery(
                model,
                f"whole-row reference `{excerpt(node.parent or node)}`",
                "name the columns or fields it should hold (`v.a, v.b`), or build the value from named "
                "columns (jsonb_build_object('id', o.id, …) on PostgreSQL, named_struct on Spark)",
            )
        if isinstance(node, exp.Query):
            for clause, construct in (("limit", "LIMIT"), ("offset", "OFFSET")):
                if node.args.get(clause) and (
                    node is not tree or not isinstance(node, exp.Select | exp.SetOperation)
                ):
                    raise UnsupportedQuery(
                        model,
                        f"`{construct}` in `{excerpt(node)}`",
                        "keep LIMIT on the outermost SELECT",
                        position_of(node.args[clause]),
                    )


def _refuse_unmaintained_clauses(tree: exp.Expr, model: str) -> None:
    """Clauses of a table reference or a SELECT that no rule reads: planned without them, the stream
    table would silently hold another query's rows. Refused before qualify, which may drop them."""
    for node in tree.walk():
        if isinstance(node, exp.Version):
            construct, fix = "time travel", "a snapshot never changes: build it as a table model"
        elif isinstance(node, exp.TableSample):
            construct, fix = "TABLESAMPLE", "sample in a model downstream of the stream table"
        elif isinstance(node, exp.Pivot):
            construct = "UNPIVOT" if node.args.get("unpivot") else "PIVOT"
            fix = "aggregate with FILTER or CASE per value (SUM(v) FILTER (WHERE g = 'a'))"
            if construct == "UNPIVOT":
                fix = "UNION ALL one SELECT per column"
        elif isinstance(node, exp.With) and node.args.get("recursive"):
            # Its body reads itself: inlined, the self-reference would be an unknown table.
            names = ", ".join(cte.alias_or_name for cte in node.expressions)
            raise UnsupportedQuery(
                model, f"WITH RECURSIVE `{names}`", "use refresh_mode='full'", position_of(node)
            )
        else:
            continue
        raise UnsupportedQuery(
            model, f"{construct} `{excerpt(node.parent or node)}`", fix, position_of(node.parent or node)
        )


# Columns every table has beside its own, which qualify cannot find; their values change without a
# write to capture (the target's `system_columns`).
def _refuse_system_columns(tree: exp.Expr, model: str, target: Target) -> None:
    names, movers = target.system_columns, target.system_columns_moved_by
    for column in tree.find_all(exp.Column):
        if column.name.lower() in names:
            raise UnsupportedQuery(
                model,
                f"system column `{column.name}`",
                f"select the table's own columns ({movers} rows without a write to capture),"
                " or use refresh_mode='full'",
            )


def _whole_row(node: exp.Expr) -> bool:
    """`to_jsonb(o)`, `row_to_json(o.*)`, Spark's `struct(*)`: over a change set such a row would have
    the engine's columns, not the table's. (`COUNT(*)` and a select list's star are not rows.)"""
    if isinstance(node, exp.TableColumn):
        return True
    if isinstance(node, exp.Column):
        return isinstance(node.this, exp.Star)
    return isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count | exp.Select | exp.Column)


def _subquery_form(node: exp.Expr) -> str:
    """Name the form a subquery takes: NOT EXISTS, IN, NOT IN, scalar, or a derived table."""
    parent = node.parent
    if isinstance(node, exp.Exists):
        shown = parent if isinstance(parent, exp.Not) else node
        return f"`{'NOT ' if shown is parent else ''}EXISTS` subquery `{excerpt(shown)}`"
    owner = parent.parent if isinstance(parent, exp.Subquery) else parent
    if isinstance(node, exp.In):  # named by the predicate itself
        owner = node
    if isinstance(owner, exp.In):
        wrapper = owner.parent
        if isinstance(wrapper, exp.Not):
            return f"`NOT IN (subquery)` `{excerpt(wrapper)}`"
        return f"`IN (subquery)` `{excerpt(owner)}`"
    if isinstance(node, exp.Subquery) and isinstance(parent, exp.From | exp.Join):
        return f"derived table `{excerpt(node)}`"
    quantified = node.find_ancestor(exp.All, exp.Any)
    if quantified is not None and quantified.find_ancestor(exp.Select) is not node:
        word = "ALL" if isinstance(quantified, exp.All) else "ANY"
        return f"`{word} (subquery)` comparison `{excerpt(quantified.parent or quantified)}`"
    return f"scalar subquery `{excerpt(node)}`"


class _Planner:
    """Maps a qualified query onto operators, scope by scope (each SELECT, subquery and branch)."""

    def __init__(
        self,
        tables: dict[str, TableInfo],
        setting: passes.Setting,
        aliases: Iterator[int],
        case_insensitive: bool = False,
        set_returning: frozenset[FunctionCall] = frozenset(),
    ) -> None:
        self.tables, self.case_insensitive = tables, case_insensitive
        self.setting, self.model, self.target = setting, setting.model, setting.target
        self.set_returning = set_returning
        self.positions = itertools.count()
        self.aliases = aliases  # shared with `setting.aliases`: one numbering

    def refuse(
        self, construct: str, fix: str = "use refresh_mode='full'", at: exp.Expr | None = None
    ) -> NoReturn:
        """Refuse `construct`, pointing at where `at` stands in the model's SQL."""
        raise UnsupportedQuery(self.model, construct, fix, position_of(at))

    def query(self, node: exp.Expr, names: tuple[str, ...] | None = None) -> Plan:
        while isinstance(node, exp.Subquery) and not node.alias:
            node = node.this
        if isinstance(node, exp.SetOperation):
            return self.set_operation(node, names)
        if isinstance(node, exp.Values):
            return self.rows(node, names)
        if not isinstance(node, exp.Select):
            self.refuse(f"`{excerpt(node)}`", "write a SELECT", at=node)
        names = names or tuple(s.alias_or_name for s in node.selects)
        passes.rewrite_select(node, self.setting)
        rewritten = self.rewritten(node)
        if rewritten is not None:
            return self.query(rewritten, names)
        ordered = with_hidden_order(node)
        if ordered is not None:
            hidden = tuple(s.alias_or_name for s in ordered.selects[len(node.selects) :])
            return self.query(ordered, names + hidden)
        if any(w.find_ancestor(exp.Select) is node for s in node.selects for w in s.find_all(exp.Window)):
            return self.window(node, names)
        return self.select(node, names)

    def rewritten(self, node: exp.Select) -> exp.Query | None:
        """Grouping sets as a UNION ALL of aggregates, DISTINCT ON as a window (None: neither)."""
        try:
            sets = rewrites.grouping_sets(node)
        except ValueError as error:
            self.refuse(f"`{error}`", "name the groupings with GROUPING SETS", at=node.args.get("group"))
        if sets is not None:
            if node.args.get("limit") or node.args.get("offset"):
                return self.first_grouped_rows(node, sets)
            return rewrites.as_union_of_groupings(node, sets)
        distinct = node.args.get("distinct")
        if isinstance(distinct, exp.Distinct) and distinct.args.get("on"):
            if not node.args.get("order"):
                self.refuse(
                    "`DISTINCT ON` without `ORDER BY` (it keeps an arbitrary row per key)",
                    "add ORDER BY with the DISTINCT ON keys first, then what picks the row",
                    at=node,
                )
            if node.args.get("limit") or node.args.get("offset"):
                self.refuse(
                    "`DISTINCT ON` with `LIMIT`", "limit in a downstream model", at=node.args.get("limit")
                )
            return rewrites.distinct_on_as_window(node)
        return None

    def first_grouped_rows(self, node: exp.Select, sets: list[list[exp.Expr]]) -> exp.Select:
        """`ORDER BY … LIMIT n OFFSET m` of a ROLLUP / CUBE / GROUPING SETS aggregate: the first rows
        of its groupings' UNION ALL (a TopK over the grouped rows), ordered by output columns."""
        names = [s.alias_or_name for s in node.selects]
        grouped = node.copy()
        for clause in ("order", "limit", "offset"):
            grouped.set(clause, None)
        alias = next(self.setting.aliases)
        outer = exp.select(*(exp.column(n, table=alias, quoted=True) for n in names)).from_(
            exp.Subquery(
                this=rewrites.as_union_of_groupings(grouped, sets),
                alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
            )
        )
        order = node.args.get("order")
        if order is not None:
            outer.set("order", exp.Order(expressions=self.order_by_outputs(node, order, names)))
        outer.set("limit", node.args.get("limit"))
        outer.set("offset", node.args.get("offset"))
        return outer

    def window(self, node: exp.Select, names: tuple[str, ...]) -> Plan:
        """Window functions over the rest of the SELECT, planned as a subquery below them."""
        if node.args.get("distinct"):
            self.refuse(
                "`DISTINCT` with window functions",
                "select DISTINCT from a subquery that computes them",
                at=node,
            )
        for projection in node.selects:
            subquery = projection.find(exp.Subquery)
            if subquery is not None:
                self.refuse(_subquery_form(subquery) + " beside window functions", at=subquery)
        multiplying = generators.multiplying(node.selects, self.set_returning)
        if multiplying is not None:
            self.refuse(
                f"set-returning call `{excerpt(multiplying)}` beside window functions",
                generators.MULTIPLYING_FIX,
                at=multiplying,
            )
        inner, outputs, partition = rewrites.lifted_windows(node, is_aggregate(node))
        plan: Plan = Window(
            self.query(inner),
            partition,
            tuple(Output(name, expression) for name, expression in zip(names, outputs, strict=True)),
        )
        if node.args.get("limit") or node.args.get("offset"):
            return self.top_k(node, plan)
        return plan

    def set_operation(self, node: exp.SetOperation, names: tuple[str, ...] | None) -> Plan:
        # ORDER BY alone orders nothing a table keeps; the first rows of the query's own set operation
        # are a SELECT over it by now (ordered_set_operations).
        if node.args.get("limit") or node.args.get("offset"):
            self.refuse(
                f"LIMIT / OFFSET on `{excerpt(node)}`",
                "order by output columns only, each named once",
                at=node,
            )
        distinct = bool(node.args.get("distinct", True))
        # Every branch under the operation's names: a later branch's own may repeat (`SELECT
        # CAST(x AS …), x`), and its rows are read by name.
        names = names or tuple(s.alias_or_name for s in node.selects)
        if isinstance(node, exp.Union) and not distinct:
            branches = _union_all_branches(node)
            inputs = tuple(self.query(b, names) for b in branches)
            return UnionAll(inputs, names)
        left, right = self.query(node.this, names), self.query(node.expression, names)
        kind: SetKind = "union" if isinstance(node, exp.Union) else "intersect"
        if isinstance(node, exp.Except):
            kind = "except"
        return SetOp(kind, not distinct, left, right, names or left.names)

    def select(self, node: exp.Select, names: tuple[str, ...] | None) -> Plan:
        relation = self.block(node, set())
        selects = node.selects
        outputs = tuple(
            Output(name, s.unalias())
            for name, s in zip(names or tuple(s.alias_or_name for s in selects), selects, strict=True)
        )
        plan: Plan
        multiplying = generators.multiplying((o.expression for o in outputs), self.set_returning)
        if is_aggregate(node):
            if multiplying is not None:
                self.refuse(
                    f"set-returning call `{excerpt(multiplying)}` in an aggregate query",
                    generators.MULTIPLYING_FIX,
                    at=multiplying,
                )
            plan = aggregate_of(node, relation, outputs, self.model)
        else:
            for output in outputs:
                if output.expression.find(exp.Subquery):
                    self.refuse(
                        _subquery_form(next(output.expression.find_all(exp.Subquery))), at=output.expression
                    )
            plan = Project(relation, outputs, multiplying is not None)
        if node.args.get("limit") or node.args.get("offset"):
            if self.limit_keeps_every_row(node, plan):
                return plan
            return self.top_k(node, plan)
        return plan

    def limit_keeps_every_row(self, node: exp.Select, plan: Plan) -> bool:
        """An aggregate without GROUP BY is one row (none with a HAVING that fails): `LIMIT n`, n ≥ 1,
        without OFFSET, cannot cut it, with or without ORDER BY; it is maintained as the aggregate."""
        owned_calls = any(
            a.find_ancestor(exp.Select) is node for s in node.selects for a in s.find_all(exp.AggFunc)
        )
        one_row = not node.args.get("group") and (owned_calls or bool(node.args.get("having")))
        hidden_order = any(n.startswith(ORDER_ALIAS) for n in plan.names)
        if not one_row or hidden_order or node.args.get("offset"):
            return False
        return self.count(node.args.get("limit"), "LIMIT") >= 1

    def top_k(self, node: exp.Select, plan: Plan) -> TopK:
        """`ORDER BY … LIMIT n OFFSET m` over `plan`, the order mapped onto its output names."""
        limit, offset = node.args.get("limit"), node.args.get("offset")
        order = node.args.get("order")
        if limit is None and offset is not None:
            # Every row past the first m is stored: any change moves rows in or out.
            self.refuse(
                f"`{excerpt(offset)}` without `LIMIT`", "add a LIMIT, or use refresh_mode='full'", at=offset
            )
        if order is None:
            self.refuse(
                "`LIMIT` without `ORDER BY`",
                "order by columns that make the first rows unique",
                at=node.args.get("limit"),
            )
        terms = self.order_by_outputs(node, order, list(plan.names))
        hidden = tuple(n for n in plan.names if n.startswith(ORDER_ALIAS))
        return TopK(plan, tuple(terms), self.count(limit, "LIMIT"), self.count(offset, "OFFSET"), hidden)

    def order_by_outputs(self, node: exp.Select, order: exp.Order, names: list[str]) -> list[exp.Ordered]:
        """`node`'s ORDER BY terms, each key the output column (named by `names`, position for
        position with `node`'s select list) it is, by alias or expression; refused otherwise."""
        aliases = [s.alias_or_name for s in node.selects]
        terms: list[exp.Ordered] = []
        for ordered in order.expressions:
            key = ordered.this
            by_alias = isinstance(key, exp.Column) and not key.table and key.name in aliases
            position = (
                aliases.index(key.name)
                if by_alias
                else next((i for i, s in enumerate(node.selects) if s.unalias() == key), None)
            )
            if position is None:
                self.refuse(
                    f"`ORDER BY {excerpt(key)}` with `LIMIT` (not an output column)",
                    "select the column you order by",
                    at=key,
                )
            term = ordered.copy()
            term.set("this", exp.column(names[position], quoted=True))
            terms.append(term)
        return terms

    def count(self, clause: exp.Expr | None, construct: str) -> int:
        if clause is None:
            return 0
        try:
            return row_count(clause)
        except NoRowCount as missing:
            subject = f"`{excerpt(clause)}`" if missing.ties else f"`{construct}` `{excerpt(clause)}`"
            self.refuse(subject, missing.fix, at=clause)

    def block(self, node: exp.Select, outer: set[str]) -> Relation:
        """FROM, joins and WHERE of one SELECT; EXISTS / IN conjuncts become semi- and anti-joins,
        other subqueries are decorrelated into joins (sqlglot's unnest_subqueries)."""
        where = node.args.get("where")
        existence: list[tuple[JoinKind, exp.Expr]] = []
        if where is not None:
            kept = []
            for conjunct in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
                found = _existence_form(conjunct)
                if found is None:
                    kept.append(conjunct)
                else:
                    existence.append((found, conjunct))
            node.set("where", exp.Where(this=_and(kept)) if kept else None)
        # sqlglot's unnest_subqueries decorrelates the subqueries left in expressions (an EXISTS has no
        # Subquery node: only this SELECT's own are looked for, a derived table plans its own).
        if any(
            (isinstance(n, exp.Subquery) and not isinstance(n.parent, exp.From | exp.Join))
            or (isinstance(n, exp.Exists) and n.find_ancestor(exp.Select) is node)
            for n in node.walk()
        ):
            for value in node.find_all(exp.In):
                if value.args.get("query") is not None and not in_truth_position(value):
                    if self.target.rewrites_in_values:
                        self.refuse(
                            f"`IN (subquery)` as a value `{excerpt(value.parent or value)}` ({SPARK_IN_VALUES})",
                            "use EXISTS (… WHERE s.x = t.x), which is true or false, or use refresh_mode='full'",
                            at=value,
                        )
                    self.refuse(
                        f"`IN (subquery)` as a value `{excerpt(value.parent or value)}` (comparing more than "
                        "a column on each side, or correlated with a subquery that groups)",
                        "compare columns (compute the expression in a subquery), or use refresh_mode='full'",
                        at=value,
                    )
            for exists in node.find_all(exp.Exists):
                if isinstance(exists.this, exp.Select) and equalities(exists.this) is None:
                    # sqlglot would collect the inner values into arrays and compare per row.
                    self.refuse(
                        _subquery_form(exists)
                        + " (correlated by more than equalities, inside an expression)",
                        at=exists,
                    )
            unnest_subqueries(node)
        from_ = node.args.get("from_") or node.args.get("from")
        if from_ is None:
            self.refuse("SELECT without FROM", "select from a table", at=node)
        relation: Relation = self.item(from_.this)
        for join in node.args.get("joins") or []:
            relation = self.join(relation, join)
        where = node.args.get("where")
        if where is not None and not (isinstance(where.this, exp.Boolean) and where.this.this):
            if where.this.find(exp.Subquery, exp.Exists):
                self.refuse(_subquery_form(where.this.find(exp.Subquery, exp.Exists)), at=where.this)
            relation = _folded_into_window(Filter(relation, where.this))
        own = outer | {i.alias for i in all_items(relation)}
        for kind, conjunct in existence:
            relation = self.existence(relation, kind, conjunct, own)
        return relation

    def item(self, node: exp.Expr) -> Item:
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier):
                self.refuse(f"table function `{excerpt(node)}`", "select from a table", at=node)
            if node.args.get("only"):
                # A scan reads the table with its inheritance children, as the delta rules do.
                self.refuse(f"`FROM ONLY {node.name}`", "drop ONLY, or use refresh_mode='full'", at=node)
            info = self.tables[qualified_name(node.db, node.name)]
            return Scan(next(self.positions), node.alias_or_name, info)
        if isinstance(node, exp.Subquery) and node.alias:
            return Derived(next(self.positions), node.alias, self.query(node.this))
        if isinstance(node, exp.Values) and node.alias:
            return Derived(next(self.positions), node.alias, self.rows(node, None))
        if isinstance(node, exp.Subquery | exp.Table):
            self.refuse(
                f"parenthesized join `{excerpt(node)}` beside an outer join",
                "write the joins in sequence",
                at=node,
            )
        self.refuse(f"FROM item `{excerpt(node)}`", "select from tables or subqueries", at=node)

    def rows(self, node: exp.Values, names: tuple[str, ...] | None) -> Rows:
        """`VALUES` as rows that never change, under `names` (else the alias's column names)."""
        reads = node.find(exp.Column, exp.Subquery, exp.Select, exp.Table)
        if reads is not None:
            self.refuse(
                f"`VALUES` reading `{excerpt(reads)}` (its rows would change with it)",
                "write a SELECT per row and UNION ALL them, or use refresh_mode='full'",
                at=reads,
            )
        alias = node.args.get("alias")
        declared = tuple(c.name for c in alias.columns) if alias is not None else ()
        first = node.expressions[0]
        width = len(first.expressions) if isinstance(first, exp.Tuple) else 1
        names = names or declared or tuple(f"column{i}" for i in range(1, width + 1))
        values = node.copy()
        values.set(
            "alias",
            exp.TableAlias(
                this=exp.to_identifier(ROWS_ALIAS, quoted=True),
                columns=[exp.to_identifier(n, quoted=True) for n in names],
            ),
        )
        query = exp.select(*[exp.column(n, ROWS_ALIAS, quoted=True) for n in names]).from_(values)
        return Rows(query, names)

    def join(self, left: Relation, join: exp.Join) -> Relation:
        side, kind = (join.side or "").upper(), (join.kind or "").upper()
        if join.args.get("using"):
            self.refuse("`JOIN ... USING`", "write JOIN ... ON", at=join)
        right = self.item(join.this)
        condition = join.args.get("on")
        if kind in ("SEMI", "ANTI"):
            return Join("semi" if kind == "SEMI" else "anti", left, right, condition)
        if side in ("LEFT", "RIGHT", "FULL"):
            return Join(side.lower(), left, right, condition)  # type: ignore[arg-type]
        if kind not in ("", "INNER", "CROSS", "OUTER"):
            self.refuse(f"`{kind} JOIN`", "use an inner or outer join", at=join)
        return Join("inner", left, right, condition)

    def existence(self, left: Relation, kind: JoinKind, conjunct: exp.Expr, outer: set[str]) -> Relation:
        """`left` semi- or anti-joined with an EXISTS / IN subquery's rows."""
        inner = conjunct.this if isinstance(conjunct, exp.Not) else conjunct
        if isinstance(inner, exp.Paren):
            inner = inner.this
        subquery = inner.this if isinstance(inner, exp.Exists) else inner.args["query"].this
        while isinstance(subquery, exp.Subquery):
            subquery = subquery.this
        if isinstance(subquery, exp.SetOperation):
            # `x IN (SELECT a FROM t UNION SELECT b FROM u)`: a derived set operation, when it reads
            # nothing of the outer query (each branch would need the outer row otherwise).
            if correlated(subquery):
                self.refuse(_subquery_form(conjunct) + " (correlated, over a set operation)", at=conjunct)
        elif not isinstance(subquery, exp.Select):
            self.refuse(_subquery_form(conjunct), "join instead, or use refresh_mode='full'", at=conjunct)
        else:
            self.separate_aliases(subquery, outer)
        condition: exp.Expr | None = None
        if isinstance(subquery, exp.Select) and is_plain(subquery):
            right: Relation = self.block(subquery, outer)
            value = subquery.selects[0] if isinstance(inner, exp.In) else None
        else:
            if correlated(subquery):
                self.refuse(_subquery_form(conjunct) + " (correlated, with aggregates)", at=conjunct)
            alias = f"__ivm_s{next(self.aliases)}"
            derived = Derived(next(self.positions), alias, self.query(subquery))
            right = derived
            value = (
                exp.column(derived.plan.names[0], alias, quoted=True) if isinstance(inner, exp.In) else None
            )
        if isinstance(inner, exp.In):
            assert value is not None
            if len(subquery.selects) != 1 or isinstance(inner.this, exp.Tuple):
                self.refuse(_subquery_form(conjunct) + " over several columns", "use EXISTS", at=conjunct)
            probe, found = inner.this.copy(), value.unalias().copy()
            condition = exp.EQ(this=probe, expression=found)
            if kind == "anti":
                # x NOT IN (…) holds when no value equals x or might (NULL on either side).
                condition = exp.or_(condition, exp.Is(this=probe.copy(), expression=exp.Null()))
                condition = exp.or_(condition, exp.Is(this=found.copy(), expression=exp.Null()))
        return Join(kind, left, right, condition)

    def separate_aliases(self, subquery: exp.Select, outer: set[str]) -> None:
        """Rename a subquery's own aliases that an enclosing scope also declares: the conditions
        added for IN must reach the outer one, and shadowing would hide it.

        qualify names an outer column by its alias even where an inner alias shadows it
        (``FROM partsupp p WHERE p.ps_partkey = p_partkey``, p_partkey the outer part's): only
        references to a column the inner source has, and made in no nested scope declaring the
        alias again, are the inner source's."""
        for source in list(subquery.find_all(exp.Table, exp.Subquery)):
            alias = source.alias_or_name if isinstance(source, exp.Table) else source.alias
            if not alias or alias not in outer or source.find_ancestor(exp.Select) is not subquery:
                continue
            fresh = f"{alias}__ivm_{next(self.aliases)}"
            columns = self.source_columns(source)
            source.set("alias", exp.TableAlias(this=exp.to_identifier(fresh, quoted=True)))
            for column in subquery.find_all(exp.Column):
                name = column.name.lower() if self.case_insensitive else column.name
                if column.table == alias and name in columns and _declared_in(column, alias, subquery):
                    column.set("table", exp.to_identifier(fresh, quoted=True))

    def source_columns(self, source: exp.Expr) -> set[str]:
        """The column names a FROM item provides, as qualified references spell them."""
        if isinstance(source, exp.Subquery):
            names = [s.alias_or_name for s in source.this.selects]
        else:
            assert isinstance(source, exp.Table)
            names = internal_columns(self.tables[qualified_name(source.db, source.name)])
        return {n.lower() for n in names} if self.case_insensitive else set(names)


def _folded_into_window(relation: Filter) -> Relation:
    """A WHERE over nothing but a subquery of window functions, folded into the window as its `keep`
    (each conjunct over the subquery's own columns; a correlated one stays a filter).

    >>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
    >>> events = TableInfo("public", "events", (Column("id", "int"), Column("k", "int")), ("id",))
    >>> from dbt_ivm.target import POSTGRES
    >>> plan = build_plan(POSTGRES, "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id) AS rn "
    ...                   "FROM events) r WHERE rn = 1", StaticCatalog([events]), "first_events")
    >>> type(plan.input).__name__, plan.input.plan.keep.sql()
    ('Derived', '"rn" = 1')
    """
    item = relation.input
    if not isinstance(item, Derived) or not isinstance(item.plan, Window) or item.plan.keep is not None:
        return relation
    predicate = relation.predicate
    conjuncts = list(predicate.flatten()) if isinstance(predicate, exp.And) else [predicate]
    names = set(item.plan.names)

    def own(conjunct: exp.Expr) -> bool:
        return all(c.table == item.alias and c.name in names for c in conjunct.find_all(exp.Column))

    folded = [c for c in conjuncts if own(c)]
    if not folded:
        return relation
    keep = _and(folded).transform(
        lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n
    )
    window = Derived(item.position, item.alias, dataclasses.replace(item.plan, keep=keep))
    rest = [c for c in conjuncts if not own(c)]
    return Filter(window, _and(rest)) if rest else window


def _declared_in(column: exp.Column, alias: str, scope: exp.Select) -> bool:
    """Does `column` resolve `alias` in `scope`, rather than in a SELECT between them declaring it?"""
    select = column.find_ancestor(exp.Select)
    while select is not None and select is not scope:
        if any(
            s.alias_or_name == alias
            for s in select.find_all(exp.Table, exp.Subquery)
            if s.find_ancestor(exp.Select) is select
        ):
            return False
        select = select.find_ancestor(exp.Select)
    return True


def _union_all_branches(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Subquery) and not node.alias:
        node = node.this
    if isinstance(node, exp.Union) and not node.args.get("distinct", True) and not node.args.get("order"):
        return _union_all_branches(node.this) + _union_all_branches(node.expression)
    return [node]


def _existence_form(conjunct: exp.Expr) -> JoinKind | None:
    """semi for EXISTS / IN (subquery), anti for their negations, None for anything else."""
    negated = isinstance(conjunct, exp.Not)
    inner = conjunct.this if negated else conjunct
    if isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Exists) or (isinstance(inner, exp.In) and inner.args.get("query") is not None):
        return "anti" if negated else "semi"
    return None


def _drop_first_rows_limit(select: exp.Select) -> None:
    """Inside EXISTS, `LIMIT n` (n >= 1, no OFFSET) and the ORDER BY it came with change nothing: a
    subquery has a row when its first row exists.

    >>> select = sqlglot.parse_one("SELECT 1 FROM t WHERE t.a = 1 ORDER BY t.b LIMIT 1")
    >>> _drop_first_rows_limit(select)
    >>> select.sql()
    'SELECT 1 FROM t WHERE t.a = 1'
    """
    clause = select.args.get("limit")
    if clause is None or select.args.get("offset") is not None:
        return
    try:
        kept = row_count(clause, ties_kept=True)
    except NoRowCount:
        return
    if kept >= 1:
        select.set("limit", None)
        select.set("order", None)


def _and(conditions: list[exp.Expr]) -> exp.Expr:
    result = conditions[0]
    for condition in conditions[1:]:
        result = exp.and_(result, condition, copy=False)
    return result
