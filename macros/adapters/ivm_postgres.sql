{#- PostgreSQL part of the stream_table materialization: the engine runs on its own autocommit connection. -#}

{% macro ivm_postgres__stream_table_run(relation, sql, ivm_config, full_refresh) %}
  {{ return(adapter.ivm_run_stream_table(relation, sql, ivm_config, full_refresh, model.name)) }}
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
