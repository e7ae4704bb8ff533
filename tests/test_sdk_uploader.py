"""The background uploader's promises, each checked against a real collector: when a pass
sends, how it backs off, what a flush or a close answers, what happens to a report the
collector will never take.

Written for the mutants of ``client_sdk/uploader.py`` that survived its first mutation run
(docs/MUTATION.md, seventh session), and for a flush that waited out its whole timeout while
uploads were turned off.
"""

from __future__ import annotations

import math
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import InvalidParameter
from client_sdk.state import STATE_FILE
from client_sdk.uploader import DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, DEFAULT_BATCH_SIZE
from tests.support.faulty_proxy import Fault, FaultyProxy
from tests.support.server import CollectorProcess, running_collector
from tests.support.waiting import eventually
from tests.test_sdk_client import UNLIMITED, client_for, create_campaign, wait_for_reports

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        yield srv


@pytest.fixture
def proxy(collector: CollectorProcess) -> Iterator[FaultyProxy]:
    with FaultyProxy(upstream=collector.url) as p:
        yield p


def test_the_defaults_are_the_documented_ones() -> None:
    """docs/SDK.md's table of options states the batch size and the backoff."""
    doc = (REPO / "docs" / "SDK.md").read_text()
    assert f"| `batch_size` | {DEFAULT_BATCH_SIZE} |" in doc
    assert (
        f"| `backoff_base`, `backoff_cap` | {DEFAULT_BACKOFF_BASE:g} s, {DEFAULT_BACKOFF_CAP:g} s |"
        in doc
    )


def test_flush_answers_at_once_when_uploads_are_off(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """``set_upload_enabled(False)`` empties the outbox, so there is nothing to wait for: flush
    waited out its whole timeout and answered False."""
    campaign = create_campaign(collector)
    with client_for(collector, tmp_path, ready=[campaign]) as client:
        assert client.report(campaign, "Zebra-Keeper")
        client.set_upload_enabled(False)
        assert client.stats()["pending"] == 0
        assert client.flush(timeout=5) is True


def test_flush_of_a_paused_client_says_whether_anything_is_left(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """Uploads paused by a refused token: flush answers at once, False while reports wait for
    a valid token, True once nothing is pending."""
    campaign = create_campaign(collector)
    with client_for(
        proxy.url, tmp_path, ingest_token=collector.ingest_token, close_timeout=1, ready=[campaign]
    ) as client:
        proxy.plan(Fault.status(401), path="/reports")
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=30) is False
        assert client.stats()["paused"] and client.stats()["pending"] == 1
        client.set_upload_enabled(False)  # the app withdraws consent: the report is deleted
        client.set_upload_enabled(True)
        assert client.stats()["paused"] and client.stats()["pending"] == 0
        assert client.flush(timeout=30) is True


def test_close_waits_for_the_upload_thread(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """close() returns once the upload thread has ended, within its timeout: here the thread is
    a second into fetching a campaign the collector answers slowly when close() is called."""
    campaign = create_campaign(collector)
    proxy.plan(Fault.delay(1.0), path=f"/campaigns/{campaign}")
    client = client_for(
        proxy.url, tmp_path, ingest_token=collector.ingest_token, campaigns=[campaign]
    )
    eventually(
        lambda: proxy.requests_to(f"/campaigns/{campaign}"), bool, what="the campaign's fetch"
    )
    thread = client._uploader._thread
    assert thread.is_alive()
    client.close(timeout=20)
    assert not thread.is_alive()


def test_the_backoff_doubles_from_the_last_success(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Full jitter, ``uniform(0, min(cap, base * 2**failures))`` with failures counted since
    the last acknowledged upload: the delays after a success are exactly those of a reference
    with the same random stream."""
    campaign = create_campaign(collector)
    base, cap = 0.01, 0.3
    with client_for(
        collector, tmp_path, backoff_base=base, backoff_cap=cap, ready=[campaign]
    ) as client:
        uploader = client._uploader
        for _ in range(3):
            uploader._retry_later("a failure before the success")
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=30)
        uploader._jitter = random.Random(5)
        delays = [uploader._retry_later("refused") for _ in range(7)]
        uploader._retry_at = 0.0
    reference = random.Random(5)
    expected = [reference.uniform(0, min(cap, base * 2**n)) for n in range(1, 8)]
    assert delays == expected


def test_a_single_report_too_large_is_dropped_not_retried(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """413 halves the batch; a batch of one that is still too large can never go up: it is
    dropped and counted (``dropped_refused``), and the next report goes up as usual."""
    campaign = create_campaign(collector)
    with client_for(
        proxy.url,
        tmp_path,
        ingest_token=collector.ingest_token,
        reports_per_window=None,
        budget=UNLIMITED,
        batch_size=1,
        ready=[campaign],
    ) as client:
        proxy.plan(Fault.status(413), path="/reports")
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=30)
        assert client.stats()["dropped_refused"] == 1 and client.stats()["accepted"] == 0
        assert client.report(campaign, "Axolotl-Chef")
        assert client.flush(timeout=30)
        assert client.stats()["accepted"] == 1
    assert len(proxy.requests_to(f"/{campaign}/reports")) == 2


def test_a_pass_goes_on_after_dropping_a_recreated_campaigns_reports(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Reports made under a config the collector no longer has are dropped (409, new digest),
    and the same pass sends the report queued behind them: it does not wait for the time
    trigger (an hour here) or a flush."""
    campaign = create_campaign(collector)
    options = {
        "ingest_token": collector.ingest_token,
        "reports_per_window": None,
        "budget": UNLIMITED,
        "batch_size": 1,
        "flush_interval": 3600,
    }
    with client_for(collector, tmp_path, ready=[campaign], **options):
        pass
    # A report made while the collector cannot be reached (the config is cached) ...
    offline = client_for("http://127.0.0.1:9", tmp_path, **options)
    assert offline.report(campaign, "Axolotl-Chef")
    offline.close(timeout=0)
    # ... queued behind three made under a digest the collector does not have.
    day = time.strftime("%Y-%m-%d", time.gmtime())
    with sqlite3.connect(tmp_path / STATE_FILE) as conn:
        conn.executemany(
            "INSERT INTO outbox (seq, campaign, report_id, day, payload, digest) "
            "VALUES (?,?,?,?,?,?)",
            [(-i, campaign, f"{i:032x}", day, '"AA=="', "0" * 64) for i in range(1, 4)],
        )
    conn.close()
    # Fetching the campaign at start begins a pass; nothing else will until the hour is up.
    with client_for(collector, tmp_path, campaigns=[campaign], **options) as client:
        assert wait_for_reports(collector, campaign, 1) == 1
        assert client.stats()["dropped_stale"] == 3 and client.stats()["pending"] == 0


def test_a_flush_retries_through_a_transient_fault(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """A 503 during a flush is retried after the backoff (a hundredth of a second here), not
    after the time trigger (30 s by default)."""
    campaign = create_campaign(collector)
    with client_for(
        proxy.url, tmp_path, ingest_token=collector.ingest_token, ready=[campaign]
    ) as client:
        proxy.plan(Fault.status(503), path="/reports")
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=20)
        assert client.stats()["accepted"] == 1
    assert len(proxy.requests_to(f"/{campaign}/reports")) == 2


def test_after_a_flush_the_triggers_are_back(collector: CollectorProcess, tmp_path: Path) -> None:
    """Once flush() has returned, a report waits for a full batch or the time trigger again;
    it does not go up at once as during the flush."""
    campaign = create_campaign(collector)
    with client_for(
        collector,
        tmp_path,
        reports_per_window=None,
        budget=UNLIMITED,
        flush_interval=3600,
        ready=[campaign],
    ) as client:
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=30)
        assert client.report(campaign, "Axolotl-Chef")
        time.sleep(1.0)  # a flush still counted as running would have sent it in milliseconds
        assert client.stats()["pending"] == 1
    assert wait_for_reports(collector, campaign, 2) == 2  # close() flushes it


@pytest.mark.parametrize("status", [413, 400], ids=["too-large", "refused"])
def test_a_pass_goes_on_after_dropping_a_refused_report(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path, status: int
) -> None:
    """A report the collector refuses for good (413 alone in its batch, 400) is dropped, and the
    same pass sends the reports behind it: they do not wait for the time trigger."""
    campaign = create_campaign(collector)
    with client_for(
        proxy.url,
        tmp_path,
        ingest_token=collector.ingest_token,
        batch_size=1,
        flush_interval=3600,
        ready=[campaign],
    ) as client:
        proxy.plan(Fault.status(status), path="/reports")
        client.report_many(campaign, ["Zebra-Keeper"] * 3, simulate_devices=True)
        assert wait_for_reports(collector, campaign, 2) == 2
        assert client.stats()["dropped_refused"] == 1


def test_an_infinite_time_means_no_limit(collector: CollectorProcess, tmp_path: Path) -> None:
    """``flush_interval=math.inf`` (the size trigger alone), ``flush(math.inf)`` and
    ``close(math.inf)``: each reached ``Condition.wait(inf)``, which raises OverflowError; the
    first stopped the upload thread for good ("internal error") at the first report."""
    campaign = create_campaign(collector)
    client = client_for(
        collector,
        tmp_path,
        reports_per_window=None,
        budget=UNLIMITED,
        batch_size=2,
        flush_interval=math.inf,
        close_timeout=math.inf,
        ready=[campaign],
    )
    try:
        assert client.report(campaign, "Zebra-Keeper")
        assert client.report(campaign, "Axolotl-Chef")  # a full batch: the size trigger
        assert wait_for_reports(collector, campaign, 2) == 2
        assert client.stats()["paused"] is None
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=math.inf)
    finally:
        client.close(timeout=math.inf)
    assert wait_for_reports(collector, campaign, 3) == 3


def test_bad_arguments_are_invalid_parameter(collector: CollectorProcess, tmp_path: Path) -> None:
    """A bad timeout or campaign id given to the reading and flushing methods is the SDK's
    InvalidParameter, naming the argument; these were TypeError, OverflowError,
    UnicodeEncodeError or sqlite3 errors from deep inside, and NaN seconds were taken."""
    campaign = create_campaign(collector)
    with client_for(collector, tmp_path, ready=[campaign]) as client:
        for bad in (math.nan, -1, "5", None, True, [5]):
            with pytest.raises(InvalidParameter, match="timeout must be a number of seconds"):
                client.flush(timeout=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidParameter, match="timeout must be a number of seconds"):
                client.report_many(campaign, ["Zebra-Keeper"], simulate_devices=True, timeout=bad)  # type: ignore[arg-type]
        for bad_id in ("\ud800", [], 10**20, "../up", ""):
            for method in (
                client.sent_reports,
                client.pending_reports,
                client.privacy_spent,
                client.privacy_charges,
                client.budget_left,
                client.prefetch,
            ):
                with pytest.raises(InvalidParameter, match="campaign id must be a slug"):
                    method(bad_id)  # type: ignore[operator]
        with pytest.raises(InvalidParameter, match="timeout must be a number of seconds"):
            client.close(timeout=math.nan)
        assert client.stats()["pending"] == 0
    for option in ("flush_interval", "backoff_base", "backoff_cap", "close_timeout"):
        with pytest.raises(InvalidParameter, match=f"{option} must be a number of seconds"):
            client_for(collector, tmp_path / option, **{option: math.nan})


def test_a_campaign_the_collector_keeps_failing_does_not_hold_up_the_others(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """Every pass took the oldest batch and backed off on its failure, so one campaign the
    collector answers 500 for (a broken config, a bug) stopped every other campaign's uploads
    for good. Its batch is now skipped for the rest of the pass; the others go out."""
    broken, fine = create_campaign(collector), create_campaign(collector)
    with client_for(
        proxy.url,
        tmp_path,
        ingest_token=collector.ingest_token,
        close_timeout=0,
        ready=[broken, fine],
    ) as client:
        proxy.plan(*[Fault.status(500)] * 10_000, path=f"/{broken}/reports")
        assert client.report(broken, "Zebra-Keeper")  # the oldest report in the outbox
        assert client.report(fine, "Axolotl-Chef")
        assert client.flush(timeout=3) is False
        assert wait_for_reports(collector, fine, 1) == 1
        # The collector counts the report before the device settles it: wait for the device.
        left = eventually(
            lambda: [r["campaign"] for r in client.pending_reports()],
            lambda campaigns: campaigns == [broken],
            what=f"only {broken} pending",
        )
        assert left == [broken]
        assert proxy.requests_to(f"/{broken}/reports")


def test_a_collector_that_is_overloaded_as_a_whole_ends_the_pass(
    collector: CollectorProcess, proxy: FaultyProxy, tmp_path: Path
) -> None:
    """A 503 with Retry-After (or an unreachable collector) concerns every campaign: the pass
    ends at once and waits, instead of trying each campaign in turn."""
    first, second = create_campaign(collector), create_campaign(collector)
    with client_for(
        proxy.url,
        tmp_path,
        ingest_token=collector.ingest_token,
        close_timeout=0,
        ready=[first, second],
    ) as client:
        proxy.plan(Fault.status(503, retry_after=3600), path="/reports")
        assert client.report(first, "Zebra-Keeper")
        assert client.report(second, "Axolotl-Chef")
        assert client.flush(timeout=2) is False
        # Two seconds is no bound on a loaded machine: wait until the pass has sent its first
        # upload and ended (the thread idle again), then count what it sent.
        sent, _ = eventually(
            lambda: (len(proxy.requests_to("/reports")), client._uploader._idle),
            lambda seen: seen[0] >= 1 and seen[1],
            what="the first pass sent and ended",
        )
        assert sent == 1
        assert client.stats()["pending"] == 2
