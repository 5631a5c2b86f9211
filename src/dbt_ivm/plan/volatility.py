"""Planner pass: refuse values that can change between the refresh that stored a row and a
recomputation — the stream table would drift from its query.

Judged by the database's catalog where it can tell: a call it marks VOLATILE, or STABLE without
arguments (now(), txid_current(): they read only the transaction or session). Also SQL value
functions (CURRENT_TIMESTAMP, LOCALTIME, CURRENT_USER, ...) and 'now', 'today', 'tomorrow',
'yesterday' read as a date or time. A catalog that cannot tell (Spark's) leaves the judgement to a
list of names.

>>> from dbt_ivm.catalog import Column, StaticCatalog, TableInfo
>>> from dbt_ivm.plan import build_plan
>>> orders = TableInfo("public", "orders", (Column("id", "int"), Column("amount", "numeric")), ("id",))
>>> from dbt_ivm.target import POSTGRES
>>> build_plan(POSTGRES, "SELECT id, 'today'::date AS seen FROM orders", StaticCatalog([orders]), "stamped")
Traceback (most recent call last):
...
dbt_ivm.errors.UnsupportedQuery: current date/time literal `CAST('today' AS DATE)` in model stamped ...
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.schema import MappingSchema

from dbt_ivm.catalog import Catalog, FunctionCall
from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.plan.messages import shown
from dbt_ivm.plan.source_positions import position_of

# SQL value functions: keywords, not catalog functions, that read the transaction's clock or the
# session. A stream table maintained by deltas keeps the value of the refresh that wrote each row.
SQL_VALUE_FUNCTIONS = (
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.Localtime,
    exp.Localtimestamp,
    exp.CurrentUser,
    exp.SessionUser,
    exp.CurrentRole,
    exp.CurrentCatalog,
    exp.CurrentSchema,
)
# The same keywords in PostgreSQL, for those sqlglot reads as a bare column (USER, CURRENT_ROLE, ...).
# All are reserved words there, so an unquoted one is never a column.
SQL_VALUE_KEYWORDS = {
    "current_catalog",
    "current_date",
    "current_role",
    "current_time",
    "current_timestamp",
    "current_user",
    "localtime",
    "localtimestamp",
    "session_user",
    "system_user",
    "user",
}
# Strings a date/time input function reads as the current date or time ('epoch', 'infinity' are constants).
CLOCK_STRINGS = {"now", "today", "tomorrow", "yesterday"}
# Stable functions whose one-argument form measures against the current transaction: age(ts) is
# current_date - ts, age(xid) counts from the current transaction id.
CLOCK_WITH_ARGUMENT = {("age", 1), ("mxid_age", 1)}
# Non-deterministic functions by name: the judgement when the catalog cannot tell (Spark,
# StaticCatalog, or a name the catalog does not know).
VOLATILE_FUNCTIONS = {
    "now",
    "random",
    "rand",
    "randn",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "gen_random_uuid",
    "uuid",
    "current_timestamp",
    "current_date",
    "current_time",
    "current_timezone",
    "current_user",
    "localtimestamp",
    "localtime",
    "nextval",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
}
VOLATILE_NODES = (*SQL_VALUE_FUNCTIONS, exp.Rand)
NONDETERMINISTIC_FIX = "compute it outside the model, or use refresh_mode='full'"
CALL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
TEMPORAL_TYPES = tuple(exp.DataType.TEMPORAL_TYPES)


def refuse_value_keywords(tree: exp.Expr, model: str) -> None:
    """USER, CURRENT_ROLE, ... written bare: sqlglot reads some of them as columns."""
    for column in tree.find_all(exp.Column):
        identifier = column.this
        if (
            not column.table
            and isinstance(identifier, exp.Identifier)
            and not identifier.quoted
            and identifier.name in SQL_VALUE_KEYWORDS
        ):
            raise UnsupportedQuery(
                model,
                f"non-deterministic SQL value function `{identifier.name.upper()}`",
                NONDETERMINISTIC_FIX,
                position_of(column),
            )


def refuse_nondeterministic(tree: exp.Expr, catalog: Catalog, schema: MappingSchema, model: str) -> None:
    """Refuse any value that can differ between the refresh that stored a row and a recomputation:
    volatile calls, stable calls that read only the transaction or session, the clock keywords, and
    date/time literals such as 'now'. Views are expanded already, so their calls are judged too."""
    volatilities = catalog.function_volatilities(function_calls(tree))  # one look-up for the query
    for node in tree.walk():
        if isinstance(node, SQL_VALUE_FUNCTIONS):
            raise UnsupportedQuery(
                model,
                f"non-deterministic SQL value function `{shown(node)}`",
                NONDETERMINISTIC_FIX,
                position_of(node),
            )
        if isinstance(node, exp.Func) and _is_nondeterministic_call(node, catalog, volatilities):
            raise UnsupportedQuery(
                model,
                f"non-deterministic function `{_call_text(node)}`",
                NONDETERMINISTIC_FIX,
                position_of(node),
            )
        if isinstance(node, exp.Cast) and _casts_clock_string(node):
            raise UnsupportedQuery(
                model, f"current date/time literal `{shown(node)}`", NONDETERMINISTIC_FIX, position_of(node)
            )
    _refuse_clock_comparisons(tree, schema, model)


def _is_nondeterministic_call(
    node: exp.Func, catalog: Catalog, volatilities: dict[FunctionCall, str | None]
) -> bool:
    count = argument_count(node)
    called = call_name(node)
    if called is not None:
        schema, name = called
        volatility = volatilities.get((schema, name, count))
        if volatility is not None:
            return _volatility_refused(volatility, name, count)
    # The catalog cannot tell (Spark, a static catalog, a name it does not know): judge by name.
    fallback = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
    return isinstance(node, VOLATILE_NODES) or fallback.lower() in VOLATILE_FUNCTIONS


def _volatility_refused(volatility: str, name: str, count: int) -> bool:
    if volatility == "v":
        return True
    # A stable function may read the snapshot, the transaction's clock or the session. Without
    # arguments that is all it can depend on (now(), txid_current(), current_database()); with
    # arguments it is a function of them for fixed settings (to_char, timezone), bar age(ts).
    return volatility == "s" and (count == 0 or (name, count) in CLOCK_WITH_ARGUMENT)


def function_calls(tree: exp.Expr) -> list[FunctionCall]:
    """Every catalog function `tree` calls, once each, in a stable order (how catalogs are asked)."""
    return sorted({call for node in tree.find_all(exp.Func) if (call := call_of(node)) is not None}, key=str)


def call_of(node: exp.Func) -> FunctionCall | None:
    """The catalog function a call names, with its argument count (None: not written as a call)."""
    called = call_name(node)
    return None if called is None else (*called, argument_count(node))


def call_name(node: exp.Func) -> tuple[str | None, str] | None:
    """(schema, name) of the catalog function a call names, as the catalog spells them; None when the
    node is not written as a call (CAST, CASE, an operator)."""
    if isinstance(node, exp.Anonymous):
        parent = node.parent
        schema = None
        if isinstance(parent, exp.Dot) and parent.expression is node:
            qualifier = parent.this  # schema, or catalog.schema
            schema = _exact_name(qualifier.expression if isinstance(qualifier, exp.Dot) else qualifier)
        return schema, _exact_name(node.this)
    # A typed node (exp.Round, exp.TimeToStr, ...) is the function it renders as in PostgreSQL.
    head, paren, _ = node.sql("postgres").partition("(")
    if not paren or not CALL_NAME.fullmatch(head):
        return None
    return None, head.lower()


def _call_text(node: exp.Func) -> str:
    """The call as written: with its schema, and names in their own case (sqlglot upper-cases them)."""
    parent = node.parent
    call = parent if isinstance(node, exp.Anonymous) and isinstance(parent, exp.Dot) else node
    return shown(call, normalize_functions=False)


def _exact_name(part: object) -> str:
    """A name as written, in the catalog's spelling: unquoted names fold to lower case, as in PostgreSQL."""
    if isinstance(part, exp.Identifier) and part.quoted:
        return part.name
    return (part.name if isinstance(part, exp.Expr) else str(part)).lower()


def argument_count(node: exp.Func) -> int:
    if isinstance(node, exp.Anonymous):
        return len(node.expressions)  # `this` is the name
    values = [v for value in node.args.values() for v in (value if isinstance(value, list) else [value])]
    return sum(isinstance(v, exp.Expr) for v in values)


def _is_clock_string(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and node.is_string and node.name.strip().lower() in CLOCK_STRINGS


def _casts_clock_string(cast: exp.Cast) -> bool:
    """'now'::timestamptz, date 'today': the type's input function reads the clock at every run."""
    if not cast.to.is_type(*TEMPORAL_TYPES):
        return False
    operand = cast.this
    while isinstance(operand, exp.Cast | exp.Paren):  # ('now'::text)::timestamptz converts at run time too
        operand = operand.this
    return _is_clock_string(operand)


def _refuse_clock_comparisons(tree: exp.Expr, schema: MappingSchema, model: str) -> None:
    """`placed > 'today'`: PostgreSQL types the bare literal from the date/time column it meets, as a cast."""
    if not any(_is_clock_string(node) for node in tree.find_all(exp.Literal)):
        return
    # Column types are needed; annotate a copy so that the plan keeps the tree as qualified.
    typed = annotate_types(tree.copy(), schema=schema)
    for literal in typed.find_all(exp.Literal):
        found = _comparison_of(literal) if _is_clock_string(literal) else None
        if found is not None and found[1].type is not None and found[1].type.is_type(*TEMPORAL_TYPES):
            raise UnsupportedQuery(
                model,
                f"current date/time literal in `{shown(found[0])}`",
                NONDETERMINISTIC_FIX,
                position_of(literal),
            )


def _comparison_of(literal: exp.Expr) -> tuple[exp.Expr, exp.Expr] | None:
    """The comparison (or arithmetic) a literal is an operand of, and the operand whose type it takes."""
    node, parent = literal, literal.parent
    while isinstance(parent, exp.Paren):
        node, parent = parent, parent.parent
    if isinstance(parent, exp.Binary):
        return parent, (parent.right if parent.left is node else parent.left).unnest()
    if isinstance(parent, exp.Between | exp.In) and parent.this is not node:
        return parent, parent.this.unnest()
    return None
