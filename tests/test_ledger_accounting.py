"""The device's privacy ledger, number by number: counts per window, bounds, refusals.

Each test states the accounting the device shows its user (reports left, epsilon spent) and
compares with the closed form: sequential ``sum eps``, advanced composition
``sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1)`` (shown only when tighter), memoised
``min(k, domain) * eps_permanent`` (shown only when tighter). Real SQLite state file.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk.errors import InvalidParameter, PrivacyBudgetExceeded
from client_sdk.ledger import (
    DEFAULT_ADVANCED_DELTA,
    Ledger,
    advanced_composition,
    window_of,
)
from client_sdk.state import StateDB


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    db = StateDB(tmp_path)
    yield Ledger(db)
    db.close()


def _day(i: int) -> str:
    """The i-th daily window (the ledger's windows are ISO dates)."""
    return (dt.date(2020, 1, 1) + dt.timedelta(days=i)).isoformat()


def _charge(ledger: Ledger, campaign: str, window: str, epsilon: float, **kw: object) -> int:
    with ledger.db.transaction() as conn:
        return ledger.charge(conn, campaign=campaign, window=window, epsilon=epsilon, **kw)


def test_an_untouched_window_has_used_nothing(ledger: Ledger) -> None:
    assert ledger.used("never", "2026-11-23") == 0
    _charge(ledger, "c", "2026-11-22", 0.5, limit=3)
    assert ledger.used("c", "2026-11-23") == 0  # another window
    assert ledger.used("other", "2026-11-22") == 0  # another campaign
    assert ledger.used("c", "2026-11-22") == 1


def test_charge_counts_up_to_the_limit_then_refuses(ledger: Ledger) -> None:
    assert [_charge(ledger, "c", "2026-11-19", 0.25, limit=3) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(PrivacyBudgetExceeded, match="3 of 3 report"):
        _charge(ledger, "c", "2026-11-19", 0.25, limit=3)
    assert ledger.used("c", "2026-11-19") == 3
    assert _charge(ledger, "c", "2026-11-19", 0.25, limit=None) == 4  # no limit: always allowed
    assert _charge(ledger, "c", "2026-11-18", 0.25, limit=1) == 1
    with pytest.raises(PrivacyBudgetExceeded):
        _charge(ledger, "c", "2026-11-18", 0.25, limit=1)
    with pytest.raises(PrivacyBudgetExceeded, match="0 of 0"):
        _charge(ledger, "d", "2026-11-19", 0.25, limit=0)
    assert ledger.campaigns() == ["c"]


def test_spent_adds_epsilons_and_counts_windows(ledger: Ledger) -> None:
    _charge(ledger, "c", "2026-11-17", 0.5, limit=None)
    _charge(ledger, "c", "2026-11-17", 0.25, limit=None)
    _charge(ledger, "c", "2026-11-18", 0.125, limit=None)
    _charge(ledger, "z", "2026-11-17", 3.0, limit=None)
    spent = ledger.spent("c")
    assert (spent.campaign, spent.reports, spent.windows) == ("c", 3, 2)
    assert spent.sequential == 0.875
    assert spent.epsilon_per_report == 0.5  # the largest per-report epsilon
    assert spent.delta == DEFAULT_ADVANCED_DELTA
    assert spent.advanced is None and spent.memoised is None and spent.best == 0.875
    assert ledger.campaigns() == ["c", "z"]
    empty = ledger.spent("none")
    assert (empty.reports, empty.windows, empty.sequential, empty.best) == (0, 0, 0.0, 0.0)
    assert empty.advanced is None and empty.memoised is None


def test_advanced_composition_formula_and_its_domain() -> None:
    for k, eps, delta in [(1, 1.0, 0.5), (7, 0.3, 1e-9), (10_000, 0.01, 1e-6)]:
        expected = math.sqrt(2 * k * math.log(1 / delta)) * eps + k * eps * (math.exp(eps) - 1)
        assert advanced_composition(k, eps, delta) == pytest.approx(expected, rel=1e-12)
    assert advanced_composition(0, 1.0, 0.5) == 0.0
    assert advanced_composition(-3, 1.0, 0.5) == 0.0
    # delta' = 1 gives ln(1) = 0: a "bound" of k eps (e^eps - 1) that fails with probability
    # one, so it is refused, as are delta' <= 0 and > 1.
    for bad in (1, 1.0, 0, 0.0, -1e-6, 1.5):
        with pytest.raises(InvalidParameter, match="delta"):
            advanced_composition(5, 0.1, bad)
    with pytest.raises(InvalidParameter, match="delta"):
        advanced_composition(0, 0.1, 1.0)  # refused before the k = 0 shortcut


def test_spent_refuses_a_meaningless_delta(ledger: Ledger) -> None:
    for i in range(50):
        _charge(ledger, "c", _day(i), 0.1, limit=1)
    with pytest.raises(InvalidParameter, match="delta"):
        ledger.spent("c", delta=1.0)


def test_windows_are_days_or_iso_weeks() -> None:
    monday = dt.date(2026, 11, 16)
    for offset in range(7):
        day = monday + dt.timedelta(days=offset)
        assert window_of(day, "week") == "2026-11-16"
        assert window_of(day, "day") == day.isoformat()
    assert window_of(monday + dt.timedelta(days=7), "week") == "2026-11-23"
    with pytest.raises(InvalidParameter, match="window"):
        window_of(monday, "Week")


def test_spent_options_are_keyword_only(ledger: Ledger) -> None:
    # spent("c", 1e-6) must not quietly take delta' as a domain size.
    _charge(ledger, "c", "2026-11-19", 0.5, limit=None)
    with pytest.raises(TypeError):
        ledger.spent("c", 3)  # type: ignore[misc]
    assert ledger.spent(campaign="c", domain_size=3, delta=0.5).reports == 1
