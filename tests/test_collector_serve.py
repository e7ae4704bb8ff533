"""`ldp serve` as a process: start-up rules, restarts, SIGKILL durability, busy storage,
concurrent workers, and `ldp tally verify`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from tests.support.postgres import tamper_tallies, write_lock_held
from tests.support.reports import batch, campaign_body, mechanism_of, reports
from tests.support.server import CollectorProcess, running_collector


def create(srv: CollectorProcess, cid: str, **extra: Any) -> dict:
    r = requests.post(
        srv.url + "/v1/campaigns",
        json=campaign_body(cid, **extra),
        headers=srv.headers("admin"),
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()


def upload(srv: CollectorProcess, cid: str, body: Any) -> requests.Response:
    return requests.post(
        f"{srv.url}/v1/campaigns/{cid}/reports",
        json=body,
        headers=srv.headers("ingest"),
        timeout=30,
    )


def ldp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_serve_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("LDP_")}
    out = ldp("serve", "-p", "0", "--database", str(tmp_path / "x.db"), env=env)
    assert out.returncode != 0
    assert "LDP_ADMIN_TOKEN is not set" in out.stderr and "--dev" in out.stderr


def test_serve_dev_generates_and_prints_tokens(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    env["LDP_ANALYST_TOKEN"] = "analyst-token-from-the-operator-123"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ldp_cli",
            "serve",
            "--dev",
            "-p",
            "0",
            "--workers",
            "1",
            "--database",
            str(tmp_path / "dev.db"),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        tokens = dict(line.split("=", 1) for line in lines[:2])
        assert set(tokens) == {"LDP_ADMIN_TOKEN", "LDP_INGEST_TOKEN"}  # analyst was set
        assert lines[2].startswith("ldp serve: listening on http://127.0.0.1:")
        url = lines[2].rsplit(" ", 1)[1]
        r = requests.get(
            url + "/v1/campaigns",
            headers={"Authorization": f"Bearer {tokens['LDP_ADMIN_TOKEN']}"},
            timeout=20,
        )
        assert r.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        proc.stdout.close()  # type: ignore[union-attr]


def test_restart_keeps_everything(tmp_path: Path, db_url: str) -> None:
    with running_collector(tmp_path, db_url=db_url) as srv:
        campaign = create(srv, "keep", window="week", horizon_days=60)
        items = reports(campaign, 100)
        assert upload(srv, "keep", batch(campaign, items)).json()["accepted"] == 100
        before = requests.get(
            srv.url + "/v1/campaigns/keep/estimates?postprocess=none",
            headers=srv.headers("analyst"),
            timeout=10,
        ).json()
        srv.restart()
        again = requests.get(
            srv.url + "/v1/campaigns/keep", headers=srv.headers("ingest"), timeout=10
        )
        assert again.json() == campaign
        after = requests.get(
            srv.url + "/v1/campaigns/keep/estimates?postprocess=none",
            headers=srv.headers("analyst"),
            timeout=10,
        ).json()
        assert after == before
        # Ids are remembered across the restart.
        retry = upload(srv, "keep", batch(campaign, items)).json()
        assert (retry["accepted"], retry["duplicate"]) == (0, 100)


def test_sigkill_right_after_2xx_loses_nothing(tmp_path: Path, db_url: str) -> None:
    with running_collector(tmp_path, workers=2, db_url=db_url) as srv:
        campaign = create(srv, "durable")
        sent: list[dict] = []
        for round_ in range(3):
            items = reports(campaign, 200, seed=round_)
            r = upload(srv, "durable", batch(campaign, items))
            assert r.status_code == 200 and r.json()["accepted"] == 200
            sent += items
            srv.kill()  # SIGKILL master and workers, no graceful shutdown
            srv.start()
        # Every acknowledged report is there: a retry of all of them is all duplicates.
        answer = upload(srv, "durable", batch(campaign, sent[:1000])).json()
        assert answer == {"accepted": 0, "duplicate": 600, "rejected": 0, "errors": []}
        mech = mechanism_of(campaign)
        est = requests.get(
            srv.url + "/v1/campaigns/durable/estimates?postprocess=none",
            headers=srv.headers("analyst"),
            timeout=10,
        ).json()
        assert est["n"] == 600
        assert mech.tally([x["payload"] for x in sent]).n == 600


def test_busy_database_answers_503_and_stores_nothing(tmp_path: Path, db_url: str) -> None:
    with running_collector(
        tmp_path, env={"LDP_BUSY_TIMEOUT_MS": "200", "LDP_RETRY_AFTER": "3"}, db_url=db_url
    ) as srv:
        campaign = create(srv, "busy")
        items = reports(campaign, 50)
        with write_lock_held(srv.db_url):  # another session holds the write lock
            r = upload(srv, "busy", batch(campaign, items))
            assert r.status_code == 503, r.text
            assert r.headers["Retry-After"] == "3"
            assert r.json()["error"]["code"] == "storage_unavailable"
            ready = requests.get(srv.url + "/readyz", timeout=10)
            assert ready.status_code == 503 and ready.headers["Retry-After"] == "3"
        # Readiness is cached for LDP_READY_CACHE_SECONDS (default 2): ready again soon after
        # (the deadline is generous for a loaded machine, not a timing claim).
        deadline = time.monotonic() + 60
        while requests.get(srv.url + "/readyz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "never ready again"
            time.sleep(0.2)
        # Nothing of the refused batch was stored: the retry stores all of it.
        assert upload(srv, "busy", batch(campaign, items)).json()["accepted"] == 50


def test_concurrent_uploads_through_two_workers_count_each_report_once(
    tmp_path: Path, db_url: str
) -> None:
    with running_collector(tmp_path, workers=2, db_url=db_url) as srv:
        campaign = create(srv, "race")
        pool = reports(campaign, 2000, seed=3)
        # Four uploaders send overlapping slices, so every report is raced by two of them.
        slices = [pool[0:1000], pool[500:1500], pool[1000:2000], pool[0:500] + pool[1500:2000]]
        answers: list[dict] = []

        def send(items: list[dict]) -> None:
            for start in range(0, len(items), 250):
                r = upload(srv, "race", batch(campaign, items[start : start + 250]))
                answers.append(r.json())

        threads = [threading.Thread(target=send, args=(s,)) for s in slices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(a["accepted"] for a in answers) == 2000
        assert sum(a["duplicate"] for a in answers) == 2000
        db = srv.db_url
    out = ldp("tally", "verify", "--database", str(db), "--format", "json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] and sum(w["stored"]["n"] for w in result["windows"]) == 2000
    expected = mechanism_of(campaign).tally([x["payload"] for x in pool])
    assert result["windows"][0]["stored"] == expected.to_dict()


def test_tally_verify_reports_a_difference(tmp_path: Path, db_url: str) -> None:
    with running_collector(tmp_path, db_url=db_url) as srv:
        campaign = create(srv, "tamper")
        upload(srv, "tamper", batch(campaign, reports(campaign, 30)))
        db = srv.db_url
    ok = ldp("tally", "verify", "--database", str(db))
    assert ok.returncode == 0 and "0 differ" in ok.stdout
    tamper_tallies(db)
    bad = ldp("tally", "verify", "--database", str(db))
    assert bad.returncode == 1 and "DIFFERS" in bad.stdout
    missing = ldp("tally", "verify", "--database", str(tmp_path / "nope.db"))
    assert missing.returncode != 0 and "no database file" in missing.stderr
