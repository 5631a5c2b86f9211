#!/usr/bin/env bash
# Everything CI checks: lint, format, types, then the whole test suite (both backends).
#   scripts/test.sh                       # all
#   scripts/test.sh --backend postgres    # extra arguments go to pytest
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
bin=.venv/bin
"$bin/ruff" check src dbt tests integration_tests benchmarks
"$bin/ruff" format --check src dbt tests integration_tests benchmarks
"$bin/mypy" src
# pytest exits 5 when a selection collected no test: nothing failed.
run_pytest() {
  set +e
  "$bin/python" -m pytest "$@" --durations=25
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then
    echo "pytest: no tests selected"
    code=0
  fi
  return "$code"
}
if [ "$#" -gt 0 ]; then
  status=0
  run_pytest "$@" || status=$?
  exit "$status"
fi
# The whole suite runs as two lanes side by side, each printed when it ends. One runs the long Spark
# suites (query shapes, TPC-H, randomized DML, crashes, a standalone cluster); the other the
# PostgreSQL tests (with the backend-free ones), then, when Debian's server binaries are on the
# machine, the PostgreSQL engine tests again on PostgreSQL 15 (users point dbt-ivm at any
# PostgreSQL >= 15), then the other Spark tests. Each Spark session is mostly one busy thread, so
# two of them share the cores well.
logs="$(mktemp -d)"
# The lanes take about as long: the long Spark suites, and the PostgreSQL tests then the other Spark
# ones (the last two files here balance them).
long_spark=(tests/spark/test_shapes.py tests/spark/test_tpch.py tests/spark/test_randomized.py
  tests/spark/test_kill.py tests/spark/test_cluster.py tests/spark/test_smoke.py
  tests/spark/test_suspicious_sources.py tests/spark/test_upkeep.py tests/spark/test_decimal_sums.py
  tests/spark/test_session_time_zone.py tests/spark/test_repeating_rows.py tests/spark/test_grouped_apply.py
  tests/spark/test_generators.py tests/spark/test_refused_constructs.py tests/spark/test_table_operations.py
  tests/spark/test_spark_spellings.py)
spark_lane() {
  run_pytest --backend spark "${long_spark[@]}"
}
postgres_lane() {
  local code=0
  run_pytest --backend postgres --ignore tests/spark --ignore integration_tests/tests/spark || code=$?
  pg15=/usr/lib/postgresql/15/bin
  if [ -x "$pg15/postgres" ]; then
    echo "== the PostgreSQL engine tests again, on PostgreSQL 15 ($pg15)"
    run_pytest tests/postgres --pg-bin "$pg15" -q -p no:cacheprovider || code=$?
  fi
  echo "== the other Spark tests"
  local ignored=()
  for file in "${long_spark[@]}"; do ignored+=(--ignore "$file"); done
  run_pytest --backend spark tests/spark integration_tests/tests/spark "${ignored[@]}" || code=$?
  return "$code"
}
spark_lane >"$logs/spark.log" 2>&1 &
spark_pid=$!
postgres_lane >"$logs/postgres.log" 2>&1 &
postgres_pid=$!
status=0
wait "$postgres_pid" || status=$?
echo "== PostgreSQL lane, then the other Spark tests (exit $status)"
cat "$logs/postgres.log"
spark_status=0
wait "$spark_pid" || spark_status=$?
echo "== Spark lane: shapes, TPC-H, randomized, crashes, cluster, smoke, suspicious sources, upkeep, decimal sums, time zone, repeating rows, grouped apply, generators, refused constructs, table operations, spellings (exit $spark_status)"
cat "$logs/spark.log"
rm -rf "$logs"
if [ "$status" -eq 0 ]; then
  status=$spark_status
fi
exit "$status"
