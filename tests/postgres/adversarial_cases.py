"""The harness and the cases of the adversarial suite (tests/postgres/test_adversarial.py).

A case is: setup SQL (sources, user triggers, domains, ...), extra stream shapes, and steps. A step is
a user write (run by a *writer* connection: another session, in some cases a non-owner role), a DDL
statement (run by the sources' owner) or a Python callable (COPY, two interleaved sessions, ...).
After the setup and after every step, every shape is refreshed and must equal its defining query
(the oracle), with the column types the query has; a user write or DDL that raises fails the case
with its SQL and error; a FULL or REBUILD refresh must say why. A case marked ``differential`` has
nothing that justifies a FULL or REBUILD: its refreshes must stay DIFFERENTIAL (or SKIP). The one
refusal accepted is a clean, up-front UnsupportedQuery for output columns named with the engine's
reserved ``__ivm_`` prefix (see ``create_shapes``).

The standard sources and shapes, shared by most cases::

    customers (id PK, name, tier)  orders (id PK, customer_id, note, customer, amount numeric(10,2))
    events (kind, v)   -- no primary key: a multiset

    totals      aggregate SUM/COUNT per group           (orders)
    big_orders  keyed projection with a filter          (orders)
    details     inner join of two keyed sources         (orders ⋈ customers)
    kept_events keyless (multiset) projection           (events)

With ``roles=True`` three roles take part: ``<db>_owner`` owns the sources and runs the DDL,
``<db>_dbt`` (not a superuser) creates and refreshes the stream tables, ``<db>_writer`` writes; the
oracle always runs as the superuser.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from dbt_ivm.errors import UnsupportedQuery
from dbt_ivm.postgres.runner import run_stream_table
from dbt_ivm.spec import RefreshResult, StreamTableSpec
from tests.oracle import assert_matches_query
from tests.postgres.streams import connect, execute, rows, value

HIDDEN = "__ivm_"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------------------------------------------
# Shapes, steps, cases


@dataclass(frozen=True)
class Shape:
    """One stream table: `schema`.`name` defined by `sql`."""

    name: str
    sql: str
    schema: str = "public"
    mode: str = "differential"

    @property
    def relation(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}"


@dataclass(frozen=True)
class Step:
    """A user write (kind 'write'), a DDL statement (kind 'ddl') or a callable taking the Ctx."""

    action: str | Callable[[Ctx], None]
    by: str = "writer"  # writer | writer2 | owner | admin (the superuser)
    kind: str = "write"
    label: str = ""
    refresh: bool = True  # refresh and check every shape after this step
    full_ok: bool = False  # in a Case with differential=True: this step may make a refresh FULL

    def describe(self) -> str:
        if self.label:
            return self.label
        return self.action if isinstance(self.action, str) else getattr(self.action, "__name__", "?")


def W(sql: str, by: str = "writer", refresh: bool = True, full_ok: bool = False) -> Step:
    return Step(sql, by=by, kind="write", refresh=refresh, full_ok=full_ok)


def DDL(sql: str, by: str = "owner", refresh: bool = True) -> Step:
    return Step(sql, by=by, kind="ddl", refresh=refresh)


def Call(function: Callable[[Ctx], None], label: str, refresh: bool = True) -> Step:
    return Step(function, kind="call", label=label, refresh=refresh)


@dataclass(frozen=True)
class Case:
    name: str
    defect: str  # which defect class of issue 9 it covers
    steps: tuple[Step, ...]
    setup: str = ""  # run by the owner after the standard sources (if any); "{dbt}" etc. are role names
    shapes: tuple[Shape, ...] = ()
    standard: bool = True  # the standard sources and shapes
    roles: bool = False
    epilogue: bool = True  # a last ordinary write to the standard sources (must stay correct)
    # Nothing in the case justifies a FULL or REBUILD: every refresh after the first is DIFFERENTIAL/SKIP.
    differential: bool = False
    finally_check: Callable[[Ctx], None] | None = None
    min_version: int = 0  # server_version_num the case needs (skipped below)

    def __str__(self) -> str:
        return self.name


STANDARD_SETUP = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text, customer text, amount numeric(10,2));
CREATE TABLE events (kind text, v int);
INSERT INTO customers VALUES (1, 'alice', 'gold'), (2, 'bob', NULL), (3, 'carol', 'std');
INSERT INTO orders VALUES (1, 1, 'n1', 'alice', 50), (2, 1, NULL, 'alice', 30), (3, 2, 'n3', 'bob', 75),
  (4, 3, NULL, 'carol', 5), (5, NULL, NULL, NULL, NULL);
INSERT INTO events VALUES ('a', 1), ('a', 1), ('b', NULL), ('c', 2), (NULL, 3), ('d', -1);
"""

STANDARD_SHAPES = (
    Shape("totals", "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"),
    Shape("big_orders", "SELECT id, customer, amount FROM orders WHERE amount > 20"),
    Shape(
        "details",
        "SELECT o.id, c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id",
    ),
    Shape("kept_events", "SELECT kind, v FROM events WHERE v IS NULL OR v > 0"),
)

EPILOGUE = W(
    "INSERT INTO orders (id, customer_id, customer, amount) VALUES (900, 2, 'bob', 42);"
    "UPDATE orders SET amount = amount + 1 WHERE id = 2; DELETE FROM orders WHERE id = 3;"
    "UPDATE customers SET tier = 'epilogue' WHERE id = 1;"
    "INSERT INTO events VALUES ('a', 1), ('e', 9); DELETE FROM events WHERE kind = 'c'"
)


# ---------------------------------------------------------------------------------------------------
# The run


@dataclass
class Ctx:
    """The sessions of one case: the superuser (oracle), the refresher, the owner and two writers."""

    dsn: str
    admin: Any
    dbt: Any
    owner: Any
    writer: Any
    writer2: Any
    roles: dict[str, str] = field(default_factory=dict)
    results: list[tuple[str, str, RefreshResult]] = field(default_factory=list)  # (step, shape, result)

    def conn(self, by: str) -> Any:
        return {
            "writer": self.writer,
            "writer2": self.writer2,
            "owner": self.owner,
            "admin": self.admin,
            "dbt": self.dbt,
        }[by]


def dbname(dsn: str) -> str:
    return psycopg2.extensions.parse_dsn(dsn)["dbname"]


def role_names(dsn: str) -> dict[str, str]:
    db = dbname(dsn)
    return {kind: f"{db}_{kind}" for kind in ("dbt", "owner", "writer")}


@contextmanager
def sessions(dsn: str, admin: Any, with_roles: bool) -> Iterator[Ctx]:
    """Open the case's sessions (creating its three roles when asked); close and drop them after."""
    opened: list[Any] = []

    def open_as(user: str | None = None) -> Any:
        conn = connect(dsn, user=user) if user else connect(dsn)
        opened.append(conn)
        return conn

    names = role_names(dsn) if with_roles else {}
    try:
        if with_roles:
            db = quote(dbname(dsn))
            dbt, owner, writer = (quote(names[k]) for k in ("dbt", "owner", "writer"))
            for name in names.values():
                execute(admin, f"DROP ROLE IF EXISTS {quote(name)}")
                execute(admin, f"CREATE ROLE {quote(name)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
            execute(admin, f"GRANT CREATE ON DATABASE {db} TO {dbt}")
            execute(admin, f"GRANT USAGE, CREATE ON SCHEMA public TO {dbt}, {owner}")
            execute(admin, f"GRANT USAGE ON SCHEMA public TO {writer}")
            ctx = Ctx(
                dsn,
                admin,
                dbt=open_as(names["dbt"]),
                owner=open_as(names["owner"]),
                writer=open_as(names["writer"]),
                writer2=open_as(names["writer"]),
                roles=names,
            )
        else:
            ctx = Ctx(dsn, admin, dbt=open_as(), owner=open_as(), writer=open_as(), writer2=open_as())
        yield ctx
    finally:
        for conn in opened:
            conn.close()
        if names:
            listed = ", ".join(quote(n) for n in names.values())
            execute(admin, f"DROP OWNED BY {listed} CASCADE")
            for name in names.values():
                execute(admin, f"DROP ROLE IF EXISTS {quote(name)}")


def with_role_names(sql: str, ctx: Ctx) -> str:
    for kind, name in ctx.roles.items():
        sql = sql.replace("{" + kind + "}", name)
    return sql


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "pgerror", None) or error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def user_sql(ctx: Ctx, by: str, sql: str, what: str, where: str) -> None:
    """Run a user's statement(s); fail the case, naming them, if they raise."""
    conn = ctx.conn(by)
    try:
        execute(conn, with_role_names(sql, ctx))
    except Exception as error:
        if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            execute(conn, "ROLLBACK")
        pytest.fail(f"{where}: user {what} raised ({by}): {sql}\n  -> {_first_line(error)}", pytrace=False)


def user_copy(ctx: Ctx, by: str, sql: str, data: str, where: str) -> None:
    conn = ctx.conn(by)
    try:
        with conn.cursor() as cur:
            cur.copy_expert(sql, io.StringIO(data))
    except Exception as error:
        if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            execute(conn, "ROLLBACK")
        pytest.fail(f"{where}: user COPY raised ({by}): {sql}\n  -> {_first_line(error)}", pytrace=False)


# Output columns with their types, domains resolved to their base type (a stream table may store a
# domain's base type so that the domain's CHECK never runs as the refreshing role).
TYPES_SQL = (
    "SELECT a.attname, CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) "
    "ELSE format_type(a.atttypid, a.atttypmod) END FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)


def query_types(conn: Any, sql: str) -> list[tuple[str, str]]:
    execute(conn, "BEGIN")
    try:
        execute(conn, f"CREATE TEMP VIEW __adversarial_probe AS {sql}")
        return [(str(n), str(t)) for n, t in rows(conn, TYPES_SQL, ("pg_temp.__adversarial_probe",))]
    finally:
        execute(conn, "ROLLBACK")


def check_shape(conn: Any, shape: Shape, context: str) -> None:
    """The stream table equals its query (as a multiset) and has the query's column names and types."""
    expected = query_types(conn, shape.sql)
    stored = [(str(n), str(t)) for n, t in rows(conn, TYPES_SQL, (shape.relation,))]
    names = [n for n, _ in expected]
    if any(n.startswith(HIDDEN) for n in names):
        # The shared oracle hides __ivm_* columns: compare the query's own columns by name.
        assert [n for n, _ in stored[: len(names)]] == names, (
            f"{context}: user columns {[n for n, _ in stored]} do not start with the query's {names}"
        )
        listed = ", ".join(quote(n) for n in names)
        table = f"SELECT {listed} FROM {shape.relation}"
        query = f"SELECT {listed} FROM ({shape.sql}) AS q"
        extra, missing = rows(conn, f"{table} EXCEPT ALL {query}"), rows(conn, f"{query} EXCEPT ALL {table}")
        assert not extra and not missing, (
            f"{context}: {shape.relation} differs from its query:\n  stored but not in the query: {extra[:20]}"
            f"\n  in the query but not stored: {missing[:20]}"
        )
    else:
        assert_matches_query(conn, shape.schema, shape.name, shape.sql, context)
    stored_types = dict(reversed(stored))  # first occurrence wins
    wrong = [(n, stored_types.get(n), t) for n, t in expected if stored_types.get(n) != t]
    assert not wrong, f"{context}: column types (name, stored, query) differ: {wrong}"


def refresh_shape(ctx: Ctx, shape: Shape, where: str) -> RefreshResult:
    spec = StreamTableSpec(
        model=shape.name, schema=shape.schema, name=shape.name, sql=shape.sql, refresh_mode=shape.mode
    )
    try:
        result = run_stream_table(ctx.dbt, spec)
    except Exception as error:
        pytest.fail(f"{where}: refresh of {shape.relation} raised {_first_line(error)}", pytrace=False)
    context = f"{where}: {shape.relation}: {result.summary()}"
    if result.action in ("FULL", "REBUILD"):
        assert result.reason, f"{context}: a {result.action} refresh without a reason"
    check_shape(ctx.admin, shape, context)
    return result


def reserved_outputs(conn: Any, sql: str) -> list[str]:
    """Output columns named like the engine's bookkeeping (``__ivm_*``, any case)."""
    return [n for n, _ in query_types(conn, sql) if n.lower().startswith(HIDDEN)]


def create_shapes(ctx: Ctx, shapes: tuple[Shape, ...], where: str) -> tuple[Shape, ...]:
    """Create every shape; returns those created. The one refusal accepted: a query whose output
    columns use the engine's reserved ``__ivm_`` prefix may be refused up front, cleanly (an
    UnsupportedQuery naming the column, no table left behind) -- never by a database error."""
    created = []
    for shape in shapes:
        reserved = reserved_outputs(ctx.admin, shape.sql)
        if reserved:
            spec = StreamTableSpec(
                model=shape.name, schema=shape.schema, name=shape.name, sql=shape.sql, refresh_mode=shape.mode
            )
            try:
                result = run_stream_table(ctx.dbt, spec)
            except UnsupportedQuery as refused:
                assert any(name in str(refused) for name in reserved), f"{where}: {shape.relation}: {refused}"
                exists = value(ctx.admin, "SELECT to_regclass(%s) IS NOT NULL", (shape.relation,))
                assert not exists, f"{where}: {shape.relation} refused ({refused}) but created"
                continue
            except Exception as error:
                pytest.fail(
                    f"{where}: refresh of {shape.relation} raised {_first_line(error)}", pytrace=False
                )
            check_shape(ctx.admin, shape, f"{where}: {shape.relation}: {result.summary()}")
        else:
            result = refresh_shape(ctx, shape, where)
        ctx.results.append((where, shape.name, result))
        created.append(shape)
    return tuple(created)


def refresh_all(ctx: Ctx, shapes: tuple[Shape, ...], where: str, differential: bool = False) -> None:
    for shape in shapes:
        result = refresh_shape(ctx, shape, where)
        ctx.results.append((where, shape.name, result))
        if differential:
            assert result.action in ("DIFFERENTIAL", "SKIP"), (
                f"{where}: {shape.relation}: {result.summary()}: nothing here justifies a {result.action}"
            )


def run_step(ctx: Ctx, step: Step, where: str) -> None:
    if callable(step.action):
        step.action(ctx)
    else:
        user_sql(ctx, step.by, step.action, "DDL" if step.kind == "ddl" else "write", where)


def run_case(case: Case, dsn: str, admin: Any) -> Ctx:
    shapes = (STANDARD_SHAPES if case.standard else ()) + case.shapes
    with sessions(dsn, admin, case.roles) as ctx:
        setup = (STANDARD_SETUP if case.standard else "") + case.setup
        execute(ctx.owner, with_role_names(setup, ctx))
        if case.roles:
            grant = with_role_names(
                "GRANT SELECT, TRIGGER ON ALL TABLES IN SCHEMA public TO {dbt};"
                "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public TO {writer};"
                "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {writer}",
                ctx,
            )
            execute(ctx.owner, grant)
        shapes = create_shapes(ctx, shapes, f"{case.name}, create")
        steps = case.steps + ((EPILOGUE,) if case.epilogue and case.standard else ())
        for number, step in enumerate(steps, 1):
            where = f"{case.name}, step {number} [{step.describe()[:160]}]"
            run_step(ctx, step, where)
            if step.refresh:
                refresh_all(ctx, shapes, where, case.differential and not step.full_ok)
        if case.finally_check is not None:
            case.finally_check(ctx)
        return ctx


# ---------------------------------------------------------------------------------------------------
# Defect class 1: the net effect of a batch must not depend on the order capture triggers fired

ROW_TRIGGER_SAME_ROW = Case(
    "row_trigger_updates_same_row",
    "1 order of capture",
    setup="""
CREATE FUNCTION orders_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE orders SET amount = NEW.amount + 1000 WHERE id = NEW.id; RETURN NULL; END $$;
CREATE TRIGGER orders_bump AFTER INSERT OR UPDATE ON orders FOR EACH ROW WHEN (NEW.amount < 1000)
  EXECUTE FUNCTION orders_bump();
""",
    steps=(
        W("INSERT INTO orders VALUES (10, 2, NULL, 'bob', 7)"),
        W("UPDATE orders SET amount = 8 WHERE id = 2"),
        W(
            "UPDATE orders SET customer = 'dave' WHERE id = 4; INSERT INTO orders VALUES (11, 1, NULL, 'x', 1)"
        ),
    ),
)

STATEMENT_TRIGGER_SAME_TABLE = Case(
    "statement_trigger_writes_same_table",
    "1 order of capture",
    # "AAA first" and "A_undelete" fire before the capture triggers (names sort), zzz_last after them.
    setup="""
CREATE FUNCTION orders_upper() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE orders SET customer = upper(customer) WHERE id >= 10 AND customer <> upper(customer); RETURN NULL; END $$;
CREATE TRIGGER "AAA first" AFTER INSERT ON orders FOR EACH STATEMENT EXECUTE FUNCTION orders_upper();
CREATE FUNCTION orders_double() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE orders SET amount = amount * 2 WHERE id >= 10 AND amount < 100; RETURN NULL; END $$;
CREATE TRIGGER zzz_last AFTER INSERT ON orders FOR EACH STATEMENT EXECUTE FUNCTION orders_double();
CREATE FUNCTION orders_undelete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO orders SELECT id, customer_id, 'restored', customer, amount + 0.5 FROM gone WHERE amount > 40;
  RETURN NULL;
END $$;
CREATE TRIGGER "A_undelete" AFTER DELETE ON orders REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION orders_undelete();
""",
    steps=(
        W("INSERT INTO orders VALUES (10, 1, NULL, 'dave', 40)"),
        W("INSERT INTO orders VALUES (11, 2, NULL, 'erin', 60), (12, 3, NULL, 'bob', 1)"),
        W("DELETE FROM orders WHERE id IN (1, 4)"),
    ),
)

TRIGGER_WRITES_OTHER_SOURCE = Case(
    "trigger_writes_another_source",
    "1 order of capture",
    setup="""
CREATE FUNCTION orders_customer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO customers VALUES (NEW.customer_id, coalesce(NEW.customer, '?'), 'auto')
    ON CONFLICT (id) DO UPDATE SET tier = 'touched';
  RETURN NULL;
END $$;
CREATE TRIGGER orders_customer AFTER INSERT OR UPDATE OF customer_id ON orders FOR EACH ROW
  WHEN (NEW.customer_id IS NOT NULL) EXECUTE FUNCTION orders_customer();
CREATE FUNCTION orders_round() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.amount := round(NEW.amount); RETURN NEW; END $$;
CREATE TRIGGER orders_round BEFORE INSERT OR UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_round();
CREATE FUNCTION customers_delete_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN DELETE FROM orders WHERE customer_id = OLD.id; RETURN OLD; END $$;
CREATE TRIGGER customers_delete_orders BEFORE DELETE ON customers FOR EACH ROW
  EXECUTE FUNCTION customers_delete_orders();
""",
    steps=(
        W("INSERT INTO orders VALUES (10, 7, NULL, 'gina', 12.6), (11, 1, NULL, 'alice', 40.4)"),
        W("UPDATE orders SET customer_id = 8, amount = 99.5 WHERE id = 4"),
        W("DELETE FROM customers WHERE id = 1"),
    ),
)

WRITABLE_CTE = Case(
    "writable_cte_delete_reinsert",
    "1 order of capture",
    steps=(
        W(
            "WITH d AS (DELETE FROM orders WHERE id IN (1, 3) RETURNING *) "
            "INSERT INTO orders SELECT id, customer_id, note, customer, amount + 1 FROM d"
        ),
        # The INSERT stops reading after one row: the DELETE finishes (and fires its triggers) after it.
        W(
            "WITH d AS (DELETE FROM orders WHERE id IN (1, 2, 4) RETURNING *) "
            "INSERT INTO orders SELECT id, customer_id, note, customer, amount + 5 FROM d LIMIT 1"
        ),
        W(
            "WITH d AS (DELETE FROM events WHERE kind = 'a' RETURNING *) "
            "INSERT INTO events SELECT kind, v + 10 FROM d"
        ),
        W(
            "WITH i AS (INSERT INTO customers VALUES (4, 'dan', NULL) RETURNING id) "
            "UPDATE orders SET customer_id = (SELECT id FROM i), amount = 21 WHERE id = 4"
        ),
        W(
            "WITH u AS (UPDATE orders SET amount = amount * 2 WHERE id = 2 RETURNING id, customer) "
            "INSERT INTO orders SELECT id + 100, 1, NULL, customer, 1 FROM u"
        ),
        W(
            "WITH i AS (INSERT INTO orders VALUES (20, 2, NULL, 'bob', 33) RETURNING id), "
            "d AS (DELETE FROM orders WHERE id = 1 RETURNING id) "
            "UPDATE customers SET name = 'bobby' WHERE id = (SELECT 2 FROM i)"
        ),
    ),
)

DEFERRED_PK = Case(
    "deferred_primary_key_duplicate",
    "1 order of capture",
    setup="ALTER TABLE orders DROP CONSTRAINT orders_pkey, "
    "ADD CONSTRAINT orders_pkey PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED;",
    steps=(
        W(
            "BEGIN; INSERT INTO orders VALUES (1, 2, NULL, 'bob', 99);"
            "DELETE FROM orders WHERE id = 1 AND customer = 'alice'; COMMIT"
        ),
        # Ids 2 and 3 swap rows in two statements: id 3 briefly exists twice.
        W(
            "BEGIN; UPDATE orders SET id = 3 WHERE id = 2;"
            "UPDATE orders SET id = 2 WHERE id = 3 AND customer = 'bob'; COMMIT"
        ),
        W("BEGIN; UPDATE orders SET id = id + 1 WHERE id IN (4, 5); DELETE FROM orders WHERE id = 6; COMMIT"),
        # The new row 2 is inserted (and captured) before the old row 2 is deleted, in one statement.
        W(
            "WITH i AS (INSERT INTO orders VALUES (2, 3, NULL, 'carol', 77) RETURNING id) "
            "DELETE FROM orders o USING i WHERE o.id = i.id AND o.customer IS DISTINCT FROM 'carol'"
        ),
    ),
)

SELF_FK_CASCADE = Case(
    "self_referencing_fk_on_update_cascade",
    "1 order of capture",
    setup="""
CREATE TABLE nodes (a int PRIMARY KEY, parent int REFERENCES nodes (a) ON UPDATE CASCADE ON DELETE SET NULL,
  label text);
INSERT INTO nodes VALUES (1, NULL, 'root'), (2, 1, 'x'), (3, 2, 'y'), (4, 1, 'z');
""",
    shapes=(
        Shape("nodes_all", "SELECT a, parent, label FROM nodes"),
        Shape("children", "SELECT parent, COUNT(*) AS n FROM nodes GROUP BY parent"),
        Shape(
            "edges",
            "SELECT c.a AS child, p.label AS parent_label FROM nodes c JOIN nodes p ON c.parent = p.a",
        ),
    ),
    steps=(
        W("UPDATE nodes SET a = a + 10"),
        W("DELETE FROM nodes WHERE a = 12"),
        W("UPDATE nodes SET a = a * 2 WHERE a = 11"),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Defect class 2: names of sources and outputs that collide with the engine's own

SOURCE_COLUMNS_LIKE_INTERNALS = Case(
    "source_columns_named_like_internals",
    "2 name collisions",
    differential=True,
    standard=False,
    setup="""
CREATE TABLE log (id int PRIMARY KEY, "writer" text, statement_number int, "__ivm_weight" int,
  "__ivm_seq" bigint, "__ivm_xid" text, "__ivm_first" int, "__ivm_last" int);
INSERT INTO log VALUES (1, 'w1', 1, 1, 1, 'x', 1, 1), (2, 'w1', 2, -1, 2, 'y', 2, 2), (3, 'w2', 3, 9, 3, NULL, 3, 3);
CREATE TABLE log2 ("writer" text, "__ivm_weight" int, "__ivm_seq" int, "__ivm_net" int, "__ivm_rank" int);
INSERT INTO log2 VALUES ('a', 1, 1, 1, 1), ('a', 1, 1, 1, 1), ('b', 0, 2, 2, 2);
""",
    shapes=(
        Shape(
            "log_totals",
            'SELECT "writer", SUM(statement_number) AS total, COUNT(*) AS n FROM log GROUP BY "writer"',
        ),
        Shape(
            "log_rows",
            'SELECT id, "writer", statement_number, "__ivm_weight" AS w, "__ivm_seq" AS s, "__ivm_xid" AS x, '
            '"__ivm_first" AS f FROM log WHERE statement_number > 0',
        ),
        Shape("log2_rows", 'SELECT "writer", "__ivm_weight" AS w, "__ivm_net" AS net FROM log2'),
    ),
    steps=(
        W("INSERT INTO log VALUES (4, 'w2', 4, 1, 4, 'z', 4, 4); INSERT INTO log2 VALUES ('c', 3, 3, 3, 3)"),
        W('UPDATE log SET "writer" = \'w3\', statement_number = 7, "__ivm_weight" = 0 WHERE id = 1'),
        W("DELETE FROM log WHERE id = 2; DELETE FROM log2 WHERE \"writer\" = 'a'"),
        W("TRUNCATE log2; INSERT INTO log2 VALUES ('t', 1, 1, 1, 1)", full_ok=True),
    ),
)

OUTPUT_COLUMNS_LIKE_INTERNALS = Case(
    "output_columns_named_like_internals",
    "2 name collisions",
    differential=True,
    shapes=(
        Shape(
            "agg_internal_names",
            'SELECT customer AS "__ivm_hash", SUM(amount) AS "__ivm_count", COUNT(*) AS "__ivm_dup", '
            'COUNT(amount) AS "__ivm_a1_count", SUM(customer_id) AS "__ivm_a2_sum" FROM orders GROUP BY customer',
        ),
        Shape(
            "agg_hidden_group",
            'SELECT SUM(amount) AS "__ivm_g0", COUNT(*) AS n FROM orders GROUP BY customer',
        ),
        Shape(
            "keyed_internal_names",
            'SELECT id AS "__ivm_hash", amount AS "__ivm_k0_id", customer AS "__ivm_count" FROM orders '
            "WHERE amount > 20",
        ),
        Shape("multiset_internal_names", 'SELECT kind AS "__ivm_dup", v AS "__ivm_hash" FROM events'),
        # A correlated MAX (restricted sideways to the changed customers) under our own aliases.
        Shape(
            "correlated_internal_names",
            'SELECT "__ivm_reach".id AS "__ivm_reach", "__ivm_reach".amount FROM orders AS "__ivm_reach" '
            'WHERE "__ivm_reach".amount = (SELECT MAX(o2.amount) FROM orders o2 '
            'WHERE o2.customer = "__ivm_reach".customer)',
        ),
        # Near misses of the reserved prefix: ordinary names that must simply work.
        Shape(
            "near_miss_agg",
            'SELECT customer AS "_ivm_hash", SUM(amount) AS "__ivm", COUNT(*) AS " __ivm_dup", '
            'COUNT(amount) AS "x__ivm_count" FROM orders GROUP BY customer',
        ),
        Shape(
            "near_miss_keyed",
            'SELECT id AS "__ivmhash", amount AS "ivm_k0_id", customer AS "__iv_count" FROM orders '
            "WHERE amount > 20",
        ),
        Shape("near_miss_multiset", 'SELECT kind AS "_ivm_dup", v AS "__ivm" FROM events'),
    ),
    steps=(
        W("INSERT INTO orders VALUES (10, 1, NULL, 'alice', 70); INSERT INTO events VALUES ('a', 1)"),
        W("UPDATE orders SET amount = 1, customer = 'bob' WHERE id = 1; DELETE FROM events WHERE kind = 'b'"),
    ),
)

LONG = "k" * 55  # two 62-character column names sharing this 55-character prefix
PK1, PK2 = LONG + "_first1", LONG + "_second"
LONG_PRIMARY_KEY = Case(
    "long_primary_key_column_names",
    "2 name collisions",
    differential=True,
    standard=False,
    setup=f"""
CREATE TABLE wide ({quote(PK1)} int, {quote(PK2)} int, payload text, PRIMARY KEY ({quote(PK1)}, {quote(PK2)}));
INSERT INTO wide VALUES (1, 1, 'a'), (1, 2, 'b'), (2, 1, 'c');
""",
    shapes=(
        Shape("wide_rows", f"SELECT {quote(PK1)}, {quote(PK2)}, payload FROM wide WHERE payload <> 'x'"),
        Shape(
            "wide_pairs",
            f"SELECT a.payload AS left_payload, b.payload AS right_payload FROM wide a JOIN wide b "
            f"ON a.{quote(PK1)} = b.{quote(PK2)}",
        ),
        Shape("wide_counts", "SELECT payload, COUNT(*) AS n FROM wide GROUP BY payload"),
    ),
    steps=(
        W("INSERT INTO wide VALUES (2, 2, 'd'), (3, 1, 'a')"),
        W(f"UPDATE wide SET payload = 'e' WHERE {quote(PK1)} = 1 AND {quote(PK2)} = 1"),
        W(
            f"UPDATE wide SET {quote(PK2)} = {quote(PK2)} + 10 WHERE {quote(PK1)} = 2;"
            "DELETE FROM wide WHERE payload = 'b'"
        ),
    ),
)

# Quotes, spaces, Unicode, reserved words, mixed case, 63-byte names: sources and output aliases.
ODD_SCHEMA = 'Ünïcødé 表 "q"'
SIXTY_THREE = "é" * 31 + "x"  # 63 bytes in UTF-8
assert len(SIXTY_THREE.encode()) == 63
ODD_SETUP = f"""
CREATE SCHEMA {quote(ODD_SCHEMA)};
CREATE TABLE {quote(ODD_SCHEMA)}."select" ("order" int PRIMARY KEY, "user" text, "Mixed Case" numeric,
  {quote('we"ird col')} text, {quote(SIXTY_THREE)} int);
INSERT INTO {quote(ODD_SCHEMA)}."select" VALUES (1, 'u1', 1.5, 'a', 1), (2, 'u1', 2.5, 'b', 2), (3, 'u2', NULL, NULL, 3);
CREATE TABLE {quote(ODD_SCHEMA)}."User" ("from" text, "Group" int);
INSERT INTO {quote(ODD_SCHEMA)}."User" VALUES ('x', 1), ('x', 1), ('y', NULL);
"""
ODD_SELECT = f'{quote(ODD_SCHEMA)}."select"'
ODD_USER = f'{quote(ODD_SCHEMA)}."User"'
ODD_IDENTIFIERS = Case(
    "identifiers_quoted_unicode_reserved",
    "2 name collisions (identifier fuzz)",
    differential=True,
    standard=False,
    setup=ODD_SETUP,
    shapes=(
        Shape(
            'Tötals "by" user',
            f'SELECT "user", SUM("Mixed Case") AS "sum ""of"" Mixed", COUNT(*) AS "order" FROM {ODD_SELECT} '
            f'GROUP BY "user"',
            schema=ODD_SCHEMA,
        ),
        Shape(
            SIXTY_THREE,
            f'SELECT "order", {quote("we" + chr(34) + "ird col")} AS "select", {quote(SIXTY_THREE)} '
            f'FROM {ODD_SELECT} WHERE "order" > 0',
            schema=ODD_SCHEMA,
        ),
        Shape(
            "order",
            f'SELECT s."user" AS "User", u."from" AS "表" FROM {ODD_SELECT} s JOIN {ODD_USER} u '
            f'ON u."Group" = s."order"',
            schema=ODD_SCHEMA,
        ),
        Shape("user", f'SELECT "from", "Group" FROM {ODD_USER}'),
    ),
    steps=(
        W(f"INSERT INTO {ODD_SELECT} VALUES (4, 'u2', 4, 'c', 4); INSERT INTO {ODD_USER} VALUES ('z', 4)"),
        W(
            f"UPDATE {ODD_SELECT} SET \"user\" = 'u3', {quote('we' + chr(34) + 'ird col')} = 'q' WHERE \"order\" = 1"
        ),
        W(f'DELETE FROM {ODD_SELECT} WHERE "order" = 2; DELETE FROM {ODD_USER} WHERE "from" = \'x\''),
    ),
)

# The planner's subquery rewrites (ANY/ALL, row-valued NOT IN, IN as a value, uncorrelated EXISTS,
# scalar subqueries inside expressions, TopK by hidden keys) over odd names, aliases and source columns
# named like the aliases those rewrites introduce, and a user trigger that writes the other source.
SUBQUERY_SCHEMA = 'sub "q" 表'
SUB_ORDER = f'{quote(SUBQUERY_SCHEMA)}."order"'
SUB_GROUP = f'{quote(SUBQUERY_SCHEMA)}."group"'
SUBQUERY_REWRITES = Case(
    "subquery_rewrites_odd_names_and_triggers",
    "2 name collisions (identifier fuzz)",
    differential=True,
    standard=False,
    setup=f"""
CREATE SCHEMA {quote(SUBQUERY_SCHEMA)};
CREATE TABLE {SUB_ORDER} ("select" int PRIMARY KEY, "user" int, "__ivm_in" numeric, "Mixed Case" text);
CREATE TABLE {SUB_GROUP} ("user" int PRIMARY KEY, "__ivm_order0" text, "limit" numeric);
INSERT INTO {SUB_ORDER} VALUES (1, 1, 10, 'a'), (2, 1, 3, 'b'), (3, 2, NULL, 'a'), (4, NULL, 7, NULL),
  (5, 3, 8, 'c');
INSERT INTO {SUB_GROUP} VALUES (1, 'a', 5), (2, 'x', NULL), (3, 'c', 9);
CREATE FUNCTION {quote(SUBQUERY_SCHEMA)}."bump ""limit"" now" () RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE {SUB_GROUP} SET "limit" = coalesce("limit", 0) + 1 WHERE "user" = NEW."user";
  RETURN NULL;
END $$;
CREATE TRIGGER "__ivm_capture_insert" AFTER INSERT ON {SUB_ORDER} FOR EACH ROW
  EXECUTE FUNCTION {quote(SUBQUERY_SCHEMA)}."bump ""limit"" now"();
""",
    shapes=(
        Shape(
            "all",
            f'SELECT o."select", o."__ivm_in" FROM {SUB_ORDER} AS o WHERE o."__ivm_in" > ALL '
            f'(SELECT "__ivm_q0"."limit" FROM {SUB_GROUP} AS "__ivm_q0" WHERE "__ivm_q0"."user" = o."user")',
            schema=SUBQUERY_SCHEMA,
        ),
        Shape(
            "not in",
            f'SELECT "__ivm_q0"."select" FROM {SUB_ORDER} AS "__ivm_q0" WHERE ("__ivm_q0"."user", '
            f'"__ivm_q0"."Mixed Case") NOT IN (SELECT "user", "__ivm_order0" FROM {SUB_GROUP})',
            schema=SUBQUERY_SCHEMA,
        ),
        Shape(
            "in?",
            f'SELECT o."select", o."user" IN (SELECT "__ivm_in"."user" FROM {SUB_GROUP} AS "__ivm_in" '
            f'WHERE "__ivm_in"."limit" > 1) AS "in?", o."__ivm_in" FROM {SUB_ORDER} AS o',
            schema=SUBQUERY_SCHEMA,
        ),
        Shape(
            "exists",
            f'SELECT o."select", EXISTS (SELECT 1 FROM {SUB_GROUP} AS "__ivm_exists" WHERE '
            f'"__ivm_exists"."limit" > 9) AS "any ""big""" FROM {SUB_ORDER} AS o',
            schema=SUBQUERY_SCHEMA,
        ),
        Shape(
            "scalar",
            f'SELECT o."select", o."__ivm_in" + (SELECT MAX("__ivm_s0"."limit") FROM {SUB_GROUP} AS "__ivm_s0" '
            f'WHERE "__ivm_s0"."user" = o."user") AS "sum ""x""" FROM {SUB_ORDER} AS o',
            schema=SUBQUERY_SCHEMA,
        ),
        Shape(
            "top",
            f'SELECT "select", "user" FROM {SUB_ORDER} ORDER BY "__ivm_in" DESC NULLS LAST, "select" LIMIT 3',
            schema=SUBQUERY_SCHEMA,
        ),
    ),
    steps=(
        W(f"INSERT INTO {SUB_ORDER} VALUES (6, 2, 20, 'x'), (7, 1, 1, 'a')"),
        W(f'UPDATE {SUB_GROUP} SET "limit" = 30, "__ivm_order0" = \'b\' WHERE "user" = 1'),
        W(f'UPDATE {SUB_ORDER} SET "__ivm_in" = NULL, "user" = 3 WHERE "select" IN (1, 6)'),
        W(f'DELETE FROM {SUB_GROUP} WHERE "user" = 3; INSERT INTO {SUB_GROUP} VALUES (4, NULL, 2)'),
        W(f'DELETE FROM {SUB_ORDER} WHERE "select" = 5; INSERT INTO {SUB_ORDER} VALUES (8, 4, 100, NULL)'),
    ),
)

SQL_SYNTAX_IDENTIFIERS = Case(
    "identifiers_like_internals_and_sql_syntax",
    "2 name collisions (identifier fuzz)",
    differential=True,
    standard=False,
    setup="""
CREATE TABLE "changes_1234" ("a$b" int PRIMARY KEY, "50%s off" text, "x'); DROP TABLE t; --" int,
  "dbt_ivm" text, "%%" int);
INSERT INTO "changes_1234" VALUES (1, 'p', 1, 'd', 1), (2, 'q', 2, 'd', 2);
CREATE TABLE "dbt_ivm" ("$1" int, "?" text);
INSERT INTO "dbt_ivm" VALUES (1, 'a'), (1, 'a'), (2, NULL);
""",
    shapes=(
        Shape(
            "capture_1234",
            'SELECT "a$b", "50%s off", "x\'); DROP TABLE t; --" AS "$$", "%%" FROM "changes_1234"',
        ),
        Shape(
            "changes_1234_totals",
            'SELECT "dbt_ivm", SUM("%%") AS "%s", COUNT(*) AS n FROM "changes_1234" GROUP BY "dbt_ivm"',
        ),
        Shape("stream_tables", 'SELECT "$1", "?" FROM "dbt_ivm"'),
    ),
    steps=(
        W("INSERT INTO \"changes_1234\" VALUES (3, 'r', 3, 'e', 3); INSERT INTO \"dbt_ivm\" VALUES (3, 'c')"),
        W('UPDATE "changes_1234" SET "50%s off" = \'z\', "%%" = 9 WHERE "a$b" = 1'),
        W('DELETE FROM "changes_1234" WHERE "a$b" = 2; DELETE FROM "dbt_ivm" WHERE "$1" = 1'),
    ),
)

# The capture function's body is dollar-quoted: a column name holding the delimiter must not end it.
DOLLAR_QUOTE_NAMES = Case(
    "dollar_quote_delimiter_in_column_names",
    "2 name collisions (identifier fuzz)",
    differential=True,
    standard=False,
    setup="""
CREATE TABLE quoted ("a$ivm$b" int PRIMARY KEY, "$$" text, "$ivm$" int, "$body$" text);
INSERT INTO quoted VALUES (1, 'p', 1, 'x'), (2, 'q', 2, 'y');
""",
    shapes=(
        Shape("quoted_rows", 'SELECT "a$ivm$b", "$$", "$ivm$" AS "$ivm$ $$" FROM quoted'),
        Shape(
            "quoted_totals",
            'SELECT "$body$", SUM("$ivm$") AS total, COUNT(*) AS n FROM quoted GROUP BY "$body$"',
        ),
    ),
    steps=(
        W("INSERT INTO quoted VALUES (3, 'r', 3, 'x')"),
        W(
            'UPDATE quoted SET "$$" = \'z\', "$ivm$" = 9 WHERE "a$ivm$b" = 1; DELETE FROM quoted WHERE "a$ivm$b" = 2'
        ),
    ),
)

DOTTED_NAMES = Case(
    "dotted_names_do_not_collide",
    "2 name collisions (identifier fuzz)",
    differential=True,
    standard=False,
    setup="""
CREATE SCHEMA "a.b"; CREATE SCHEMA a; CREATE SCHEMA "x.y"; CREATE SCHEMA x;
CREATE TABLE "a.b".c (id int PRIMARY KEY, v int); CREATE TABLE a."b.c" (id int PRIMARY KEY, w text);
INSERT INTO "a.b".c VALUES (1, 10), (2, 20); INSERT INTO a."b.c" VALUES (1, 'one'), (3, 'three');
""",
    shapes=(
        Shape("z", 'SELECT id, v FROM "a.b".c', schema="x.y"),
        Shape("y.z", 'SELECT id, w FROM a."b.c"', schema="x"),
    ),
    steps=(
        W('INSERT INTO "a.b".c VALUES (3, 30); INSERT INTO a."b.c" VALUES (4, \'four\')'),
        W('UPDATE "a.b".c SET v = 11 WHERE id = 1; DELETE FROM a."b.c" WHERE id = 1'),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Defect class 3: writes that bypass ordinary triggers must be captured or detected

REPLICATION_ROLE = Case(
    "session_replication_role_replica",
    "3 writes bypassing triggers",
    steps=(
        W(
            "SET session_replication_role = replica;"
            "INSERT INTO orders VALUES (10, 1, NULL, 'alice', 100); UPDATE orders SET amount = 1 WHERE id = 1;"
            "DELETE FROM orders WHERE id = 3; UPDATE customers SET tier = 'replica' WHERE id = 2;"
            "INSERT INTO events VALUES ('r', 5); RESET session_replication_role",
        ),
        W("INSERT INTO orders VALUES (11, 2, NULL, 'bob', 60)"),
    ),
)

DISABLE_TRIGGER_ALL = Case(
    "disable_trigger_all",
    "3 writes bypassing triggers",
    steps=(
        W(
            "ALTER TABLE orders DISABLE TRIGGER ALL; INSERT INTO orders VALUES (10, 1, NULL, 'alice', 100);"
            "UPDATE orders SET amount = 2 WHERE id = 1; DELETE FROM orders WHERE id = 3;"
            "ALTER TABLE orders ENABLE TRIGGER ALL",
        ),
        W("UPDATE orders SET amount = 3 WHERE id = 2"),
        # Three separate transactions this time, and only the user triggers (capture's among them).
        W("ALTER TABLE events DISABLE TRIGGER USER", refresh=False),
        W("INSERT INTO events VALUES ('u', 7); DELETE FROM events WHERE kind = 'c'", refresh=False),
        W("ALTER TABLE events ENABLE TRIGGER USER"),
        # A capture trigger dropped by hand, then a write.
        W("DROP TRIGGER \"__ivm_capture_ins\" ON orders; INSERT INTO orders VALUES (11, 2, NULL, 'bob', 61)"),
        W("INSERT INTO orders VALUES (12, 2, NULL, 'bob', 62)"),
    ),
)

# The dbt role does not own the sources, so it cannot make its triggers ENABLE ALWAYS (every refresh
# warns, naming the fix: test_capture_hardening.py). The owner applies the fix; a superuser (a
# maintenance job, a hand-run replication apply) then writes under session_replication_role = replica.
ENABLE_ALWAYS = "".join(
    f'ALTER TABLE {table} ENABLE ALWAYS TRIGGER "__ivm_capture_{event}";'
    for table in ("orders", "customers", "events")
    for event in ("ins", "upd", "del", "trunc")
)
REPLICATION_ROLE_NOT_OWNER = Case(
    "session_replication_role_replica_sources_not_owned",
    "3 writes bypassing triggers (non-superuser dbt role)",
    roles=True,
    steps=(
        DDL(ENABLE_ALWAYS),
        W(
            "SET session_replication_role = replica;"
            "INSERT INTO orders VALUES (10, 1, NULL, 'alice', 100); UPDATE orders SET amount = 1 WHERE id = 1;"
            "DELETE FROM orders WHERE id = 3; UPDATE customers SET tier = 'replica' WHERE id = 2;"
            "INSERT INTO events VALUES ('r', 5); RESET session_replication_role",
            by="admin",
        ),
        W("INSERT INTO orders VALUES (11, 2, NULL, 'bob', 60)"),
    ),
)

INHERITANCE_CHILD = Case(
    "inheritance_child_rows",
    "3 writes bypassing triggers",
    setup="CREATE TABLE orders_archive () INHERITS (orders);"
    "INSERT INTO orders_archive VALUES (20, 1, NULL, 'alice', 500), (21, 2, NULL, 'bob', 25);",
    steps=(
        W("INSERT INTO orders_archive VALUES (22, 3, NULL, 'carol', 60)"),
        W("UPDATE orders_archive SET amount = 1 WHERE id = 20; DELETE FROM orders_archive WHERE id = 21"),
        W("UPDATE orders SET amount = amount + 1 WHERE id IN (1, 22)"),  # through the parent
        DDL(
            "CREATE TABLE orders_more () INHERITS (orders); INSERT INTO orders_more VALUES (30, 1, NULL, 'x', 99)"
        ),
        W("INSERT INTO orders_more VALUES (31, 2, NULL, 'y', 98)"),
        DDL("ALTER TABLE orders_archive NO INHERIT orders"),
    ),
)

# Blue/green: a freshly loaded table takes the source's name (its columns in another order); the old
# one keeps being written under its new name; later the two swap back; a source moves to another schema.
TABLE_SWAP = Case(
    "source_swapped_by_rename",
    "3 writes bypassing triggers / 4 schema changes",
    setup="""
CREATE TABLE orders_next (id int PRIMARY KEY, amount numeric(10,2), customer text, note text, customer_id int);
INSERT INTO orders_next VALUES (1, 51, 'alice', NULL, 1), (7, 70, 'gus', NULL, 2);
""",
    steps=(
        DDL(
            "BEGIN; ALTER TABLE orders RENAME TO orders_old; ALTER TABLE orders_next RENAME TO orders; COMMIT"
        ),
        W(
            "INSERT INTO orders (id, customer_id, customer, amount) VALUES (8, 1, 'alice', 80); UPDATE orders_old SET amount = 0"
        ),
        DDL(
            "BEGIN; ALTER TABLE orders RENAME TO orders_next; ALTER TABLE orders_old RENAME TO orders; COMMIT",
            refresh=False,
        ),
        W("UPDATE orders SET amount = 3 WHERE id = 2; UPDATE orders_next SET amount = 9"),
        DDL(
            "CREATE SCHEMA archive; ALTER TABLE customers SET SCHEMA archive;"
            "CREATE TABLE customers (LIKE archive.customers INCLUDING ALL);"
            "INSERT INTO customers SELECT * FROM archive.customers WHERE id <> 2"
        ),
        W("UPDATE archive.customers SET tier = 'archived'; UPDATE customers SET tier = 'live' WHERE id = 1"),
    ),
)

# PostgreSQL 18: a virtual generated column's expression changes without a write or a table rewrite.
VIRTUAL_GENERATED = Case(
    "virtual_generated_column_expression_changed",
    "3 writes bypassing triggers / 4 schema changes",
    min_version=180000,
    setup="ALTER TABLE orders ADD COLUMN doubled numeric GENERATED ALWAYS AS (amount * 2) VIRTUAL;",
    shapes=(
        Shape("doubled_rows", "SELECT id, doubled FROM orders WHERE doubled > 40"),
        Shape("doubled_totals", "SELECT customer, SUM(doubled) AS total FROM orders GROUP BY customer"),
    ),
    steps=(
        W("UPDATE orders SET amount = 25 WHERE id = 4"),
        DDL("ALTER TABLE orders ALTER COLUMN doubled SET EXPRESSION AS (amount * 3)"),
        W("INSERT INTO orders (id, customer, amount) VALUES (10, 'zed', 15)"),
    ),
)

ALTER_TYPE_USING = Case(
    "alter_type_using_rewrites_values",
    "3 writes bypassing triggers",
    steps=(
        DDL("ALTER TABLE orders ALTER COLUMN amount TYPE numeric(10,2) USING amount * 2"),
        DDL("ALTER TABLE customers ALTER COLUMN name TYPE text USING upper(name)"),
        DDL("ALTER TABLE events ALTER COLUMN v TYPE int USING v + 1"),
        DDL("ALTER TABLE orders ALTER COLUMN customer TYPE varchar(20) USING left(customer, 2)"),
        W("UPDATE orders SET amount = 7 WHERE id = 1"),
    ),
)

DROP_READD_COLUMN = Case(
    "drop_and_readd_column_in_one_transaction",
    "3 writes bypassing triggers",
    steps=(
        DDL(
            "BEGIN; ALTER TABLE orders DROP COLUMN amount; "
            "ALTER TABLE orders ADD COLUMN amount numeric(10,2) DEFAULT 33; COMMIT"
        ),
        W("UPDATE orders SET amount = 44 WHERE id = 1"),
        DDL("BEGIN; ALTER TABLE events DROP COLUMN v; ALTER TABLE events ADD COLUMN v int DEFAULT 4; COMMIT"),
        DDL(
            "BEGIN; ALTER TABLE customers DROP COLUMN tier; ALTER TABLE customers ADD COLUMN tier text; COMMIT"
        ),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Defect class 4: schema changes after which the next refresh must succeed by itself

SELECT_STAR = Case(
    "add_column_under_select_star",
    "4 schema changes",
    shapes=(
        Shape("star_orders", "SELECT * FROM orders WHERE amount > 20"),
        Shape("star_events", "SELECT * FROM events"),
        Shape(
            "star_totals", "SELECT customer, COUNT(*) AS n FROM (SELECT * FROM orders) o GROUP BY customer"
        ),
    ),
    steps=(
        DDL("ALTER TABLE orders ADD COLUMN extra int DEFAULT 3"),
        W("INSERT INTO orders VALUES (10, 1, NULL, 'alice', 70, 4)"),
        DDL("ALTER TABLE events ADD COLUMN w text DEFAULT 'w'"),
        W("INSERT INTO events VALUES ('z', 1, 'x')"),
        DDL("ALTER TABLE orders DROP COLUMN note"),
        W("UPDATE orders SET extra = 5 WHERE id = 1"),
    ),
)

TEXT_TO_INT = Case(
    "read_column_text_to_int",
    "4 schema changes",
    setup="ALTER TABLE orders ADD COLUMN code text; UPDATE orders SET code = (id % 3)::text;",
    shapes=(
        Shape("by_code", "SELECT code, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY code"),
        Shape("coded", "SELECT id, code, amount FROM orders WHERE amount > 20"),
    ),
    steps=(
        DDL("ALTER TABLE orders ALTER COLUMN code TYPE int USING code::int"),
        W(
            "UPDATE orders SET code = code + 10 WHERE id = 1; INSERT INTO orders VALUES (10, 1, NULL, 'z', 25, 7)"
        ),
        DDL("ALTER TABLE customers ALTER COLUMN name TYPE varchar(20)"),
    ),
)

PRIMARY_KEY_CHANGES = Case(
    "primary_key_added_dropped_changed",
    "4 schema changes",
    steps=(
        DDL("ALTER TABLE customers DROP CONSTRAINT customers_pkey"),
        W("INSERT INTO customers VALUES (1, 'alice2', 'dup'); UPDATE customers SET tier = 't' WHERE id = 2"),
        DDL("DELETE FROM customers WHERE name = 'alice2'; ALTER TABLE customers ADD PRIMARY KEY (name)"),
        W("UPDATE customers SET id = 3 WHERE name = 'bob'; UPDATE customers SET id = 2 WHERE name = 'carol'"),
        DDL("ALTER TABLE events ADD COLUMN id serial PRIMARY KEY"),
        W("UPDATE events SET v = 5 WHERE kind = 'a'; DELETE FROM events WHERE kind IS NULL"),
        W("DELETE FROM orders WHERE id = 5", refresh=False),
        DDL(
            "ALTER TABLE orders DROP CONSTRAINT orders_pkey, ADD PRIMARY KEY (id, customer_id)", refresh=False
        ),
        W("UPDATE orders SET customer_id = 2 WHERE id = 1"),
        DDL("ALTER TABLE orders DROP CONSTRAINT orders_pkey"),
        W("INSERT INTO orders VALUES (1, 1, NULL, 'alice', 50)"),
    ),
)

NUMERIC_TYPMOD = Case(
    "numeric_typmod_widened",
    "4 schema changes",
    steps=(
        DDL("ALTER TABLE orders ALTER COLUMN amount TYPE numeric(12,4)"),
        W(
            "UPDATE orders SET amount = 12.3456 WHERE id = 1; INSERT INTO orders VALUES (10, 2, NULL, 'bob', 20.0001)"
        ),
        DDL("ALTER TABLE customers ALTER COLUMN tier TYPE varchar(8)"),
        W("UPDATE customers SET tier = 'eight888' WHERE id = 2"),
    ),
)

DDL_BETWEEN_WRITES = Case(
    "ddl_between_writes",
    "4 schema changes",
    steps=(
        DDL("ALTER TABLE orders ADD COLUMN flag boolean NOT NULL DEFAULT true"),
        W(
            "INSERT INTO orders VALUES (10, 1, NULL, 'alice', 21, false); UPDATE orders SET amount = 31 WHERE id = 2"
        ),
        DDL("ALTER TABLE orders DROP COLUMN note"),
        W("UPDATE orders SET customer = 'zed' WHERE id = 10; DELETE FROM orders WHERE id = 4"),
        DDL("ALTER TABLE orders RENAME COLUMN flag TO flagged"),
        W("UPDATE orders SET flagged = NOT flagged, amount = amount + 1"),
        DDL("ALTER TABLE orders ALTER COLUMN customer_id TYPE bigint"),
        W("UPDATE orders SET customer_id = 3 WHERE id = 1"),
        DDL("ALTER TABLE events ADD COLUMN w int DEFAULT 1; ALTER TABLE events DROP COLUMN w"),
        W("INSERT INTO events VALUES ('f', 6)"),
    ),
)

VIEW_REPLACED = Case(
    "view_over_source_replaced",
    "4 schema changes",
    setup="CREATE VIEW big AS SELECT id, customer, amount FROM orders WHERE amount > 10;",
    shapes=(
        Shape(
            "big_totals", "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM big GROUP BY customer"
        ),
        Shape("big_rows", "SELECT id, amount FROM big"),
    ),
    steps=(
        W("INSERT INTO orders VALUES (10, 1, NULL, 'alice', 15)"),
        DDL("CREATE OR REPLACE VIEW big AS SELECT id, customer, amount FROM orders WHERE amount > 40"),
        W("UPDATE orders SET amount = 45 WHERE id = 10"),
        DDL(
            "CREATE OR REPLACE VIEW big AS SELECT id, customer, (amount * 2)::numeric(10,2) AS amount, note "
            "FROM orders "
            "WHERE amount > 1"
        ),
    ),
)

SOURCE_RECREATED = Case(
    "source_dropped_and_recreated",
    "4 schema changes",
    steps=(
        DDL(
            "DROP TABLE orders; CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text, "
            "customer text, amount numeric(10,2)); INSERT INTO orders VALUES (1, 2, NULL, 'bob', 21), (2, 9, NULL, 'x', 1)"
        ),
        W("UPDATE orders SET amount = 22 WHERE id = 1"),
        # Same name, other column types and no primary key.
        DDL(
            "BEGIN; DROP TABLE orders; CREATE TABLE orders (id bigint, customer_id int, note text, customer varchar(9), "
            "amount numeric(12,3)); INSERT INTO orders VALUES (1, 1, NULL, 'alice', 21.125), (1, 1, NULL, 'alice', 21.125);"
            "COMMIT"
        ),
        W(
            "DELETE FROM orders WHERE ctid = (SELECT min(ctid) FROM orders); INSERT INTO orders VALUES (3, 3, NULL, 'c', 99)"
        ),
        DDL(
            "DROP TABLE events; CREATE TABLE events (kind text, v int); INSERT INTO events VALUES ('new', 1)"
        ),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Defect class 5: domain columns (a non-superuser dbt role; the owner's CHECK function)

DOMAIN_SETUP = """
CREATE TABLE domain_calls (who text NOT NULL);
GRANT SELECT, INSERT ON domain_calls TO PUBLIC;
CREATE FUNCTION value_ok(v numeric) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.domain_calls (who) VALUES (current_user);
  IF current_user = '{dbt}' THEN
    RAISE EXCEPTION 'the owner''s domain check ran as the dbt role %', current_user;
  END IF;
  RETURN v >= 0;
END $$;
CREATE DOMAIN checked_amount AS numeric(10,2) CHECK (value_ok(VALUE));
CREATE DOMAIN checked_id AS int CHECK (value_ok(VALUE));
CREATE DOMAIN checked_small AS checked_amount CHECK (VALUE < 1000);
CREATE DOMAIN checked_tag AS text CHECK (value_ok(length(VALUE)));
CREATE TABLE payments (id checked_id PRIMARY KEY, customer text, amount checked_amount, fee checked_small,
  tags checked_tag[]);
INSERT INTO payments VALUES (1, 'alice', 10, 1, '{a,b}'), (2, 'bob', 20, 2, '{}'), (3, 'alice', 5, NULL, NULL);
"""


def _domain_check_never_ran_as_dbt(ctx: Ctx) -> None:
    callers = sorted({r[0] for r in rows(ctx.admin, "SELECT who FROM domain_calls")})
    assert ctx.roles["dbt"] not in callers, f"the owner's domain CHECK function ran as {callers}"


DOMAIN_CHECK = Case(
    "domain_check_calls_owner_function",
    "5 domain columns",
    roles=True,
    setup=DOMAIN_SETUP,
    shapes=(
        Shape(
            "pay_totals",
            "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM payments GROUP BY customer",
        ),
        Shape("pay_rows", "SELECT id, customer, amount, fee, tags FROM payments WHERE amount > 1"),
        Shape("pay_by_fee", "SELECT fee, tags, COUNT(*) AS n FROM payments GROUP BY fee, tags"),
        Shape("pay_by_amount", "SELECT amount, COUNT(*) AS n FROM payments GROUP BY amount"),
    ),
    steps=(
        W("INSERT INTO payments VALUES (4, 'carol', 7, 3, '{c}')"),
        W("UPDATE payments SET amount = 11, tags = '{z}' WHERE id = 1; DELETE FROM payments WHERE id = 2"),
        W("TRUNCATE payments; INSERT INTO payments VALUES (5, 'dan', 1, 1, '{d}')"),
        W("UPDATE orders SET amount = 1 WHERE id = 1"),
    ),
    finally_check=_domain_check_never_ran_as_dbt,
)

NOT_NULL_DOMAIN = Case(
    "not_null_domain_column",
    "5 domain columns",
    setup="""
CREATE DOMAIN required_text AS text NOT NULL;
CREATE DOMAIN required_amount AS numeric(10,2) NOT NULL CHECK (VALUE > -1000);
CREATE TABLE invoices (id int PRIMARY KEY, label required_text, amount required_amount);
INSERT INTO invoices VALUES (1, 'a', 1), (2, 'b', 2);
CREATE TABLE notes (label required_text);
INSERT INTO notes VALUES ('x'), ('x');
""",
    shapes=(
        Shape(
            "invoice_totals", "SELECT label, SUM(amount) AS total, COUNT(*) AS n FROM invoices GROUP BY label"
        ),
        Shape("invoice_rows", "SELECT id, label, amount FROM invoices"),
        Shape("note_rows", "SELECT label FROM notes"),
    ),
    steps=(
        W("INSERT INTO invoices VALUES (3, 'a', 3); INSERT INTO notes VALUES ('y')"),
        W(
            "UPDATE invoices SET label = 'c' WHERE id = 1; DELETE FROM invoices WHERE id = 2; DELETE FROM notes"
        ),
        W("TRUNCATE invoices; INSERT INTO invoices VALUES (9, 'z', 9)"),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Defect class 9: key columns of types with btree but no hash support (money, bit, bit varying)

HASHLESS = Case(
    "keys_without_hash_support",
    "9 btree-only key types",
    standard=False,
    setup="""
CREATE TABLE ledger (code varbit PRIMARY KEY, price money, qty int);
CREATE TABLE tags (code bit(4) PRIMARY KEY, label text, n int);
CREATE TABLE ledger_log (price money, flags bit(3));
CREATE TYPE priced AS (p money, q int);
CREATE TABLE baskets (id int PRIMARY KEY, item priced, prices money[]);
INSERT INTO baskets VALUES (1, ROW(1.00, 1), '{1.00,2.00}'), (2, ROW(1.00, 1), '{1.00,2.00}'), (3, NULL, NULL);
INSERT INTO ledger VALUES (B'1', 1.50, 2), (B'10', 1.50, 3), (B'101', 2.00, 0), (B'0', NULL, 1);
INSERT INTO tags VALUES (B'0001', 'one', 1), (B'0010', 'two', 2), (B'0011', 'three', 3);
INSERT INTO ledger_log VALUES (1.00, B'101'), (1.00, B'101'), (NULL, B'000');
""",
    shapes=(
        Shape(
            "by_price", "SELECT price, COUNT(*) AS n, SUM(qty) AS q FROM ledger GROUP BY price", mode="auto"
        ),
        Shape("ledger_rows", "SELECT code, price, qty FROM ledger WHERE qty > 0", mode="auto"),
        Shape(
            "tagged",
            "SELECT t.code, t.label, l.code AS ledger_code FROM tags t JOIN ledger l ON l.qty = t.n",
            mode="auto",
        ),
        Shape("log_rows", "SELECT price, flags FROM ledger_log", mode="auto"),
        Shape("by_flags", "SELECT flags, COUNT(*) AS n FROM ledger_log GROUP BY flags", mode="auto"),
        Shape("by_item", "SELECT item, COUNT(*) AS n FROM baskets GROUP BY item", mode="auto"),
        Shape(
            "by_prices",
            "SELECT prices, COUNT(*) AS n, SUM(id) AS ids FROM baskets GROUP BY prices",
            mode="auto",
        ),
        Shape("basket_rows", "SELECT item, prices FROM baskets WHERE id > 0", mode="auto"),
    ),
    steps=(
        W(
            "INSERT INTO ledger VALUES (B'11', 2.00, 3); INSERT INTO ledger_log VALUES (1.00, B'101');"
            "INSERT INTO baskets VALUES (4, ROW(2.00, 1), '{1.00}'); UPDATE baskets SET item = ROW(3.00, 2) WHERE id = 2"
        ),
        W(
            "UPDATE ledger SET price = 3.25 WHERE code = B'1'; UPDATE ledger SET code = B'111' WHERE code = B'10'"
        ),
        W(
            "DELETE FROM ledger WHERE price IS NULL; UPDATE tags SET label = 'uno' WHERE code = B'0001';"
            "DELETE FROM ledger_log WHERE ctid = (SELECT min(ctid) FROM ledger_log WHERE flags = B'101')"
        ),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Write shapes that must simply work (MERGE, upserts, COPY, savepoints, deferred work, partitions, ...)

MERGE = Case(
    "merge_statement",
    "write shapes",
    differential=True,
    steps=(
        W(
            "MERGE INTO orders o USING (VALUES (1, 60.00), (10, 11.00), (4, NULL), (2, 31.00)) AS s (id, amount) "
            "ON o.id = s.id WHEN MATCHED AND s.amount IS NULL THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET amount = s.amount, customer = 'merged' "
            "WHEN NOT MATCHED THEN INSERT (id, customer_id, customer, amount) VALUES (s.id, 1, 'alice', s.amount)"
        ),
        W(
            "MERGE INTO events e USING (VALUES ('a', 5), ('q', 6)) AS s (kind, v) ON e.kind = s.kind "
            "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.kind, s.v)"
        ),
        W(
            "MERGE INTO customers c USING (SELECT 2 AS id) s ON c.id = s.id WHEN MATCHED THEN DELETE;"
            "MERGE INTO customers c USING (SELECT 2 AS id, 'bobby' AS name) s ON c.id = s.id "
            "WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.name, 'new')"
        ),
    ),
)

UPSERT = Case(
    "insert_on_conflict",
    "write shapes",
    differential=True,
    steps=(
        W(
            "INSERT INTO orders VALUES (1, 2, NULL, 'bob', 1), (11, 1, NULL, 'x', 21) ON CONFLICT (id) "
            "DO UPDATE SET amount = EXCLUDED.amount + orders.amount, customer = EXCLUDED.customer"
        ),
        W("INSERT INTO orders VALUES (2, 2, NULL, 'zzz', 1), (12, 2, NULL, 'y', 22) ON CONFLICT DO NOTHING"),
        W(
            "INSERT INTO customers VALUES (1, 'ann', 'p'), (5, 'eve', NULL) ON CONFLICT (id) DO UPDATE "
            "SET name = EXCLUDED.name WHERE customers.tier IS NOT NULL"
        ),
    ),
)


def _copy_rows(ctx: Ctx) -> None:
    where = "copy_from_stdin"
    user_copy(
        ctx,
        "writer",
        "COPY orders (id, customer_id, customer, amount) FROM STDIN WITH (FORMAT csv)",
        '10,1,alice,61\n11,,,\n12,2,"b,ob",22.5\n',
        where,
    )
    user_copy(ctx, "writer", "COPY events FROM STDIN", "a\t1\na\t1\n\\N\t\\N\nz\t-3\n", where)


def _copy_in_transaction(ctx: Ctx) -> None:
    user_sql(ctx, "writer", "BEGIN; DELETE FROM orders WHERE id = 10", "write", "copy_from_stdin")
    user_copy(
        ctx, "writer", "COPY orders (id, customer, amount) FROM STDIN", "10\tcopied\t99\n", "copy_from_stdin"
    )
    user_sql(ctx, "writer", "COMMIT", "write", "copy_from_stdin")


COPY = Case(
    "copy_from_stdin",
    "write shapes",
    differential=True,
    steps=(
        Call(_copy_rows, "COPY orders, events FROM STDIN"),
        Call(_copy_in_transaction, "DELETE; COPY same key"),
    ),
)

SAVEPOINTS = Case(
    "savepoints_rolled_back_and_released",
    "write shapes",
    differential=True,
    steps=(
        W(
            "BEGIN; INSERT INTO orders VALUES (10, 1, NULL, 'alice', 70); SAVEPOINT a;"
            "UPDATE orders SET amount = 0 WHERE id = 10; ROLLBACK TO SAVEPOINT a; SAVEPOINT b;"
            "DELETE FROM orders WHERE id = 2; RELEASE SAVEPOINT b; SAVEPOINT c; INSERT INTO events VALUES ('s', 1);"
            "SAVEPOINT d; DELETE FROM events; RELEASE d; ROLLBACK TO c; UPDATE orders SET amount = 71 WHERE id = 10;"
            "COMMIT"
        ),
        W(
            "BEGIN; SAVEPOINT a; UPDATE orders SET amount = 1 WHERE id = 1; RELEASE a; SAVEPOINT b;"
            "UPDATE orders SET amount = 2 WHERE id = 1; ROLLBACK TO b; ROLLBACK"
        ),
        W(
            "BEGIN; SAVEPOINT a; DELETE FROM orders WHERE id = 1; ROLLBACK TO a; SAVEPOINT b;"
            "INSERT INTO orders VALUES (40, 3, NULL, 'never', 41); ROLLBACK TO b;"
            "UPDATE orders SET customer = 'kept' WHERE id = 1; COMMIT"
        ),
    ),
)

DEFERRED_WORK = Case(
    "deferred_constraint_trigger",
    "write shapes / 1 order of capture (a constraint trigger set IMMEDIATE)",
    setup="""
CREATE FUNCTION orders_settle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE orders SET amount = amount + 100, note = 'settled' WHERE id = NEW.id; RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER orders_settle AFTER INSERT ON orders DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION orders_settle();
ALTER TABLE orders ADD CONSTRAINT orders_customer_fk FOREIGN KEY (customer_id) REFERENCES customers (id)
  DEFERRABLE INITIALLY DEFERRED;
""",
    steps=(
        W(
            "BEGIN; INSERT INTO orders VALUES (10, 7, NULL, 'g', 1); INSERT INTO customers VALUES (7, 'gus', NULL); COMMIT"
        ),
        W(
            "BEGIN; INSERT INTO orders VALUES (11, 1, NULL, 'alice', 2); UPDATE orders SET amount = 5 WHERE id = 11;"
            "DELETE FROM orders WHERE id = 1; COMMIT"
        ),
        W(
            "BEGIN; SET CONSTRAINTS orders_settle IMMEDIATE; INSERT INTO orders VALUES (12, 2, NULL, 'bob', 3);"
            "UPDATE orders SET amount = amount * 2 WHERE id = 12; COMMIT"
        ),
    ),
)

PARTITIONED = Case(
    "partitioned_source",
    "write shapes (3: partitions)",
    setup="""
CREATE TABLE sales (id int, region text, amount numeric(10,2), PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE sales_n PARTITION OF sales FOR VALUES IN ('n');
CREATE TABLE sales_s PARTITION OF sales FOR VALUES IN ('s');
CREATE TABLE sales_other PARTITION OF sales DEFAULT;
INSERT INTO sales VALUES (1, 'n', 10), (2, 's', 20), (3, 'x', 30);
""",
    shapes=(
        Shape(
            "region_totals", "SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM sales GROUP BY region"
        ),
        Shape("big_sales", "SELECT id, region, amount FROM sales WHERE amount > 15"),
        Shape("sales_names", "SELECT s.id, s.region, c.name FROM sales s JOIN customers c ON c.id = s.id"),
    ),
    steps=(
        W(
            "INSERT INTO sales VALUES (4, 'n', 40), (5, 'q', 50); UPDATE sales SET amount = amount + 1 WHERE id = 1"
        ),
        W(
            "INSERT INTO sales_n VALUES (6, 'n', 60); DELETE FROM sales_s WHERE id = 2; UPDATE sales_other SET amount = 1"
        ),
        W("UPDATE sales SET region = 's' WHERE id = 4"),  # moves to another partition
        DDL(
            "CREATE TABLE sales_e (id int, region text, amount numeric(10,2), PRIMARY KEY (id, region));"
            "INSERT INTO sales_e VALUES (7, 'e', 70); ALTER TABLE sales ATTACH PARTITION sales_e FOR VALUES IN ('e')"
        ),
        W("INSERT INTO sales_e VALUES (8, 'e', 80)"),
        DDL("CREATE TABLE sales_w PARTITION OF sales FOR VALUES IN ('w')", refresh=False),
        W("INSERT INTO sales_w VALUES (9, 'w', 90); INSERT INTO sales VALUES (10, 'w', 100)"),
        DDL(
            "CREATE TABLE sales_z (id int, region text, amount numeric(10,2), PRIMARY KEY (id, region)) "
            "PARTITION BY RANGE (id); CREATE TABLE sales_z1 PARTITION OF sales_z FOR VALUES FROM (0) TO (100);"
            "INSERT INTO sales_z VALUES (11, 'z', 11); ALTER TABLE sales ATTACH PARTITION sales_z FOR VALUES IN ('z')",
            refresh=False,
        ),
        W("INSERT INTO sales_z1 VALUES (12, 'z', 12)"),
        DDL("ALTER TABLE sales DETACH PARTITION sales_n", refresh=False),
        W(
            "INSERT INTO sales_n VALUES (13, 'n', 13); UPDATE sales SET amount = amount + 1 WHERE region = 'e'"
        ),
    ),
)

TRUNCATES = Case(
    "truncate_variants",
    "write shapes",
    steps=(
        W("TRUNCATE events"),
        W(
            "INSERT INTO events VALUES ('t', 1); TRUNCATE orders, customers; INSERT INTO orders VALUES (1, 1, NULL, 'a', 21)"
        ),
        W("BEGIN; TRUNCATE orders; INSERT INTO orders VALUES (2, 1, NULL, 'b', 22); ROLLBACK"),
        W("INSERT INTO customers VALUES (1, 'alice', 'gold')"),
    ),
)


def _interleave_open(ctx: Ctx) -> None:
    where = "interleaved_transactions, open"
    user_sql(ctx, "writer", "BEGIN; UPDATE orders SET amount = 1 WHERE id = 1", "write", where)
    user_sql(ctx, "writer2", "BEGIN; INSERT INTO orders VALUES (30, 2, NULL, 'bob', 33)", "write", where)
    user_sql(ctx, "writer", "INSERT INTO events VALUES ('i', 1)", "write", where)
    user_sql(
        ctx,
        "writer2",
        "DELETE FROM events WHERE kind = 'a'; UPDATE customers SET tier = 'w2' WHERE id = 2",
        "write",
        where,
    )


def _interleave_commit_second(ctx: Ctx) -> None:
    where = "interleaved_transactions, second commits"
    user_sql(ctx, "writer", "DELETE FROM orders WHERE id = 2", "write", where)
    user_sql(ctx, "writer2", "UPDATE orders SET amount = 34 WHERE id = 30; COMMIT", "write", where)


def _interleave_commit_first(ctx: Ctx) -> None:
    where = "interleaved_transactions, first commits"
    # Sees writer2's committed row 30 (READ COMMITTED) and changes it before committing.
    user_sql(
        ctx,
        "writer",
        "UPDATE orders SET amount = amount + 1, customer = 'w1' WHERE id IN (1, 30); COMMIT",
        "write",
        where,
    )


def _interleave_repeatable_read(ctx: Ctx) -> None:
    where = "interleaved_transactions, repeatable read"
    user_sql(
        ctx, "writer", "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM orders", "write", where
    )
    user_sql(ctx, "writer2", "INSERT INTO orders VALUES (31, 1, NULL, 'alice', 41)", "write", where)
    user_sql(ctx, "writer", "INSERT INTO orders VALUES (32, 1, NULL, 'alice', 42); COMMIT", "write", where)


INTERLEAVED = Case(
    "interleaved_transactions_on_two_connections",
    "write shapes",
    differential=True,
    steps=(
        Call(_interleave_open, "two transactions open"),
        Call(_interleave_commit_second, "the second commits"),
        Call(_interleave_commit_first, "the first commits"),
        Call(_interleave_repeatable_read, "a repeatable read writer"),
    ),
)

ROLE_SEPARATED = Case(
    "role_separated_workload",
    "write shapes (non-superuser dbt role, non-owner writer)",
    roles=True,
    steps=(
        W("INSERT INTO orders VALUES (10, 1, NULL, 'alice', 70) ON CONFLICT (id) DO UPDATE SET amount = 1"),
        W(
            "MERGE INTO orders o USING (VALUES (2, 1.00), (11, 12.00)) AS s (id, amount) ON o.id = s.id "
            "WHEN MATCHED THEN UPDATE SET amount = s.amount WHEN NOT MATCHED THEN "
            "INSERT (id, customer_id, customer, amount) VALUES (s.id, 2, 'bob', s.amount)"
        ),
        W("DELETE FROM customers WHERE id = 3; INSERT INTO events VALUES ('a', 1)"),
        W("TRUNCATE events"),
        DDL("ALTER TABLE orders ADD COLUMN extra int"),
        W("UPDATE orders SET extra = 1, amount = 77 WHERE id = 1"),
    ),
)

CASES: tuple[Case, ...] = (
    ROW_TRIGGER_SAME_ROW,
    STATEMENT_TRIGGER_SAME_TABLE,
    TRIGGER_WRITES_OTHER_SOURCE,
    WRITABLE_CTE,
    DEFERRED_PK,
    SELF_FK_CASCADE,
    SOURCE_COLUMNS_LIKE_INTERNALS,
    OUTPUT_COLUMNS_LIKE_INTERNALS,
    LONG_PRIMARY_KEY,
    ODD_IDENTIFIERS,
    SUBQUERY_REWRITES,
    SQL_SYNTAX_IDENTIFIERS,
    DOLLAR_QUOTE_NAMES,
    DOTTED_NAMES,
    REPLICATION_ROLE,
    DISABLE_TRIGGER_ALL,
    REPLICATION_ROLE_NOT_OWNER,
    INHERITANCE_CHILD,
    TABLE_SWAP,
    VIRTUAL_GENERATED,
    ALTER_TYPE_USING,
    DROP_READD_COLUMN,
    SELECT_STAR,
    TEXT_TO_INT,
    PRIMARY_KEY_CHANGES,
    NUMERIC_TYPMOD,
    DDL_BETWEEN_WRITES,
    VIEW_REPLACED,
    SOURCE_RECREATED,
    DOMAIN_CHECK,
    NOT_NULL_DOMAIN,
    HASHLESS,
    MERGE,
    UPSERT,
    COPY,
    SAVEPOINTS,
    DEFERRED_WORK,
    PARTITIONED,
    TRUNCATES,
    INTERLEAVED,
    ROLE_SEPARATED,
)
assert len({c.name for c in CASES}) == len(CASES)


def server_version(conn: Any) -> int:
    return int(value(conn, "SHOW server_version_num"))
