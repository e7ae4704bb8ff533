"""Recomputing tallies from stored reports: the check behind ``ldp tally verify``.

Invariant checked: the running tally of every window equals the tally of the reports stored in
that window, exactly (every mechanism's state is integers: support counts, or a numeric
mechanism's sums) (and no window has reports without a tally, or a tally without reports).
Windows whose reports retention deleted are reported as skipped (``WindowCheck.skipped``).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from client_sdk.mechanisms import AggregateState, Payload
from collector.campaigns import Campaign
from collector.storage import Storage

_CHUNK = 50_000


@dataclass(frozen=True)
class WindowCheck:
    """One window of one campaign: the stored running tally and the recomputed one."""

    campaign: str
    window: str
    stored: AggregateState | None
    recomputed: AggregateState | None
    #: True: the window's reports were deleted by retention, so it cannot be checked (neither
    #: passed nor failed); its tally is kept.
    skipped: bool = False

    @property
    def ok(self) -> bool:
        if self.skipped:
            return True
        if self.stored is None or self.recomputed is None:
            return self.stored is self.recomputed or (
                (self.stored or self.recomputed).n == 0  # type: ignore[union-attr]
            )
        return self.stored == self.recomputed

    def to_dict(self) -> dict[str, object]:
        return {
            "campaign": self.campaign,
            "window": self.window,
            "ok": self.ok,
            "skipped": self.skipped,
            "stored": self.stored.to_dict() if self.stored else None,
            "recomputed": self.recomputed.to_dict() if self.recomputed else None,
        }


def recompute(storage: Storage, campaign: Campaign) -> dict[str, AggregateState]:
    """Tallies by window computed from the stored reports alone (in chunks of reports)."""
    mech = campaign.mechanism
    totals: dict[str, AggregateState] = {}
    pending: dict[str, list[Payload]] = {}
    for window, payload in storage.iter_reports(campaign):
        bucket = pending.setdefault(window, [])
        bucket.append(payload)
        if len(bucket) >= _CHUNK:
            totals[window] = totals.get(window, mech.empty_tally()) + mech.tally(bucket)
            bucket.clear()
    for window, bucket in pending.items():
        if bucket:
            totals[window] = totals.get(window, mech.empty_tally()) + mech.tally(bucket)
    return totals


def verify_tallies(storage: Storage, campaign_id: str | None = None) -> list[WindowCheck]:
    """Compare every stored running tally with its recomputation, window by window."""
    if campaign_id is None:
        campaigns = [c for c, _ in storage.list_campaigns()]
    else:
        found = storage.get_campaign(campaign_id)
        if found is None:
            raise KeyError(campaign_id)
        campaigns = [found]
    checks: list[WindowCheck] = []
    for campaign in campaigns:
        # Both reads in one snapshot where the backend offers one (PostgreSQL), so a check
        # run while ingest continues compares a tally with the reports of the same moment.
        snapshot = getattr(storage, "snapshot", None)
        with snapshot() if snapshot is not None else nullcontext():
            mark = storage.purged_before(campaign)
            stored = storage.tallies(campaign)
            again = recompute(storage, campaign)
        for window in sorted(set(stored) | set(again)):
            if mark is not None and window < mark:
                # Reports deleted by retention (or being deleted): nothing to recompute from.
                checks.append(WindowCheck(campaign.id, window, stored.get(window), None, True))
                continue
            checks.append(WindowCheck(campaign.id, window, stored.get(window), again.get(window)))
    return checks
