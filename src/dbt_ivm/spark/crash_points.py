"""Named points of a Spark refresh where a test crashes the process, to check that the next refresh
recovers (tests/spark/test_kill.py). The refresh calls `reached` at each; a test installs a hook that
kills the process there (or starts a timer that kills it during the next step). Nothing is installed
in a user's process, where `reached` does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

# In the order a refresh reaches them: the sources' snapshots read, the MERGE that also stamps the
# new frontier (before it starts, while it runs, after its commit), the history row written.
KILL_POINTS = ("before_changes", "before_merge", "during_merge", "after_merge", "after_history")

_hook: Callable[[str], None] | None = None


def install(hook: Callable[[str], None] | None) -> None:
    """Call `hook` with each point a refresh reaches in this process (None: stop)."""
    global _hook
    _hook = hook


def reached(point: str) -> None:
    """A refresh reached `point` (one of KILL_POINTS; `during_merge`: the MERGE starts next)."""
    assert point in KILL_POINTS, point
    if _hook is not None:
        _hook(point)
