"""The on-device privacy budget: what every report cost, and the refusal once it is spent.

The ledger lives in the state file (``state``) and stores, per report, the campaign, the
accounting day and the report's epsilons; never a value. ``report`` charges it in the same
transaction that enqueues the report, and is refused (nothing stored) when the report would take

* the campaign's spend over the last ``period_days`` days above ``campaign_epsilon``, or
* the device's spend over all campaigns in that period above ``device_epsilon``, or
* the campaign's per-window report count above ``reports_per_window``.

**What a spend is.** For the reports in the period, the smallest valid bound of
``composition.compose`` at the app's ``delta`` (basic ``sum eps``; advanced composition; the
optimal k-fold bound of Kairouz, Oh and Viswanath) and, for memoised (``rappor``) reports, the
longitudinal bound: each *release* (campaign, device secret, permanent threshold) reveals at most
``permanent_epsilon`` per distinct value, and the ledger, which never learns values, counts the
distinct values as ``min(reports in the release, size of the union of every domain the collector
served for it)``. For the device total, campaigns add up (basic) or all reports compose together,
whichever is smaller. Every bound used is an upper bound, so the refusal is conservative.

**What cannot reset it.** The ledger is a table of the state file, not an argument: a restart,
another client on the same ``state_dir`` (locked anyway), other constructor arguments (e.g.
``reports_per_window=None``) or a new device secret (a new release, charged again) all see the
same rows. The accounting day is the latest day the device clock ever showed: a clock moved back
keeps charging the later day (counted in ``stats()["clock_went_back"]``). The collector's clock is
never used for accounting. Deleting the state file (the app's data) does reset it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from client_sdk.composition import advanced as advanced_bound
from client_sdk.composition import basic as basic_bound
from client_sdk.composition import check_delta, compose, kairouz
from client_sdk.errors import InvalidParameter, PrivacyBudgetExceeded
from client_sdk.state import StateDB

#: Reports per campaign per window a device sends by default.
DEFAULT_REPORTS_PER_WINDOW = 1
#: The delta of the (epsilon, delta) composition bounds (advanced, optimal).
DEFAULT_ADVANCED_DELTA = 1e-6
#: The rolling period the budget covers, in days.
DEFAULT_PERIOD_DAYS = 365
#: Epsilon one campaign may spend per period on one device.
DEFAULT_CAMPAIGN_EPSILON = 8.0
#: Epsilon all campaigns together may spend per period on one device.
DEFAULT_DEVICE_EPSILON = 24.0
#: Largest per-report epsilon of a campaign the device accepts from the collector.
DEFAULT_MAX_REPORT_EPSILON = 4.0
#: Largest permanent epsilon of a memoised campaign the device accepts from the collector.
DEFAULT_MAX_PERMANENT_EPSILON = 8.0
WINDOWS = ("day", "week")
_HIGH_WATER = "accounting_day"


def window_of(day: dt.date, window: str) -> str:
    """The key of the window holding ``day``: the day itself, or the Monday of its ISO week."""
    if window == "day":
        return day.isoformat()
    if window == "week":
        return (day - dt.timedelta(days=day.weekday())).isoformat()
    raise InvalidParameter(f"window must be one of {WINDOWS}, got {window!r}")


def advanced_composition(k: int, epsilon: float, delta: float) -> float:
    """Dwork-Rothblum-Vadhan: ``k`` eps-DP steps are (result, delta)-DP."""
    check_delta(delta)
    if k <= 0:
        return 0.0
    return advanced_bound({epsilon: k}, delta)


def _positive(name: str, value: object, *, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not value > 0:  # type: ignore[operator]
        kind = "an integer" if integer else "a number (math.inf: no limit)"
        raise InvalidParameter(f"{name} must be {kind} > 0, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int past the float range: no limit, as math.inf
        return math.inf


@dataclass(frozen=True)
class PrivacyBudget:
    """The app developer's privacy ceiling; every field is checked on the device.

    ``period_days``: the rolling period a budget covers. ``campaign_epsilon``,
    ``device_epsilon``: the most one campaign, and all campaigns together, may spend per
    period. ``max_report_epsilon``, ``max_permanent_epsilon``: the largest per-report and
    permanent (memoised) epsilon of a campaign config the device accepts; a config above them
    is refused (``ConfigAboveCeiling``) whatever the collector serves. ``delta``: the delta of
    the (epsilon, delta) bounds. ``math.inf`` means no limit (the app's explicit choice).
    """

    period_days: int = DEFAULT_PERIOD_DAYS
    campaign_epsilon: float = DEFAULT_CAMPAIGN_EPSILON
    device_epsilon: float = DEFAULT_DEVICE_EPSILON
    max_report_epsilon: float = DEFAULT_MAX_REPORT_EPSILON
    max_permanent_epsilon: float = DEFAULT_MAX_PERMANENT_EPSILON
    delta: float = DEFAULT_ADVANCED_DELTA

    def __post_init__(self) -> None:
        _positive("period_days", self.period_days, integer=True)
        for name in (
            "campaign_epsilon",
            "device_epsilon",
            "max_report_epsilon",
            "max_permanent_epsilon",
        ):
            _positive(name, getattr(self, name))
        check_delta(self.delta)

    @classmethod
    def unlimited(cls) -> PrivacyBudget:
        """No budget and no ceiling (simulations and tests only; the app's explicit choice)."""
        inf = math.inf
        return cls(
            campaign_epsilon=inf,
            device_epsilon=inf,
            max_report_epsilon=inf,
            max_permanent_epsilon=inf,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Release:
    """A memoised campaign's permanent answers on this device: what a new one costs.

    ``key`` names (device secret, permanent threshold) without revealing either; answers are
    keyed by label, so every config of the campaign with the same key shares them.
    ``label_digests``: SHA-256 of every label of the served domain (public, value-free).
    """

    key: str
    permanent_epsilon: float
    label_digests: tuple[str, ...] = ()

    @staticmethod
    def digests(labels: Sequence[str]) -> tuple[str, ...]:
        return tuple(hashlib.sha256(label.encode("utf-8")).hexdigest()[:32] for label in labels)


@dataclass(frozen=True)
class BudgetSpent:
    """What one campaign's reports in the budget period cost on this device (no values).

    ``sequential`` is the pure bound (sum of per-report epsilons); ``advanced`` the
    Dwork-Rothblum-Vadhan and ``optimal`` the Kairouz-Oh-Viswanath (``epsilon``, ``delta``)
    bound, each None unless tighter than ``sequential``; ``memoised`` the longitudinal bound of
    memoised reports (pure), None unless tighter. ``best`` is what the budget is charged;
    ``bound`` names it. ``budget``/``remaining``: the campaign budget and what is left of it.
    """

    campaign: str
    reports: int
    windows: int
    epsilon_per_report: float
    sequential: float
    advanced: float | None
    delta: float
    memoised: float | None
    optimal: float | None = None
    budget: float = math.inf
    period_days: int = DEFAULT_PERIOD_DAYS
    bound: str = "basic"

    @property
    def best(self) -> float:
        """The smallest of the bounds that hold (the (epsilon, delta) ones with ``delta``)."""
        return min(
            x
            for x in (self.sequential, self.advanced, self.optimal, self.memoised)
            if x is not None
        )

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget - self.best)

    @property
    def explanation(self) -> str:
        """Why ``best`` is what it is, in one sentence (for a transparency screen)."""
        if not self.reports:
            return f"no report to {self.campaign!r} in the last {self.period_days} days"
        how = {
            "basic": "the sum of the per-report epsilons",
            "advanced": f"advanced composition at delta={self.delta:g}",
            "optimal": f"optimal k-fold composition (Kairouz et al.) at delta={self.delta:g}",
            "memoised": "the memoised (permanent) bound per distinct value",
        }[self.bound]
        return (
            f"{self.reports} report(s) to {self.campaign!r} in the last {self.period_days} days "
            f"(epsilon <= {self.epsilon_per_report:.4g} each) cost at most {self.best:.4g} by "
            f"{how}, of a budget of {self.budget:g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "reports": self.reports,
            "windows": self.windows,
            "epsilon_per_report": self.epsilon_per_report,
            "sequential": self.sequential,
            "advanced": self.advanced,
            "optimal": self.optimal,
            "delta": self.delta,
            "memoised": self.memoised,
            "best": self.best,
            "bound": self.bound,
            "budget": self.budget,
            "remaining": self.remaining,
            "period_days": self.period_days,
            "explanation": self.explanation,
        }


@dataclass(frozen=True)
class DeviceSpent:
    """All campaigns together in the budget period: the device's total (no values)."""

    epsilon: float
    bound: str
    budget: float
    period_days: int
    delta: float
    campaigns: tuple[BudgetSpent, ...] = field(default_factory=tuple)

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget - self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "bound": self.bound,
            "budget": self.budget,
            "remaining": self.remaining,
            "period_days": self.period_days,
            "delta": self.delta,
            "campaigns": [c.to_dict() for c in self.campaigns],
        }


# One group of charges: (campaign, per-report epsilon, release key, permanent epsilon) -> count.
_Group = tuple[str, float, str | None, float | None]


class _Spend:
    """The bounds over a set of charge groups (what ``charge`` checks, ``spent`` shows)."""

    def __init__(self, groups: dict[_Group, int], union: dict[tuple[str, str], int]) -> None:
        self.groups = groups
        self.union = union

    def counts(self, campaign: str | None = None) -> dict[float, int]:
        out: dict[float, int] = {}
        for (c, eps, _, _), n in self.groups.items():
            if campaign is None or c == campaign:
                out[eps] = out.get(eps, 0) + n
        return out

    def pure(self, campaign: str) -> tuple[float, float | None]:
        """(sum of epsilons, memoised pure bound or None) of one campaign."""
        plain = 0.0
        eps_sums: dict[str, float] = {}  # release key -> sum of its per-report epsilons
        reports: dict[str, int] = {}
        perms: dict[str, float] = {}
        for (c, eps, key, perm), n in self.groups.items():
            if c != campaign:
                continue
            if key is None or perm is None:
                plain += eps * n
            else:
                eps_sums[key] = eps_sums.get(key, 0.0) + eps * n
                reports[key] = reports.get(key, 0) + n
                perms[key] = max(perms.get(key, 0.0), perm)
        if not eps_sums:
            return plain, None
        memo = plain
        for key, eps_sum in eps_sums.items():
            count = reports[key]
            distinct = min(count, self.union.get((campaign, key), 0) or count)
            memo += min(eps_sum, perms[key] * distinct)
        return plain + math.fsum(eps_sums.values()), memo

    def campaign_bound(self, campaign: str, delta: float, *, limit: float = math.inf) -> float:
        """The campaign's charged epsilon; cheap bounds first, stopping once within ``limit``."""
        seq, memo = self.pure(campaign)
        best = seq if memo is None else min(seq, memo)
        if best <= limit:
            return best
        return min(best, compose(self.counts(campaign), delta, limit=limit)[0])

    def device_bound(self, delta: float, *, limit: float = math.inf) -> tuple[float, str]:
        campaigns = {g[0] for g in self.groups}
        pure = 0.0
        for c in campaigns:
            seq, memo = self.pure(c)
            pure += seq if memo is None else min(seq, memo)
        if pure <= limit:
            return pure, "per campaign, added"
        comp, name = compose(self.counts(), delta, limit=limit)
        return (comp, name) if comp < pure else (pure, "per campaign, added")


class Ledger:
    """The budget ledger in the state file; thread-safe through :class:`StateDB`."""

    def __init__(self, db: StateDB) -> None:
        self.db = db

    # -- the accounting day -------------------------------------------------------------------

    def accounting_day(self, conn: sqlite3.Connection, today: dt.date) -> tuple[dt.date, bool]:
        """``max(today, latest day seen)`` inside the caller's transaction, and whether the
        clock went back. Records ``today`` when it is later."""
        row = conn.execute("SELECT value FROM settings WHERE name = ?", (_HIGH_WATER,)).fetchone()
        seen = dt.date.fromisoformat(row[0]) if row else None
        if seen is not None and today < seen:
            return seen, True
        if seen != today:
            StateDB.put_setting(conn, _HIGH_WATER, today.isoformat())
        return today, False

    def latest_day(self, today: dt.date) -> dt.date:
        """The accounting day for reading (no write)."""
        seen = self.db.get_setting(_HIGH_WATER)
        return max(today, dt.date.fromisoformat(seen)) if seen else today

    # -- charging -----------------------------------------------------------------------------

    def charge(
        self,
        conn: sqlite3.Connection,
        *,
        campaign: str,
        window: str,
        epsilon: float,
        limit: int | None,
        day: dt.date | None = None,
        budget: PrivacyBudget | None = None,
        release: Release | None = None,
        permanent_epsilon: float | None = None,
    ) -> int:
        """Record one report inside the caller's transaction; returns the window's new count.

        Raises :class:`PrivacyBudgetExceeded` (and records nothing, the caller's transaction
        rolls back) when ``limit`` reports were already sent in ``window``, or when the report
        would take the campaign's or the device's spend over ``day``'s period above
        ``budget``. ``limit`` None: no per-window limit; ``budget`` None: the defaults.
        """
        budget = budget or PrivacyBudget()
        day_text = (day or dt.date.fromisoformat(window)).isoformat()
        used = self._window_count(conn, campaign, window, day_text, charged=limit is not None)
        if limit is not None and used >= limit:
            raise PrivacyBudgetExceeded(
                f"privacy budget for campaign {campaign!r} is spent for window {window}: "
                f"{used} of {limit} report(s) per window already made (epsilon {epsilon:.4g} "
                "each); report again in the next window, or raise reports_per_window if the "
                "campaign's privacy analysis allows it"
            )
        if release is None and permanent_epsilon is not None:
            release = Release(f"legacy:{permanent_epsilon!r}", permanent_epsilon)
        key = release.key if release else None
        perm = release.permanent_epsilon if release else None
        if release is not None and release.label_digests:
            conn.executemany(
                "INSERT OR IGNORE INTO release_domain (campaign, release, label_digest) "
                "VALUES (?, ?, ?)",
                [(campaign, key, d) for d in release.label_digests],
            )
        if math.isinf(budget.campaign_epsilon) and math.isinf(budget.device_epsilon):
            self._record(conn, campaign, window, day_text, epsilon, key, perm)
            return used + 1
        spend = self._spend(conn, self._since(dt.date.fromisoformat(day_text), budget))
        group = (campaign, float(epsilon), key, perm)
        spend.groups[group] = spend.groups.get(group, 0) + 1
        cost = spend.campaign_bound(campaign, budget.delta, limit=budget.campaign_epsilon)
        if cost > budget.campaign_epsilon:
            raise PrivacyBudgetExceeded(
                f"privacy budget for campaign {campaign!r} is spent: this report (epsilon "
                f"{epsilon:.4g}) would bring its spend over the last {budget.period_days} days "
                f"to {cost:.4g}, above the app's campaign_epsilon={budget.campaign_epsilon:g}; "
                "older reports leave the period day by day"
            )
        total, _ = spend.device_bound(budget.delta, limit=budget.device_epsilon)
        if total > budget.device_epsilon:
            raise PrivacyBudgetExceeded(
                f"the device's privacy budget is spent: this report to {campaign!r} would bring "
                f"the spend of all campaigns over the last {budget.period_days} days to "
                f"{total:.4g}, above the app's device_epsilon={budget.device_epsilon:g}"
            )
        self._record(conn, campaign, window, day_text, epsilon, key, perm)
        return used + 1

    @staticmethod
    def _window_count(
        conn: sqlite3.Connection, campaign: str, window: str, day: str, *, charged: bool
    ) -> int:
        """Reports of ``campaign`` in the window that starts on ``window`` (an ISO date) and
        holds ``day``: the window's own count, or (``charged``) the reports charged on the
        days from its start to ``day``, whichever is larger.

        The charged days count whatever window the campaign had then: the window kind comes
        from the collector's config, and a collector that switched a campaign from weekly to
        daily windows (or back) got a second report on the same day under a limit of one per
        window, each window key counting apart."""
        row = conn.execute(
            "SELECT reports FROM ledger WHERE campaign = ? AND window = ?", (campaign, window)
        ).fetchone()
        used = int(row[0]) if row else 0
        if not charged or window > day:
            return used
        (charged_days,) = conn.execute(
            "SELECT coalesce(sum(reports), 0) FROM charges "
            "WHERE campaign = ? AND day >= ? AND day <= ?",
            (campaign, window, day),
        ).fetchone()
        return max(used, int(charged_days))

    @staticmethod
    def _record(
        conn: sqlite3.Connection,
        campaign: str,
        window: str,
        day: str,
        epsilon: float,
        key: str | None,
        perm: float | None,
    ) -> None:
        conn.execute(
            "INSERT INTO charges (campaign, day, epsilon, release, permanent_epsilon, reports) "
            "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (campaign, day, epsilon, release, "
            "permanent_epsilon) DO UPDATE SET reports = reports + 1",
            (campaign, day, float(epsilon), key or "", perm or 0.0),
        )
        conn.execute(
            "INSERT INTO ledger (campaign, window, reports, epsilon_sum, epsilon_max, "
            "permanent_epsilon) VALUES (?, ?, 1, ?, ?, ?) "
            "ON CONFLICT (campaign, window) DO UPDATE SET reports = reports + 1, "
            "epsilon_sum = epsilon_sum + excluded.epsilon_sum, "
            "epsilon_max = max(epsilon_max, excluded.epsilon_max), "
            "permanent_epsilon = excluded.permanent_epsilon",
            (campaign, window, epsilon, epsilon, perm),
        )

    @staticmethod
    def _since(day: dt.date, budget: PrivacyBudget) -> str:
        """Charges on days after this one are in ``day``'s period."""
        if budget.period_days > (day - dt.date.min).days:
            # A period longer than the calendar behind ``day`` (a lifetime budget of a million
            # days): every charge is in it. "" sorts before every ISO date.
            return ""
        return (day - dt.timedelta(days=budget.period_days)).isoformat()

    @staticmethod
    def _spend(conn: sqlite3.Connection, since: str, campaign: str | None = None) -> _Spend:
        where, args = "day > ?", [since]
        if campaign is not None:
            where += " AND campaign = ?"
            args.append(campaign)
        groups: dict[_Group, int] = {
            (c, float(e), k or None, p or None): int(n)
            for c, e, k, p, n in conn.execute(
                "SELECT campaign, epsilon, release, permanent_epsilon, sum(reports) FROM charges "
                f"WHERE {where} GROUP BY 1, 2, 3, 4",
                args,
            )
        }
        union: dict[tuple[str, str], int] = {}
        if any(g[2] for g in groups):
            union = {
                (c, k): int(n)
                for c, k, n in conn.execute(
                    "SELECT campaign, release, count(*) FROM release_domain GROUP BY 1, 2"
                )
            }
        return _Spend(groups, union)

    # -- reading ------------------------------------------------------------------------------

    def used(self, campaign: str, window: str, *, day: dt.date | None = None) -> int:
        """Reports charged to ``campaign`` in ``window``; with ``day`` (the accounting day),
        counted as :meth:`charge` counts them against the per-window limit."""
        with self.db.reading() as conn:
            if day is None:
                row = conn.execute(
                    "SELECT reports FROM ledger WHERE campaign = ? AND window = ?",
                    (campaign, window),
                ).fetchone()
                return int(row[0]) if row else 0
            return self._window_count(conn, campaign, window, day.isoformat(), charged=True)

    def _period(
        self, today: dt.date | None, budget: PrivacyBudget | None, delta: float | None
    ) -> tuple[PrivacyBudget, float, str]:
        """The budget, delta and start of the period ending ``today`` (or the latest day seen)."""
        budget = budget or PrivacyBudget()
        delta = budget.delta if delta is None else check_delta(delta)
        day = self.latest_day(today or dt.datetime.now(dt.UTC).date())
        return budget, delta, self._since(day, budget)

    def spent(
        self,
        campaign: str,
        *,
        today: dt.date | None = None,
        budget: PrivacyBudget | None = None,
        delta: float | None = None,
        domain_size: int | None = None,  # noqa: ARG002 - kept for callers of the old API
    ) -> BudgetSpent:
        """What ``campaign`` cost this device over the budget period ending ``today``."""
        budget, delta, since = self._period(today, budget, delta)
        with self.db.reading() as conn:
            spend = self._spend(conn, since, campaign)
            windows = conn.execute(
                "SELECT count(*) FROM ledger WHERE campaign = ? AND window > ?",
                (campaign, since),
            ).fetchone()[0]
        return self._campaign_spent(campaign, spend, budget, delta, int(windows))

    @staticmethod
    def _campaign_spent(
        campaign: str, spend: _Spend, budget: PrivacyBudget, delta: float, windows: int
    ) -> BudgetSpent:
        counts = spend.counts(campaign)
        k = sum(counts.values())
        seq, memo = spend.pure(campaign)
        adv = opt = None
        if k:
            adv = advanced_bound(counts, delta)
            opt = kairouz(k, max(counts), delta)
        best = seq
        bound = "basic"
        for name, value in (("advanced", adv), ("optimal", opt), ("memoised", memo)):
            if value is not None and value < best:
                best, bound = value, name
        return BudgetSpent(
            campaign=campaign,
            reports=k,
            windows=windows,
            epsilon_per_report=max(counts) if counts else 0.0,
            sequential=basic_bound(counts),
            advanced=adv if adv is not None and adv < seq else None,
            delta=delta,
            memoised=memo if memo is not None and memo < seq else None,
            optimal=opt if opt is not None and opt < seq else None,
            budget=budget.campaign_epsilon,
            period_days=budget.period_days,
            bound=bound,
        )

    def device_spent(
        self,
        *,
        today: dt.date | None = None,
        budget: PrivacyBudget | None = None,
        delta: float | None = None,
    ) -> DeviceSpent:
        """All campaigns together over the budget period ending ``today``."""
        budget, delta, since = self._period(today, budget, delta)
        with self.db.reading() as conn:
            spend = self._spend(conn, since)
        total, bound = spend.device_bound(delta, limit=-math.inf)
        campaigns = tuple(
            self._campaign_spent(c, spend, budget, delta, 0)
            for c in sorted({g[0] for g in spend.groups})
        )
        return DeviceSpent(
            total, bound, budget.device_epsilon, budget.period_days, delta, campaigns
        )

    def charges(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Every charge, oldest day first: campaign, day, reports, epsilon each, and why."""
        query = "SELECT campaign, day, reports, epsilon, release, permanent_epsilon FROM charges"
        args: tuple[str, ...] = ()
        if campaign is not None:
            query += " WHERE campaign = ?"
            args = (campaign,)
        with self.db.reading() as conn:
            rows = conn.execute(query + " ORDER BY day, campaign", args).fetchall()
        return [
            {
                "campaign": c,
                "day": d,
                "reports": n,
                "epsilon": e,
                "permanent_epsilon": p or None,
                "why": (
                    f"{n} memoised report(s): epsilon {e:.4g} each, and at most "
                    f"{p:.4g} per distinct value for all reports of this release"
                    if k
                    else f"{n} report(s) of epsilon {e:.4g} each"
                ),
            }
            for c, d, n, e, k, p in rows
        ]

    def campaigns(self) -> list[str]:
        """Campaigns with at least one charged report."""
        with self.db.reading() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT campaign FROM charges ORDER BY 1")]
