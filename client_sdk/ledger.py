"""The privacy-budget ledger: how many reports a device sent per campaign and window.

The ledger lives in the state file and stores counts and epsilons, never values. ``report``
charges it in the same transaction that enqueues the report, and refuses with
:class:`PrivacyBudgetExceeded` once a window's allowance is spent.

Accounting for a campaign after ``k`` reports of per-report epsilon ``eps`` (the realised epsilon
of the campaign's mechanism):

* sequential composition: ``k * eps`` (pure, delta = 0);
* advanced composition (Dwork, Rothblum, Vadhan 2010):
  ``eps' = sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1)`` with failure probability
  ``delta'`` (default 1e-6); shown when it is tighter than ``k * eps``;
* memoised campaigns (``rappor``): at most one ``permanent_epsilon`` per distinct value, so at
  most ``min(k, domain size) * permanent_epsilon`` however many reports are sent.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from dataclasses import dataclass
from typing import Any

from client_sdk.errors import InvalidParameter, PrivacyBudgetExceeded
from client_sdk.state import StateDB

#: Reports per campaign per window a device sends by default.
DEFAULT_REPORTS_PER_WINDOW = 1
#: The delta' of the advanced composition bound shown next to sequential composition.
DEFAULT_ADVANCED_DELTA = 1e-6
WINDOWS = ("day", "week")


def window_of(day: dt.date, window: str) -> str:
    """The key of the window holding ``day``: the day itself, or the Monday of its ISO week."""
    if window == "day":
        return day.isoformat()
    if window == "week":
        return (day - dt.timedelta(days=day.weekday())).isoformat()
    raise InvalidParameter(f"window must be one of {WINDOWS}, got {window!r}")


def advanced_composition(k: int, epsilon: float, delta: float) -> float:
    """Dwork-Rothblum-Vadhan: ``k`` eps-DP steps are (result, delta)-DP."""
    if not 0 < delta < 1:
        raise InvalidParameter(f"delta' must lie in (0, 1), got {delta!r}")
    if k <= 0:
        return 0.0
    return math.sqrt(2 * k * math.log(1 / delta)) * epsilon + k * epsilon * math.expm1(epsilon)


@dataclass(frozen=True)
class BudgetSpent:
    """What one campaign's reports from this device cost, in epsilon (no values).

    ``sequential`` is the pure bound ``sum of per-report epsilons``; ``advanced`` the
    (``advanced``, ``delta``) bound when it is tighter than ``sequential``, else None;
    ``memoised`` the longitudinal bound of a memoised campaign, else None.
    """

    campaign: str
    reports: int
    windows: int
    epsilon_per_report: float
    sequential: float
    advanced: float | None
    delta: float
    memoised: float | None

    @property
    def best(self) -> float:
        """The smallest of the bounds that hold (the advanced one with its delta)."""
        return min(x for x in (self.sequential, self.advanced, self.memoised) if x is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "reports": self.reports,
            "windows": self.windows,
            "epsilon_per_report": self.epsilon_per_report,
            "sequential": self.sequential,
            "advanced": self.advanced,
            "delta": self.delta,
            "memoised": self.memoised,
            "best": self.best,
        }


class Ledger:
    """Counts reports per (campaign, window); thread-safe through :class:`StateDB`."""

    def __init__(self, db: StateDB) -> None:
        self.db = db

    def charge(
        self,
        conn: sqlite3.Connection,
        *,
        campaign: str,
        window: str,
        epsilon: float,
        limit: int | None,
        permanent_epsilon: float | None = None,
    ) -> int:
        """Record one report inside the caller's transaction; returns the window's new count.

        Raises :class:`PrivacyBudgetExceeded` (and records nothing) when ``limit`` reports were
        already sent in this window. ``limit`` None means no per-window limit.
        """
        row = conn.execute(
            "SELECT reports FROM ledger WHERE campaign = ? AND window = ?", (campaign, window)
        ).fetchone()
        used = row[0] if row else 0
        if limit is not None and used >= limit:
            raise PrivacyBudgetExceeded(
                f"privacy budget for campaign {campaign!r} is spent for window {window}: "
                f"{used} of {limit} report(s) per window already sent (epsilon {epsilon:.4g} "
                "each); report again in the next window, or raise reports_per_window if the "
                "campaign's privacy analysis allows it"
            )
        conn.execute(
            "INSERT INTO ledger (campaign, window, reports, epsilon_sum, epsilon_max, "
            "permanent_epsilon) VALUES (?, ?, 1, ?, ?, ?) "
            "ON CONFLICT (campaign, window) DO UPDATE SET reports = reports + 1, "
            "epsilon_sum = epsilon_sum + excluded.epsilon_sum, "
            "epsilon_max = max(epsilon_max, excluded.epsilon_max), "
            "permanent_epsilon = excluded.permanent_epsilon",
            (campaign, window, epsilon, epsilon, permanent_epsilon),
        )
        return used + 1

    def used(self, campaign: str, window: str) -> int:
        """Reports charged to ``campaign`` in ``window``."""
        with self.db.reading() as conn:
            row = conn.execute(
                "SELECT reports FROM ledger WHERE campaign = ? AND window = ?",
                (campaign, window),
            ).fetchone()
        return row[0] if row else 0

    def spent(
        self,
        campaign: str,
        *,
        domain_size: int | None = None,
        delta: float = DEFAULT_ADVANCED_DELTA,
    ) -> BudgetSpent:
        """The epsilon this device has spent on ``campaign`` over every window."""
        with self.db.reading() as conn:
            reports, windows, eps_sum, eps_max, perm = conn.execute(
                "SELECT coalesce(sum(reports), 0), count(*), coalesce(sum(epsilon_sum), 0), "
                "coalesce(max(epsilon_max), 0), max(permanent_epsilon) "
                "FROM ledger WHERE campaign = ?",
                (campaign,),
            ).fetchone()
        advanced = advanced_composition(reports, eps_max, delta) if reports else None
        if advanced is not None and advanced >= eps_sum:
            advanced = None
        memoised = None
        if perm is not None and reports:
            distinct = reports if domain_size is None else min(reports, domain_size)
            memoised = distinct * perm
            if memoised >= eps_sum:
                memoised = None
        return BudgetSpent(
            campaign=campaign,
            reports=int(reports),
            windows=int(windows),
            epsilon_per_report=float(eps_max),
            sequential=float(eps_sum),
            advanced=advanced,
            delta=delta,
            memoised=memoised,
        )

    def campaigns(self) -> list[str]:
        """Campaigns with at least one charged report."""
        with self.db.reading() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT campaign FROM ledger ORDER BY 1")]
