"""TelemetryClient against a real ``ldp serve`` on loopback: delivery, budget, privacy, threads."""

from __future__ import annotations

import datetime as dt
import inspect
import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from client_sdk import (
    ClientClosed,
    InvalidParameter,
    InvalidReport,
    NotSent,
    PrivacyBudget,
    PrivacyBudgetExceeded,
    Report,
    TelemetryClient,
    UnknownCampaign,
    ValueNotInDomain,
)
from client_sdk.mechanisms import create
from tests.support.faulty_proxy import Fault, FaultyProxy
from tests.support.server import CollectorProcess, running_collector

LABELS = ["Zebra-Keeper", "Quokka-Tamer", "Narwhal-Pilot", "Axolotl-Chef"]
_ids = itertools.count()


def create_campaign(
    srv: CollectorProcess,
    *,
    mechanism: str = "oue",
    epsilon: float = 1.0,
    domain: Sequence[str] = LABELS,
    **extra: Any,
) -> str:
    """Create a fresh campaign on ``srv``; returns its id."""
    campaign = f"c{next(_ids)}-{mechanism}"
    body = {"id": campaign, "domain": list(domain), "mechanism": mechanism, "epsilon": epsilon}
    resp = requests.post(
        srv.url + "/v1/campaigns", json=body | extra, headers=srv.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text
    return campaign


def estimates(srv: CollectorProcess, campaign: str) -> dict[str, Any]:
    """The campaign's estimates over all windows (``{"n": 0}`` before any report)."""
    resp = requests.get(
        f"{srv.url}/v1/campaigns/{campaign}/estimates", headers=srv.headers("analyst"), timeout=10
    )
    if resp.status_code == 422:
        return {"n": 0}
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        yield srv


UNLIMITED = PrivacyBudget.unlimited()


def client_for(
    srv: CollectorProcess | str, state_dir: Path, *, ready: Sequence[str] = (), **options: Any
) -> TelemetryClient:
    """A client on ``srv``; ``ready`` campaigns are fetched before it is returned (``report``
    never fetches: a campaign not on the device yet returns ``NotSent``, ``not_ready``)."""
    url = srv if isinstance(srv, str) else srv.url
    options.setdefault("ingest_token", getattr(srv, "ingest_token", None))
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_cap", 0.2)
    client = TelemetryClient(url, state_dir=state_dir, **options)
    if ready:
        try:
            client.prefetch(*ready)
        except BaseException:
            client.close(timeout=0)
            raise
    return client


def test_reports_arrive_and_estimates_move(collector: CollectorProcess, tmp_path: Path) -> None:
    campaign = create_campaign(collector)
    assert estimates(collector, campaign)["n"] == 0
    with client_for(
        collector, tmp_path, reports_per_window=None, budget=UNLIMITED, ready=[campaign]
    ) as client:
        for _ in range(20):
            client.report(campaign, "Zebra-Keeper")
        n = client.report_many(
            campaign, np.array([0] * 1500 + [2] * 500), simulate_devices=True, rng=1
        )
        assert n == 2000
        assert client.flush(timeout=30)
        assert client.stats()["accepted"] == 2020
    est = estimates(collector, campaign)
    assert est["n"] == 2020
    rows = {row["value"]: row for row in est["values"]}
    # 1520 and 500 true counts; 5 standard errors of slack (fixed seed for the batch part).
    for label, truth in (("Zebra-Keeper", 1520), ("Narwhal-Pilot", 500), ("Quokka-Tamer", 0)):
        assert abs(rows[label]["count"] - truth) < 5 * rows[label]["std_error"]


def test_report_many_takes_payloads_and_needs_the_simulation_flag(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector, mechanism="grr")
    mech = create("grr", epsilon=1.0, domain=LABELS)
    with client_for(collector, tmp_path) as client:
        with pytest.raises(InvalidParameter, match="simulate_devices=True"):
            client.report_many(campaign, ["Zebra-Keeper"])
        batch = mech.perturb_many(np.zeros(300, dtype=np.int64), rng=3)
        assert client.report_many(campaign, payloads=batch, simulate_devices=True) == 300
        assert client.report_many(campaign, payloads=[0, 1, 2], simulate_devices=True) == 3
        with pytest.raises(InvalidReport, match="report #1"):
            client.report_many(campaign, payloads=[0, 9], simulate_devices=True)
        assert client.flush(timeout=30)
        # The budget was not charged by the simulation path.
        assert client.budget_left(campaign) == 1
    assert estimates(collector, campaign)["n"] == 303


def test_budget_refuses_then_renews_with_the_window(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector, epsilon=0.5)
    first = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=3)
    today = [first]
    with client_for(collector, tmp_path, clock=lambda: today[0], ready=[campaign]) as client:
        assert client.report(campaign, "Quokka-Tamer")
        assert client.budget_left(campaign) == 0
        refused = client.report(campaign, "Quokka-Tamer")
        assert isinstance(refused, NotSent) and not refused and refused.reason == "budget_spent"
        with pytest.raises(PrivacyBudgetExceeded, match=f"campaign '{campaign}'.*{first}"):
            refused.raise_()
        assert client.outbox.pending == 1  # the refused report left no trace
        assert client.stats()["refused_budget"] == 1
        today[0] = first + dt.timedelta(days=1)
        client.report(campaign, "Axolotl-Chef")
        spent = client.privacy_spent(campaign)
        assert spent.reports == 2 and spent.windows == 2
        assert spent.sequential == pytest.approx(2 * spent.epsilon_per_report)
        assert spent.epsilon_per_report <= 0.5
        assert spent.advanced is None and spent.optimal is None  # not tighter for 2 reports
        assert [s.campaign for s in client.privacy_summary()] == [campaign]
        assert client.flush(timeout=30)
    # The ledger persists across clients.
    with client_for(collector, tmp_path, clock=lambda: today[0]) as client:
        assert client.report(campaign, "Axolotl-Chef").reason == "budget_spent"  # type: ignore[union-attr]


def test_advanced_composition_is_shown_when_tighter(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector, epsilon=0.1, mechanism="grr")
    with client_for(
        collector, tmp_path, reports_per_window={campaign: None}, budget=UNLIMITED, ready=[campaign]
    ) as client:
        for _ in range(1000):
            client.report(campaign, "Zebra-Keeper")
        spent = client.privacy_spent(campaign, delta=1e-6)
        eps = spent.epsilon_per_report
        expected = math.sqrt(2 * 1000 * math.log(1e6)) * eps + 1000 * eps * math.expm1(eps)
        assert spent.sequential == pytest.approx(1000 * eps)
        assert spent.advanced == pytest.approx(expected)
        # The optimal (Kairouz-Oh-Viswanath) bound is tighter still and is what is charged.
        assert spent.optimal is not None and spent.optimal <= spent.advanced < spent.sequential
        assert spent.best == spent.optimal and spent.bound == "optimal"
        assert spent.to_dict()["delta"] == 1e-6
        assert client.flush(timeout=30)


def test_values_outside_the_domain(collector: CollectorProcess, tmp_path: Path) -> None:
    campaign = create_campaign(collector, domain=[*LABELS, "Other"])
    with client_for(collector, tmp_path / "a", ready=[campaign]) as client:
        with pytest.raises(ValueNotInDomain, match=f"campaign '{campaign}'.*catch_all") as info:
            client.report(campaign, "Zebra-Keepr")
        assert "Zebra-Keep" not in str(info.value)  # safe to log: the value is not quoted
        assert client.outbox.pending == 0 and client.budget_left(campaign) == 1
    with client_for(collector, tmp_path / "b", catch_all="Other", ready=[campaign]) as client:
        client.report(campaign, "Lemur-Whisperer")
        assert client.outbox.pending == 1
    with client_for(
        collector, tmp_path / "c", catch_all={campaign: "Nope"}, ready=[campaign]
    ) as client:
        with pytest.raises(InvalidParameter, match="catch_all label 'Nope'"):
            client.report(campaign, "Lemur-Whisperer")


def test_unknown_campaigns(collector: CollectorProcess, tmp_path: Path) -> None:
    # Changed by issue 13: ``report`` no longer fetches. The first report of a campaign not on
    # the device returns NotSent (not_ready); once the collector has answered 404, the id is a
    # programming error and raises.
    with client_for(collector, tmp_path) as client:
        first = client.report("no-such", "x")
        assert isinstance(first, NotSent) and first.reason == "not_ready"
        deadline = time.monotonic() + 30
        with pytest.raises(UnknownCampaign, match="has no campaign 'no-such'"):
            while time.monotonic() < deadline:
                client.report("no-such", "x")
                time.sleep(0.01)
        with pytest.raises(UnknownCampaign, match="has no campaign 'no-such'"):
            client.prefetch("no-such")
        with pytest.raises(InvalidParameter, match="slug"):
            client.report("../etc", "x")
    with FaultyProxy(upstream=None) as proxy:  # the collector is unreachable
        with client_for(proxy.url, tmp_path / "off", ingest_token="t", close_timeout=0) as client:
            result = client.report("never-seen", "x")
            assert not result and result.reason == "not_ready"  # type: ignore[union-attr]
            assert client.stats()["not_ready"] == 1 and client.outbox.pending == 0
            with pytest.raises(UnknownCampaign, match="never fetched on this device"):
                client.prefetch("never-seen")


def test_prefetch_without_arguments_fetches_the_declared_campaigns(
    collector: CollectorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/SDK.md tells apps to call prefetch() at startup; it used to fetch nothing.
    campaign = create_campaign(collector)
    with client_for(collector, tmp_path / "a", campaigns=[campaign], budget=UNLIMITED) as client:
        client.prefetch()
        assert client.configs.peek(campaign) is not None
        assert isinstance(client.report(campaign, "Zebra-Keeper"), Report)
    # Deterministic whatever the background thread does: only a real fetch raises.
    with client_for(collector, tmp_path / "b", campaigns=["no-such-declared"]) as client:
        with pytest.raises(UnknownCampaign, match="has no campaign 'no-such-declared'"):
            client.prefetch()
    monkeypatch.setenv("LDP_CAMPAIGNS", "no-such-from-env")
    with client_for(collector, tmp_path / "c") as client:
        with pytest.raises(UnknownCampaign, match="has no campaign 'no-such-from-env'"):
            client.prefetch()
    monkeypatch.delenv("LDP_CAMPAIGNS")
    with client_for(collector, tmp_path / "d") as client:
        with pytest.raises(InvalidParameter, match=r"prefetch\(\) needs campaign ids"):
            client.prefetch()


def test_works_offline_from_the_cache(collector: CollectorProcess, tmp_path: Path) -> None:
    campaign = create_campaign(collector)
    with FaultyProxy(upstream=collector.url) as proxy:
        with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
            client.prefetch(campaign)
        proxy.upstream = None  # offline from now on
        with client_for(
            proxy.url, tmp_path, ingest_token=collector.ingest_token, close_timeout=0.2
        ) as client:
            client.report(campaign, "Narwhal-Pilot")
            assert not client.flush(timeout=0.3)
        proxy.upstream = collector.url
        with client_for(proxy.url, tmp_path, ingest_token=collector.ingest_token) as client:
            assert client.outbox.pending == 1
            assert client.flush(timeout=30)
    assert estimates(collector, campaign)["n"] == 1


def test_true_values_never_stored_logged_or_sent(
    collector: CollectorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    campaigns = [create_campaign(collector, mechanism=m) for m in ("oue", "grr", "rappor")]
    state = tmp_path / "state"
    caplog.set_level(logging.DEBUG)
    with FaultyProxy(upstream=collector.url) as proxy:
        proxy.plan(Fault.status(503, retry_after=0), path="/reports")
        with client_for(
            proxy.url,
            state,
            ingest_token=collector.ingest_token,
            reports_per_window=None,
            ready=campaigns,
        ) as client:
            for campaign in campaigns:
                for label in LABELS:
                    client.report(campaign, label)
            assert client.flush(timeout=30)
            shown = client.sent_reports()
        bodies = [r for r in proxy.requests if r.method == "POST"]
    assert len(shown) == 3 * len(LABELS)
    assert {r["outcome"] for r in shown} == {"acknowledged"}
    # The HTTP bodies carry only the digest and reports (id, day, payload), nothing else.
    sent_ids = set()
    for request in bodies:
        body = request.json()
        assert set(body) == {"digest", "reports"}
        for report in body["reports"]:
            assert set(report) == {"id", "day", "payload"}
            assert len(report["id"]) == 32 and int(report["id"], 16) >= 0
            sent_ids.add(report["id"])
    assert {r["id"] for r in shown} == sent_ids
    # Nothing on disk (outbox, ledger, sent log, WAL, device secret) and nothing logged or sent
    # holds a true value. The config cache holds the domain, as the collector publishes it.
    haystacks = {
        str(p): p.read_bytes()
        for p in state.rglob("*")
        if p.is_file() and p.parent.name != "campaigns"
    }
    haystacks["log"] = caplog.text.encode()
    haystacks["http"] = b"".join(r.body + json.dumps(r.headers).encode() for r in proxy.requests)
    assert len(haystacks) >= 3
    for where, blob in haystacks.items():
        for label in LABELS:
            for form in (label.encode(), label.encode("utf-16-le"), label.lower().encode()):
                assert form not in blob, f"{label!r} found in {where}"


def test_many_threads_share_one_client(collector: CollectorProcess, tmp_path: Path) -> None:
    campaign = create_campaign(collector)
    made: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with client_for(
        collector,
        tmp_path,
        reports_per_window=None,
        batch_size=16,
        flush_interval=0.01,
        budget=UNLIMITED,
        ready=[campaign],
    ) as client:

        def work(label: str) -> None:
            try:
                for _ in range(60):
                    report = client.report(campaign, label)
                    with lock:
                        made.append(report.id)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(label,)) for label in LABELS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert client.flush(timeout=30)
        assert client.privacy_spent(campaign).reports == 240
    assert len(set(made)) == 240
    assert estimates(collector, campaign)["n"] == 240


def test_the_rate_limit_counts_the_campaigns_own_window(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """A weekly campaign's limit counts every report of the ISO week, not of the day: two a
    week, one on Monday and one on Tuesday, and the week is spent."""
    campaign = create_campaign(collector, window="week")
    today = dt.datetime.now(dt.UTC).date()
    monday = today - dt.timedelta(days=today.weekday() + 7)
    day = [monday]
    with client_for(
        collector,
        tmp_path,
        clock=lambda: day[0],
        reports_per_window=2,
        budget=UNLIMITED,
        ready=[campaign],
    ) as client:
        assert client.report(campaign, "Zebra-Keeper")
        day[0] = monday + dt.timedelta(days=1)
        assert client.budget_left(campaign) == 1
        assert client.report(campaign, "Zebra-Keeper")
        assert client.budget_left(campaign) == 0
        refused = client.report(campaign, "Zebra-Keeper")
        assert isinstance(refused, NotSent) and refused.reason == "budget_spent"


def test_closed_client_refuses_and_close_is_idempotent(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    client = client_for(collector, tmp_path, ready=[campaign])
    client.report(campaign, "Zebra-Keeper")
    client.close()
    client.close()
    with pytest.raises(ClientClosed, match="closed"):
        client.report(campaign, "Zebra-Keeper")
    assert estimates(collector, campaign)["n"] == 1


def test_memoised_campaign_through_the_client(collector: CollectorProcess, tmp_path: Path) -> None:
    campaign = create_campaign(collector, mechanism="rappor", epsilon=1.0)
    start = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=10)
    days = iter(start + dt.timedelta(days=i) for i in range(10))
    with client_for(collector, tmp_path, clock=lambda: next(days), ready=[campaign]) as client:
        payloads = [client.report(campaign, "Quokka-Tamer").payload for _ in range(3)]
        mech = client.configs.get(campaign).mechanism
        spent = client.privacy_spent(campaign)
        assert spent.reports == 3
        assert spent.memoised is None or spent.memoised <= spent.sequential
        secret = (tmp_path / "device.key").read_text()
    assert len(set(payloads)) >= 1 and all(isinstance(p, str) for p in payloads)
    # The secret survives a restart, so the permanent bits do too.
    with client_for(collector, tmp_path, clock=lambda: next(days)) as client:
        client.report(campaign, "Quokka-Tamer")
        assert (tmp_path / "device.key").read_text() == secret
        assert client.flush(timeout=30)
    assert mech.permanent_epsilon > mech.realised_epsilon
    assert estimates(collector, campaign)["n"] == 4


def test_readme_example_runs(collector: CollectorProcess, tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Client SDK", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    create_campaign_named(collector, "occupation", domain=["Sales", "Tech-support"])
    code = code.replace('"https://telemetry.example.com"', repr(collector.url))
    exec(code, {"TOKEN": collector.ingest_token, "app_data_dir": tmp_path})  # noqa: S102
    assert estimates(collector, "occupation")["n"] == 1


def test_every_option_is_documented() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "SDK.md").read_text()
    options = inspect.signature(TelemetryClient).parameters
    missing = [name for name in options if f"`{name}`" not in docs]
    assert not missing
    methods = ["report", "report_many", "flush", "close", "prefetch", "sent_reports",
               "pending_reports", "privacy_spent", "privacy_summary", "budget_left",
               "stats"]  # fmt: skip
    assert [m for m in methods if f"`{m}(" not in docs] == []


def create_campaign_named(srv: CollectorProcess, campaign: str, *, domain: list[str]) -> None:
    body = {"id": campaign, "domain": domain, "mechanism": "oue", "epsilon": 1.0}
    resp = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text


def wait_for_reports(srv: CollectorProcess, campaign: str, n: int) -> int:
    """Poll the collector until it counts ``n`` reports (or a generous deadline passes)."""
    deadline = time.monotonic() + 30
    while (seen := estimates(srv, campaign)["n"]) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


def test_the_size_trigger_sends_full_batches_only(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Before: a pass the size trigger started drained the outbox to the last report, so an app
    reporting steadily kept the upload thread sending a request every few reports (bench/sdk.py's
    latency loop, 3 x 20,200 reports: 2,306 upload requests before, 123 after)."""
    campaign = create_campaign(collector)
    with client_for(
        collector,
        tmp_path,
        reports_per_window=None,
        budget=UNLIMITED,
        batch_size=5,
        flush_interval=3600,
        ready=[campaign],
    ) as client:
        # The state lock (reentrant: report takes it too) keeps the pass that the fifth report
        # starts from reading until all seven are stored.
        with client._db.lock:
            for _ in range(7):
                client.report(campaign, "Zebra-Keeper")
        assert wait_for_reports(collector, campaign, 5) == 5
        deadline = time.monotonic() + 30
        while not client._uploader._idle and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client._uploader._idle
        assert client.stats()["pending"] == 2
        assert estimates(collector, campaign)["n"] == 5
        assert client.flush(timeout=30)
        assert client.stats()["pending"] == 0
    assert estimates(collector, campaign)["n"] == 7


def test_uploads_start_on_their_own(collector: CollectorProcess, tmp_path: Path) -> None:
    """Size trigger (a full batch) and time trigger (flush_interval), without flush()."""
    by_size = create_campaign(collector)
    with client_for(
        collector,
        tmp_path / "a",
        reports_per_window=None,
        batch_size=5,
        flush_interval=3600,
        ready=[by_size],
    ) as client:
        for _ in range(5):
            client.report(by_size, "Zebra-Keeper")
        assert wait_for_reports(collector, by_size, 5) == 5
    by_time = create_campaign(collector)
    with client_for(collector, tmp_path / "b", flush_interval=0.05, ready=[by_time]) as client:
        client.report(by_time, "Zebra-Keeper")
        assert wait_for_reports(collector, by_time, 1) == 1
