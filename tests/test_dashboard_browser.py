"""The dashboard in a real headless Chromium (Debian's package) driven by Playwright.

Set-up (``.ci/run`` does it): ``apt-get install chromium`` and ``pip install -e '.[dev]'``
(Playwright); the browser is launched from ``/usr/bin/chromium`` (never ``playwright install``).
Without the browser the test skips and says how to enable it, except under ``CI`` where a
missing browser is a failure, so CI cannot pass without it (``tests.support.browser``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests

from client_sdk.mechanisms import from_config
from tests.support.browser import CHROMIUM, require_chromium
from tests.support.server import running_collector

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OCCUPATIONS = [
    "Adm-clerical",
    "Armed-Forces",
    "Craft-repair",
    "Exec-managerial",
    "Farming-fishing",
    "Handlers-cleaners",
    "Machine-op-inspct",
    "Other-service",
    "Priv-house-serv",
    "Prof-specialty",
    "Protective-serv",
    "Sales",
    "Tech-support",
    "Transport-moving",
]
COUNTS = [3770, 9, 4099, 4066, 994, 1370, 2002, 3295, 149, 4140, 649, 3650, 928, 1597]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_chromium()  # before starting a collector the test could not use
    tmp = tmp_path_factory.mktemp("dashboard")
    with running_collector(tmp) as srv:
        created = requests.post(
            srv.url + "/v1/campaigns",
            json={
                "id": "occupation",
                "description": "Occupation (UCI Adult)",
                "domain": OCCUPATIONS,
                "mechanism": "oue",
                "epsilon": 2.0,
                "min_reports": 200,
            },
            headers=srv.headers("admin"),
            timeout=10,
        ).json()
        mech = from_config(created["mechanism"])
        rng = np.random.default_rng(3)
        probs = np.asarray(COUNTS) / sum(COUNTS)
        today = dt.datetime.now(dt.UTC).date()
        for back in range(6, 0, -1):
            day = (today - dt.timedelta(days=back)).isoformat()
            n = 1500 + 150 * back
            payloads = mech.encode_many(mech.perturb_many(rng.choice(14, n, p=probs), rng=rng))
            for start in range(0, n, 500):
                reports = [
                    {"id": f"{day}-{start + i:08d}", "day": day, "payload": p}
                    for i, p in enumerate(payloads[start : start + 500])
                ]
                answer = requests.post(
                    f"{srv.url}/v1/campaigns/occupation/reports",
                    json={"digest": created["digest"], "reports": reports},
                    headers=srv.headers("ingest"),
                    timeout=30,
                )
                assert answer.status_code == 200
        process = srv.process
        yield srv
    if process is not None and process.stdout is not None:
        process.stdout.close()


@pytest.mark.browser
def test_dashboard_in_headless_chromium(collector: Any, tmp_path: Any) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.goto(collector.url + "/dashboard")
            assert page.url.endswith("/dashboard/login")
            page.fill("#token", collector.analyst_token)
            page.click("button[type=submit]")
            page.wait_for_selector("table.campaigns")
            page.screenshot(path=str(tmp_path / "campaigns.png"), full_page=True)
            page.click("text=occupation")
            page.wait_for_selector("svg#estimates")
            assert page.locator("svg#estimates rect.bar").count() == len(OCCUPATIONS)
            labels = page.locator("svg#estimates rect.bar").evaluate_all(
                "els => els.map(e => e.getAttribute('data-value'))"
            )
            assert labels == OCCUPATIONS
            # Bars have a real rendered size (the stylesheet loaded, the SVG laid out).
            widest = page.locator("svg#estimates rect.bar[data-value='Prof-specialty']")
            assert widest.bounding_box()["width"] > 50
            assert page.locator("svg#trend circle").count() == 6 * 8  # 8 largest values
            legend = page.locator("svg#trend text.legend").all_text_contents()
            assert len(legend) == 8 and set(legend) <= set(OCCUPATIONS)
            assert "Armed-Forces" not in legend and "Priv-house-serv" not in legend
            assert (
                page.inner_text("#report-count") == f"{sum(1500 + 150 * b for b in range(1, 7)):,}"
            )
            assert page.inner_text("#mechanism") == "oue"
            assert page.inner_text("#epsilon") == "2"
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            # The cookie is HttpOnly: page scripts cannot read it.
            assert page.evaluate("document.cookie") == ""
        finally:
            browser.close()


def test_missing_browser_skips_with_the_fix_but_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from tests.support import browser

    monkeypatch.setattr(browser, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        browser.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        browser.require_chromium()
