"""Names for the temp tables one refresh creates.

A temp table lives until its transaction commits (ON COMMIT DROP), so two refreshes in one
transaction (a caller's own, or IMMEDIATE mode inside the writer's) would collide on fixed names.
Every name carries a number no earlier name of this process had.

>>> first, second = unique("rows"), unique("rows")
>>> first != second and first.startswith("__ivm_rows_")
True
"""

import itertools

_numbers = itertools.count(1)


def unique(purpose: str) -> str:
    """`__ivm_<purpose>_<n>`, with n never used before in this process."""
    return f"__ivm_{purpose}_{next(_numbers)}"
