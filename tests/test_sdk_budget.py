"""The on-device budget: composition bounds checked numerically, the ledger on real SQLite."""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from pathlib import Path

import pytest

from client_sdk.composition import advanced, basic, compose, kairouz, kairouz_delta
from client_sdk.errors import InvalidParameter, PrivacyBudgetExceeded
from client_sdk.ledger import Ledger, PrivacyBudget, Release
from client_sdk.state import STATE_FILE, StateDB

DAY = dt.date(2026, 11, 23)


def direct_kairouz(k: int, eps: float, delta: float) -> float:
    """KOV 2015 Thm 3.3 evaluated term by term with exact binomials (small k only)."""
    for i in range(k // 2, -1, -1):  # the smallest (k - 2i) eps first
        d = (
            sum(
                math.comb(k, l) * (math.exp((k - l) * eps) - math.exp((k - 2 * i + l) * eps))
                for l in range(i)  # noqa: E741
            )
            / (1 + math.exp(eps)) ** k
        )
        if d <= delta:
            return (k - 2 * i) * eps
    raise AssertionError("i = 0 always holds")


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("delta", [1e-6, 1e-3, 0.05])
def test_kairouz_matches_the_formula_and_beats_the_others(eps: float, delta: float) -> None:
    for k in range(1, 41):
        opt = kairouz(k, eps, delta)
        assert opt == pytest.approx(direct_kairouz(k, eps, delta), rel=1e-12)
        assert opt <= basic({eps: k}) + 1e-12
        adv = advanced({eps: k}, delta)
        assert opt <= adv + 1e-9  # optimal is never worse than advanced where both hold
        best, _ = compose({eps: k}, delta)
        assert best == min(basic({eps: k}), adv, opt)


def test_kairouz_delta_is_increasing_and_large_k_is_finite() -> None:
    deltas = [kairouz_delta(200, 0.3, i) for i in range(101)]
    assert deltas[0] == 0 and all(a <= b for a, b in zip(deltas, deltas[1:], strict=False))
    # 5000 reports: the log-space evaluation neither overflows nor loses the ordering.
    big = kairouz(5000, 0.1, 1e-6)
    assert 0 < big < advanced({0.1: 5000}, 1e-6) < 5000 * 0.1
    with pytest.raises(InvalidParameter, match="delta"):
        kairouz(3, 0.1, 0.0)


def test_advanced_heterogeneous_reduces_to_drv() -> None:
    k, eps, delta = 100, 0.1, 1e-5
    drv = math.sqrt(2 * k * math.log(1 / delta)) * eps + k * eps * math.expm1(eps)
    assert advanced({eps: k}, delta) == pytest.approx(drv)
    mixed = advanced({0.1: 50, 0.2: 50}, delta)
    assert mixed == pytest.approx(
        math.sqrt(2 * math.log(1 / delta) * (50 * 0.01 + 50 * 0.04))
        + 50 * 0.1 * math.expm1(0.1)
        + 50 * 0.2 * math.expm1(0.2)
    )


def charge(
    ledger: Ledger, db: StateDB, campaign: str, eps: float, day: dt.date, **kw: object
) -> None:
    with db.transaction() as conn:
        ledger.charge(
            conn,
            campaign=campaign,
            window=day.isoformat(),
            day=day,
            epsilon=eps,
            limit=None,
            **kw,  # type: ignore[arg-type]
        )


def test_budget_refuses_at_the_composed_bound_and_rolls(tmp_path: object) -> None:
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    budget = PrivacyBudget(period_days=30, campaign_epsilon=4.0, device_epsilon=100.0)
    for i in range(4):
        charge(ledger, db, "c", 1.0, DAY + dt.timedelta(days=i), budget=budget)
    with pytest.raises(PrivacyBudgetExceeded, match="campaign_epsilon=4"):
        charge(ledger, db, "c", 1.0, DAY + dt.timedelta(days=4), budget=budget)
    assert len(ledger.charges("c")) == 4  # the refused report left no charge
    # 30 days after the first charge it leaves the period: one more fits.
    charge(ledger, db, "c", 1.0, DAY + dt.timedelta(days=30), budget=budget)
    spent = ledger.spent("c", today=DAY + dt.timedelta(days=30), budget=budget)
    assert spent.reports == 4 and spent.best == pytest.approx(4.0) and spent.remaining == 0
    assert "4 report(s)" in spent.explanation
    db.close()


def test_device_total_composes_over_campaigns(tmp_path: object) -> None:
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    budget = PrivacyBudget(campaign_epsilon=10.0, device_epsilon=3.0)
    for c in ("a", "b", "c"):
        charge(ledger, db, c, 1.0, DAY, budget=budget)
    with pytest.raises(PrivacyBudgetExceeded, match="device_epsilon=3"):
        charge(ledger, db, "d", 1.0, DAY, budget=budget)
    total = ledger.device_spent(today=DAY, budget=budget)
    assert total.epsilon == pytest.approx(3.0) and [c.campaign for c in total.campaigns] == [
        "a",
        "b",
        "c",
    ]
    db.close()


def test_many_small_reports_are_charged_by_the_optimal_bound(tmp_path: object) -> None:
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    budget = PrivacyBudget(campaign_epsilon=8.0, device_epsilon=8.0)
    sent = 0
    for _ in range(400):
        try:
            charge(ledger, db, "c", 0.1, DAY, budget=budget)
        except PrivacyBudgetExceeded:
            break
        sent += 1
    # Exactly as many as the tightest bound allows: basic would stop at 80.
    assert kairouz(sent, 0.1, 1e-6) <= 8.0 < min(kairouz(sent + 1, 0.1, 1e-6), (sent + 1) * 0.1)
    assert sent > 80
    db.close()


def test_memoised_releases_are_charged_per_release(tmp_path: object) -> None:
    """A new device secret or another permanent threshold is a new release: charged again
    (issue 14 §1: resetting device.key must not restart the permanent bound)."""
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    budget = PrivacyBudget(campaign_epsilon=2.0)
    labels = Release.digests(["a", "b"])
    for _ in range(40):  # one release: at most 2 distinct values x 0.5
        charge(ledger, db, "m", 0.25, DAY, budget=budget, release=Release("k1", 0.5, labels))
    assert ledger.spent("m", today=DAY, budget=budget).best == pytest.approx(1.0)
    for _ in range(40):  # the key was reset: a second release, charged again
        charge(ledger, db, "m", 0.25, DAY, budget=budget, release=Release("k2", 0.5, labels))
    assert ledger.spent("m", today=DAY, budget=budget).memoised == pytest.approx(2.0)
    with pytest.raises(PrivacyBudgetExceeded):
        charge(ledger, db, "m", 0.25, DAY, budget=budget, release=Release("k3", 0.5, labels))
    # A served domain that grows widens the union the distinct values may come from.
    wider = Release("k2", 0.5, Release.digests(["a", "b", "c"]))
    with pytest.raises(PrivacyBudgetExceeded):
        charge(ledger, db, "m", 0.25, DAY, budget=budget, release=wider)
    db.close()


def test_the_accounting_day_never_goes_back(tmp_path: object) -> None:
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    with db.transaction() as conn:
        assert ledger.accounting_day(conn, DAY) == (DAY, False)
    with db.transaction() as conn:
        assert ledger.accounting_day(conn, DAY - dt.timedelta(days=3)) == (DAY, True)
    assert ledger.latest_day(DAY - dt.timedelta(days=3)) == DAY
    db.close()


def test_budget_options_are_checked() -> None:
    with pytest.raises(InvalidParameter, match="campaign_epsilon"):
        PrivacyBudget(campaign_epsilon=0)
    with pytest.raises(InvalidParameter, match="period_days"):
        PrivacyBudget(period_days=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="delta"):
        PrivacyBudget(delta=1)
    assert PrivacyBudget.unlimited().campaign_epsilon == math.inf
    assert PrivacyBudget().to_dict()["period_days"] == 365


def test_a_period_longer_than_the_calendar_covers_every_charge(tmp_path: object) -> None:
    """A lifetime budget, ``period_days`` of a million (2,700 years): the start of the period
    fell before year 1 and every report raised OverflowError ("date value out of range")."""
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    budget = PrivacyBudget(period_days=10**6, campaign_epsilon=2.0, device_epsilon=10**400)
    assert budget.device_epsilon == 10**400  # past the float range: no limit, as math.inf
    charge(ledger, db, "c", 1.0, dt.date(1, 1, 1), budget=budget)  # the calendar's first day
    charge(ledger, db, "c", 1.0, DAY, budget=budget)
    with pytest.raises(PrivacyBudgetExceeded, match="campaign_epsilon=2"):
        charge(ledger, db, "c", 1.0, DAY, budget=budget)
    spent = ledger.spent("c", today=DAY, budget=budget)
    assert spent.reports == 2 and spent.remaining == 0
    assert ledger.device_spent(today=DAY, budget=budget).epsilon == pytest.approx(2.0)
    db.close()


def test_a_version_1_state_file_keeps_what_it_spent(tmp_path: object) -> None:
    """Upgrading the SDK must not reset the budget: version 1 counted reports per window."""
    path = Path(tmp_path) / STATE_FILE  # type: ignore[arg-type]
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE ledger (campaign TEXT NOT NULL, window TEXT NOT NULL, "
            "reports INTEGER NOT NULL, epsilon_sum REAL NOT NULL, epsilon_max REAL NOT NULL, "
            "permanent_epsilon REAL, PRIMARY KEY (campaign, window));"
            f"INSERT INTO ledger VALUES ('c', '{DAY}', 6, 6.0, 1.0, NULL);"
            "PRAGMA user_version=1;"
        )
    conn.close()
    db = StateDB(tmp_path)  # type: ignore[arg-type]
    ledger = Ledger(db)
    spent = ledger.spent("c", today=DAY)
    assert spent.reports == 6 and spent.sequential == pytest.approx(6.0)
    with pytest.raises(PrivacyBudgetExceeded):
        for _ in range(3):
            charge(ledger, db, "c", 1.0, DAY, budget=PrivacyBudget())
    assert ledger.spent("c", today=DAY).reports == 8
    db.close()
    db = StateDB(tmp_path)  # type: ignore[arg-type]  # migrated once, not twice
    assert Ledger(db).spent("c", today=DAY).reports == 8
    db.close()


@pytest.mark.parametrize(("k", "eps"), [(100, 1.0), (537, 0.3), (2000, 0.05), (3001, 0.02)])
def test_kairouz_one_pass_agrees_with_the_direct_sums(k: int, eps: float) -> None:
    """The O(k) prefix-sum evaluation equals a bisection over the direct (log-space) sums."""
    delta = 1e-6
    lo, hi = 0, k // 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if kairouz_delta(k, eps, mid) <= delta else (lo, mid - 1)
    assert kairouz(k, eps, delta) == pytest.approx((k - 2 * lo) * eps, rel=1e-12)
