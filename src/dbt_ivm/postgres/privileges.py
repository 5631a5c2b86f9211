"""Readers of a stream table see the model's columns, never the hidden bookkeeping ones.

A PostgreSQL stream table is a real table: next to the model's output columns it holds hidden
``__ivm_*`` columns (group keys the query does not output, the sources' primary keys, reference
counts, running sums; see ``dbt_ivm.layout``). A role holding table-level SELECT reads all of them,
and so learns values the defining query deliberately hides. Until hidden state moves out of the
table, the engine narrows every grant instead: no role other than the owner keeps table-level SELECT
on a stream table; whoever had it gets SELECT on exactly the model's columns (column privileges).
A reader must therefore name the columns it reads: ``SELECT *`` needs SELECT on every column, hidden
ones included, and fails with "permission denied".

Called after a stream table is created or rebuilt and at every refresh, so table-level SELECT
granted since (a hand-made ``GRANT SELECT ON st TO r``, or ``ALTER DEFAULT PRIVILEGES ... GRANT
SELECT ON TABLES``, which applies to the table when it is created) is converted by the next run.

What PostgreSQL does, relied on here (checked on 15 and 18):

* ``REVOKE SELECT ON t FROM r`` removes r's table-level SELECT *and* r's column-level SELECT on
  every column of t (other privileges, table- or column-level, stay). So the revoke must come first
  and the column grant after it; granting columns first would be undone by the revoke.
* A role can only revoke grants recorded as made by itself; grants by the owner, a superuser or a
  member of the owning role are all recorded as made by the owner, so the owner's grants are the ones
  converted. Grants recorded as made by another role exist only through a grant option the owner gave;
  revoking the owner's grant needs CASCADE then, which also revokes what the grantee granted through
  it (table- or column-level). Those are not recreated: the grantee keeps the grant option, on the
  model's columns only, and may grant those columns again (PostgreSQL refuses it the hidden ones).
* Several statements sent in one query string run as one implicit transaction (unless the caller
  already opened one, which then includes them), so no reader sees the table between the revoke and
  the grant.

Column-level privileges granted explicitly (``GRANT SELECT (__ivm_g0) ON st TO r``) are a deliberate
act and are left alone, as is every other privilege (INSERT, UPDATE, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from dbt_ivm.postgres.db import Db
from dbt_ivm.sqltext import q

# Table-level SELECT on `relation` granted by its owner to anyone else (grantee 0 = PUBLIC).
_TABLE_SELECT_GRANTS = """
SELECT a.grantee = 0, pg_get_userbyid(a.grantee), a.is_grantable
FROM pg_class AS c
CROSS JOIN LATERAL aclexplode(c.relacl) AS a
WHERE c.oid = %s::regclass
  AND a.privilege_type = 'SELECT'
  AND a.grantor = c.relowner
  AND a.grantee <> c.relowner
ORDER BY a.grantee <> 0, 2
"""


def restrict_to_user_columns(db: Db, relation: str, user_columns: Sequence[str]) -> list[str]:
    """Turn every non-owner's table-level SELECT on `relation` into SELECT on `user_columns` only.

    `relation`: the table as the engine writes it, schema-qualified and quoted (``qn(schema, name)``).
    A grant made WITH GRANT OPTION keeps its grant option (on the columns). Returns the grantees
    converted (``PUBLIC`` for the pseudo-role, first), in name order; one catalog query when there are none.
    """
    grants = db.rows(_TABLE_SELECT_GRANTS, (relation,))
    if not grants:
        return []
    columns = ", ".join(q(column) for column in user_columns)
    statements: list[str] = []
    converted: list[str] = []
    for is_public, name, grantable in grants:
        grantee = "PUBLIC" if is_public else q(name)
        converted.append("PUBLIC" if is_public else name)
        # CASCADE: a grant option given with the table-level SELECT may have been used (see above).
        statements.append(f"REVOKE SELECT ON {relation} FROM {grantee} CASCADE")
        if columns:
            option = " WITH GRANT OPTION" if grantable else ""
            statements.append(f"GRANT SELECT ({columns}) ON {relation} TO {grantee}{option}")
    db.execute(";\n".join(statements))
    return converted
