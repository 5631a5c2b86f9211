"""`dbt-ivm report --html`: one static page of the registered stream tables, for people to look at.

The graph of stream tables and their sources, each box coloured by its state (fresh, stale beyond
its target lag, failing, never refreshed, table gone) with its mode, lag and last refresh; then, per
stream table, its refreshes over time (seconds and changes read, by action) and the newest few as
a table. Everything is inline (SVG, CSS, a few lines of script that only mark the page as drawn):
the file opens anywhere, offline.

>>> from dbt_ivm.status import StreamTableStatus
>>> page = render([StreamTableStatus("s.t", True, "auto", ["s.a"])], {}, "a test", datetime(2026, 1, 1))
>>> "<svg class=\\"graph\\"" in page, "never refreshed" in page, "http" in page
(True, True, False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape

from dbt_ivm.cli.tables import duration, pending_text
from dbt_ivm.report.graph import layout
from dbt_ivm.report.state import STATES, state_of
from dbt_ivm.report.svg import ACTION_COLOURS, Caption, Point, graph_svg, refreshes_svg
from dbt_ivm.status import HistoryRow, StreamTableStatus

NEWEST_LISTED = 10  # refreshes listed under each stream table's plot

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #263238; margin: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 6px; }
.where { color: #607d8b; margin-bottom: 16px; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 2px solid; border-radius: 3px;
  vertical-align: -2px; margin-right: 4px; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 4px; }
svg text { font: 12px system-ui, sans-serif; fill: #263238; }
svg text.name { font-weight: 600; } svg text.detail, svg text.tick { fill: #546e7a; font-size: 11px; }
svg text.axis-title { font-size: 11px; fill: #37474f; }
.graph-box { overflow-x: auto; border: 1px solid #eceff1; padding: 8px; margin: 10px 0; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #eceff1; vertical-align: top; }
th { font-weight: 600; color: #455a64; }
.state { font-weight: 600; } .error { color: #c62828; white-space: pre-wrap; }
"""
# The only script: a page that drew itself says so (the browser test reads it), an error says what.
SCRIPT = """
window.addEventListener("error", function (e) {
  document.documentElement.setAttribute("data-errors", String(e.message));
});
document.addEventListener("DOMContentLoaded", function () {
  var drawn = document.querySelectorAll("svg.graph, svg.refreshes").length;
  document.documentElement.setAttribute("data-drawn", String(drawn));
});
"""


def _lag(status: StreamTableStatus) -> str:
    if status.schedule:
        return f"schedule {status.schedule}"
    if status.target_lag_seconds:
        return f"lag {duration(status.target_lag_seconds)}"
    return "no lag set"


def _last(status: StreamTableStatus) -> str:
    if status.last_action is None:
        return "never refreshed"
    same = status.last_status in ("OK", status.last_action)  # a failed run's action is FAILED too
    outcome = status.last_action if same else f"{status.last_action} {status.last_status}"
    if status.staleness_seconds is None:
        return outcome
    return f"{outcome} · data {duration(status.staleness_seconds)} old"


def _points(rows: Sequence[HistoryRow]) -> list[Point]:
    return [
        Point(r.finished_at, r.action, r.duration_seconds or 0.0, r.changes_read, r.status != "OK")
        for r in sorted(rows, key=lambda r: r.refresh_id)
        if r.finished_at is not None
    ]


def _summary(statuses: Sequence[StreamTableStatus], anchors: Mapping[str, str]) -> str:
    header = "".join(
        f"<th>{h}</th>"
        for h in ("stream table", "state", "mode", "lag", "last refresh", "pending changes", "next")
    )
    rows = []
    for status in statuses:
        state = state_of(status)
        next_action = f"{status.next_action}: {status.next_reason}" if status.next_action else "-"
        rows.append(
            f'<tr><td><a href="#{anchors[status.stream_table]}">{escape(status.stream_table)}</a></td>'
            f'<td class="state" style="color:{state.stroke}">{state.name}</td>'
            f"<td>{escape(status.refresh_mode)}</td><td>{escape(_lag(status))}</td>"
            f"<td>{escape(_last(status))}</td><td>{escape(pending_text(status.pending))}</td>"
            f"<td>{escape(next_action)}</td></tr>"
        )
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def _section(status: StreamTableStatus, anchor: str, rows: Sequence[HistoryRow]) -> str:
    state = state_of(status)
    newest = sorted(rows, key=lambda r: r.refresh_id, reverse=True)
    failure = next((r for r in newest[:1] if r.status != "OK" and r.reason), None)
    error = f'<p class="error">{escape(failure.reason or "")}</p>' if failure else ""
    actions = sorted({r.action for r in rows})
    legend = "".join(
        f'<span><i class="dot" style="background:{ACTION_COLOURS.get(a, "#455a64")}"></i>{escape(a)}</span>'
        for a in actions
    )
    listed = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(cell)}</td>"
            for cell in (
                r.finished_at.isoformat(sep=" ", timespec="seconds") if r.finished_at else "-",
                r.action,
                r.status,
                f"+{r.rows_inserted} ~{r.rows_updated} -{r.rows_deleted}",
                str(r.changes_read),
                "-" if r.duration_seconds is None else f"{r.duration_seconds:.3f}",
                r.initiated_by or "-",
                (r.reason or "").splitlines()[0] if r.reason else "",
            )
        )
        + "</tr>"
        for r in newest[:NEWEST_LISTED]
    )
    header = "".join(
        f"<th>{h}</th>" for h in ("finished", "action", "status", "rows", "changes", "seconds", "by", "why")
    )
    sources = ", ".join(status.sources) or "-"
    return (
        f'<section id="{anchor}"><h2>{escape(status.stream_table)} '
        f'<span class="state" style="color:{state.stroke}">{state.name}</span></h2>'
        f"<div>{escape(status.refresh_mode)} · {escape(_lag(status))} · {escape(_last(status))} · "
        f"reads {escape(sources)}</div>{error}"
        f'<div class="legend">{legend}</div>{refreshes_svg(_points(rows))}'
        f"<table><tr>{header}</tr>{listed}</table></section>"
    )


def render(
    statuses: Sequence[StreamTableStatus],
    histories: Mapping[str, Sequence[HistoryRow]],
    where: str,
    now: datetime,
) -> str:
    """The page: `statuses` (dbt-ivm status), each one's `histories` (newest refreshes), read from
    `where` (a connection's description) at `now`."""
    anchors = {s.stream_table: f"st-{index}" for index, s in enumerate(statuses)}
    captions = {
        s.stream_table: Caption(
            state_of(s).name, [f"{s.refresh_mode} · {_lag(s)}", _last(s)], f"#{anchors[s.stream_table]}"
        )
        for s in statuses
    }
    graph = layout({s.stream_table: s.sources for s in statuses})
    counts = {state.name: sum(1 for s in statuses if state_of(s) == state) for state in STATES}
    legend = "".join(
        f'<span><i class="swatch" style="background:{s.fill};border-color:{s.stroke}"></i>'
        f"{escape(s.meaning)} ({counts[s.name]})</span>"
        for s in STATES
    )
    sections = "".join(
        _section(s, anchors[s.stream_table], histories.get(s.stream_table, ())) for s in statuses
    )
    body = (
        f"<h1>dbt-ivm: {len(statuses)} stream table{'s' if len(statuses) != 1 else ''}</h1>"
        f'<div class="where">{escape(where)} · {now.isoformat(sep=" ", timespec="seconds")}</div>'
        f'<div class="legend">{legend}</div>'
        f'<div class="graph-box">{graph_svg(graph, captions)}</div>'
        f"{_summary(statuses, anchors)}{sections}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>dbt-ivm report</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
        f"<body>{body}</body></html>\n"
    )
