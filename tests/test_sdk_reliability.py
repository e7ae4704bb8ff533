"""No report is lost or counted twice: faults, a collector that is down, a killed client."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk.state import STATE_FILE
from client_sdk.transport import (
    AuthError,
    CampaignGone,
    PermanentError,
    RetryableError,
    StaleConfig,
    Transport,
    parse_retry_after,
)
from tests.support.faulty_proxy import (
    DROP,
    HALF,
    LOST_RESPONSE,
    PASS,
    TIMEOUT,
    Fault,
    FaultyProxy,
)
from tests.support.server import CollectorProcess, running_collector
from tests.support.waiting import eventually
from tests.test_sdk_client import UNLIMITED, client_for, create_campaign, estimates

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        yield srv


@pytest.fixture
def proxy(collector: CollectorProcess) -> Iterator[FaultyProxy]:
    with FaultyProxy(upstream=collector.url) as p:
        yield p


def test_retries_through_every_transient_fault_lose_nothing(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    proxy.plan(
        Fault.status(503, retry_after=0),
        Fault.status(500),
        Fault.status(429, retry_after=0),
        Fault.status(408),
        DROP,
        HALF,
        LOST_RESPONSE,
        TIMEOUT,
        Fault.delay(0.2),
        LOST_RESPONSE,
        path="/reports",
    )
    with client_for(
        proxy.url,
        tmp_path,
        ingest_token=collector.ingest_token,
        reports_per_window=None,
        budget=UNLIMITED,
        batch_size=10,
        timeout=(1.0, 0.5),
        ready=[campaign],
    ) as client:
        made = [client.report(campaign, "Quokka-Tamer").id for _ in range(60)]
        assert client.flush(timeout=60)
        stats = client.stats()
        sent = client.sent_reports(campaign)
    assert proxy.planned() == 0
    assert estimates(collector, campaign)["n"] == 60
    assert stats["pending"] == 0 and stats["rejected"] == 0
    assert stats["accepted"] + stats["duplicate"] == 60
    assert stats["duplicate"] >= 10  # the lost responses were re-sent and not counted twice
    assert sorted(r["id"] for r in sent) == sorted(made)


def test_collector_down_at_start_then_up(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    with running_collector(tmp_path / "srv") as srv, FaultyProxy(upstream=srv.url) as proxy:
        campaign = create_campaign(srv)
        with client_for(proxy.url, tmp_path / "dev", ingest_token=srv.ingest_token) as client:
            client.prefetch(campaign)
        srv.stop()  # the collector is down when the app starts
        client = client_for(
            proxy.url,
            tmp_path / "dev",
            ingest_token=srv.ingest_token,
            reports_per_window=None,
            budget=UNLIMITED,
            batch_size=5,
        )
        try:
            for _ in range(30):
                client.report(campaign, "Narwhal-Pilot")
            assert not client.flush(timeout=0.3)
            assert client.outbox.pending == 30
            srv.start()  # back, on a new port behind the same proxy address
            proxy.upstream = srv.url
            assert client.flush(timeout=60)
        finally:
            client.close()
        assert estimates(srv, campaign)["n"] == 30


def test_permanent_answers_are_not_retried(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    options = {
        "ingest_token": collector.ingest_token,
        "reports_per_window": None,
        "budget": UNLIMITED,
    }
    with client_for(proxy.url, tmp_path / "a", batch_size=4, ready=[campaign], **options) as client:
        proxy.plan(Fault.status(400), Fault.status(404), path="/reports")
        # All ten pending before the first upload (one transaction): the batches are fixed.
        client.report_many(campaign, ["Zebra-Keeper"] * 10, simulate_devices=True)
        assert client.flush(timeout=30)
        stats = client.stats()
    # 400 drops one batch (4); 404 means the campaign is gone: all its 6 others are dropped.
    assert stats["dropped_refused"] == 4 and stats["dropped_unknown_campaign"] == 6
    assert len(proxy.requests_to(f"/{campaign}/reports")) == 2

    campaign = create_campaign(collector)
    with client_for(proxy.url, tmp_path / "b", batch_size=8, ready=[campaign], **options) as client:
        proxy.plan(Fault.status(413), Fault.status(413), path="/reports")
        client.report_many(campaign, ["Zebra-Keeper"] * 8, simulate_devices=True)
        assert client.flush(timeout=30)
        assert client.stats()["accepted"] == 8
    # 8 refused (413), 4 refused (413), then four batches of 2.
    assert len(proxy.requests_to(f"/{campaign}/reports")) == 6
    assert estimates(collector, campaign)["n"] == 8

    campaign = create_campaign(collector)
    with client_for(
        proxy.url, tmp_path / "c", close_timeout=1, ready=[campaign], **options
    ) as client:
        proxy.plan(Fault.status(401), path="/reports")
        client.report(campaign, "Zebra-Keeper")
        assert not client.flush(timeout=30)
        assert client.stats()["paused"] and client.outbox.pending == 1
    with client_for(proxy.url, tmp_path / "c", **options) as client:  # a fixed token later
        assert client.flush(timeout=30)
    assert estimates(collector, campaign)["n"] == 1


def test_reports_of_a_recreated_campaign_are_dropped_and_counted(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    options = {"ingest_token": collector.ingest_token, "reports_per_window": None}
    with client_for(collector, tmp_path, **options) as client:
        client.prefetch(campaign)
    # Reports made under a digest the collector does not have (a recreated or forged config).
    with sqlite3.connect(tmp_path / STATE_FILE) as conn:
        conn.executemany(
            "INSERT INTO outbox (campaign, report_id, day, payload, digest) VALUES (?,?,?,?,?)",
            [
                (
                    campaign,
                    f"{i:032x}",
                    time.strftime("%Y-%m-%d", time.gmtime()),
                    '"AA=="',
                    "0" * 64,
                )
                for i in range(3)
            ],
        )
    conn.close()
    with client_for(collector, tmp_path, **options) as client:
        client.report(campaign, "Axolotl-Chef")
        assert client.flush(timeout=30)
        stats = client.stats()
    assert stats["dropped_stale"] == 3 and stats["accepted"] == 1
    assert estimates(collector, campaign)["n"] == 1


def test_close_never_hangs_and_keeps_the_reports(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
        client.prefetch(campaign)
    proxy.default = TIMEOUT  # the collector accepts connections and never answers
    client = client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token)
    client.report(campaign, "Zebra-Keeper")
    done = threading.Event()
    closer = threading.Thread(target=lambda: (client.close(timeout=0.3), done.set()))
    closer.start()
    closer.join(30)  # a generous bound: close returns after its own 0.3 s deadline
    assert done.is_set()
    proxy.default = PASS
    with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
        assert client.outbox.pending == 1
        assert client.flush(timeout=30)


CHILD = """
import sys
from client_sdk import TelemetryClient
url, token, state, campaign, n = sys.argv[1:]
from client_sdk import PrivacyBudget
client = TelemetryClient(url, ingest_token=token, state_dir=state, reports_per_window=None,
                         batch_size=20, flush_interval=0.0, backoff_base=0.01, backoff_cap=0.1,
                         budget=PrivacyBudget.unlimited())
client.prefetch(campaign)
for _ in range(int(n)):
    print(client.report(campaign, "Zebra-Keeper").id, flush=True)
print("DONE", flush=True)
client.flush(120)
print("FLUSHED", flush=True)
client.close()
"""


def test_client_killed_mid_upload_counts_every_report_once(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    n = 300
    # Slow answers, relayed only after the collector stored the batch: a kill during the wait
    # leaves reports stored on the collector but still in the client's outbox.
    proxy.default = Fault.delay(0.15, after=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            proxy.url,
            collector.ingest_token,
            str(tmp_path),
            campaign,
            str(n),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    made = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "DONE":
                break
            made.append(line.strip())
        # Killed once a few uploads are under way (a wait that ran out would kill a child
        # that had perhaps flushed everything, and fail below for the wrong reason).
        eventually(
            lambda: len(proxy.requests_to("/reports")),
            lambda sent: sent >= 4,
            what="4 uploads from the child",
        )
        child.send_signal(signal.SIGKILL)
        tail = child.stdout.read()
    finally:
        child.kill()
        child.wait(30)
        if child.stdout:
            child.stdout.close()
    assert "FLUSHED" not in tail  # killed mid-upload
    assert len(made) == n
    proxy.default = PASS
    with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
        assert client.outbox.pending > 0
        assert client.flush(timeout=60)
        sent = [r["id"] for r in client.sent_reports(campaign)]
        stats = client.stats()
    assert sorted(sent) == sorted(made)  # each generated report acknowledged exactly once
    assert estimates(collector, campaign)["n"] == n  # and counted exactly once
    assert stats["rejected"] == 0 and stats["pending"] == 0


def test_transport_classifies_answers(proxy: FaultyProxy) -> None:
    transport = Transport(proxy.url, "token", timeout=(1.0, 1.0))
    try:
        cases = [
            (Fault.status(429, retry_after=7), RetryableError),
            (Fault.status(503), RetryableError),
            (DROP, RetryableError),
            (Fault.status(401), AuthError),
            (Fault.status(404), CampaignGone),
            (Fault.status(409, error="stale_config"), StaleConfig),
            (Fault.status(422), PermanentError),
        ]
        for fault, error in cases:
            proxy.plan(fault)
            with pytest.raises(error) as info:
                transport.post_reports("c", "d", [{"id": "x" * 32, "day": "2026-11-22"}])
            if fault.retry_after:
                assert info.value.retry_after == 7  # type: ignore[attr-defined]
        body = proxy.requests[-1]
        assert body.headers["content-encoding"] == "gzip"
        assert json.loads(body.body) == {
            "digest": "d",
            "reports": [{"id": "x" * 32, "day": "2026-11-22"}],
        }
    finally:
        transport.close()


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 120))
    assert 60 < parse_retry_after(future) <= 121  # type: ignore[operator]


def test_reports_rejected_as_invalid_are_dropped_counted_and_shown(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    options = {"ingest_token": collector.ingest_token, "reports_per_window": None}
    with client_for(proxy.url, tmp_path, ready=[campaign], **options) as client:
        good = client.report(campaign, "Zebra-Keeper")
        assert good
        digest = good.digest
        assert client.flush(timeout=30)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    with sqlite3.connect(tmp_path / STATE_FILE) as conn:  # corrupted on the device
        conn.executemany(
            "INSERT INTO outbox (campaign, report_id, day, payload, digest) VALUES (?,?,?,?,?)",
            [
                (campaign, "a" * 32, today, '"not base64!"', digest),
                (campaign, "b" * 32, "2001-01-01", '"AA=="', digest),
                (campaign, "c" * 32, today, '"AA=="', digest),
            ],
        )
    conn.close()
    posts_before = len(proxy.requests_to("/reports"))
    with client_for(proxy.url, tmp_path, **options) as client:
        assert client.flush(timeout=30)
        stats = client.stats()
        outcomes = {r["id"]: r["outcome"] for r in client.sent_reports(campaign)}
    assert stats["rejected"] == 2 and stats["accepted"] == 2 and stats["pending"] == 0
    # One upload per day (issue 14): today's two reports, then the 2001 one; never retried.
    # The 2001 report is rejected, not re-stamped: the device clock is right, it is just old.
    assert len(proxy.requests_to("/reports")) == posts_before + 2
    assert outcomes["a" * 32].startswith("rejected: ")
    assert outcomes["b" * 32].startswith("rejected: ")
    assert outcomes["c" * 32] == "acknowledged"
    assert estimates(collector, campaign)["n"] == 2


def test_config_is_cached_and_revalidated_with_its_etag(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
        client.prefetch(campaign)
    first = [r for r in proxy.requests if r.method == "GET"]
    assert len(first) == 1 and "if-none-match" not in first[0].headers
    with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
        client.report(campaign, "Zebra-Keeper")  # from the cache: no GET before the report
        assert len([r for r in proxy.requests if r.method == "GET"]) == 1
        assert client.flush(timeout=30)  # the upload thread revalidates in the background
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert len(gets) == 2
    digest = client.configs.get(campaign).digest
    assert gets[1].headers["if-none-match"] == f'"{digest}"'
    assert (first[0].status, gets[1].status) == (200, 304)
