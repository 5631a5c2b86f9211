#!/usr/bin/env bash
# Everything CI checks: lint, format, types, then the whole test suite (both backends).
#   scripts/test.sh                       # all, as CI runs it (about 30 minutes; docs/testing.md)
#   scripts/test.sh --quick               # the inner loop: lint, types, doctests, the PostgreSQL
#                                         # query shapes, one Spark refresh (about 5 minutes)
#   scripts/test.sh --deep                # all, with more seeds, cycles and scale (by hand)
#   scripts/test.sh --backend postgres    # other arguments go to one pytest run
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
bin=.venv/bin
"$bin/ruff" check src dbt tests integration_tests benchmarks scripts
"$bin/ruff" format --check src dbt tests integration_tests benchmarks scripts
"$bin/mypy" src
case "${1:-}" in
  "")
    exec "$bin/python" scripts/suite.py
    ;;
  --quick)
    exec "$bin/python" scripts/suite.py --quick
    ;;
  --deep)
    DBT_IVM_TEST_DEPTH=deep exec "$bin/python" scripts/suite.py
    ;;
esac
# One pytest run with the given arguments; pytest exits 5 when it selected no test: nothing failed.
set +e
"$bin/python" -m pytest "$@" --durations=25
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest: no tests selected"
  code=0
fi
exit "$code"
