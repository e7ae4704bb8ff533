"""The ledger's per-campaign and device figures, checked where campaigns meet (issue 21).

Mutation survivors showed that nothing checked that one campaign's charges stay out of another
campaign's spend, that ``remaining`` is ``budget - best`` floored at 0, or that a release is an
immutable value. Real SQLite state file, closed-form figures.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk.errors import PrivacyBudgetExceeded
from client_sdk.ledger import Ledger, PrivacyBudget, Release
from client_sdk.state import StateDB

DAY = dt.date(2026, 11, 19)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    db = StateDB(tmp_path)
    yield Ledger(db)
    db.close()


def _charge(ledger: Ledger, campaign: str, epsilon: float, **kw: object) -> int:
    with ledger.db.transaction() as conn:
        return ledger.charge(
            conn, campaign=campaign, window=DAY.isoformat(), epsilon=epsilon, limit=None, **kw
        )


def test_one_campaigns_reports_are_not_charged_to_another(ledger: Ledger) -> None:
    budget = PrivacyBudget(campaign_epsilon=2.0, device_epsilon=10.0)
    _charge(ledger, "a", 1.5, budget=budget)
    _charge(ledger, "b", 1.5, budget=budget)  # "b" alone spends 1.5 <= 2
    _charge(ledger, "c", 1.5, budget=budget)
    with pytest.raises(PrivacyBudgetExceeded, match="campaign 'b'"):
        _charge(ledger, "b", 1.0, budget=budget)  # 2.5 > 2
    device = ledger.device_spent(today=DAY, budget=budget)
    assert device.epsilon == pytest.approx(4.5, rel=1e-12)
    assert device.remaining == pytest.approx(5.5, rel=1e-12)
    by_name = {c.campaign: c for c in device.campaigns}
    assert sorted(by_name) == ["a", "b", "c"]
    for c in by_name.values():
        assert (c.reports, c.sequential, c.best, c.bound) == (1, 1.5, 1.5, "basic")


def test_remaining_is_the_budget_minus_the_spend_and_never_negative(ledger: Ledger) -> None:
    _charge(ledger, "a", 1.25, budget=PrivacyBudget.unlimited())
    _charge(ledger, "b", 0.5, budget=PrivacyBudget.unlimited())
    roomy = PrivacyBudget(campaign_epsilon=3.0, device_epsilon=4.0)
    spent = ledger.spent("a", today=DAY, budget=roomy)
    assert (spent.best, spent.budget, spent.remaining) == (1.25, 3.0, 1.75)
    assert spent.to_dict()["remaining"] == 1.75
    device = ledger.device_spent(today=DAY, budget=roomy)
    assert (device.epsilon, device.remaining) == (1.75, 2.25)
    # The app lowered its budget below what was already spent: nothing is left, not less.
    tight = PrivacyBudget(campaign_epsilon=0.5, device_epsilon=1.0)
    assert ledger.spent("a", today=DAY, budget=tight).remaining == 0.0
    device = ledger.device_spent(today=DAY, budget=tight)
    assert device.remaining == 0.0 and device.to_dict()["remaining"] == 0.0


def test_a_release_is_an_immutable_value() -> None:
    r = Release("k", 2.0, Release.digests(["a", "b"]))
    assert r == Release("k", 2.0, Release.digests(["a", "b"]))
    assert len({r, Release("k", 2.0, Release.digests(["a", "b"]))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.permanent_epsilon = math.inf  # type: ignore[misc]


def test_a_spend_shown_to_the_user_is_immutable(ledger: Ledger) -> None:
    _charge(ledger, "a", 1.0, budget=PrivacyBudget.unlimited())
    spent = ledger.spent("a", today=DAY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spent.sequential = 0.0  # type: ignore[misc]


def test_bounds_looser_than_the_sum_are_not_shown(ledger: Ledger) -> None:
    # Mixed epsilons: the optimal k-fold bound takes the largest epsilon for every report
    # (2 x 3.0 = 6.0) and advanced composition is looser still, both above the sum 3.1.
    _charge(ledger, "a", 3.0, budget=PrivacyBudget.unlimited())
    _charge(ledger, "a", 0.1, budget=PrivacyBudget.unlimited())
    spent = ledger.spent("a", today=DAY)
    assert spent.optimal is None and spent.advanced is None and spent.memoised is None
    assert (spent.sequential, spent.best, spent.bound) == (3.1, 3.1, "basic")


def test_the_device_total_uses_composition_when_it_is_tighter(ledger: Ledger) -> None:
    # 200 reports of epsilon 0.05 to one campaign: the sum is 10, advanced composition at
    # delta = 1e-6 about 4.2; the device total shown is the tighter bound, like the campaign's.
    with ledger.db.transaction() as conn:
        for _ in range(200):
            ledger.charge(
                conn,
                campaign="a",
                window=DAY.isoformat(),
                epsilon=0.05,
                limit=None,
                budget=PrivacyBudget.unlimited(),
            )
    campaign = ledger.spent("a", today=DAY)
    device = ledger.device_spent(today=DAY)
    assert campaign.sequential == pytest.approx(10.0, rel=1e-12)
    assert campaign.best < 5.0 and campaign.bound in ("advanced", "optimal")
    assert device.epsilon == pytest.approx(campaign.best, rel=1e-9)
    assert device.bound != "per campaign, added"


def test_the_default_budget_is_the_documented_one() -> None:
    # docs/SDK.md, "The budget": what an app gets when it passes no PrivacyBudget.
    assert PrivacyBudget().to_dict() == {
        "period_days": 365,
        "campaign_epsilon": 8.0,
        "device_epsilon": 24.0,
        "max_report_epsilon": 4.0,
        "max_permanent_epsilon": 8.0,
        "delta": 1e-6,
    }


def test_a_report_the_composed_bound_allows_is_not_refused(ledger: Ledger) -> None:
    # 200 reports of 0.05 sum to 10, above both budgets of 6; advanced composition keeps them
    # near 4.2, so every one is accepted (the refusal uses the smallest valid bound).
    budget = PrivacyBudget(campaign_epsilon=6.0, device_epsilon=6.0)
    with ledger.db.transaction() as conn:
        for _ in range(200):
            ledger.charge(
                conn,
                campaign="a",
                window=DAY.isoformat(),
                epsilon=0.05,
                limit=None,
                budget=budget,
            )
    assert ledger.spent("a", today=DAY, budget=budget).best < 6.0


def test_charge_returns_the_windows_new_count_with_or_without_a_budget(ledger: Ledger) -> None:
    free = PrivacyBudget.unlimited()
    assert [_charge(ledger, "a", 0.5, budget=free) for _ in range(3)] == [1, 2, 3]
    assert [_charge(ledger, "b", 0.5) for _ in range(3)] == [1, 2, 3]
    assert ledger.used("a", DAY.isoformat()) == 3 and ledger.used("b", DAY.isoformat()) == 3
