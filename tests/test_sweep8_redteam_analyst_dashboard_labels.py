"""Red team, analyst side: long labels on the dashboard's charts and tables.

Domain labels may be 200 characters, attribute names and open-domain strings long too, and
devices choose the open-domain ones. A chart drew each label in full beside its bars (anchored
at its end) or in its legend: a long one ran out of the SVG, which clips, so the start of a
bar label and the end of a legend entry were cut off unseen (two labels that differ only
there looked alike), and the numbers table stretched the page to more than twice the window's
width. Now a chart's label is cut in the middle with an ellipsis to fit its room (the full
text in the tooltip and the table) and table cells wrap.

A real ``ldp serve`` with a categorical, a multi-attribute and an open-domain campaign whose
labels are long; reports perturbed by ``client_sdk``'s mechanisms, uploaded over HTTP. The
browser test measures the laid-out page in Debian's Chromium (tests/support/browser.py).
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
import requests

from client_sdk.mechanisms import from_config
from tests.support.browser import CHROMIUM, require_chromium
from tests.support.server import CollectorProcess, running_collector

HEAD_A, HEAD_B = "A" * 150, "B" * 150
#: Two 200-character labels that differ only in their first 150 characters (what a chart
#: clipped away), one with markup and wide characters.
LABELS = [
    HEAD_A + "-same-tail" + "x" * 40,
    HEAD_B + "-same-tail" + "x" * 40,
    "Short",
    "<b>粗体</b>" * 20,
]
#: A pair's joint labels ("x|y") are at most 200 characters too.
PAIRED = [label[:190] for label in LABELS]
ATTRIBUTE = "attribute-" + "n" * 90
CANDIDATE = "W" * 40 + "<i>tail</i>" + "m" * 13  # 64 bytes, the widest glyphs
PAGES = (
    "longlabels",
    "multi",
    f"open?candidates={quote(CANDIDATE)}%0Ashort",
)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-sync"]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    tmp: Path = tmp_path_factory.mktemp("sweep8-labels")
    with running_collector(tmp, env={"LDP_RATE_LIMIT": "0"}) as srv:
        gen = np.random.default_rng(8)
        today = dt.datetime.now(dt.UTC).date()

        def make(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            created = srv.post_campaign(body)
            assert created.status_code == 201, created.text
            campaign = created.json()
            return campaign, from_config(campaign["mechanism"])

        campaign, mech = make(
            {"id": "longlabels", "domain": LABELS, "mechanism": "oue", "epsilon": 2}
        )
        for back in range(3):
            values = gen.integers(0, len(LABELS), 300)
            day = (today - dt.timedelta(days=back)).isoformat()
            srv.upload(campaign, mech.encode_many(mech.perturb_many(values, rng=gen)), day)
        campaign, mech = make(
            {
                "id": "multi",
                "attributes": {ATTRIBUTE: PAIRED, "sex": ["F", "M"]},
                "mechanism": "smp",
                "epsilon": 4,
                "pairs": [[ATTRIBUTE, "sex"]],
            }
        )
        rows = {ATTRIBUTE: gen.integers(0, len(LABELS), 400), "sex": gen.integers(0, 2, 400)}
        srv.upload(campaign, mech.encode_many(mech.perturb_many(rows, rng=gen)))
        campaign, mech = make(
            {
                "id": "open",
                "max_length": 64,
                "mechanism": "pem",
                "epsilon": 8,
                "params": {"width": 256, "depth": 8},
            }
        )
        strings = [CANDIDATE] * 200 + ["short"] * 100
        srv.upload(campaign, mech.encode_many(mech.perturb_many(strings, rng=gen)))
        yield srv


def _chart_texts(page: str) -> list[str]:
    """The text of every ``<text class="label">``/``legend`` of the page's charts."""
    found = re.findall(r'<text class="(?:label|legend)"[^>]*>([^<]*)</text>', page)
    return [html.unescape(t) for t in found]


def test_chart_labels_keep_their_start_and_end_and_the_tooltip_the_whole(
    collector: CollectorProcess,
) -> None:
    session = requests.Session()
    signed = session.post(
        collector.url + "/dashboard/login",
        data={"token": collector.analyst_token},
        timeout=30,
        allow_redirects=False,
    )
    assert signed.status_code == 303, signed.text
    page = session.get(collector.url + "/dashboard/campaigns/longlabels", timeout=60)
    assert page.status_code == 200
    texts = _chart_texts(page.text)
    for label in LABELS[:2]:
        drawn = [t for t in texts if t.startswith(label[:4])]
        assert len(drawn) == 2  # the bar and the trend's legend
        for text in drawn:
            head, _, tail = text.partition("\u2026")
            assert tail and label.startswith(head) and label.endswith(tail), text
            assert len(text) < len(label)
    # The two labels that differ only in their first 150 characters look different.
    assert len({t for t in texts if "-same-tail" in t or "\u2026" in t}) == len(
        [t for t in texts if "-same-tail" in t or "\u2026" in t]
    )
    assert "Short" in texts
    # The whole label is in the tooltip and in the table.
    assert f"<title>{html.escape(LABELS[0])}: " in page.text
    assert f"<td>{html.escape(LABELS[0])}</td>" in page.text


#: Every <text> of every chart lies inside its SVG; the page needs no horizontal scrolling.
MEASURE = """() => {
  const out = [];
  for (const svg of document.querySelectorAll('svg')) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const b = t.getBoundingClientRect();
      if (b.left < box.left - 0.5 || b.right > box.right + 0.5)
        out.push([svg.id, t.textContent.slice(0, 24), Math.round(b.left - box.left),
                  Math.round(b.right - box.right)]);
    }
  }
  return {outside: out, scroll: document.documentElement.scrollWidth,
          view: window.innerWidth, texts: document.querySelectorAll('svg text').length};
}"""


@pytest.mark.browser
def test_long_labels_stay_inside_their_charts_and_the_page_in_chromium(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            dialogs: list[str] = []
            page.on("dialog", lambda d: dialogs.append(d.message))
            page.goto(collector.url + "/dashboard")
            page.fill("#token", collector.analyst_token)
            page.click("button[type=submit]")
            page.wait_for_selector("table.campaigns")
            for path in PAGES:
                answer = page.goto(f"{collector.url}/dashboard/campaigns/{path}")
                assert answer is not None and answer.status == 200, path
                page.wait_for_selector("svg.chart")
                page.screenshot(path=str(tmp_path / f"{path[:10]}.png"), full_page=True)
                measured = page.evaluate(MEASURE)
                assert measured["texts"] > 10, path
                assert measured["outside"] == [], path
                assert measured["scroll"] <= measured["view"], (path, measured["scroll"])
            # The candidate's markup is text, never elements, and no script ran.
            assert page.locator("svg#candidates i").count() == 0
            assert dialogs == []
            # The query form takes every level the API does: the browser refused 0.999 (the
            # form's own max, off its 0.005 steps from 0.5), 0.9999 and 0.25.
            page.goto(f"{collector.url}/dashboard/campaigns/longlabels?level=0.9999")
            level = page.locator("input[name=level]")
            assert level.input_value() == "0.9999"
            for typed in ("0.9999", "0.999", "0.25", "0.95"):
                level.fill(typed)
                assert level.evaluate("e => e.checkValidity()"), (
                    typed,
                    level.evaluate("e => e.validationMessage"),
                )
            level.fill("0.999")
            with page.expect_navigation():
                page.click("form.query button[type=submit]")
            assert "level=0.999" in page.url
            assert page.inner_text("#report-count") == "900"
        finally:
            browser.close()
