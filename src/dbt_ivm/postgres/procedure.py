"""``CALL dbt_ivm.refresh('analytics.customer_totals')``: a refresh inside PostgreSQL, for pg_cron or
any client, from statements the engine rendered when it last planned the query — no Python, no dbt.

`dbt run` (or ``dbt-ivm refresh``) installs three functions per stream table next to its
registration: ``refresh_<tag>()`` refreshes, ``refresh_<tag>_stale()`` says why its statements no
longer fit the database (NULL: they fit), ``refresh_<tag>_cleanup()`` trims the change buffers.
The catalog's procedure ``refresh(stream_table)`` finds them by the stream table's name. Following
one row: ``INSERT INTO orders VALUES (7, 'alice', 20.00)`` was captured into the buffer of orders;
then ``CALL dbt_ivm.refresh('analytics.customer_totals')``

1. takes the stream table's refresh lock (the one ``dbt-ivm refresh`` and ``dbt run`` take), commits
   and starts a REPEATABLE READ transaction: its snapshot comes after any refresh that held the lock;
2. ``refresh_<tag>()`` checks what its statements were planned against (the query's fingerprint,
   the stream table's and the sources' columns, capture, the views the query reads): a change it
   cannot follow fails the CALL by name, and ``dbt-ivm refresh`` re-plans and installs it anew;
3. it counts the buffer rows since the frontier: one for orders. A TRUNCATE, a registration flagged
   for FULL, refresh_mode='full', AUTO's threshold, or a logical replication gap make it FULL;
4. it copies that row (weight +1, only the columns the query reads) into the session's pending
   table for orders, analyzes it from a small sample (`statistics`), and runs the same
   statement IMMEDIATE mode runs for changes kept over several statements (``immediate_sql``): one
   MERGE, alice's group gains 20.00 and one order — or explicit DML when the table has user triggers;
5. it moves the frontier to its snapshot and writes the history row, counting what the stream table
   saw in this transaction (``pg_stat_get_xact_tuples_*``);
6. the procedure commits, trims the buffers in a new transaction, releases the lock and returns
   the action, reason, rows inserted, updated and deleted, and changes read.

Inside a transaction block the CALL needs REPEATABLE READ (it cannot commit there), and the buffers
are trimmed by the next refresh instead. Everything runs with the caller's rights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from dbt_ivm.catalog import TableInfo
from dbt_ivm.postgres import capture, immediate, outside_writes, statistics, user_triggers
from dbt_ivm.postgres.apply import NO_JIT
from dbt_ivm.postgres.catalog import FUNCTION_DEFINITIONS_SQL
from dbt_ivm.postgres.db import Db
from dbt_ivm.postgres.immediate_sql import Statements, pending_insert
from dbt_ivm.postgres.in_database import ARGUMENTS, LOCK_PREFIX, TABLE, VERSION, function_name, tag_of
from dbt_ivm.quoting import dollar_quoted
from dbt_ivm.reserved import internal_columns
from dbt_ivm.sqltext import WEIGHT, lit, q, qn

# The stream table's columns as the functions were planned against them (compared at every CALL).
TABLE_COLUMNS_SQL = (
    "(SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(a.attnum, a.attname, "
    "a.atttypid::pg_catalog.regtype::text, a.atttypmod) ORDER BY a.attnum) FROM pg_catalog.pg_attribute a "
    "WHERE a.attrelid = pg_catalog.to_regclass({relation}) AND a.attnum > 0 AND NOT a.attisdropped)"
)
VIEW_SQL = "pg_catalog.md5(pg_catalog.pg_get_viewdef(pg_catalog.to_regclass({view})))"
# A source's primary key and NOT NULL columns, which the plan's row keys and layout follow.
SOURCE_KEYS_SQL = (
    "pg_catalog.jsonb_build_array((SELECT COALESCE(pg_catalog.jsonb_agg(a.attname ORDER BY "
    "pg_catalog.array_position(i.indkey, a.attnum)), '[]') FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a "
    "ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = {oid}::pg_catalog.oid AND i.indisprimary), "
    "(SELECT COALESCE(pg_catalog.jsonb_agg(a.attname ORDER BY a.attnum), '[]') FROM pg_catalog.pg_attribute a "
    "WHERE a.attrelid = {oid}::pg_catalog.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull))"
)


class Basis(NamedTuple):
    """What the statements were planned against, read at install (compared by `_stale_sql` at every
    CALL): the stream table's columns; each source's captured columns, and its keys; each view's
    definition; the user functions' definitions, hashed."""

    columns: str
    captured: list[str]
    keys: list[str]
    views: list[str]
    functions: str


@dataclass(frozen=True)
class Program:
    """What a stream table's refresh functions hold (rendered by the runner from its compiled query)."""

    stream_table: str  # the registry key
    model: str
    relation: str  # the stream table, quoted
    fingerprint: str  # the defining query's (lifecycle.fingerprint)
    # Each with only the columns its pending changes carry (those the query reads); empty: not
    # maintainable, every refresh is FULL.
    sources: list[TableInfo]
    views: list[str]  # the views the query reads, quoted
    functions: list[int]  # the user functions the query calls (oids)
    statements: Statements | None  # None: not maintainable
    full: str  # recompute from scratch, applied as a diff
    static_full_reason: str | None  # why every refresh is FULL (the query cannot be maintained)
    whole_input_reason: str | None  # why AUTO recomputes anyway (a differential one would cost that)
    # Per source: its virtual generated columns' expressions (capture.virtual_columns).
    virtual: list[dict[str, str]] = field(default_factory=list)
    netted: bool = True  # whether the pending changes are netted first (compact.needs_netting)


def _sourced(sql: str, table: TableInfo, catalog: str) -> str:
    """Capture's catalog queries with this source's oid and capture function as literals."""
    function = qn(catalog, capture.function_name(table)) + "()"
    return sql.replace("%(source)s", lit(table.identity)).replace("%(function)s", lit(function))


def _now_state(table: TableInfo, catalog: str) -> str:
    """The source's capture fingerprint now, as capture stores it (one jsonb object)."""
    parts = ", ".join(f"{lit(p)}, x.{p}" for p in capture.STATE_PARTS)
    names = ", ".join(capture.STATE_PARTS)
    return (
        f"(SELECT pg_catalog.jsonb_build_object({parts}) FROM "
        f"({_sourced(capture.STATE_SQL, table, catalog)}) AS x({names}))"
    )


def _not_always(table: TableInfo, catalog: str) -> str:
    """True when a capture trigger on the source is not ENABLE ALWAYS (capture.ReplicaGap)."""
    return _sourced(
        capture.TREE_SQL
        + "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t JOIN tree ON t.tgrelid = tree.relid "
        "WHERE t.tgfoid = pg_catalog.to_regprocedure(%(function)s) AND t.tgenabled <> 'A')",
        table,
        catalog,
    )


def _subscribed(table: TableInfo, catalog: str) -> str:
    """True when a logical replication subscription writes the source."""
    return _sourced(
        capture.TREE_SQL
        + "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r JOIN tree ON r.srrelid = tree.relid)",
        table,
        catalog,
    )


def _basis(db: Db, catalog: str, program: Program) -> Basis:
    columns = db.value("SELECT " + TABLE_COLUMNS_SQL.format(relation=lit(program.relation)) + "::text")
    captured = [
        str(
            db.value(
                f"SELECT (state -> 'columns')::text FROM {qn(catalog, 'change_buffers')} WHERE source = %s",
                (s.qualified,),
            )
        )
        for s in program.sources
    ]
    keys = [
        str(db.value(f"SELECT ({SOURCE_KEYS_SQL.format(oid=lit(s.identity))})::text"))
        for s in program.sources
    ]
    views = [str(db.value("SELECT " + VIEW_SQL.format(view=lit(v)))) for v in program.views]
    functions = str(db.value("SELECT " + _function_definitions(program))) if program.functions else ""
    return Basis(str(columns), captured, keys, views, functions)


def _function_definitions(program: Program) -> str:
    return FUNCTION_DEFINITIONS_SQL.format(oids=lit("{" + ",".join(map(str, program.functions)) + "}"))


def _stale_sql(catalog: str, program: Program, basis: Basis) -> str:
    """The body of ``refresh_<tag>_stale()``: why the statements no longer fit (NULL: they fit)."""
    columns, captured, keys, views, functions = basis
    registered = (
        f"(SELECT s.fingerprint FROM {qn(catalog, 'stream_tables')} AS s "
        f"WHERE s.stream_table = {lit(program.stream_table)})"
    )
    cases = [
        (f"{registered} IS DISTINCT FROM {lit(program.fingerprint)}", "its defining query changed"),
        (
            f"{TABLE_COLUMNS_SQL.format(relation=lit(program.relation))} IS DISTINCT FROM {lit(columns)}::jsonb",
            "the stream table's columns changed",
        ),
    ]
    if program.statements is not None:
        # Sources are captured unless refresh_mode='full': the statements were rendered for one or the other.
        full = f"(SELECT s.refresh_mode = 'full' FROM {qn(catalog, 'stream_tables')} AS s WHERE s.stream_table = {lit(program.stream_table)})"
        cases.append(
            (
                f"{full} IS DISTINCT FROM {'false' if program.sources else 'true'}",
                "its refresh_mode changed to or from 'full'",
            )
        )
    for source, stored, planned_keys in zip(program.sources, captured, keys, strict=True):
        found = (
            f"EXISTS (SELECT 1 FROM {qn(catalog, 'change_buffers')} AS b WHERE b.source = {lit(source.qualified)} "
            f"AND b.source_oid = {lit(source.identity)}::pg_catalog.oid "
            f"AND b.capture_version = {capture.CAPTURE_VERSION} AND b.state -> 'columns' = {lit(stored)}::jsonb)"
        )
        cases.append((f"NOT {found}", f"the columns or the change capture of {source.qualified} changed"))
        cases.append(
            (
                f"{SOURCE_KEYS_SQL.format(oid=lit(source.identity))} IS DISTINCT FROM {lit(planned_keys)}::jsonb",
                f"the primary key or NOT NULL columns of {source.qualified} changed",
            )
        )
        if program.statements is not None:
            # Planned as a role that reads every row; the caller (pg_cron's, or after a policy came)
            # would see fewer, and the batch would disagree with the stored rows.
            cases.append(
                (
                    f"pg_catalog.row_security_active({lit(source.identity)}::pg_catalog.oid)",
                    f"row-level security applies to the caller on {source.qualified}",
                )
            )
        renamed = f"pg_catalog.to_regclass({lit(qn(source.schema, source.name))}) IS DISTINCT FROM {lit(source.identity)}::pg_catalog.regclass"
        cases.append(
            (renamed, f"{source.qualified} now names another table (renamed, or dropped and created again)")
        )
    for view, definition in zip(program.views, views, strict=True):
        cases.append(
            (
                f"{VIEW_SQL.format(view=lit(view))} IS DISTINCT FROM {lit(definition)}",
                f"view {view} was redefined",
            )
        )
    if program.functions:
        cases.append(
            (
                f"{_function_definitions(program)} IS DISTINCT FROM {lit(functions)}",
                "a function the defining query calls was redefined or dropped",
            )
        )
    whens = " ".join(f"WHEN {condition} THEN {lit(reason)}" for condition, reason in cases)
    return f"SELECT CASE {whens} ELSE NULL END"


def _per_source(catalog: str, program: Program) -> str:
    """Count each source's pending changes and check its capture; decide FULL where Python would."""
    blocks = []
    buffers = qn(catalog, "change_buffers")
    for index, source in enumerate(program.sources):
        label = lit(source.qualified)
        stats = capture.pending_stats_sql(catalog, source, "__ivm_frontier")
        intact = (
            f"pg_catalog.to_regclass({lit(qn(catalog, capture.buffer_name(source)))}) IS NOT NULL AND EXISTS "
            f"(SELECT 1 FROM {qn(catalog, capture.MARKS)} WHERE buffer = {lit(capture.buffer_name(source))} "
            f"AND kind = {lit(capture.SENTINEL)})"
        )
        reinstall = (
            "IF __ivm_apply_up_to IS NOT NULL THEN RETURN; END IF; RAISE EXCEPTION USING MESSAGE = pg_catalog.format('dbt-ivm: the change capture on %s %s', "
            f"{label}, __ivm_why), HINT = pg_catalog.format('run dbt-ivm refresh %s: it reinstalls capture and "
            "refreshes FULL', __ivm_key);"
        )
        # What a recompute reads: every source's rows (the threshold weighs the batch against it).
        rows = (
            "__ivm_rows_read := __ivm_rows_read + COALESCE((SELECT GREATEST(c.reltuples, 0) FROM "
            f"pg_catalog.pg_class c WHERE c.oid = {lit(source.identity)}::pg_catalog.oid), 0);"
        )
        blocks.append(
            f"""
    -- source {index}: {source.qualified.replace(chr(10), " ")}
    {stats} INTO __ivm_n, __ivm_truncated;
    SELECT b.state, {_now_state(source, catalog)}, {intact} INTO __ivm_state, __ivm_now, __ivm_intact
      FROM {buffers} AS b WHERE b.source = {label};
    __ivm_why := CASE
      WHEN NOT COALESCE(__ivm_intact, false) THEN 'was reset (crash recovery or failover) or removed'
      WHEN __ivm_now -> 'columns' IS DISTINCT FROM __ivm_state -> 'columns' THEN 'sees other columns'
      WHEN __ivm_now -> 'triggers' IS DISTINCT FROM __ivm_state -> 'triggers' THEN 'had its triggers disabled, altered or dropped'
      WHEN __ivm_now -> 'storage' IS DISTINCT FROM __ivm_state -> 'storage' AND NOT __ivm_truncated
        THEN 'follows a table that was rewritten (ALTER TABLE … TYPE, VACUUM FULL, CLUSTER) or repartitioned'
      END;
    IF __ivm_why IS NOT NULL THEN {reinstall} END IF;
    IF __ivm_truncated THEN
      __ivm_reason := COALESCE(__ivm_reason, {lit(source.qualified + " was truncated")});
      -- The TRUNCATE gave it new storage; every consumer sees its FULL mark, so the fingerprint follows.
      UPDATE {buffers} SET state = pg_catalog.jsonb_set(state, '{{storage}}', __ivm_now -> 'storage')
        WHERE source = {label};
    END IF;
    IF ({_not_always(source, catalog)}) THEN
      -- The engine warns at every refresh; a subscription's writes would go unseen: FULL.
      IF __ivm_apply_up_to IS NOT NULL THEN RETURN; END IF;
      IF __ivm_reason IS NULL AND ({_subscribed(source, catalog)}) THEN
        __ivm_reason := {lit(capture.ReplicaGap(source.qualified, True).full_reason())};
      END IF;
    END IF;
    __ivm_out_changes := __ivm_out_changes + __ivm_n;
    IF __ivm_n > 0 THEN
      __ivm_changed := __ivm_changed || {index};
      __ivm_changed_names := pg_catalog.concat_ws(', ', __ivm_changed_names, {label});
    END IF;
    {rows}"""
        )
    return "".join(blocks) + _threshold(catalog, program)


def _threshold(catalog: str, program: Program) -> str:
    """As the runner weighs `full_refresh_threshold`: the captured changes against the rows the
    query reads, and past it the rows changed in the columns it reads."""
    counted = "".join(
        f"""
      IF {index} = ANY (__ivm_changed) THEN
        {capture.changed_rows_sql(catalog, source, "__ivm_frontier", source.column_names())} INTO __ivm_n;
        __ivm_changed_rows := __ivm_changed_rows + __ivm_n;
      END IF;"""
        for index, source in enumerate(program.sources)
    )
    return f"""
    IF __ivm_reason IS NULL AND __ivm_mode = 'auto' AND __ivm_rows_read > 0
        AND __ivm_out_changes > __ivm_threshold * __ivm_rows_read THEN
      __ivm_changed_rows := 0;{counted}
      IF __ivm_changed_rows > __ivm_threshold * __ivm_rows_read THEN
        __ivm_reason := pg_catalog.format('%s changes to %s exceed full_refresh_threshold=%s of the ~%s rows the query reads',
          __ivm_changed_rows, __ivm_changed_names, __ivm_threshold, pg_catalog.round(__ivm_rows_read::numeric));
      END IF;
    END IF;"""


def _granted_whole(relation: str) -> str:
    """True when a role besides the owner holds table-level SELECT on the stream table, granted by the
    owner: the engine narrows it to the model's columns at every refresh (postgres.privileges)."""
    return (
        "EXISTS (SELECT 1 FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a "
        f"WHERE c.oid = pg_catalog.to_regclass({lit(relation)}) AND a.privilege_type = 'SELECT' "
        "AND a.grantor = c.relowner AND a.grantee <> c.relowner)"
    )


def _fill_pending(catalog: str, program: Program) -> str:
    """Copy the net effect of each changed source's pending changes (or the changes themselves, where
    the plan does not need them netted) into the session's pending table
    (`immediate_sql.pending_insert`), then give every pending table statistics: a new session's are
    unanalyzed, and the planner would take an empty one for hundreds of rows (and scan the other side
    of a join whole). A small sample is enough (`statistics`)."""
    parts = [immediate.create_pending(program.stream_table, program.sources)]
    tables = []
    for index, source in enumerate(program.sources):
        table = immediate.pending_relation(program.stream_table, index, source)
        names = ", ".join(q(c) for c in (WEIGHT, *internal_columns(source)))
        virtual = program.virtual[index] if program.virtual else {}
        rows = capture.raw_changes_sql(catalog, source, "__ivm_frontier", virtual)
        copied = pending_insert(table, source, f"SELECT {names} FROM {rows} AS r", program.netted)
        parts.append(f"DELETE FROM {table}; IF {index} = ANY (__ivm_changed) THEN {copied}; END IF;")
        tables.append(table)
    if tables:  # ANALYZE without a table would analyze the whole database
        parts.append(statistics.analyze_block(tables))
    return "\n    ".join(parts)


def _apply(catalog: str, program: Program, explicit: immediate.Explicit) -> str:
    """Apply the pending changes (or, for FULL, the recompute) through the MERGE or explicit DML."""
    path = program.statements.explicit if program.statements is not None else None
    full = explicit.or_merge(f"EXECUTE {lit(path.full)};" if path else "", f"EXECUTE {lit(program.full)};")
    if program.statements is None:
        return f"__ivm_out_action := 'FULL'; {full}"
    combined = explicit.or_merge(
        f"EXECUTE {lit(path.combined)};" if path else "", f"EXECUTE {lit(program.statements.combined)};"
    )
    return f"""IF __ivm_reason IS NULL AND __ivm_out_changes = 0 THEN
      __ivm_out_action := 'SKIP'; __ivm_reason := 'no changes';
    ELSIF __ivm_reason IS NULL THEN
      __ivm_out_action := 'DIFFERENTIAL';
      -- Few rows: probe the key index, compile no plan (for these statements; the caller's
      -- transaction keeps its own settings).
      __ivm_page_cost := pg_catalog.current_setting('random_page_cost');
      __ivm_jit := pg_catalog.current_setting('jit');
      PERFORM pg_catalog.set_config('random_page_cost', '1.1', true);
      PERFORM pg_catalog.set_config('jit', {lit(NO_JIT)}, true);
      {_fill_pending(catalog, program)}
      {combined}
      {immediate.clear_pending(program.stream_table, program.sources)}
      PERFORM pg_catalog.set_config('random_page_cost', __ivm_page_cost, true);
      PERFORM pg_catalog.set_config('jit', __ivm_jit, true);
    ELSE
      __ivm_out_action := 'FULL';
      {full}
    END IF;"""


def refresh_sql(catalog: str, program: Program, pinned: str) -> str:
    """``refresh_<tag>()``: the refresh of one stream table in the caller's transaction."""
    key, relation = program.stream_table, program.relation
    settings = immediate.Settings.of(key)
    explicit = immediate.Explicit(
        program.statements.explicit if program.statements is not None else None,
        key,
        relation,
        "(__ivm_settings ->> 'user_triggers' = 'on')",
        settings.applying,
    )
    registry = qn(catalog, "stream_tables")
    history = qn(catalog, "refresh_history")
    counted = ", ".join(
        f"pg_catalog.pg_stat_get_xact_tuples_{kind}(pg_catalog.to_regclass({lit(relation)}))"
        for kind in ("inserted", "updated", "deleted")
    )
    static = (
        f"__ivm_reason := {lit(program.static_full_reason)};"
        if program.static_full_reason is not None
        else ""
    )
    whole = (
        f"IF __ivm_reason IS NULL AND __ivm_mode = 'auto' THEN __ivm_reason := {lit(program.whole_input_reason)}; END IF;"
        if program.whole_input_reason is not None
        else ""
    )
    apply = _apply(catalog, program, explicit)
    has_user_triggers = (
        "EXISTS (SELECT FROM pg_catalog.pg_trigger t "
        f"WHERE {user_triggers.enabled_condition(f'pg_catalog.to_regclass({lit(relation)})')})"
    )
    user_triggers_off = (
        f"IF __ivm_settings ->> 'user_triggers' = 'off' AND {has_user_triggers} THEN "
        "RAISE EXCEPTION USING MESSAGE = pg_catalog.format('dbt-ivm: stream table %s has user_triggers=''off'' "
        "and user triggers: CALL refresh does not disable them', __ivm_key), "
        "HINT = 'run dbt-ivm refresh (it disables them around its MERGE), or use user_triggers=''auto''';"
        " END IF;"
    )
    body = f"""#variable_conflict use_column
DECLARE
  __ivm_key text := {lit(key)};
  __ivm_frontier pg_snapshot; __ivm_mode text; __ivm_needs text; __ivm_settings jsonb;
  __ivm_reason text; __ivm_why text; __ivm_stale text; __ivm_threshold float8;
  __ivm_n bigint; __ivm_truncated boolean; __ivm_changed int[] := '{{}}';
  __ivm_state jsonb; __ivm_now jsonb; __ivm_intact boolean;
  __ivm_before bigint[]; __ivm_after bigint[]; __ivm_id bigint; __ivm_channel text; __ivm_page_cost text; __ivm_jit text;
  __ivm_changed_rows bigint; __ivm_rows_read float8 := 0; __ivm_changed_names text;
  __ivm_started timestamptz := pg_catalog.clock_timestamp();
  __ivm_inserted bigint; __ivm_updated bigint; __ivm_deleted bigint; __ivm_differing bigint;
BEGIN
  __ivm_out_changes := 0;
  IF pg_catalog.current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
    RAISE EXCEPTION 'dbt-ivm: refreshing % needs a REPEATABLE READ transaction', __ivm_key;
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext({lit(LOCK_PREFIX + key)}));
  -- Row-locked: a refresh that committed after this snapshot makes this one fail to serialize
  -- (retry) instead of applying its batch again.
  SELECT s.frontier, s.refresh_mode, s.needs_full, COALESCE(s.run_settings, '{{}}')
    INTO __ivm_frontier, __ivm_mode, __ivm_needs, __ivm_settings
    FROM {registry} AS s WHERE s.stream_table = __ivm_key FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dbt-ivm: stream table % is not registered', __ivm_key;
  END IF;
  IF __ivm_mode = 'immediate' THEN
    __ivm_out_action := 'SKIP'; __ivm_out_reason := 'refresh_mode=''immediate'': maintained by its writers';
    RETURN;
  END IF;
  __ivm_stale := {qn(catalog, function_name(key, "_stale"))}();
  IF __ivm_stale IS NOT NULL THEN
    IF __ivm_apply_up_to IS NOT NULL THEN RETURN; END IF;
    RAISE EXCEPTION USING MESSAGE = pg_catalog.format('dbt-ivm: stream table %s changed since its refresh was planned: %s', __ivm_key, __ivm_stale),
      HINT = pg_catalog.format('run dbt-ivm refresh %s (or dbt run): it plans the query again and installs its refresh anew', __ivm_key);
  END IF;
  __ivm_threshold := COALESCE((__ivm_settings ->> 'full_refresh_threshold')::float8, 0.5);
  {static}
  IF __ivm_reason IS NULL AND __ivm_needs IS NOT NULL THEN __ivm_reason := __ivm_needs; END IF;
  IF __ivm_reason IS NULL THEN __ivm_reason := {outside_writes.reason_sql(catalog, key)}; END IF;
  IF __ivm_reason IS NULL AND NOT {outside_writes.guarded_sql(relation)} THEN
    __ivm_reason := {lit(outside_writes.UNGUARDED)};
  END IF;
  IF __ivm_reason IS NULL AND __ivm_mode = 'full' THEN __ivm_reason := 'refresh_mode=''full'''; END IF;
  {whole}
  IF __ivm_reason IS NULL AND __ivm_frontier IS NULL THEN __ivm_reason := 'no frontier recorded'; END IF;
  IF __ivm_reason IS NULL AND {capture.frontier_ahead_sql("__ivm_frontier")} THEN
    __ivm_reason := {lit(capture.FRONTIER_AHEAD)};
  END IF;
  IF __ivm_frontier IS NOT NULL AND __ivm_mode <> 'full' THEN {_per_source(catalog, program)}
  END IF;
  IF __ivm_apply_up_to IS NOT NULL AND (__ivm_reason IS NOT NULL OR __ivm_out_changes > __ivm_apply_up_to
      OR {_granted_whole(relation)} OR (__ivm_out_changes > 0 AND {has_user_triggers})) THEN
    __ivm_out_changes := NULL;
    RETURN;  -- more than the caller lets it do: the caller's engine does it
  END IF;
  {user_triggers_off}
  __ivm_before := ARRAY[{counted}];
  {apply}
  __ivm_after := ARRAY[{counted}];
  __ivm_out_inserted := __ivm_after[1] - __ivm_before[1];
  __ivm_out_updated := __ivm_after[2] - __ivm_before[2];
  __ivm_out_deleted := __ivm_after[3] - __ivm_before[3];
  __ivm_out_reason := __ivm_reason;
  UPDATE {registry} SET frontier = pg_catalog.pg_current_snapshot(), refreshed_at = pg_catalog.now(), needs_full = NULL
    WHERE stream_table = __ivm_key;
  {outside_writes.forget_sql(catalog, key)};
  INSERT INTO {history} (stream_table, action, rows_inserted, rows_updated, rows_deleted, changes_read,
      duration_seconds, status, reason, initiated_by, invocation_id, started_at, finished_at)
    VALUES (__ivm_key, __ivm_out_action, __ivm_out_inserted, __ivm_out_updated, __ivm_out_deleted, __ivm_out_changes,
      EXTRACT(EPOCH FROM pg_catalog.clock_timestamp() - __ivm_started), 'OK', __ivm_reason, __ivm_initiated_by, __ivm_invocation_id,
      __ivm_started, pg_catalog.clock_timestamp())
    RETURNING refresh_id INTO __ivm_id;
  __ivm_channel := __ivm_settings ->> 'notify_channel';
  IF __ivm_channel IS NOT NULL AND __ivm_out_inserted + __ivm_out_updated + __ivm_out_deleted > 0 THEN
    PERFORM pg_catalog.pg_notify(__ivm_channel, pg_catalog.jsonb_build_object('stream_table', __ivm_key,
      'model', {lit(program.model)}, 'mode', __ivm_out_action, 'rows_inserted', __ivm_out_inserted,
      'rows_updated', __ivm_out_updated, 'rows_deleted', __ivm_out_deleted, 'refresh_id', __ivm_id,
      'apply_path', 'merge')::text);
  END IF;
END
"""
    outputs = (
        "__ivm_initiated_by text, __ivm_invocation_id text, __ivm_apply_up_to bigint, "
        "OUT __ivm_out_action text, OUT __ivm_out_reason text, OUT __ivm_out_inserted bigint, "
        "OUT __ivm_out_updated bigint, OUT __ivm_out_deleted bigint, OUT __ivm_out_changes bigint"
    )
    return _function(qn(catalog, function_name(key)), outputs, None, body, pinned)


def _function(name: str, arguments: str, returns: str | None, body: str, pinned: str) -> str:
    """CREATE OR REPLACE FUNCTION (`returns` None: its OUT arguments say what it returns)."""
    returning = "" if returns is None else f" RETURNS {returns}"
    return (
        f"CREATE OR REPLACE FUNCTION {name}({arguments}){returning} LANGUAGE plpgsql "
        f"{pinned} AS {dollar_quoted(body)}"
    )


def cleanup_sql(catalog: str, program: Program, pinned: str) -> str:
    """``refresh_<tag>_cleanup()``: delete buffer rows every consumer has seen (after the refresh commits)."""
    parts = []
    for source in program.sources:
        marks, rows = capture.cleanup_sql(catalog, source)
        parts.append(f"IF {capture.cleanup_guard_sql(catalog, source)} THEN {marks}; {rows}; END IF;")
    body = "BEGIN\n  " + "\n  ".join(parts) + "\nEND\n"
    return _function(qn(catalog, function_name(program.stream_table, "_cleanup")), "", "void", body, pinned)


def stale_function_sql(catalog: str, program: Program, basis: Basis, pinned: str) -> str:
    """``refresh_<tag>_stale()``: why the statements no longer fit (NULL: they fit)."""
    body = f"BEGIN\n  RETURN ({_stale_sql(catalog, program, basis)});\nEND\n"
    return _function(qn(catalog, function_name(program.stream_table, "_stale")), "", "text", body, pinned)


def install(db: Db, catalog: str, program: Program, pinned: str) -> None:
    """Create (or replace) the stream table's refresh functions, in the caller's transaction (the
    catalog's procedure that calls them is the registry's: `in_database.dispatcher_sql`)."""
    basis = _basis(db, catalog, program)
    # Version 1 took (text, text, boolean): another function, which would linger beside this one.
    db.execute(
        f"DROP FUNCTION IF EXISTS {qn(catalog, function_name(program.stream_table))}(text, text, boolean)"
    )
    for sql in (
        stale_function_sql(catalog, program, basis, pinned),
        cleanup_sql(catalog, program, pinned),
        refresh_sql(catalog, program, pinned),
    ):
        db.execute(sql)
    name = qn(catalog, TABLE)
    db.execute(
        f"INSERT INTO {name} (stream_table, version, tag) VALUES (%s, %s, %s) ON CONFLICT (stream_table) "
        "DO UPDATE SET version = EXCLUDED.version, tag = EXCLUDED.tag",
        (program.stream_table, VERSION, tag_of(program.stream_table)),
    )


def stale_reason(db: Db, catalog: str, stream_table: str) -> str | None:
    """Why the refresh functions must be installed anew (None: they fit): not installed, installed
    by another version of this module, or planned against a query, schema, capture or view since changed."""
    installed = db.value(f"SELECT version FROM {qn(catalog, TABLE)} WHERE stream_table = %s", (stream_table,))
    if installed is None:
        return "not installed"
    if installed != VERSION:
        return f"installed by another dbt-ivm (version {installed})"
    stale = db.value(f"SELECT {qn(catalog, function_name(stream_table, '_stale'))}()")
    return None if stale is None else str(stale)


def remove(db: Db, catalog: str, stream_table: str) -> None:
    """Drop the stream table's refresh functions and their row; nothing if none are installed."""
    if not db.value("SELECT to_regclass(%s) IS NOT NULL", (qn(catalog, TABLE),)):
        return
    for suffix, arguments in (("", ARGUMENTS), ("_stale", ""), ("_cleanup", "")):
        db.execute(f"DROP FUNCTION IF EXISTS {qn(catalog, function_name(stream_table, suffix))}({arguments})")
    db.execute(f"DELETE FROM {qn(catalog, TABLE)} WHERE stream_table = %s", (stream_table,))
