#!/usr/bin/env bash
# The example pipeline: seed, dbt run, change the sources, dbt run, print stream tables and history.
#   scripts/demo.sh                     # embedded default
#   scripts/demo.sh --target postgres   # embedded PostgreSQL 18
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
exec "$root/.venv/bin/python" "$root/integration_tests/demo.py" "$@"
