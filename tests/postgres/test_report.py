"""`dbt-ivm report --html`: a page of the stream tables on a real PostgreSQL, opened in a real
headless browser (tests/browser.py): it draws itself without errors, offline, and the screenshot
shows the graph in each state's colour."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dbt_ivm import cli
from dbt_ivm.report.state import FAILING, FRESH, STALE
from tests.browser import open_page, png_colours
from tests.postgres.streams import execute, refresh

pytestmark = pytest.mark.postgres

TOTALS = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"
BIG = "SELECT customer, total FROM customer_totals WHERE total > 25"
# Fails once an order has no amount: a refresh of it fails, and the report shows it failing.
SHARES = "SELECT id, 100 / amount AS share FROM orders"


@pytest.fixture
def page(pg_conn: Any, pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    execute(
        pg_conn,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount int);"
        "INSERT INTO orders SELECT i, 'c' || (i % 3), i FROM generate_series(1, 12) i;",
    )
    refresh(pg_conn, "customer_totals", TOTALS, refresh_mode="differential")
    refresh(pg_conn, "big_customers", BIG, refresh_mode="differential", target_lag_seconds=0.001)
    refresh(pg_conn, "shares", SHARES, refresh_mode="differential")
    for round_ in range(3):
        execute(pg_conn, f"INSERT INTO orders VALUES ({100 + round_}, 'c{round_}', {round_ + 1})")
        refresh(pg_conn, "customer_totals", TOTALS, refresh_mode="differential")
    execute(pg_conn, "INSERT INTO orders VALUES (200, 'c1', 0)")
    with pytest.raises(Exception, match="division by zero"):
        refresh(pg_conn, "shares", SHARES, refresh_mode="differential")
    target = tmp_path / "report.html"
    assert cli.main(["report", "--dsn", pg_dsn, "--html", str(target)]) == 0
    assert "3 stream table(s)" in capsys.readouterr().out
    return target


def test_the_report_shows_each_stream_table_in_its_state(page: Path) -> None:
    text = page.read_text()
    graph = text[text.index('<svg class="graph"') : text.index("</svg>")]
    states = dict(re.findall(r'<title>public\.(\w+)</title><rect[^>]*fill="(#\w+)"', graph))
    assert states == {
        "orders": "#ffffff",  # a source: plain
        "customer_totals": FRESH.fill,
        "big_customers": STALE.fill,
        "shares": FAILING.fill,
    }
    assert graph.count('class="edge"') == 3  # orders -> customer_totals -> big_customers, orders -> shares
    assert text.count('<svg class="refreshes"') == 3
    assert "division by zero" in text  # the failing one's error, under its plot
    assert text.count("<circle") >= 4 + 1 + 1  # customer_totals' CREATE and 3 batches, the others' CREATE
    assert "http" not in text  # nothing to fetch: the page opens offline


def test_the_page_draws_itself_in_a_browser(page: Path, tmp_path: Path) -> None:
    loaded = open_page(page, tmp_path / "report.png")
    root = re.search(r"<html[^>]*>", loaded.dom)
    assert root is not None, loaded.dom[:500]
    assert 'data-drawn="4"' in root.group(0), root.group(0)  # the graph and three plots, drawn
    assert "data-errors" not in root.group(0), root.group(0)  # no script error
    colours = png_colours(loaded.screenshot)

    def rgb(hex_colour: str) -> tuple[int, ...]:
        return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))

    for state in (FRESH, STALE, FAILING):  # each box's fill shows on the screen
        assert rgb(state.fill) in colours, state.name
