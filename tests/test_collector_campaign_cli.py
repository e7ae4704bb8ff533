"""`ldp campaign create|list|show|archive` and the archive endpoint (issue 12).

Archiving stops ingest with a clear error (410 campaign_archived) and keeps the estimates
readable; an upload racing the archive is either acknowledged and stored, or refused and not
stored. A valid token of the wrong role answers 403, an unknown one 401.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import requests

from tests.support.reports import batch, reports
from tests.support.server import ADMIN_TOKEN, ANALYST_TOKEN, CollectorProcess, running_collector


def ldp(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", "campaign", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )


def upload(srv: CollectorProcess, cid: str, body: Any) -> requests.Response:
    return requests.post(
        f"{srv.url}/v1/campaigns/{cid}/reports",
        json=body,
        headers=srv.headers("ingest"),
        timeout=30,
    )


def test_campaign_commands_through_the_store_and_the_collector(tmp_path: Path, db_url: str) -> None:
    with running_collector(tmp_path, db_url=db_url) as srv:
        out = ldp(
            "create", "shop", "--url", srv.url, "--domain", "a,b,c", "--domain", "d",
            "-m", "grr", "-e", "2", "--format", "json",
            LDP_ADMIN_TOKEN=ADMIN_TOKEN,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        created = json.loads(out.stdout)
        assert created["mechanism"]["domain"] == ["a", "b", "c", "d"]
        assert created["archived"] is None
        # The same rules as POST /v1/campaigns, straight into the store.
        out = ldp("create", "bad", "--db", srv.db_url, "--domain", "ok,x\ty")
        assert out.returncode != 0 and "control character" in out.stderr
        out = ldp("create", "shop", "--db", srv.db_url, "--domain", "a,b", "-e", "1")
        assert out.returncode != 0 and "already exists" in out.stderr
        out = ldp(
            "create", "city", "--db", srv.db_url, "--domain", "x,y", "-e", "1", "--window", "week"
        )
        assert out.returncode == 0, out.stderr

        items = reports(created, 30)
        assert upload(srv, "shop", batch(created, items)).json()["accepted"] == 30
        out = ldp("list", "--url", srv.url, LDP_ANALYST_TOKEN=ANALYST_TOKEN)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split() == ["id", "mechanism", "epsilon", "k", "window", "reports",
                                    "archived"]  # fmt: skip
        city = lines[2].split()
        assert (city[0], city[4], city[5], city[6]) == ("city", "week", "0", "-")
        assert lines[3].split()[0] == "shop" and lines[3].split()[5] == "30"

        # Archive from the store while the collector serves: its workers see it at once.
        out = ldp("archive", "shop", "--db", srv.db_url)
        assert out.returncode == 0, out.stderr
        assert "archived on" in out.stdout and "410" in out.stdout
        refused = upload(srv, "shop", batch(created, reports(created, 5, seed=1)))
        assert refused.status_code == 410, refused.text
        error = refused.json()["error"]
        assert error["code"] == "campaign_archived" and "archived on" in error["message"]
        estimates = requests.get(
            srv.url + "/v1/campaigns/shop/estimates", headers=srv.headers("analyst"), timeout=10
        )
        assert estimates.status_code == 200 and estimates.json()["n"] == 30
        out = ldp("show", "shop", "--db", srv.db_url, "--format", "json")
        day = json.loads(out.stdout)["archived"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", day)
        got = requests.get(srv.url + "/v1/campaigns/shop", headers=srv.headers("ingest"))
        assert got.json()["archived"] == day
        # The endpoint: admin only; archiving again keeps the first date.
        again = requests.post(
            srv.url + "/v1/campaigns/shop/archive", headers=srv.headers("admin"), timeout=10
        )
        assert again.status_code == 200 and again.json()["archived"] == got.json()["archived"]
        for role in ("analyst", "ingest"):
            r = requests.post(
                srv.url + "/v1/campaigns/city/archive", headers=srv.headers(role), timeout=10
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = requests.post(
            srv.url + "/v1/campaigns/city/archive",
            headers={"Authorization": "Bearer not-a-token-at-all-xx"},
            timeout=10,
        )
        assert r.status_code == 401
        out = ldp("archive", "city", "--url", srv.url, LDP_ANALYST_TOKEN=ANALYST_TOKEN)
        assert out.returncode != 0 and "LDP_ADMIN_TOKEN" in out.stderr
        out = ldp("archive", "nope", "--url", srv.url, LDP_ADMIN_TOKEN=ADMIN_TOKEN)
        assert out.returncode != 0 and "404" in out.stderr


def test_an_upload_racing_the_archive_is_stored_exactly_when_acknowledged(
    tmp_path: Path, db_url: str
) -> None:
    with running_collector(tmp_path, workers=2, db_url=db_url) as srv:
        out = ldp(
            "create", "race", "--url", srv.url, "--domain", "a,b,c", "-e", "1",
            "--format", "json", LDP_ADMIN_TOKEN=ADMIN_TOKEN,
        )  # fmt: skip
        campaign = json.loads(out.stdout)
        acknowledged = 0
        statuses: list[int] = []
        lock = threading.Lock()
        stop = threading.Event()

        def uploader(seed: int) -> None:
            nonlocal acknowledged
            i = 0
            while not stop.is_set():
                r = upload(
                    srv, "race", batch(campaign, reports(campaign, 50, seed=seed * 1000 + i))
                )
                i += 1
                with lock:
                    statuses.append(r.status_code)
                    if r.status_code == 200:
                        acknowledged += r.json()["accepted"]
                if r.status_code == 410:
                    return

        threads = [threading.Thread(target=uploader, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        while True:
            with lock:
                if len(statuses) >= 20:
                    break
        archived = requests.post(
            srv.url + "/v1/campaigns/race/archive", headers=srv.headers("admin"), timeout=30
        )
        assert archived.status_code == 200
        for t in threads:
            t.join(timeout=60)
        stop.set()
        assert set(statuses) <= {200, 410} and 410 in statuses
        est = requests.get(
            srv.url + "/v1/campaigns/race/estimates?postprocess=none",
            headers=srv.headers("analyst"),
            timeout=10,
        ).json()
        assert est["n"] == acknowledged
