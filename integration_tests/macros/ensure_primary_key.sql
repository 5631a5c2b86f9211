{#- Give a seeded table a primary key (once: `dbt seed` re-runs keep the table). Returns the hook's SQL. -#}
{% macro ensure_primary_key(relation, column) %}
  {{ return(adapter.dispatch('ensure_primary_key')(relation, column)) }}
{% endmacro %}

{% macro default__ensure_primary_key(relation, column) %}
  {{ return('') }}
{% endmacro %}

{% macro ivm_postgres__ensure_primary_key(relation, column) %}
  {%- set table = relation.include(database=false) -%}
  {% set sql %}
    do $$
    begin
      if not exists (
        select 1 from pg_catalog.pg_index
        where indrelid = '{{ table }}'::regclass and indisprimary
      ) then
        alter table {{ table }} add primary key ({{ adapter.quote(column) }});
      end if;
    end
    $$
  {% endset %}
  {{ return(sql) }}
{% endmacro %}

{#- Iceberg has no primary-key constraint: dbt-ivm reads the key from this table property. -#}
{% macro ivm_spark__ensure_primary_key(relation, column) %}
  {{ return("alter table " ~ relation ~ " set tblproperties ('dbt_ivm.primary_key' = '" ~ column ~ "')") }}
{% endmacro %}
