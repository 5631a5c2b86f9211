{#-
  Spark part of the stream_table materialization: the adapter hands the model to the engine
  (dbt_ivm.spark.runner.run_stream_table) on the adapter's SparkSession. Spark has no transactions,
  so the shared default__stream_table_commit (a no-op) applies.
-#}

{% macro ivm_spark__stream_table_run(relation, sql, ivm_config, full_refresh) %}
  {{ return(adapter.ivm_run_stream_table(relation, sql, ivm_config, full_refresh, model.name)) }}
{% endmacro %}


{#-
  When dbt drops or renames a table (a stream-table model became a table or a view, or was removed),
  the engine forgets it, so a later stream table of that name starts from a clean registration.
  The rest is exactly what dbt-spark does.
-#}
{% macro ivm_spark__drop_relation(relation) -%}
  {%- if relation.is_table -%}
    {% do adapter.ivm_forget_stream_table(relation, ivm_catalog_schema_for_drop()) %}
  {%- endif -%}
  {%- if spark__drop_relation is defined -%}
    {{ return(spark__drop_relation(relation)) }}
  {%- else -%}
    {{ return(default__drop_relation(relation)) }}
  {%- endif -%}
{%- endmacro %}


{% macro ivm_spark__rename_relation(from_relation, to_relation) -%}
  {%- if from_relation.is_table -%}
    {% do adapter.ivm_forget_stream_table(from_relation, ivm_catalog_schema_for_drop()) %}
  {%- endif -%}
  {%- if spark__rename_relation is defined -%}
    {{ return(spark__rename_relation(from_relation, to_relation)) }}
  {%- else -%}
    {{ return(default__rename_relation(from_relation, to_relation)) }}
  {%- endif -%}
{%- endmacro %}
