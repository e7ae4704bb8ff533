"""A campaign config the collector keeps failing (500) is not fetched again about once a second
while another campaign's uploads go through.

The upload thread reset its failure count after every settled batch, also in a pass whose
config fetch had just failed: the next fetch then waited the first backoff step again, never a
longer one, so each device kept asking for the broken campaign about twice a second for as long
as it reported to any other campaign (21 fetches in 20 s against 6 when nothing else was
uploaded). The backoff of a failed fetch now grows as that of a failed upload does.
"""

from __future__ import annotations

import time
from pathlib import Path

from client_sdk import NotSent, PrivacyBudget
from tests.support.faulty_proxy import Fault, FaultyProxy
from tests.support.server import running_collector
from tests.test_sdk_client import client_for, create_campaign


class _LongestWait:
    """The full-jitter draw at its maximum: the test counts the fetches deterministically."""

    def uniform(self, low: float, high: float) -> float:
        return high


def test_a_failing_config_fetch_backs_off_while_other_uploads_succeed(tmp_path: Path) -> None:
    with running_collector(tmp_path) as srv, FaultyProxy(upstream=srv.url) as proxy:
        broken = create_campaign(srv, mechanism="grr", epsilon=1.0, domain=["x", "y"])
        working = create_campaign(srv, mechanism="grr", epsilon=1.0, domain=["x", "y"])
        assert broken not in working and working not in broken
        proxy.plan(*[Fault.status(500)] * 10_000, path=f"/v1/campaigns/{broken}")
        with client_for(
            proxy.url,
            tmp_path / "device",
            ingest_token=srv.ingest_token,
            ready=[working],
            budget=PrivacyBudget.unlimited(),
            reports_per_window=None,
            batch_size=1,
            backoff_base=0.25,
            backoff_cap=300,
        ) as client:
            client._uploader._jitter = _LongestWait()  # type: ignore[attr-defined]
            assert isinstance(client.report(broken, "x"), NotSent)  # asks for the config
            started = time.monotonic()
            while time.monotonic() - started < 10:
                client.report(working, "x")
                time.sleep(0.05)
            fetches = [
                r for r in proxy.requests if r.method == "GET" and f"/campaigns/{broken}" in r.path
            ]
            accepted = client.stats()["accepted"]
    # Waits of 0.5, 1, 2, 4, 8 s: five fetches in 10 s (about 20 before, one per 0.5 s).
    assert len(fetches) <= 7, len(fetches)
    assert accepted > 0  # the other campaign's reports went out meanwhile


def test_a_failed_revalidation_leaves_the_other_cached_campaigns_to_revalidate(
    tmp_path: Path,
) -> None:
    """Configs cached on disk are revalidated with the collector once per session. A failed
    revalidation of one campaign ended the round and forgot every campaign after it in the
    list: those were never revalidated in that session (a campaign deleted meanwhile went on
    taking reports)."""
    with running_collector(tmp_path) as srv:
        first, second = sorted(
            create_campaign(srv, mechanism="grr", epsilon=1.0, domain=["x", "y"]) for _ in "ab"
        )
        options = {"budget": PrivacyBudget.unlimited(), "reports_per_window": None}
        with client_for(
            srv, tmp_path / "device", ready=[first, second], **options
        ) as client:
            assert client.report(first, "x") and client.report(second, "x")
            assert client.flush(timeout=30)
        with FaultyProxy(upstream=srv.url) as proxy:
            proxy.plan(*[Fault.status(500)] * 10_000, path=f"/v1/campaigns/{first}")
            with client_for(
                proxy.url, tmp_path / "device", ingest_token=srv.ingest_token, **options
            ) as client:
                # From the cache, no fetch needed; each is revalidated in the background.
                assert client.report(first, "y") and client.report(second, "y")
                client.flush(timeout=5)
                started = time.monotonic()
                while not proxy.requests_to(f"/v1/campaigns/{second}") and (
                    time.monotonic() - started < 10
                ):
                    client.report(second, "y")
                    time.sleep(0.1)
            assert proxy.requests_to(f"/v1/campaigns/{first}")  # it was tried
            assert any(
                r.method == "GET" and r.path.endswith(f"/v1/campaigns/{second}")
                for r in proxy.requests_to(f"/v1/campaigns/{second}")
            )


def test_a_config_that_keeps_failing_does_not_starve_the_other_fetches(tmp_path: Path) -> None:
    """A fetch that failed for one campaign's sake (its config answered 500) ended the round:
    a campaign asked for after it was never fetched, and its reports stayed ``not_ready``."""
    with running_collector(tmp_path) as srv, FaultyProxy(upstream=srv.url) as proxy:
        broken, working = sorted(
            create_campaign(srv, mechanism="grr", epsilon=1.0, domain=["x", "y"]) for _ in "ab"
        )
        proxy.plan(*[Fault.status(500)] * 10_000, path=f"/v1/campaigns/{broken}")
        with client_for(
            proxy.url,
            tmp_path / "device",
            ingest_token=srv.ingest_token,
            budget=PrivacyBudget.unlimited(),
            reports_per_window=None,
        ) as client:
            # Both asked for in one round, the broken one first.
            assert isinstance(client.report(broken, "x"), NotSent)
            assert isinstance(client.report(working, "x"), NotSent)
            started = time.monotonic()
            while not client.report(working, "x") and time.monotonic() - started < 10:
                time.sleep(0.1)
            assert client.report(working, "x")
