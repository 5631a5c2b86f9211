"""How `dbt-ivm` shows what it found: aligned columns, durations, pending changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dbt_ivm.status import StreamTableStatus


def first_lines(text: str, count: int = 3) -> str:
    """An error's first lines (a JVM error carries its stack trace after them)."""
    return "\n".join(text.strip().splitlines()[:count])


def pending_text(pending: dict[str, int | None]) -> str:
    """`3`, or `5 (public.a=3, public.b=2)` for several sources; `?` when unknown, `-` for none."""
    if not pending:
        return "-"
    counts = {source: "?" if count is None else str(count) for source, count in pending.items()}
    known = [c for c in pending.values() if c is not None]
    total = str(sum(known)) if len(known) == len(pending) else "?"
    if len(pending) == 1:
        return total
    return f"{total} ({', '.join(f'{s}={c}' for s, c in counts.items())})"


def next_text(status: StreamTableStatus) -> str:
    """What the next refresh will do, as far as the catalog tells: `FULL` or `REBUILD` (its reason is
    printed under the table), `FULL` for refresh_mode='full', else `-` (planning decides)."""
    if status.next_action:
        return f"{status.next_action} (see below)"
    return "FULL" if status.refresh_mode == "full" and status.exists else "-"


def duration(seconds: float | None) -> str:
    """`42s`, `5m`, `1h30m`, `2d3h`; `-` for none.

    >>> [duration(s) for s in (None, 42.4, 300, 5400, 183600)]
    ['-', '42s', '5m', '1h30m', '2d3h']
    """
    if seconds is None:
        return "-"
    whole = int(seconds)
    for unit, size, smaller, smaller_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            rest = (whole % size) // smaller_size
            return f"{whole // size}{unit}" + (f"{rest}{smaller}" if rest else "")
    return f"{whole // 60}m" if whole >= 60 else f"{whole}s"


def print_table(header: tuple[str, ...], lines: Sequence[tuple[str, ...]]) -> None:
    """Rows as aligned columns under `header`."""
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(),
            flush=True,
        )
