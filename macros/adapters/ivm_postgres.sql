{#- PostgreSQL part of the stream_table materialization: the engine runs on its own autocommit connection. -#}

{% macro ivm_postgres__stream_table_run(relation, sql, ivm_config, full_refresh) %}
  {{ return(adapter.ivm_run_stream_table(relation, sql, ivm_config, full_refresh, model.name)) }}
{% endmacro %}


{% macro ivm_postgres__stream_table_commit() %}
  {% do adapter.ivm_commit_open_transaction() %}
{% endmacro %}
