"""Apply strategies: turn a row delta into changes of the stream table.

* `keyed` — aggregate and keyed stream tables: one MERGE on the row key, guarded so unchanged rows
  are not rewritten (also used by FULL refresh, whose delta is new contents minus stored contents).
* `multiset` — stream tables whose rows may repeat, stored as identical copies: copies deleted and
  inserted.
* `explicit` — DELETE, UPDATE, INSERT as three statements, so user row triggers see the right
  TG_OP/OLD/NEW.

Each builds sqlglot trees that the backend renders in its dialect (`dbt_ivm.keys.Target`);
`statements` holds what they share.
"""
