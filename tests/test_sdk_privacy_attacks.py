"""Issue 14 §1-2 from the collector's side, through the real client and a real ``ldp serve``.

Each test reproduces an attack that worked before the on-device budget existed and fails on
the old code: the averaging attack over a year of daily reports, a restart with other
arguments, a clock moved back, and resetting the device key of a memoised campaign.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import NotSent, PrivacyBudget, Report
from client_sdk.composition import compose
from client_sdk.memo import SECRET_FILE
from tests.support.server import CollectorProcess, running_collector
from tests.test_sdk_client import client_for, create_campaign

OCCUPATIONS = [f"occ-{i:02d}" for i in range(14)]
START = dt.datetime.now(dt.UTC).date()


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        yield srv


def test_a_year_of_daily_reports_is_refused_once_the_budget_is_spent(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """365 daily OUE eps=1 reports per device, averaged, gave the value for 20 of 20 devices.
    Now each device stops at the budget (default: 8 per campaign per 365 days)."""
    campaign = create_campaign(collector, mechanism="oue", epsilon=1.0, domain=OCCUPATIONS)
    devices, hits = 20, 0
    allowed = None
    for d in range(devices):
        today = [START]
        value = OCCUPATIONS[d % 14]
        with client_for(
            collector,
            tmp_path / f"d{d}",
            clock=lambda t=today: t[0],
            close_timeout=0,
            ready=[campaign],
        ) as client:
            mech = client.configs.get(campaign).mechanism
            eps = mech.realised_epsilon
            allowed = max(k for k in range(1, 100) if compose({eps: k}, 1e-6)[0] <= 8.0)
            sent: list[Report] = []
            refused: list[NotSent] = []
            for day in range(365):
                today[0] = START + dt.timedelta(days=day)
                result = client.report(campaign, value)
                (sent if isinstance(result, Report) else refused).append(result)  # type: ignore[arg-type]
            assert len(sent) == allowed
            assert {r.reason for r in refused} == {"budget_spent"}
            spent = client.privacy_spent(campaign)
            assert spent.reports == allowed and spent.best <= 8.0
            assert client.stats()["refused_budget"] == 365 - allowed
        # The attacker averages what it received and guesses the largest coordinate.
        counts = mech.support_counts(mech.decode_many([r.payload for r in sent]))
        hits += int(counts.argmax() == mech.index_of(value)) if counts.max() > 0 else 0
    # With 8 reports the guess is right with probability ~0.40 (simulated from p*, q*;
    # argmax ties broken low here, which only lowers it): mean 8 of 20, sd 2.2. Before: 20/20.
    assert allowed == 8
    assert hits <= 17


def test_other_arguments_and_a_restart_do_not_reset_the_budget(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Before: a new client with reports_per_window=None accepted 50 more reports in a spent
    window."""
    campaign = create_campaign(collector, mechanism="grr", epsilon=1.0, domain=OCCUPATIONS)
    with client_for(collector, tmp_path, close_timeout=0, ready=[campaign]) as client:
        assert client.report(campaign, "occ-01")
        assert not client.report(campaign, "occ-01")  # one per window
    with client_for(collector, tmp_path, close_timeout=0, reports_per_window=None) as client:
        results = [client.report(campaign, "occ-01") for _ in range(50)]
    assert sum(1 for r in results if r) == 7  # 8 per period in all, 1 already spent
    assert all(r.reason == "budget_spent" for r in results if not r)  # type: ignore[union-attr]


def test_a_clock_moved_back_keeps_charging_the_later_window(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Before: moving the device clock back 3 days opened a new window."""
    campaign = create_campaign(collector, mechanism="grr", epsilon=0.5, domain=OCCUPATIONS)
    today = [START]
    with client_for(
        collector, tmp_path, clock=lambda t=today: t[0], close_timeout=0, ready=[campaign]
    ) as client:
        assert client.report(campaign, "occ-02")
        today[0] = START - dt.timedelta(days=3)
        again = client.report(campaign, "occ-02")
        assert not again and again.reason == "budget_spent"  # type: ignore[union-attr]
        assert str(START) in again.message  # type: ignore[union-attr]
        assert client.stats()["clock_went_back"] == 1
        today[0] = START + dt.timedelta(days=1)
        assert client.report(campaign, "occ-02")  # the next real day is a new window


def test_resetting_the_device_key_does_not_restart_the_permanent_bound(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Before: 30 resets x 40 reports all went through, each reset a fresh permanent release
    the ledger did not know about. Now every release is charged (0.5 per distinct value, at
    most 4 values: 2 per release) and the fifth is refused."""
    campaign = create_campaign(
        collector,
        mechanism="rappor",
        epsilon=0.25,
        params={"epsilon_permanent": 0.5},
        domain=OCCUPATIONS[:4],
    )
    accepted = []
    for _ in range(30):
        with client_for(
            collector, tmp_path, close_timeout=0, reports_per_window=None, ready=[campaign]
        ) as client:
            accepted.append(sum(1 for _ in range(40) if client.report(campaign, "occ-03")))
            spent = client.privacy_spent(campaign)
        (tmp_path / SECRET_FILE).unlink()
    assert accepted[:4] == [40] * 4 and accepted[4:] == [0] * 26
    assert spent.memoised == pytest.approx(8.0, rel=1e-6) and spent.best <= 8.0
    assert spent.bound == "memoised"


def test_configs_above_the_apps_ceiling_are_refused(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Before: the SDK accepted any config the collector served (up to eps 16, eps_perm 64)."""
    loud = create_campaign(collector, mechanism="oue", epsilon=6.0, domain=OCCUPATIONS)
    sticky = create_campaign(
        collector,
        mechanism="rappor",
        epsilon=1.0,
        params={"epsilon_permanent": 16.0},
        domain=OCCUPATIONS,
    )
    with client_for(collector, tmp_path / "a", close_timeout=0, ready=[loud, sticky]) as client:
        for campaign, what in ((loud, "max_report_epsilon=4"), (sticky, "max_permanent_epsilon=8")):
            result = client.report(campaign, "occ-04")
            assert isinstance(result, NotSent) and result.reason == "above_ceiling"
            assert what in result.message
        assert client.outbox.pending == 0 and client.stats()["refused_ceiling"] == 2
    ceiling = PrivacyBudget(
        campaign_epsilon=100, device_epsilon=100, max_report_epsilon=6, max_permanent_epsilon=16
    )
    with client_for(
        collector, tmp_path / "b", close_timeout=0, budget=ceiling, ready=[loud, sticky]
    ) as client:
        assert client.report(loud, "occ-04") and client.report(sticky, "occ-04")
    assert math.isfinite(ceiling.campaign_epsilon)


def test_the_collectors_clock_cannot_refill_the_budget(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    """Reports carry the collector's day (clock skew), but the budget runs on the device's own
    clock: a collector whose Date header claims next year gains nothing."""
    campaign = create_campaign(collector, mechanism="grr", epsilon=1.0, domain=OCCUPATIONS)
    with client_for(
        collector, tmp_path, close_timeout=0, reports_per_window=None, ready=[campaign]
    ) as client:
        assert sum(1 for _ in range(20) if client.report(campaign, "occ-05")) == 8
        client._transport.server_skew = 400 * 86400.0  # type: ignore[attr-defined]
        refused = client.report(campaign, "occ-05")
        assert not refused and refused.reason == "budget_spent"  # type: ignore[union-attr]
        assert client.privacy_spent(campaign).reports == 8
