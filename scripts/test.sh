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
  "$bin/python" -m pytest "$@"
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then
    echo "pytest: no tests selected"
    code=0
  fi
  return "$code"
}
status=0
run_pytest "$@" || status=$?
# The whole suite (no arguments) also runs the PostgreSQL engine tests on PostgreSQL 15 when Debian's
# server binaries are on the machine: users point dbt-ivm at any PostgreSQL >= 15.
pg15=/usr/lib/postgresql/15/bin
if [ "$#" -eq 0 ] && [ -x "$pg15/postgres" ]; then
  echo "== the PostgreSQL engine tests again, on PostgreSQL 15 ($pg15)"
  run_pytest tests/postgres --pg-bin "$pg15" -q -p no:cacheprovider || status=$?
fi
exit "$status"
