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
set +e
"$bin/python" -m pytest "$@"
status=$?
set -e
# pytest exits 5 when a selection collected no test: nothing failed.
if [ "$status" -eq 5 ]; then
  echo "pytest: no tests selected"
  exit 0
fi
exit "$status"
