"""The built wheel serves every dashboard page outside the checkout (issue 12: the wheel lacked
``collector/templates/dashboard/*.html`` and the dashboard answered 500 TemplateNotFound)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from tests.support.reports import campaign_body
from tests.support.server import ADMIN_TOKEN, ANALYST_TOKEN, INGEST_TOKEN, LISTENING

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted(p.name for p in (ROOT / "collector" / "templates" / "dashboard").glob("*.html"))


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_serves_every_dashboard_page(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDP_", "PYTHON"))}
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheels)],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = wheels.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for template in TEMPLATES:
        assert f"collector/templates/dashboard/{template}" in names, template
    venv = tmp_path / "venv"
    # A venv without pip of its own (ensurepip took most of a 10 s start): this pip installs
    # into it with --python, resolving the wheel's own dependencies just the same.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    subprocess.run(
        # The collector's dependencies are an extra: the bare package is the light SDK.
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", f"{wheel}[collector]"],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    env |= {
        "LDP_ADMIN_TOKEN": ADMIN_TOKEN,
        "LDP_ANALYST_TOKEN": ANALYST_TOKEN,
        "LDP_INGEST_TOKEN": INGEST_TOKEN,
    }
    proc = subprocess.Popen(
        [python, "-m", "ldp_cli", "serve", "--init", "-p", "0", "-w", "1", "--database", "x.db"],
        cwd=tmp_path,  # outside the checkout: only the installed package can be imported
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(LISTENING):
                url = line[len(LISTENING) :].strip()
                break
        else:
            pytest.fail("ldp serve from the wheel did not start")
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        r = requests.post(url + "/v1/campaigns", json=campaign_body("wheel"), headers=admin)
        assert r.status_code == 201, r.text
        session = requests.Session()
        assert session.get(url + "/dashboard/login", timeout=10).status_code == 200
        bad = session.post(url + "/dashboard/login", data={"token": "x" * 20}, timeout=10)
        assert bad.status_code == 401 and "analyst token" in bad.text
        ok = session.post(url + "/dashboard/login", data={"token": ANALYST_TOKEN}, timeout=10)
        assert ok.status_code == 200 and "wheel" in ok.text
        for path in ("/dashboard", "/dashboard/campaigns/wheel", "/dashboard/campaigns/none"):
            page = session.get(url + path, timeout=10)
            assert page.status_code in (200, 404, 422), (path, page.status_code)
            assert "<html" in page.text.lower(), path
        css = session.get(url + "/dashboard/static/dashboard.css", timeout=10)
        assert css.status_code == 200 and "text/css" in css.headers["Content-Type"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
