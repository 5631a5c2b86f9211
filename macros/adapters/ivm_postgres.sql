{#- PostgreSQL part of the stream_table materialization: the engine runs on its own autocommit connection. -#}

{% macro ivm_postgres__stream_table_run(relation, sql, ivm_config, full_refresh) %}
  {{ return(adapter.ivm_run_stream_table(relation, sql, ivm_config, full_refresh, model.name)) }}
{% endmacro %}


{#- dbt-postgres's `indexes` config against the stream table's indexes (see the materialization). -#}
{% macro ivm_postgres__stream_table_index_changes(relation) %}
  {{ return(adapter.ivm_index_changes(relation, config.get('indexes', []) or [],
      ivm_stream_table_config()['ivm_catalog_schema'])) }}
{% endmacro %}


{% macro ivm_postgres__stream_table_commit() %}
  {% do adapter.ivm_commit_open_transaction() %}
{% endmacro %}


{#-
  When dbt drops or renames a table (a stream-table model became a table or a view, or was removed),
  the engine forgets it, so a later stream table of that name starts from a clean registration.
  The rest is exactly what dbt-postgres does.
-#}
{% macro ivm_postgres__drop_relation(relation) -%}
  {%- if relation.is_table -%}
    {% do adapter.ivm_forget_stream_table(relation, ivm_catalog_schema_for_drop()) %}
  {%- endif -%}
  {%- if postgres__drop_relation is defined -%}
    {{ return(postgres__drop_relation(relation)) }}
  {%- else -%}
    {{ return(default__drop_relation(relation)) }}
  {%- endif -%}
{%- endmacro %}


{% macro ivm_postgres__rename_relation(from_relation, to_relation) -%}
  {%- if from_relation.is_table -%}
    {% do adapter.ivm_forget_stream_table(from_relation, ivm_catalog_schema_for_drop()) %}
  {%- endif -%}
  {%- if postgres__rename_relation is defined -%}
    {{ return(postgres__rename_relation(from_relation, to_relation)) }}
  {%- else -%}
    {{ return(default__rename_relation(from_relation, to_relation)) }}
  {%- endif -%}
{%- endmacro %}


{#- The catalog schema of the model being run (operations outside a model use the default). -#}
{% macro ivm_catalog_schema_for_drop() %}
  {%- if model is mapping and model.get('resource_type') == 'model' -%}
    {{ return(config.get('ivm_catalog_schema', 'dbt_ivm')) }}
  {%- endif -%}
  {{ return('dbt_ivm') }}
{% endmacro %}


{#-
  dbt's `grants:` on a stream table. Next to the model's columns a stream table holds hidden `__ivm_`
  bookkeeping columns (group keys the query does not output, the sources' primary keys): SELECT is
  granted on the model's columns only, never on the table (see dbt_ivm.postgres.privileges, which
  converts table-level SELECT granted by other means at every run). A reader must name columns.

  A stream table is refreshed in place, never replaced, so earlier grants are always there: the
  current grants are always compared with the config (the materialization's `should_revoke` is False
  on PostgreSQL, whose copy_grants() is False, and dbt would never revoke a grantee removed from the
  config). Other relations: dbt's own apply_grants.
-#}
{% macro ivm_postgres__apply_grants(relation, grant_config, should_revoke=True) %}
  {%- set user_columns = adapter.ivm_stream_table_user_columns(relation) if grant_config else none -%}
  {%- if user_columns is none -%}
    {%- if postgres__apply_grants is defined -%}
      {{ return(postgres__apply_grants(relation, grant_config, should_revoke)) }}
    {%- else -%}
      {{ return(default__apply_grants(relation, grant_config, should_revoke)) }}
    {%- endif -%}
  {%- endif -%}
  {%- set current_grants = adapter.standardize_grants_dict(run_query(ivm_postgres__stream_table_show_grant_sql(relation))) -%}
  {%- set needs_revoking = diff_of_two_dicts(current_grants, grant_config) -%}
  {%- set needs_granting = diff_of_two_dicts(grant_config, current_grants) -%}
  {%- set quoted_columns = [] -%}
  {%- for column in user_columns -%}
    {%- do quoted_columns.append('"' ~ column | replace('"', '""') ~ '"') -%}
  {%- endfor -%}
  {%- set dcl_statements = [] -%}
  {#- Revoking SELECT on the table also revokes it on every column: revokes first, then grants. -#}
  {%- for privilege, grantees in needs_revoking.items() if grantees -%}
    {%- set revoked = 'select' if privilege.lower().startswith('select') else privilege -%}
    {%- do dcl_statements.append(get_revoke_sql(relation, revoked, grantees)) -%}
  {%- endfor -%}
  {%- for privilege, grantees in needs_granting.items() if grantees -%}
    {%- if privilege.lower() == 'select' -%}
      {%- do dcl_statements.append('grant select (' ~ quoted_columns | join(', ') ~ ') on ' ~ relation.render() ~ ' to ' ~ grantees | join(', ')) -%}
    {%- else -%}
      {%- do dcl_statements.append(get_grant_sql(relation, privilege, grantees)) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if dcl_statements -%}
    {{ call_dcl_statements(dcl_statements) }}
  {%- else -%}
    {{ log('On ' ~ relation.render() ~ ': All grants are in place, no revocation or granting needed.') }}
  {%- endif -%}
{% endmacro %}


{#-
  "Show grants" for a stream table, as dbt's diff compares them with the config: one (grantee,
  privilege_type) row per table-level privilege granted by us (the owner, or the current role, as
  dbt-postgres asks), where SELECT counts only when it is held on exactly the model's columns and not
  on the table. Any other SELECT (table-level, hidden columns, missing columns) is reported under a
  name no config uses, so dbt revokes it, and grants the model's columns afresh if the grantee is
  configured. Column privileges other than SELECT are not dbt's, as in dbt-postgres.
-#}
{% macro ivm_postgres__stream_table_show_grant_sql(relation) %}
  with target as (
    select c.oid, c.relacl, array[c.relowner, (select r.oid from pg_catalog.pg_roles r where r.rolname = current_user)] as us,
           (select count(*) from pg_catalog.pg_attribute a
            where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
              and not starts_with(a.attname, '__ivm_')) as user_columns
    from pg_catalog.pg_class c
    join pg_catalog.pg_namespace n on n.oid = c.relnamespace
    where n.nspname = '{{ relation.schema | replace("'", "''") }}'
      and c.relname = '{{ relation.identifier | replace("'", "''") }}'
  ),
  granted as (
    select acl.grantee, acl.privilege_type, null::text as column_name
    from target t cross join lateral aclexplode(t.relacl) acl
    where acl.grantor = any(t.us) and acl.grantee <> all(t.us)
    union all
    select acl.grantee, acl.privilege_type, a.attname::text
    from target t
    join pg_catalog.pg_attribute a on a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped
    cross join lateral aclexplode(a.attacl) acl
    where acl.privilege_type = 'SELECT' and acl.grantor = any(t.us) and acl.grantee <> all(t.us)
  )
  select case when g.grantee = 0 then 'PUBLIC' else pg_catalog.pg_get_userbyid(g.grantee)::text end as grantee,
         g.privilege_type
  from granted g
  where g.column_name is null and g.privilege_type <> 'SELECT'
  union all
  select case when g.grantee = 0 then 'PUBLIC' else pg_catalog.pg_get_userbyid(g.grantee)::text end as grantee,
         case when count(*) filter (where g.column_name is null) = 0
                   and count(*) filter (where starts_with(g.column_name, '__ivm_')) = 0
                   and count(distinct g.column_name) = max(t.user_columns)
              then 'SELECT'
              else 'SELECT (not exactly the model''s columns)'
         end as privilege_type
  from granted g cross join target t
  where g.privilege_type = 'SELECT'
  group by g.grantee
{% endmacro %}
