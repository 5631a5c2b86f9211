"""IMMEDIATE maintenance: the stream table changes inside the writer's own transaction.

One PL/pgSQL trigger function per stream table, installed by `dbt run` on every source (and every
table below it), holds the statements `immediate_sql` rendered; no Python runs at write time.
Following one row: ``INSERT INTO orders VALUES (7, 'alice', 20.00)`` with ``customer_totals``:

1. the BEFORE STATEMENT trigger counts one statement under way for the stream table (a transaction-
   local setting, so a rolled-back savepoint or statement takes its count back with it);
2. the AFTER INSERT STATEMENT trigger counts it done. None is left under way, so it applies its own
   transition table now: it first takes its turn on the stripe alice's name hashes to (a row of
   ``immediate_turns``, locked until commit; writers of other customers hold other stripes and go
   on at once, and under READ COMMITTED the statement after it sees what the writer before it on
   that stripe committed), then runs the INSERT MERGE: alice's group gains 20.00 and one order;
3. the writer's next SELECT, in the same transaction, sees the new total. A ROLLBACK takes it away.

What a write conflicts on is decided at `dbt run` (`immediate_keys`): the group keys, or the join
column, so the classic anomaly of two transactions inserting the two halves of a join meets on one
stripe and cannot lose the joined row: the second one's delta reads the first one's committed half.
A query with no such columns makes every write take every stripe (writers take turns), as do a
TRUNCATE's recompute and a combined statement. Each turn updates its stripe rows, so under REPEATABLE
READ or SERIALIZABLE a writer whose snapshot predates another's commit on a shared stripe gets
PostgreSQL's serialization error (retry) and never a wrong stream table. Two writers that take
stripes in opposite orders over several statements can deadlock; PostgreSQL then fails one of them.

One statement can change several sources, or one source twice (a writable CTE, ``INSERT … ON
CONFLICT DO UPDATE``, a trigger or an FK cascade writing another source): their AFTER triggers fire one
by one, each after all the changes. While statements are still under way, a trigger only keeps its
rows in a ``pending`` temp table; the last one applies all of them with the `combined` statement,
whose delta is exactly what every source's change contributes (inclusion–exclusion over the states
now). A TRUNCATE recomputes the stream table. A failure that is not a serialization failure, a
deadlock or a lock timeout never fails the write: the stream table is marked for a rebuild at the
next ``dbt run`` (``needs_full``) and the writer gets a WARNING.

The function is SECURITY DEFINER (the dbt role, which built the stream table and reads its sources;
a writer needs no rights on either) with its search_path, time zone and date styles pinned at
install (`pinned_settings`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from dbt_ivm.apply import multiset
from dbt_ivm.catalog import TableInfo
from dbt_ivm.layout import HASH
from dbt_ivm.postgres import outside_writes, user_triggers
from dbt_ivm.postgres.apply import NO_JIT
from dbt_ivm.postgres.capture import IMMEDIATE_TRIGGER_PREFIX, TREE_SQL, enum_labels
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.immediate_sql import (
    EVENTS,
    NEW_ROWS,
    OLD_ROWS,
    STRIPES,
    ExplicitPath,
    Statements,
    pending_insert,
)
from dbt_ivm.postgres.in_database import tag_of
from dbt_ivm.quoting import dollar_quoted
from dbt_ivm.reserved import internal_columns
from dbt_ivm.sqltext import WEIGHT, lit, q, qn

# Bump when the function's text changes in a way an installed one must not keep.
IMMEDIATE_VERSION = 4
STATE_TABLE = "immediate_state"
TURNS_TABLE = "immediate_turns"
TRIGGER_PREFIX = IMMEDIATE_TRIGGER_PREFIX
# The function's one variable (a source column of that name is renamed by the engine, and columns
# win over variables anyway: `#variable_conflict use_column`).
EMPTY = "__ivm_empty"
INSUFFICIENT_PRIVILEGE = "42501"
UNDEFINED_FUNCTION = "42883"
# Errors that must reach the writer: its transaction is to be retried, or it asked not to wait.
PASSED_ON = ("serialization_failure", "deadlock_detected", "lock_not_available")
# How many times one statement recomputes while user triggers on the stream table keep writing its
# sources mid-apply, before it gives up (the next dbt run rebuilds).
RECOMPUTE_ROUNDS = 8


def function_name(stream_table: str) -> str:
    return f"immediate_{tag_of(stream_table)}"


def pending_table(stream_table: str, index: int, source: TableInfo) -> str:
    """The session's temp table of source `index`'s pending rows. Its name carries the source's column
    types: a pooled session that kept one from before a column changed type never reuses it."""
    types = hashlib.sha256(repr([(c.name, c.declared_type()) for c in source.columns]).encode()).hexdigest()[
        :8
    ]
    return f"__ivm_pending_{tag_of(stream_table)}_{index}_{types}"


def pending_relation(stream_table: str, index: int, source: TableInfo) -> str:
    """`pending_table`, quoted and qualified by pg_temp (a writer's own table of that name is never read)."""
    return f"pg_temp.{q(pending_table(stream_table, index, source))}"


@dataclass(frozen=True)
class Settings:
    """The transaction-local settings one stream table's triggers share."""

    under_way: str  # statements whose AFTER trigger has not fired yet
    pending: str  # 'on': rows wait in the pending tables
    full: str  # 'on': recompute (a TRUNCATE happened, or a user trigger wrote a source mid-apply)
    applying: str  # 'on': explicit DML is writing the stream table (its user triggers may write sources)

    @staticmethod
    def of(stream_table: str) -> Settings:
        tag = tag_of(stream_table)
        names = (f"dbt_ivm.{kind}_{tag}" for kind in ("under_way", "pending", "full", "applying"))
        return Settings(*names)


def _setting(name: str) -> str:
    return f"COALESCE(NULLIF(pg_catalog.current_setting({lit(name)}, true), ''), '')"


def _set(name: str, value: str) -> str:
    return f"PERFORM pg_catalog.set_config({lit(name)}, {value}, true);"


def _under_way(settings: Settings) -> str:
    return f"COALESCE(NULLIF({_setting(settings.under_way)}, '')::int, 0)"


def _stash(catalog: str, stream_table: str, index: int, source: TableInfo) -> str:
    """Keep this statement's rows in the source's pending table (created once per session)."""
    table = pending_relation(stream_table, index, source)
    names = ", ".join(q(c) for c in internal_columns(source))
    copies = {
        "INSERT": [(1, NEW_ROWS)],
        "DELETE": [(-1, OLD_ROWS)],
        "UPDATE": [(-1, OLD_ROWS), (1, NEW_ROWS)],
    }
    branches = []
    for event in EVENTS:
        inserts = " ".join(
            f"INSERT INTO {table} ({q(WEIGHT)}, {names}) SELECT {weight}, "
            + ", ".join(f"r.{q(c)}" for c in source.column_names())
            + f" FROM {q(rows)} AS r;"
            for weight, rows in copies[event]
        )
        branches.append(f"TG_OP = {lit(event)} THEN {inserts}")
    return "IF " + " ELSIF ".join(branches) + " END IF;"


def create_pending(stream_table: str, sources: list[TableInfo]) -> str:
    """Create the pending tables once per session, and make sure they are ours: a writer could have
    created one under that name first (then its DEFAULTs or triggers would run with our rights)."""
    statements = []
    for index, source in enumerate(sources):
        columns = "".join(
            f", {q(n)} {c.declared_type()}"
            for n, c in zip(internal_columns(source), source.columns, strict=True)
        )
        name = q(pending_table(stream_table, index, source))
        statements.append(_own_temp_table(name, f"({q(WEIGHT)} smallint NOT NULL{columns})"))
    return " ".join(statements)


def _own_temp_table(name: str, definition: str) -> str:
    """Create temp table `name` (quoted) once per session, and make sure it is ours: a writer could
    have created one under that name first (then its DEFAULTs or triggers would run with our rights)."""
    return f"{_create_once(name, definition)} IF NOT {_ours(name)} THEN RAISE EXCEPTION 'dbt-ivm: % is not dbt-ivm''s own', {lit(name)}; END IF;"


def _create_once(name: str, definition: str) -> str:
    return f"IF pg_catalog.to_regclass({lit('pg_temp.' + name)}) IS NULL THEN CREATE TEMP TABLE {name} {definition}; END IF;"


def _ours(name: str) -> str:
    """SQL: temp table `name` belongs to this function's role and has no triggers or rules."""
    return (
        f"COALESCE((SELECT c.relowner = r.oid AND NOT c.relhastriggers AND NOT c.relhasrules "
        f"FROM pg_catalog.pg_class c, pg_catalog.pg_roles r WHERE c.oid = pg_catalog.to_regclass("
        f"{lit('pg_temp.' + name)}) AND r.rolname = current_user), false)"
    )


def rows_table(stream_table: str, shape: object) -> str:
    """The session's temp table of rows the explicit path applies. Its name carries a digest of the
    stream table's `shape` (columns and types): a pooled session never reuses one of another shape."""
    return f"__ivm_rows_{tag_of(stream_table)}_{hashlib.sha256(repr(shape).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Explicit:
    """How the function picks explicit DML over the MERGE (user triggers on the stream table)."""

    path: ExplicitPath | None
    stream_table: str
    relation: str
    always: str  # SQL: true when user_triggers='on' (then explicit DML even without user triggers)
    applying: str  # the setting that is 'on' while explicit DML writes the stream table

    def wanted(self) -> str:
        """Always with user_triggers='on'; with 'auto' when the stream table has user triggers now
        (looked up per write: a trigger created since `dbt run` counts at once)."""
        if self.always == "true":
            return "true"
        found = user_triggers.enabled_condition(f"pg_catalog.to_regclass({lit(self.relation)})")
        exists = f"EXISTS (SELECT FROM pg_catalog.pg_trigger t WHERE {found})"
        return exists if self.always == "false" else f"({self.always} OR {exists})"

    def or_merge(self, fill: str, merge: str) -> str:
        """`fill` the rows table, then apply its rows, when explicit DML is wanted and the session's
        rows table is ours (a writer may have taken its name: then the MERGE, whose row triggers fire
        too); else `merge`. Either writes the stream table as dbt-ivm (postgres.outside_writes)."""
        return outside_writes.marked(self.stream_table, self._or_merge(fill, merge))

    def _or_merge(self, fill: str, merge: str) -> str:
        path = self.path
        if path is None:
            return merge
        name = path.rows.removeprefix('"pg_temp".')
        # Only the columns and their types: no constraint or default of the stream table comes along.
        # The rows' key hash and a multiset value's stored count are theirs alone (the stream table
        # stores neither).
        own = (HASH, multiset.STORED_COUNT)
        columns = ", ".join(f"NULL::bigint AS {q(c)}" if c in own else q(c) for c in path.columns)
        definition = f"AS SELECT {columns}, NULL::bigint AS {q(WEIGHT)} FROM {self.relation} WITH NO DATA"
        return (
            f"IF {self.wanted()} THEN {_create_once(name, definition)} "
            f"IF {_ours(name)} THEN {fill} {self._apply_rows(path)} ELSE {merge} END IF; "
            f"ELSE {merge} END IF;"
        )

    def _apply_rows(self, path: ExplicitPath) -> str:
        """Apply the rows table with only the statements that change something, then empty it; warn
        when a BEFORE row trigger changed or skipped rows (the table then differs from its query).
        The rows were computed against the stream table as it was: a user trigger that writes a
        source between the three statements gets the stream table recomputed afterwards (`applying`)."""
        counted = (
            "__ivm_inserted, __ivm_updated, __ivm_deleted" if path.update else "__ivm_inserted, __ivm_deleted"
        )
        update = f"IF __ivm_updated > 0 THEN {path.update}; END IF; " if path.update else ""
        before_row = user_triggers.enabled_condition(f"pg_catalog.to_regclass({lit(self.relation)})")
        before = user_triggers.ROW | user_triggers.BEFORE
        before_row += f" AND (t.tgtype & {before}) = {before}"
        on, off = _set(self.applying, "'on'"), _set(self.applying, "'off'")
        return (
            f"SELECT * INTO {counted} FROM ({path.counts}) AS c; {on} "
            f"IF __ivm_deleted > 0 THEN {path.delete}; END IF; {update}"
            f"IF __ivm_inserted > 0 THEN {path.insert}; END IF; {off} "
            f"IF EXISTS (SELECT FROM pg_catalog.pg_trigger t WHERE {before_row}) THEN "
            f"SELECT * INTO __ivm_differing FROM ({path.mismatches}) AS m; "
            f"IF __ivm_differing > 0 THEN RAISE WARNING 'dbt-ivm: % row(s) written to % read back different "
            f"from the query''s result: a BEFORE trigger changed or skipped them', __ivm_differing, "
            f"{lit(self.relation)}; END IF; END IF; DELETE FROM {path.rows};"
        )


def net_pending(stream_table: str, sources: list[TableInfo]) -> str:
    """Replace the rows of each pending table by their net effect, which `combined` reads."""
    statements = []
    for index, source in enumerate(sources):
        table = pending_relation(stream_table, index, source)
        names = ", ".join(q(c) for c in (WEIGHT, *internal_columns(source)))
        statements.append(pending_insert(table, source, f"DELETE FROM {table} RETURNING {names}") + ";")
    return " ".join(statements)


def clear_pending(stream_table: str, sources: list[TableInfo]) -> str:
    return " ".join(f"DELETE FROM {pending_relation(stream_table, i, t)};" for i, t in enumerate(sources))


def _turn(catalog: str, stream_table: str, stripes: str | None) -> str:
    """Take this statement's turn: lock (once, in stripe order, so two writers never wait on each
    other crosswise) and update its stripes' rows; None: every stripe."""
    turns, name = qn(catalog, TURNS_TABLE), lit(stream_table)
    which = "" if stripes is None else f" AND l.stripe = ANY (ARRAY({stripes}))"
    return (
        f"WITH l AS MATERIALIZED (SELECT l.stripe FROM {turns} AS l WHERE l.stream_table = {name}{which} "
        f"ORDER BY l.stripe FOR NO KEY UPDATE) UPDATE {turns} AS t SET writes = t.writes + 1 FROM l "
        f"WHERE t.stream_table = {name} AND t.stripe = l.stripe;"
    )


def _by_source(catalog: str, stream_table: str, statements: Statements, explicit: Explicit) -> str:
    """Apply this statement's own transition table: one branch per source and event, each taking
    its turn on the stripes its rows conflict on first."""
    path = statements.explicit
    branches = []
    for index, events in enumerate(statements.by_source):
        inner = []
        for event, text in events.items():
            if text is None:
                continue
            turn = _turn(
                catalog, stream_table, statements.stripes[index][event] if statements.stripes else None
            )
            rows = f"{path.by_source[index][event]};" if path is not None else ""
            inner.append(f"TG_OP = {lit(event)} THEN {turn} " + explicit.or_merge(rows, f"{text};"))
        body = ("IF " + " ELSIF ".join(inner) + " END IF;") if inner else "NULL;"
        branches.append(f"TG_ARGV[0] = {lit(str(index))} THEN {body}")
    return "IF " + " ELSIF ".join(branches) + " END IF;"


def _nothing_changed() -> str:
    """Set EMPTY when this statement touched no row (an UPDATE matching nothing, ON CONFLICT's unused
    half). One IF per transition table: a trigger has only its own, and an expression naming the
    other would not plan."""
    return (
        f"IF TG_OP = 'INSERT' THEN {EMPTY} := NOT EXISTS (SELECT FROM {q(NEW_ROWS)}); "
        f"ELSIF TG_OP IN ('UPDATE', 'DELETE') THEN {EMPTY} := NOT EXISTS (SELECT FROM {q(OLD_ROWS)}); END IF;"
    )


def function_sql(
    catalog: str,
    stream_table: str,
    relation: str,
    sources: list[TableInfo],
    statements: Statements,
    pinned: str,
    always_explicit: bool = False,
    key: tuple[str, ...] = (),
) -> str:
    """The trigger function of one stream table (see the module docstring). `always_explicit`:
    user_triggers='on' (apply through explicit DML even without user triggers). `key`: the stream
    table's key when its rows are found by `=` (no key column could be NULL when it was planned)."""
    s = Settings.of(stream_table)
    state = qn(catalog, STATE_TABLE)
    stash = "".join(
        f"{'IF' if i == 0 else 'ELSIF'} TG_ARGV[0] = {lit(str(i))} THEN {_stash(catalog, stream_table, i, t)} "
        for i, t in enumerate(sources)
    )
    failed = (
        f"UPDATE {qn(catalog, 'stream_tables')} SET needs_full = 'immediate maintenance failed: ' || SQLERRM "
        f"WHERE stream_table = {lit(stream_table)}; "
        f"IF pg_catalog.to_regclass({lit(relation)}) IS NOT NULL THEN "
        f"RAISE WARNING 'dbt-ivm: stream table % was not maintained (%): the next dbt run rebuilds it', "
        f"{lit(stream_table)}, SQLERRM; END IF;"
    )
    explicit = Explicit(
        statements.explicit, stream_table, relation, "true" if always_explicit else "false", s.applying
    )
    guard = _null_key_guard(relation, key)
    unhidden = _every_row_visible(stream_table, sources)
    path = statements.explicit
    passed_on = " OR ".join(PASSED_ON)
    body = f"""#variable_conflict use_column
DECLARE {EMPTY} boolean := false;
  __ivm_inserted bigint; __ivm_updated bigint; __ivm_deleted bigint; __ivm_differing bigint;
  __ivm_failed boolean := false;
BEGIN
  IF TG_WHEN = 'BEFORE' THEN
    {_set(s.under_way, f"({_under_way(s)} + 1)::text")}
    RETURN NULL;
  END IF;
  {_set(s.under_way, f"GREATEST({_under_way(s)} - 1, 0)::text")}
  {_nothing_changed()}
  IF TG_OP = 'TRUNCATE' OR {_setting(s.applying)} = 'on' THEN
    -- (a user trigger on the stream table wrote a source between our explicit statements: the rows
    -- they apply predate it, so the stream table is recomputed once they are done)
    {_set(s.full, "'on'")}
  ELSIF {EMPTY} THEN
    NULL;
  ELSIF {_under_way(s)} > 0 OR {_setting(s.pending)} = 'on' THEN
    BEGIN
      {create_pending(stream_table, sources)}
      {stash}END IF;
      {_set(s.pending, "'on'")}
    EXCEPTION WHEN {passed_on} THEN RAISE;
    WHEN OTHERS THEN {_set(s.full, "'on'")}  -- recompute instead, at the end of the statement
    END;
  ELSIF {_setting(s.full)} <> 'on' THEN
    BEGIN
      {unhidden}
      {_by_source(catalog, stream_table, statements, explicit)}
      {guard}
    EXCEPTION WHEN {passed_on} THEN RAISE;
    WHEN OTHERS THEN {failed}
    END;
    IF {_setting(s.full)} <> 'on' THEN
      RETURN NULL;
    END IF;
  END IF;
  IF {_under_way(s)} > 0 OR {_setting(s.applying)} = 'on'
     OR ({_setting(s.pending)} <> 'on' AND {_setting(s.full)} <> 'on') THEN
    RETURN NULL;
  END IF;
  {_turn(catalog, stream_table, None)}
  FOR __ivm_round IN 1..{RECOMPUTE_ROUNDS} LOOP
    BEGIN
      {unhidden}
      IF {_setting(s.full)} = 'on' THEN
        {_set(s.full, "'off'")}
        {explicit.or_merge(f"{path.full};" if path else "", f"{statements.full};")}
        -- A TRUNCATE gave the source new storage: this recompute accounts for it.
        UPDATE {state} SET storage = ({storage_sql(stream_table, sources)}) WHERE stream_table = {lit(stream_table)};
      ELSE
        {net_pending(stream_table, sources)}
        {explicit.or_merge(f"EXECUTE {lit(path.combined)};" if path else "", f"EXECUTE {lit(statements.combined)};")}
      END IF;
      {guard}
    EXCEPTION WHEN {passed_on} THEN RAISE;
    WHEN OTHERS THEN {failed} __ivm_failed := true;
    END;
    IF {_setting(s.pending)} = 'on' THEN
      {clear_pending(stream_table, sources)}
    END IF;
    {_set(s.pending, "'off'")}
    EXIT WHEN __ivm_failed OR {_setting(s.full)} <> 'on';
  END LOOP;
  IF {_setting(s.full)} = 'on' AND NOT __ivm_failed THEN
    UPDATE {qn(catalog, "stream_tables")} SET needs_full = 'immediate maintenance: user triggers on the stream table kept writing its sources' WHERE stream_table = {lit(stream_table)};
    RAISE WARNING 'dbt-ivm: stream table % was not maintained (user triggers on it kept writing its sources): the next dbt run rebuilds it', {lit(stream_table)};
  END IF;
  {_set(s.full, "'off'")}
  RETURN NULL;
END
"""
    return (
        f"CREATE OR REPLACE FUNCTION {qn(catalog, function_name(stream_table))}() RETURNS trigger "
        f"LANGUAGE plpgsql SECURITY DEFINER {pinned} SET jit = {NO_JIT} AS {dollar_quoted(body)}"
    )


def _null_key_guard(relation: str, key: tuple[str, ...]) -> str:
    """Fails the apply (undone; the stream table marked for a rebuild, the writer warned) when a row
    with a NULL key got in: a key column's NOT NULL was dropped since `dbt run`, and `=` cannot find
    such rows again. The key's index answers it."""
    if not key:
        return ""
    nulls = " OR ".join(f"{q(k)} IS NULL" for k in key)
    message = lit(f"a key column of {relation} can be NULL now (its NOT NULL was dropped)")
    return f"IF EXISTS (SELECT FROM {relation} WHERE {nulls}) THEN RAISE EXCEPTION '%', {message}; END IF;"


def _every_row_visible(stream_table: str, sources: list[TableInfo]) -> str:
    """Fail the maintenance (never the write: it is flagged for the next run) once row-level security
    applies to the dbt role on a source, as after a policy added since `dbt run`: the role would read
    fewer rows than the stream table was built from."""
    hidden = " OR ".join(
        f"pg_catalog.row_security_active({lit(t.identity)}::pg_catalog.oid)" for t in sources
    )
    message = lit(f"row-level security applies to the dbt role on a source of {stream_table}")
    return f"IF {hidden} THEN RAISE EXCEPTION '%', {message}; END IF;"


def storage_sql(stream_table: str, sources: list[TableInfo]) -> str:
    """Where every table of every source's tree keeps its rows (relfilenode: a statement that rewrites
    a table, possibly changing its values, fires no trigger but changes it), and our triggers' rows
    (disabling one and enabling it again rewrites its row: writes in between went unmaintained), as
    one JSON array. The function stores it anew after a TRUNCATE it recomputed for."""
    ours = lit(f"{TRIGGER_PREFIX}{tag_of(stream_table)}")
    parts = [
        "(WITH RECURSIVE tree(relid) AS (SELECT "
        f"{lit(source.identity)}::pg_catalog.oid UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i "
        "JOIN tree ON i.inhparent = tree.relid) SELECT pg_catalog.jsonb_build_array("
        "(SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(c.oid::bigint, "
        "c.relfilenode::bigint) ORDER BY c.oid), '[]') FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.relid), "
        "(SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(t.tgname, t.xmin::text, t.tgenabled) "
        "ORDER BY t.tgrelid, t.tgname), '[]') FROM pg_catalog.pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
        f"WHERE pg_catalog.starts_with(t.tgname, {ours})))"
        # The labels of its enums (a value renamed shows otherwise as text); none: as before.
        " || "
        + enum_labels(
            "(SELECT attnum, atttypid FROM pg_catalog.pg_attribute WHERE attrelid = "
            f"{lit(source.identity)}::pg_catalog.oid AND attnum > 0 AND NOT attisdropped) AS a"
        )
        + ")"
        for source in sources
    ]
    return f"SELECT pg_catalog.jsonb_build_array({', '.join(parts)})"


def storage(db: Db, stream_table: str, sources: list[TableInfo]) -> object:
    """`storage_sql`'s array now."""
    return db.value(storage_sql(stream_table, sources).replace("%", "%%"))


def digest(inputs: str) -> str:
    """What an installed function is compared by: the digest of what it was rendered from
    (installed.immediate_digest) and the version of this module."""
    return hashlib.sha256(f"{IMMEDIATE_VERSION}\n{inputs}".encode()).hexdigest()


def pinned_settings(db: Db) -> str:
    """The SET clauses a maintenance or refresh function runs under, as the install session had them.

    The search path: the session's schemas behind pg_catalog (built-ins cannot be shadowed), then
    pg_temp, so the model's unqualified functions and types resolve as they did when `dbt run`
    compiled it; a schema where every role may create objects is left out (a writer could plant an
    overload there). The time zone and date and interval styles: a timestamptz cast to a date or to
    text gives what `dbt run`'s session gives, whatever session writes or calls."""
    schemas = [
        str(r[0])
        for r in db.rows(
            "SELECT s FROM unnest(current_schemas(false)) WITH ORDINALITY AS p(s, n) "
            "WHERE NOT has_schema_privilege('public', s, 'CREATE') ORDER BY n"
        )
    ]
    path = ", ".join(["pg_catalog", *(q(s) for s in schemas if s != "pg_catalog"), "pg_temp"])
    row = db.one(
        "SELECT current_setting('TimeZone'), current_setting('DateStyle'), current_setting('IntervalStyle')"
    )
    assert row is not None
    zone, dates, intervals = (lit(str(v)) for v in row)
    return (
        f"SET search_path = {path} SET TimeZone = {zone} SET DateStyle = {dates} SET IntervalStyle = {intervals} "
        "SET standard_conforming_strings = on"
    )


def _triggers(prefix: str, source: int, target: str, function: str) -> dict[str, str]:
    """Trigger name -> its CREATE TRIGGER, for one table of source number `source`'s tree."""
    base = f"FOR EACH STATEMENT EXECUTE FUNCTION {function}({lit(str(source))})"
    timings = {
        "before": "BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {}",
        "ins": f"AFTER INSERT ON {{}} REFERENCING NEW TABLE AS {q(NEW_ROWS)}",
        "upd": f"AFTER UPDATE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)} NEW TABLE AS {q(NEW_ROWS)}",
        "del": f"AFTER DELETE ON {{}} REFERENCING OLD TABLE AS {q(OLD_ROWS)}",
        "trunc": "AFTER TRUNCATE ON {}",
    }
    return {
        q(prefix + suffix): f"CREATE TRIGGER {q(prefix + suffix)} {timing.format(target)} {base}"
        for suffix, timing in timings.items()
    }


TRIGGERS_PER_TABLE = 5


def install(
    db: Db, catalog: str, stream_table: str, sources: list[TableInfo], function: str, inputs: str
) -> None:
    """Create the function and its triggers on every table of every source's tree, in the caller's
    transaction (CREATE TRIGGER locks each source against writes until it commits). `inputs`: the
    digest of what `function` was rendered from, kept to compare later runs' by."""
    remove(db, catalog, stream_table)
    db.execute(function)
    name = qn(catalog, function_name(stream_table))
    db.execute(f"REVOKE ALL ON FUNCTION {name}() FROM PUBLIC")
    prefix = f"{TRIGGER_PREFIX}{tag_of(stream_table)}_"
    for index, source in enumerate(sources):
        tree = db.rows(TREE_SQL + "SELECT relid::regclass::text FROM tree", {"source": source.identity})
        for (target,) in tree:
            for trigger, statement in _triggers(prefix, index, str(target), name).items():
                db.execute(statement)
                # Fire under session_replication_role = replica too (only the table's owner may say so).
                db.attempt(f"ALTER TABLE {target} ENABLE ALWAYS TRIGGER {trigger}", INSUFFICIENT_PRIVILEGE)
    db.execute(
        f"INSERT INTO {qn(catalog, STATE_TABLE)} (stream_table, writes, storage, digest) VALUES (%s, 0, %s, %s)",
        (stream_table, json.dumps(storage(db, stream_table, sources)), digest(inputs)),
    )
    db.execute(
        f"INSERT INTO {qn(catalog, TURNS_TABLE)} (stream_table, stripe, writes) "
        f"SELECT %s, s, 0 FROM generate_series(0, {STRIPES - 1}) AS s",
        (stream_table,),
    )


def remove(db: Db, catalog: str, stream_table: str) -> None:
    """Drop the function (its triggers with it) and its state row; nothing if it is not installed."""
    db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, function_name(stream_table))}() CASCADE")
    for table in (STATE_TABLE, TURNS_TABLE):
        if db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog, table),)):  # older catalogs
            db.execute(f"DELETE FROM {qn(catalog, table)} WHERE stream_table = %s", (stream_table,))


def hashable(db: Db, types: list[str]) -> bool:
    """Can values of these types be hashed as they compare (a stripe per value)? A type without a
    hash operator class (point, json, xml …) cannot: its writers then take every stripe."""
    values = ", ".join(f"NULL::{t}" for t in types)
    return db.attempt(f"SELECT pg_catalog.hash_record_extended(ROW({values}), 0)", UNDEFINED_FUNCTION)


def subscribed(db: Db, source: TableInfo) -> bool:
    """Does a logical replication subscription write a table of the source's tree?"""
    return bool(
        db.value(
            TREE_SQL
            + "SELECT EXISTS (SELECT 1 FROM pg_subscription_rel r JOIN tree ON r.srrelid = tree.relid)",
            {"source": source.identity},
        )
    )


def reinstall_reason(
    db: Db, catalog: str, stream_table: str, sources: list[TableInfo], inputs: str
) -> str | None:
    """Why the installed maintenance cannot be trusted to have kept the stream table right (None: it can)."""
    installed = db.one(
        f"SELECT digest, storage FROM {qn(catalog, STATE_TABLE)} WHERE stream_table = %s", (stream_table,)
    )
    if installed is None:
        return "its immediate maintenance is not installed"
    if installed[0] != digest(inputs):
        return "its immediate maintenance was installed for another query, schema or dbt-ivm version"
    stripes = db.value(
        f"SELECT count(*) FROM {qn(catalog, TURNS_TABLE)} WHERE stream_table = %s", (stream_table,)
    )
    if stripes != STRIPES:
        return "rows its writers take turns on were deleted"
    if installed[1] != storage(db, stream_table, sources):
        return (
            "a source was rewritten without firing triggers (ALTER TABLE … TYPE … USING, VACUUM FULL, "
            "CLUSTER, or dropped and recreated), an enum type it has renamed or added a value, or its "
            "maintenance triggers were disabled for a while"
        )
    signature = qn(catalog, function_name(stream_table)) + "()"
    for source in sources:
        complete = db.value(
            TREE_SQL + "SELECT (SELECT count(*) FROM pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
            "WHERE t.tgfoid = to_regprocedure(%(function)s) AND t.tgenabled IN ('O', 'A')) "
            f"= {TRIGGERS_PER_TABLE} * (SELECT count(*) FROM tree)",
            {"source": source.identity, "function": signature},
        )
        if not complete:
            return (
                f"its immediate maintenance triggers on {source.qualified} were disabled, altered or dropped"
            )
    return None
