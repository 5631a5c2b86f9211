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
# The whole suite runs as two lanes side by side, each printed when it ends: every Spark test (query
# shapes, TPC-H, randomized, crashes, a standalone cluster, dbt-spark) in one session; the PostgreSQL
# tests (with the backend-free ones), then, when Debian's server binaries are on the machine, the
# PostgreSQL engine tests again on PostgreSQL 15 (users point dbt-ivm at any PostgreSQL >= 15). With
# the tests' Spark session on the full JIT the two take about as long (35 + 6.5 min of Spark against
# 21 + 17 min of PostgreSQL in the last CI). A Spark session is mostly one busy thread, so the lanes
# share the cores well.
logs="$(mktemp -d)"
spark_lane() {
  run_pytest --backend spark tests/spark integration_tests/tests/spark
}
postgres_lane() {
  local code=0
  run_pytest --backend postgres --ignore tests/spark --ignore integration_tests/tests/spark || code=$?
  pg15=/usr/lib/postgresql/15/bin
  if [ -x "$pg15/postgres" ]; then
    echo "== the PostgreSQL engine tests again, on PostgreSQL 15 ($pg15)"
    run_pytest tests/postgres --pg-bin "$pg15" -q -p no:cacheprovider || code=$?
  fi
  return "$code"
}
spark_lane >"$logs/spark.log" 2>&1 &
spark_pid=$!
postgres_lane >"$logs/postgres.log" 2>&1 &
postgres_pid=$!
status=0
wait "$postgres_pid" || status=$?
echo "== PostgreSQL lane: PostgreSQL 18, then PostgreSQL 15 (exit $status)"
cat "$logs/postgres.log"
spark_status=0
wait "$spark_pid" || spark_status=$?
echo "== Spark lane: every Spark test (exit $spark_status)"
cat "$logs/spark.log"
rm -rf "$logs"
if [ "$status" -eq 0 ]; then
  status=$spark_status
fi
exit "$status"
