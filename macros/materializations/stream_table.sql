{#-
  The `stream_table` materialization: a table the dbt-ivm engine keeps equal to the model's query.
  Shared by every dbt-ivm adapter; the adapter-specific part is `<adapter>__stream_table_run`, which
  hands the compiled SQL and config to the engine. dbt_ivm is an internal package like dbt's own, so its
  macros dispatch in the `dbt` namespace (dbt cannot search an internal package by its own name).
-#}
{% materialization stream_table, default %}

  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set grant_config = config.get('grants') -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {% do ivm_warn_inapplicable_configs() %}
  {#- dbt's contract: the query's columns and types must be the declared ones (dbt's own check). -#}
  {%- if config.get('contract').enforced -%}
    {% do get_assert_columns_equivalent(sql) %}
  {%- endif -%}

  {#- A view or materialized view of the same name (the model's previous materialization) makes way. -#}
  {%- if existing_relation is not none and not existing_relation.is_table -%}
    {{ log('Dropping ' ~ existing_relation ~ ' (a ' ~ existing_relation.type ~ ') to create stream table ' ~ target_relation) }}
    {% do adapter.drop_relation(existing_relation) %}
  {%- endif -%}

  {%- if flags.EMPTY and existing_relation is not none and existing_relation.is_table -%}
    {#- --empty reads every ref as zero rows: a stream table keeps its rows and its registration. -#}
    {{ log('stream table model ' ~ model.name ~ ': left as it is under --empty', info=True) }}
    {% do store_raw_result('main', message='NO-OP (--empty)', code='NO-OP', rows_affected=0) %}
  {%- elif flags.EMPTY -%}
    {#- Nothing to keep yet: an empty plain table with the model's columns, for the models downstream;
        the next run without --empty makes it a stream table. -#}
    {% call statement('main') -%}
      {{ create_table_as(False, target_relation, sql) }}
    {%- endcall %}
  {%- else -%}
    {%- set on_change = config.get('on_configuration_change', 'apply') -%}
    {#- Only 'fail' and 'continue' act before the run; 'apply' reads the indexes once, after it. -#}
    {%- if on_change != 'apply' and existing_relation is not none and existing_relation.is_table
          and not should_full_refresh() -%}
      {% do ivm_check_index_changes(target_relation, on_change) %}
    {%- endif -%}
    {%- set result = adapter.dispatch('stream_table_run', 'dbt')(
          target_relation, sql, ivm_stream_table_config(), should_full_refresh()) -%}
    {%- if result['action'] in ('CREATE', 'REBUILD') or on_change == 'apply' -%}
      {% do ivm_apply_index_changes(target_relation) %}
    {%- endif -%}
    {#- What `dbt run` prints (action, rows changed, seconds) and run_results' adapter_response;
        target/run holds the SQL the engine ran. -#}
    {% do store_result('main', response=result['response']) %}
    {% do write(result['statements']) %}
    {% do ivm_warn_unused_registrations(ivm_stream_table_config()['ivm_catalog_schema']) %}
  {%- endif -%}

  {{ run_hooks(post_hooks, inside_transaction=True) }}

  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke(existing_relation, full_refresh_mode=True)) %}
  {% do persist_docs(target_relation, model) %}

  {% do adapter.dispatch('stream_table_commit', 'dbt')() %}

  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}

{% endmaterialization %}


{#- The model's stream-table settings, with their defaults (validated by the adapter). -#}
{% macro ivm_stream_table_config() %}
  {{ return({
      'refresh_mode': config.get('refresh_mode', 'auto'),
      'ivm_catalog_schema': config.get('ivm_catalog_schema', 'dbt_ivm'),
      'on_configuration_change': config.get('on_configuration_change', 'apply'),
      'full_refresh_threshold': config.get('full_refresh_threshold', 0.5),
      'user_triggers': config.get('user_triggers', 'auto'),
      'notify_channel': config.get('notify_channel', none),
      'tblproperties': config.get('tblproperties', none),
      'target_lag': config.get('target_lag', none),
      'schedule': config.get('schedule', none),
      'invocation_id': invocation_id,
      'dbt_project': project_name,
  }) }}
{% endmacro %}


{#-
  Configs of other materializations that mean nothing for a stream table (its rows always equal its
  query, its columns follow it); a model carrying one is told so rather than silently ignored.
-#}
{% macro ivm_warn_inapplicable_configs() %}
  {%- set why = {
      'unique_key': "rows are matched on the query's own keys",
      'incremental_strategy': 'every run applies exactly what changed in the sources',
      'on_schema_change': "a changed query or source rebuilds the table (the reason is logged)",
  } -%}
  {%- if adapter.type() != 'ivm_postgres' -%}
    {%- do why.update({'indexes': 'indexes are a PostgreSQL config'}) -%}
  {%- endif -%}
  {#- dbt fills on_schema_change with 'ignore' for every model: only another value was set by the user. -#}
  {%- set defaults = {'on_schema_change': 'ignore'} -%}
  {%- for name, reason in why.items() -%}
    {%- if config.get(name) is not none and config.get(name) != defaults.get(name) -%}
      {% do exceptions.warn('stream table model ' ~ model.name ~ ': config ' ~ name ~ ' does not apply to '
          ~ "materialized='stream_table' and is ignored (" ~ reason ~ '); remove it') %}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}


{#-
  Once per run and catalog schema (the adapter remembers), for each stream table registered in one of
  this project's schemas that none of its enabled models builds any more: this project's own are
  unregistered (their tables kept, a line logged for each), another's are warned about.
-#}
{% macro ivm_warn_unused_registrations(catalog_schema) %}
  {%- set stream_tables = [] -%}
  {%- set schemas = [] -%}
  {%- for node in graph.nodes.values() if node.resource_type in ('model', 'seed', 'snapshot') -%}
    {%- do schemas.append(node.schema) -%}
    {%- if node.config.materialized == 'stream_table' -%}
      {%- do stream_tables.append([node.schema, node.alias]) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- for level, message in adapter.ivm_unused_registrations(
        invocation_id, catalog_schema, stream_tables, schemas, project_name) -%}
    {%- if level == 'info' -%}
      {{ log(message, info=True) }}
    {%- else -%}
      {% do exceptions.warn(message) %}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}


{#-
  The `indexes` config (dbt-postgres) of a stream table that exists: under on_configuration_change
  'fail' a change fails the run before anything is refreshed, under 'continue' it is named in a
  warning and the table keeps its indexes. 'apply' (and a new or rebuilt table) applies it after the run.
-#}
{% macro ivm_check_index_changes(relation, on_change) %}
  {%- set changes = adapter.dispatch('stream_table_index_changes', 'dbt')(relation) -%}
  {%- if changes['any'] and on_change == 'fail' -%}
    {{ exceptions.raise_compiler_error('stream table model ' ~ model.name ~ ': its indexes config changed ('
        ~ changes['described'] ~ ") and on_configuration_change='fail'; run with --full-refresh to apply "
        ~ "it, or set on_configuration_change='apply'") }}
  {%- elif changes['any'] and on_change == 'continue' -%}
    {% do exceptions.warn('stream table model ' ~ model.name ~ ': its indexes config changed ('
        ~ changes['described'] ~ "); on_configuration_change='continue' keeps the table's indexes until "
        ~ '--full-refresh') %}
  {%- endif -%}
{% endmacro %}


{% macro ivm_apply_index_changes(relation) %}
  {%- set changes = adapter.dispatch('stream_table_index_changes', 'dbt')(relation) -%}
  {%- for name in changes.get('drop', []) -%}
    {% call statement('drop_index') -%}
      {{ get_drop_index_sql(relation, name) }}
    {%- endcall %}
  {%- endfor -%}
  {%- for index in changes.get('create', []) -%}
    {% call statement('create_index') -%}
      {{ get_create_index_sql(relation, index) }}
    {%- endcall %}
  {%- endfor -%}
{% endmacro %}


{% macro default__stream_table_index_changes(relation) %}
  {{ return({'any': false}) }}
{% endmacro %}


{% macro default__stream_table_run(relation, sql, ivm_config, full_refresh) %}
  {{ exceptions.raise_compiler_error(
      "materialized='stream_table' (model " ~ model.name ~ ") needs a dbt-ivm adapter "
      ~ "(type: ivm_postgres); this profile uses " ~ adapter.type()) }}
{% endmacro %}


{#- Commit whatever dbt's own connection still has open (post-hooks, grants, docs); adapters without transactions do nothing. -#}
{% macro default__stream_table_commit() %}
{% endmacro %}
