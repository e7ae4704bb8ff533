"""What one campaign's trouble may do to a device, checked against a real collector: an archived
campaign stops costing budget, and a campaign whose shuffler is down, or whose sealing needs a
library the device lacks, holds up no other campaign.

Found by an exploratory run of the SDK (2026-11-27): after the collector archived a campaign
every ``report`` still stored a report and charged the budget, only for the uploader to drop
it (410); a shuffler that could not be reached, or PyNaCl missing on the device, stopped the
uploads of every campaign (the latter killed the upload thread).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from client_sdk import TelemetryClient, UnknownCampaign
from tests.support.server import CollectorProcess, running_collector
from tests.support.waiting import eventually
from tests.test_sdk_client import (
    UNLIMITED,
    client_for,
    create_campaign,
    estimates,
    wait_for_reports,
)


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    tmp = tmp_path_factory.mktemp("collector")
    # A sealed key, so campaigns may name a shuffler (the collector creates the file).
    env = {"LDP_SEALED_KEY_FILE": str(tmp / "sealed.key")}
    with running_collector(tmp, env=env) as srv:
        yield srv


def settled(client: TelemetryClient, stuck: str) -> tuple[list[str], dict[str, Any]]:
    """The campaigns still pending and the stats, once the device has settled every other
    campaign's upload and recorded the pass's failure. The collector counts a report before
    the device settles it, and the pass records its failure only at its end: a read right
    after the collector's count could still see either undone (on a loaded machine)."""
    return eventually(
        lambda: ([r["campaign"] for r in client.pending_reports()], client.stats()),
        lambda seen: seen[0] == [stuck] and seen[1]["last_error"] is not None,
        what=f"only {stuck} pending, with the pass's failure recorded",
    )


def _archive(collector: CollectorProcess, campaign: str) -> None:
    resp = requests.post(
        f"{collector.url}/v1/campaigns/{campaign}/archive",
        headers=collector.headers("admin"),
        timeout=10,
    )
    assert resp.status_code == 200, resp.text


def test_an_archived_campaign_stores_and_charges_nothing(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create_campaign(collector)
    options = {"reports_per_window": None, "budget": UNLIMITED, "close_timeout": 0}
    with client_for(collector, tmp_path, ready=[campaign], **options) as client:
        assert client.report(campaign, "Zebra-Keeper")
        assert client.flush(timeout=30)
        _archive(collector, campaign)
        # Made before the device knows: stored, then dropped on the 410.
        assert client.report(campaign, "Zebra-Keeper")
        charged = len(client.privacy_charges(campaign))
        assert client.flush(timeout=30)
        stats = client.stats()
        assert stats["dropped_archived"] == 1 and stats["pending"] == 0
        # From then on nothing is stored or charged.
        for _ in range(3):
            outcome = client.report(campaign, "Zebra-Keeper")
            assert not outcome and outcome.reason == "campaign_archived"
        assert len(client.privacy_charges(campaign)) == charged
        assert client.stats()["refused_archived"] == 3 and client.stats()["pending"] == 0
        with pytest.raises(UnknownCampaign, match="archived"):
            outcome.raise_()
    # A device that fetches the campaign after it was archived learns it from the resource,
    # and a restart keeps what the 410 taught.
    for state in (tmp_path / "fresh", tmp_path):
        state.mkdir(exist_ok=True)
        with client_for(collector, state, ready=[campaign], **options) as client:
            outcome = client.report(campaign, "Zebra-Keeper")
            assert not outcome and outcome.reason == "campaign_archived"
    assert estimates(collector, campaign)["n"] == 1


def test_an_unreachable_shuffler_holds_up_no_other_campaign(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    shuffled = create_campaign(collector, shuffler="http://127.0.0.1:9")  # nothing listens
    direct = create_campaign(collector)
    with client_for(collector, tmp_path, close_timeout=0, ready=[shuffled, direct]) as client:
        assert client.report(shuffled, "Zebra-Keeper")  # the oldest report in the outbox
        assert client.report(direct, "Axolotl-Chef")
        assert client.flush(timeout=3) is False
        assert wait_for_reports(collector, direct, 1) == 1
        left, stats = settled(client, shuffled)
        assert left == [shuffled]
        assert "shuffler unreachable" in (stats["last_error"] or ""), stats


def test_without_pynacl_a_shuffled_campaign_is_not_ready_and_the_others_go_on(
    collector: CollectorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shuffled = create_campaign(collector, shuffler="http://127.0.0.1:9")
    direct = create_campaign(collector)
    with client_for(collector, tmp_path, close_timeout=0, ready=[shuffled, direct]) as client:
        assert client.report(shuffled, "Zebra-Keeper")  # stored while PyNaCl was there
        # PyNaCl gone (a plain `pip install ldp-telemetry` on the device).
        for name in [m for m in sys.modules if m == "nacl" or m.startswith("nacl.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "nacl", None)
        outcome = client.report(shuffled, "Zebra-Keeper")
        assert not outcome and outcome.reason == "not_ready" and "PyNaCl" in outcome.message
        assert client.report(direct, "Axolotl-Chef")
        assert client.flush(timeout=3) is False
        assert wait_for_reports(collector, direct, 1) == 1
        left, stats = settled(client, shuffled)
        assert stats["paused"] is None, stats  # the upload thread did not stop
        assert "PyNaCl" in (stats["last_error"] or ""), stats
        assert left == [shuffled]
