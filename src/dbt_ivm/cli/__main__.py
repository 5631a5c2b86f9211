"""`python -m dbt_ivm.cli`: the `dbt-ivm` command."""

import sys

from dbt_ivm.cli import main

sys.exit(main())
