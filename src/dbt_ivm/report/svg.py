"""The report's pictures as inline SVG text: the graph of stream tables, and each one's refreshes
over time. Drawn here rather than by a script library, so the page needs no network and no script
to show them.

>>> from dbt_ivm.report.graph import layout
>>> picture = graph_svg(layout({"s.t": ["s.a"]}), {"s.t": Caption("fresh", ["auto"], "#st-s.t")})
>>> picture.count("<rect"), picture.count('class="edge"'), 's.t' in picture
(2, 1, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from dbt_ivm.report.graph import Graph
from dbt_ivm.report.state import STATES

BOX_WIDTH, BOX_HEIGHT = 220, 64
COLUMN_GAP, ROW_GAP, MARGIN = 90, 26, 16
LONGEST_NAME = 30  # characters; longer names are cut in the middle (the full name is the tooltip)
# One colour per refresh action in the plots (a failed refresh is drawn as a cross).
ACTION_COLOURS = {
    "CREATE": "#6a1b9a",
    "REBUILD": "#ad1457",
    "FULL": "#e65100",
    "DIFFERENTIAL": "#1565c0",
    "SKIP": "#9e9e9e",
    "FAILED": "#c62828",
}
OTHER_ACTION = "#455a64"


@dataclass(frozen=True)
class Caption:
    """What a stream table's box says and where clicking it leads."""

    state: str  # a State's name
    lines: list[str]  # under the name: mode and lag, last refresh
    link: str


def shortened(name: str, most: int = LONGEST_NAME) -> str:
    """`name`, cut in the middle when longer than `most` characters.

    >>> shortened("analytics.orders"), shortened("a_very_long_schema_name.a_very_long_table_name", 20)
    ('analytics.orders', 'a_very_lon…able_name')
    """
    if len(name) <= most:
        return name
    head = (most - 1) // 2 + (most - 1) % 2
    return f"{name[:head]}…{name[len(name) - (most - 1 - head) :]}"


def _box_origin(column: int, row: int) -> tuple[int, int]:
    return MARGIN + column * (BOX_WIDTH + COLUMN_GAP), MARGIN + row * (BOX_HEIGHT + ROW_GAP)


def graph_svg(graph: Graph, captions: Mapping[str, Caption]) -> str:
    """Sources on the left, each stream table right of what it reads, edges from inputs to readers."""
    width = MARGIN * 2 + graph.columns * BOX_WIDTH + max(graph.columns - 1, 0) * COLUMN_GAP
    height = MARGIN * 2 + graph.rows * BOX_HEIGHT + max(graph.rows - 1, 0) * ROW_GAP
    fills = {s.name: (s.fill, s.stroke) for s in STATES}
    parts = [
        f'<svg class="graph" role="img" aria-label="stream tables and their sources" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
    ]
    for source, reader in graph.edges:
        a, b = graph.node(source), graph.node(reader)
        x1, y1 = _box_origin(a.column, a.row)
        x2, y2 = _box_origin(b.column, b.row)
        x1, y1, y2 = x1 + BOX_WIDTH, y1 + BOX_HEIGHT // 2, y2 + BOX_HEIGHT // 2
        bend = (x2 - x1) // 2
        parts.append(
            f'<path class="edge" d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}" '
            'fill="none" stroke="#90a4ae" stroke-width="1.5" marker-end="url(#arrow)"/>'
        )
    parts.append(
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#90a4ae"/></marker></defs>'
    )
    for node in graph.nodes:
        x, y = _box_origin(node.column, node.row)
        title = f"<title>{escape(node.name)}</title>"
        caption = captions.get(node.name)
        if caption is None:  # a source nobody maintains
            parts.append(
                f'<g class="source">{title}<rect x="{x}" y="{y + 12}" width="{BOX_WIDTH}" '
                f'height="{BOX_HEIGHT - 24}" rx="20" fill="#ffffff" stroke="#90a4ae"/>'
                f'<text x="{x + BOX_WIDTH // 2}" y="{y + BOX_HEIGHT // 2 + 5}" text-anchor="middle">'
                f"{escape(shortened(node.name))}</text></g>"
            )
            continue
        fill, stroke = fills[caption.state]
        lines = "".join(
            f'<text x="{x + 10}" y="{y + 38 + 16 * i}" class="detail">{escape(line)}</text>'
            for i, line in enumerate(caption.lines[:2])
        )
        parts.append(
            f'<a href="{escape(caption.link)}"><g class="stream-table {caption.state}">{title}'
            f'<rect x="{x}" y="{y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="6" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="2"/>'
            f'<text x="{x + 10}" y="{y + 20}" class="name">{escape(shortened(node.name))}</text>'
            f"{lines}</g></a>"
        )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Point:
    """One refresh in a plot."""

    at: datetime
    action: str
    seconds: float
    changes: int
    failed: bool


def _ticks(top: float) -> list[float]:
    """Three round values from 0 to at least `top`.

    >>> _ticks(0.0), _ticks(0.37), _ticks(7.2), _ticks(1234)
    ([0.0, 0.5, 1.0], [0.0, 0.2, 0.4], [0.0, 5.0, 10.0], [0.0, 1000.0, 2000.0])
    """
    if top <= 0:
        return [0.0, 0.5, 1.0]
    half = top / 2
    magnitude = 10 ** math.floor(math.log10(half))
    step = next(f * magnitude for f in (1, 2, 2.5, 5, 10) if f * magnitude >= half)
    return [0.0, round(float(step), 12), round(float(step) * 2, 12)]


def _number(value: float) -> str:
    return f"{value:g}" if value < 1000 else f"{int(value):,}"


def refreshes_svg(points: Sequence[Point], width: int = 620) -> str:
    """Two panels over one time axis: each refresh's seconds (top) and changes read (bottom), a dot
    per refresh in its action's colour (a cross where it failed)."""
    panel, left, right, gap, top_margin = 90, 64, 12, 34, 10
    height = top_margin + panel * 2 + gap + 30
    if not points:
        return (
            f'<svg class="refreshes" width="{width}" height="40" viewBox="0 0 {width} 40">'
            '<text x="8" y="24" class="detail">no refresh recorded yet</text></svg>'
        )
    times = [p.at.timestamp() for p in points]
    start, end = min(times), max(times)
    span = max(end - start, 1.0)

    def x_of(t: float) -> float:
        return left + (width - left - right) * ((t - start) / span if end > start else 0.5)

    parts = [f'<svg class="refreshes" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for index, (label, values) in enumerate(
        (("seconds", [p.seconds for p in points]), ("changes read", [float(p.changes) for p in points]))
    ):
        y0 = top_margin + index * (panel + gap)
        ticks = _ticks(max(values))
        scale = ticks[-1]

        def y_of(v: float, y0: int = y0, scale: float = scale) -> float:
            return y0 + panel - panel * (v / scale)

        parts.append(
            f'<text x="{left}" y="{y0 - 1}" class="axis-title">{label}</text>'
            f'<line x1="{left}" y1="{y0 + panel}" x2="{width - right}" y2="{y0 + panel}" stroke="#b0bec5"/>'
        )
        for tick in ticks:
            y = y_of(tick)
            parts.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#eceff1"/>'
                f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_number(tick)}</text>'
            )
        for point, value in zip(points, values, strict=True):
            x, y = x_of(point.at.timestamp()), y_of(value)
            colour = ACTION_COLOURS.get(point.action, OTHER_ACTION)
            tip = (
                f"<title>{escape(point.action)} at {point.at.isoformat(sep=' ', timespec='seconds')}: "
                f"{point.seconds:.3f} s, {point.changes} changes read</title>"
            )
            if point.failed:
                parts.append(
                    f'<path d="M{x - 4:.1f},{y - 4:.1f} L{x + 4:.1f},{y + 4:.1f} M{x - 4:.1f},{y + 4:.1f} '
                    f'L{x + 4:.1f},{y - 4:.1f}" stroke="{colour}" stroke-width="2">{tip}</path>'
                )
            else:
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">{tip}</circle>')
    axis_y = top_margin + panel * 2 + gap + 16
    ends = ((start, "start"), (end, "end")) if end > start else ((start, "middle"),)
    for t, anchor in ends:
        label = datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")
        parts.append(
            f'<text x="{x_of(t):.1f}" y="{axis_y}" text-anchor="{anchor}" class="tick">{label}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
