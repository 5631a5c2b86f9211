"""From model SQL to a logical plan: parse, resolve names with sqlglot's optimizer, then map clauses
onto operators. Anything the delta rules cannot maintain is refused here, by construct name.

Values that can change between refreshes are refused by `volatility.py`.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("customer", "text"),
...                    Column("amount", "numeric")), ("id",))
>>> plan = build_plan("SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
...                   StaticCatalog([orders]), "customer_totals")
>>> [o.name for o in plan.outputs], [c.func for c in plan.calls]
(['customer', 'total'], ['sum'])
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, NormalizationStrategy
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dbt_ivm.catalog import Catalog, TableInfo, qualified_name
from dbt_ivm.errors import InvalidQuery, UnsupportedQuery
from dbt_ivm.plan.internal_names import rename_reserved_columns
from dbt_ivm.plan.nodes import (
    AggCall,
    AggFunc,
    Aggregate,
    Filter,
    Join,
    Output,
    Plan,
    Project,
    Relation,
    Scan,
)
from dbt_ivm.plan.volatility import refuse_nondeterministic, refuse_value_keywords

SUPPORTED_AGGREGATES: dict[type[exp.Expr], AggFunc] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
}
MAX_VIEW_DEPTH = 16


def build_plan(
    sql: str,
    catalog: Catalog,
    model: str,
    output_names: Sequence[str] | None = None,
    dialect: str = "postgres",
) -> Plan:
    """Plan the defining query `sql` of `model`. `output_names` (from the database) override aliases."""
    tree = _parse(sql, model, dialect)
    tables = _resolve_tables(tree, catalog, model, dialect)
    # sqlglot wants {schema: {table: {column: type}}}
    by_schema: dict[str, dict[str, dict[str, str]]] = {}
    for t in tables.values():
        by_schema.setdefault(t.schema, {})[t.name] = {c.name: c.type for c in t.columns}
    # Catalog names are exact spellings (e.g. "Sales"."Order Items"): only a case-insensitive dialect
    # (Spark) may fold them.
    case_insensitive = (
        Dialect.get_or_raise(dialect).normalization_strategy is NormalizationStrategy.CASE_INSENSITIVE
    )
    schema = MappingSchema(dict[str, object](by_schema), dialect=dialect, normalize=case_insensitive)
    if dialect == "postgres":
        refuse_value_keywords(tree, model)  # qualify would take them for unknown columns
    try:
        tree = qualify(
            tree, schema=schema, dialect=dialect, quote_identifiers=True, validate_qualify_columns=True
        )
        tree = merge_subqueries(tree)
    except OptimizeError as error:
        raise InvalidQuery(model, str(error)) from error
    if not isinstance(tree, exp.Select):
        raise UnsupportedQuery(model, f"top-level `{type(tree).__name__.upper()}`", "write a single SELECT")
    # Before the construct checks: a view left unmerged (a subquery) should be refused for its call.
    refuse_nondeterministic(tree, catalog, schema, model)
    _refuse_unsupported(tree, model)
    names = list(output_names) if output_names is not None else [s.alias_or_name for s in tree.selects]
    if len(names) != len(tree.selects):
        raise InvalidQuery(model, f"expected {len(tree.selects)} output names, got {len(names)}")
    rename_reserved_columns(tree, tables)
    relation = _relation(tree, tables, model)
    outputs = tuple(Output(name, _unalias(s)) for name, s in zip(names, tree.selects, strict=True))
    if _is_aggregate(tree):
        return _aggregate(tree, relation, outputs, model)
    return Project(relation, outputs)


def _parse(sql: str, model: str, dialect: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except ParseError as error:
        raise InvalidQuery(model, f"syntax error: {error}") from error
    if len(statements) != 1:
        raise InvalidQuery(model, f"expected one SELECT statement, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise InvalidQuery(
            model, f"a stream table is defined by a SELECT, not `{type(tree).__name__.upper()}`"
        )
    if isinstance(tree, exp.SetOperation):
        kind = type(tree).__name__.upper()
        if not tree.args.get("distinct", True):
            kind += " ALL"
        raise UnsupportedQuery(model, f"`{kind}`", "split each branch into its own stream table")
    assert isinstance(tree, exp.Expr)
    # Unquoted names fold to the database's case now, so every name below is the catalog's own spelling.
    return flatten_join_parentheses(normalize_identifiers(tree, dialect=dialect))


def flatten_join_parentheses(tree: exp.Expr) -> exp.Expr:
    """`FROM (a JOIN b ON …)` as `FROM a JOIN b ON …`, in place. PostgreSQL writes a view's joins in
    parentheses (pg_get_viewdef). The planner keeps every join condition as a conjunct over all
    scans, which is what an inner join means wherever its parentheses stand; an outer join is
    refused by name afterwards, and its query then runs as written.

    >>> flatten_join_parentheses(sqlglot.parse_one("SELECT 1 FROM (a JOIN b ON a.x = b.x) JOIN c ON b.y = c.y")).sql()
    'SELECT 1 FROM a JOIN b ON a.x = b.x JOIN c ON b.y = c.y'
    """
    for select in list(tree.find_all(exp.Select)):
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            continue
        joins: list[exp.Expr] = []
        from_.set("this", _unparenthesized(from_.this, joins))
        for join in select.args.get("joins") or []:
            lifted: list[exp.Expr] = []
            join.set("this", _unparenthesized(join.this, lifted))
            joins.extend([join, *lifted])
        if joins:
            select.set("joins", joins)
    return tree


def _unparenthesized(item: exp.Expr, lifted: list[exp.Expr]) -> exp.Expr:
    """The first table of a parenthesized join (appending its joins, in order, to `lifted`), else
    `item`. sqlglot hangs a parenthesized join's joins on its first table or on the parentheses."""
    if isinstance(item, exp.Subquery) and not item.alias and isinstance(item.this, exp.Table | exp.Subquery):
        first = _unparenthesized(item.this, lifted)
        own = item.args.get("joins") or []
    elif isinstance(item, exp.Table) and item.args.get("joins"):
        first, own = item, item.args["joins"]
    else:
        return item
    item.set("joins", None)
    for join in list(own):
        inner: list[exp.Expr] = []
        join.set("this", _unparenthesized(join.this, inner))
        lifted.extend([join, *inner])  # each join before the joins it brought along
    return first


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name for cte in tree.find_all(exp.CTE)}


def _resolve_tables(tree: exp.Expr, catalog: Catalog, model: str, dialect: str) -> dict[str, TableInfo]:
    """Look every table up, expanding views in place; strip database names (one database per query)."""
    found: dict[str, TableInfo] = {}
    for _ in range(MAX_VIEW_DEPTH):
        expanded = False
        ctes = _cte_names(tree)
        for table in list(tree.find_all(exp.Table)):
            if not table.args.get("db") and table.name in ctes:
                continue
            if not isinstance(table.this, exp.Identifier):
                raise UnsupportedQuery(model, f"table function `{table.sql(dialect)}`", "select from a table")
            info = catalog.lookup(table.db or None, table.name)
            if info is None:
                raise InvalidQuery(model, f"relation {table.sql(dialect)} does not exist")
            if info.kind == "view" and info.view_sql:
                view = _parse(info.view_sql, model, dialect)
                alias = table.alias_or_name
                table.replace(
                    exp.Subquery(this=view, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
                )
                expanded = True
                continue
            if info.kind != "table":
                raise UnsupportedQuery(
                    model, f"{info.kind} {info.qualified}", "read from tables (or views over tables)"
                )
            table.set("catalog", None)
            table.set("db", exp.to_identifier(info.schema, quoted=True))
            found[info.qualified] = info
        if not expanded:
            return found
    raise UnsupportedQuery(model, "views nested more than 16 deep")


def _unalias(select: exp.Expr) -> exp.Expr:
    return select.this if isinstance(select, exp.Alias) else select


def _refuse_unsupported(tree: exp.Select, model: str) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Window):
            raise UnsupportedQuery(model, f"window function `{excerpt(node)}`", "use refresh_mode='full'")
        if isinstance(node, exp.Subquery | exp.Exists) or (isinstance(node, exp.Select) and node is not tree):
            raise UnsupportedQuery(model, _subquery_form(node), "join instead, or use refresh_mode='full'")
    for clause, construct in (("having", "HAVING"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        if tree.args.get(clause):
            raise UnsupportedQuery(model, f"`{construct}`", "filter in a downstream model")
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise UnsupportedQuery(model, "`DISTINCT ON`", "use GROUP BY")
    group = tree.args.get("group")
    groupings = (exp.GroupingSets, exp.Cube, exp.Rollup)
    if group is not None and (
        any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup"))
        or any(isinstance(e, groupings) for e in group.expressions)
    ):
        shown = next((e for e in group.expressions if isinstance(e, groupings)), None)
        construct = f"`{excerpt(shown)}`" if shown is not None else "`GROUPING SETS / CUBE / ROLLUP`"
        raise UnsupportedQuery(model, construct, "one stream table per grouping, or refresh_mode='full'")
    for join in tree.args.get("joins") or []:
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if side or kind not in ("", "INNER", "CROSS"):
            name = " ".join(p for p in (side, kind) if p) + " JOIN"
            raise UnsupportedQuery(model, f"`{name}`", "use an inner join, or refresh_mode='full'")
        if join.args.get("using"):
            raise UnsupportedQuery(model, "`JOIN ... USING`", "write JOIN ... ON")


def excerpt(node: exp.Expr, limit: int = 80) -> str:
    """A construct's SQL for a message, cut at a word boundary (never inside an identifier).

    >>> excerpt(sqlglot.parse_one("SELECT customer_identifier FROM orders WHERE amount > 10"), 40)
    'SELECT customer_identifier FROM orders …'
    """
    text = " ".join(node.sql("postgres").split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit] + " …"


def _subquery_form(node: exp.Expr) -> str:
    """Name the form a subquery takes: NOT EXISTS, IN, NOT IN, scalar, or a derived table."""
    parent = node.parent
    if isinstance(node, exp.Exists):
        shown = parent if isinstance(parent, exp.Not) else node
        return f"`{'NOT ' if shown is parent else ''}EXISTS` subquery `{excerpt(shown)}`"
    owner = parent.parent if isinstance(parent, exp.Subquery) else parent
    if isinstance(owner, exp.In):
        wrapper = owner.parent
        if isinstance(wrapper, exp.Not):
            return f"`NOT IN (subquery)` `{excerpt(wrapper)}`"
        return f"`IN (subquery)` `{excerpt(owner)}`"
    if isinstance(node, exp.Subquery) and isinstance(parent, exp.From | exp.Join):
        return f"derived table `{excerpt(node)}`"
    return f"scalar subquery `{excerpt(node)}`"


def _scan_of(node: exp.Expr, tables: dict[str, TableInfo], position: int, model: str) -> Scan:
    if not isinstance(node, exp.Table):
        raise UnsupportedQuery(model, f"FROM item `{node.sql('postgres')[:60]}`", "select from tables")
    if node.args.get("only"):
        # A scan reads the table with its inheritance children, as the delta rules do.
        raise UnsupportedQuery(model, f"`FROM ONLY {node.name}`", "drop ONLY, or use refresh_mode='full'")
    info = tables[qualified_name(node.db, node.name)]
    return Scan(position=position, alias=node.alias_or_name, table=info)


def _relation(tree: exp.Select, tables: dict[str, TableInfo], model: str) -> Relation:
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None:
        raise UnsupportedQuery(model, "SELECT without FROM", "select from a table")
    scans = [_scan_of(from_.this, tables, 0, model)]
    conditions: list[exp.Expr] = []
    for join in tree.args.get("joins") or []:
        scans.append(_scan_of(join.this, tables, len(scans), model))
        if join.args.get("on"):
            conditions.append(join.args["on"])
    where = tree.args.get("where")
    if where is not None:
        conditions.append(where.this)
    join_node = Join(tuple(scans))
    if not conditions:
        return join_node
    predicate = conditions[0]
    for extra in conditions[1:]:
        predicate = exp.and_(predicate, extra)
    return Filter(join_node, predicate)


def _is_aggregate(tree: exp.Select) -> bool:
    if tree.args.get("group") or tree.args.get("distinct"):
        return True
    return any(s.find(exp.AggFunc) for s in tree.selects)


def _aggregate(tree: exp.Select, relation: Relation, outputs: tuple[Output, ...], model: str) -> Aggregate:
    if tree.args.get("distinct"):
        keys: list[exp.Expr] = [o.expression for o in outputs]
        if any(k.find(exp.AggFunc) for k in keys):
            raise UnsupportedQuery(model, "`DISTINCT` over aggregates", "drop DISTINCT")
    else:
        group = tree.args.get("group")
        keys = list(group.expressions) if group is not None else []
    calls: list[AggCall] = []
    templated = [_template(o.expression, keys, calls, model) for o in outputs]
    # Columns functionally dependent on a grouped primary key are legal in PostgreSQL; grouping by them
    # too changes no group and lets us keep them as state.
    for expression in templated:
        for column in expression.find_all(exp.Column):
            if column.table and not column.name.startswith("__ivm_"):
                keys.append(column.copy())
    if len(keys) > len(tree.args["group"].expressions if tree.args.get("group") else []):
        calls = []
        templated = [_template(o.expression, keys, calls, model) for o in outputs]
    return Aggregate(
        input=relation,
        group_by=tuple(keys),
        calls=tuple(calls),
        outputs=tuple(Output(o.name, t) for o, t in zip(outputs, templated, strict=True)),
        original_outputs=outputs,
    )


def group_placeholder(index: int) -> str:
    return f"__ivm_g{index}"


def agg_placeholder(index: int) -> str:
    return f"__ivm_agg{index}"


def _template(expression: exp.Expr, keys: list[exp.Expr], calls: list[AggCall], model: str) -> exp.Expr:
    """Replace aggregate calls and group keys in an output expression by placeholder columns."""
    if isinstance(expression, exp.AggFunc):
        call = _agg_call(expression, calls, model)
        return exp.column(agg_placeholder(call.index), quoted=True)
    for index, key in enumerate(keys):
        if expression == key:
            return exp.column(group_placeholder(index), quoted=True)
    copy = expression.copy()
    for name, value in list(copy.args.items()):
        if isinstance(value, exp.Expr):
            copy.set(name, _template(value, keys, calls, model))
        elif isinstance(value, list):
            copy.set(
                name,
                [_template(v, keys, calls, model) if isinstance(v, exp.Expr) else v for v in value],
            )
    return copy


def _agg_call(node: exp.AggFunc, calls: list[AggCall], model: str) -> AggCall:
    func = SUPPORTED_AGGREGATES.get(type(node))
    text = node.sql("postgres")
    if func is None:
        raise UnsupportedQuery(model, f"aggregate `{text}`", "use COUNT, SUM or AVG, or refresh_mode='full'")
    argument: exp.Expr | None = node.this
    if isinstance(argument, exp.Distinct):
        raise UnsupportedQuery(model, f"aggregate `{text}` (DISTINCT)", "use refresh_mode='full'")
    if node.find_ancestor(exp.Filter) is not None or isinstance(node.parent, exp.Filter):
        raise UnsupportedQuery(model, f"aggregate `{text}` with FILTER", "use CASE WHEN inside the aggregate")
    if func == "count" and (argument is None or isinstance(argument, exp.Star)):
        func, argument = "count_star", None
    if argument is not None and argument.find(exp.AggFunc):
        raise UnsupportedQuery(model, f"nested aggregate `{text}`")
    for existing in calls:
        if existing.func == func and existing.argument == argument:
            return existing
    call = AggCall(index=len(calls), func=func, argument=argument, original=node.copy())
    calls.append(call)
    return call
