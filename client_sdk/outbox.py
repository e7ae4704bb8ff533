"""The durable outbox: perturbed reports waiting for the collector's acknowledgement.

Each row is (campaign, report id, day, payload, config digest, attempts): the report exactly as
it will be sent, never the true value. A report leaves the outbox only when the collector
acknowledged it (accepted or duplicate) or when it is dropped for a counted reason:

* ``rejected``: the collector answered 200 but refused this report as invalid;
* ``dropped_overflow``: the outbox hit its cap (oldest first), e.g. a device offline for months;
* ``dropped_stale``: the campaign's config digest changed (the campaign was recreated);
* ``dropped_unknown_campaign``: the collector no longer knows the campaign (404);
* ``dropped_refused``: the collector refused a whole batch with a permanent 4xx;
* ``dropped_archived``: the campaign was archived on the collector (410 ``campaign_archived``):
  it takes no report any more;
* ``deleted_consent``: the app turned uploads off (``set_upload_enabled(False)``).

A report the collector rejects only because its day is outside the collector's window (the
device clock was off) is not dropped: it is re-stamped with the collector's day and kept
(``restamped_skew``).

Batches hold reports of one campaign, one config digest and one day: one upload never carries
reports of two campaigns or two days (docs/SDK.md, "What the collector can link").

Besides these outcome counters, ``counters`` holds what ``report`` did not store (``not_ready``,
``refused_budget``, ``refused_ceiling``, ``refused_disabled``, ``refused_storage``,
``refused_archived``) and
``clock_went_back``. A counter the state file cannot take (disk full) is kept in memory.

Acknowledged and rejected reports are copied to the ``sent`` log (payloads are safe to show) so
the device owner can see exactly what left the device.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter, StorageFailed
from client_sdk.state import StateDB

if TYPE_CHECKING:
    from client_sdk.mechanisms.base import Payload

#: Most reports kept waiting; beyond it the oldest are dropped (and counted).
DEFAULT_MAX_PENDING = 100_000
#: Most entries kept in the sent log (oldest trimmed).
DEFAULT_KEEP_SENT = 10_000

#: Reports settled per transaction after an upload while the app is writing, and while it
#: is idle (see :meth:`Outbox.settle`).
SETTLE_CHUNK = 16
SETTLE_CHUNK_IDLE = 512

_DELETE_SEQS = "DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))"
#: Marks (``device_day``) of reports no longer pending: usually none, a few at most.
_DELETE_UNMARKED = "DELETE FROM device_day WHERE report_id NOT IN (SELECT report_id FROM outbox)"
_PRESENT_SEQS = "SELECT seq FROM outbox WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq"

COUNTERS = (
    "accepted",
    "duplicate",
    "rejected",
    "dropped_overflow",
    "dropped_stale",
    "dropped_unknown_campaign",
    "dropped_refused",
    "dropped_archived",
    "deleted_consent",
    "restamped_skew",
    "not_ready",
    "refused_budget",
    "refused_ceiling",
    "refused_disabled",
    "clock_went_back",
    "refused_storage",
    "refused_archived",
)


@dataclass(frozen=True)
class Report:
    """One perturbed report as stored and sent. Safe to show: it holds no true value."""

    campaign: str
    id: str
    day: str
    payload: Payload
    digest: str

    def wire(self) -> dict[str, Any]:
        """The report's JSON form in an upload body."""
        return {"id": self.id, "day": self.day, "payload": self.payload}


#: Why ``report`` stored nothing: reason -> (counter, exception class name).
NOT_SENT_REASONS = {
    "not_ready": "not_ready",
    "budget_spent": "refused_budget",
    "above_ceiling": "refused_ceiling",
    "upload_disabled": "refused_disabled",
    "storage_failed": "refused_storage",
    "campaign_archived": "refused_archived",
}


@dataclass(frozen=True)
class NotSent:
    """What ``report`` returns when it stored nothing (an operational outcome, not a bug).

    Falsy, so ``if client.report(...):`` reads naturally. ``reason`` is one of
    ``not_ready`` (the campaign's config is being fetched in the background; report again
    later), ``budget_spent`` (the privacy budget or per-window limit), ``above_ceiling`` (the
    collector serves a config above the app's ceiling), ``upload_disabled`` (consent off),
    ``storage_failed`` (the state file could not be written: disk full, I/O error),
    ``campaign_archived`` (the collector archived the campaign: it takes no report any more,
    and nothing is charged to the budget for it).
    ``message`` says why and what to do; it never quotes the value. :meth:`raise_` raises the
    matching exception for callers who prefer exceptions.
    """

    campaign: str
    reason: str
    message: str

    def __bool__(self) -> bool:
        return False

    @property
    def counter(self) -> str:
        return NOT_SENT_REASONS[self.reason]

    def raise_(self) -> None:
        from client_sdk import errors

        cls: type[errors.LDPError] = {
            "not_ready": errors.CampaignNotReady,
            "budget_spent": errors.PrivacyBudgetExceeded,
            "above_ceiling": errors.ConfigAboveCeiling,
            "upload_disabled": errors.LDPError,
            "storage_failed": errors.StorageFailed,
            "campaign_archived": errors.UnknownCampaign,
        }[self.reason]
        raise cls(self.message)


@dataclass(frozen=True)
class Batch:
    """Up to ``batch_size`` pending reports of one campaign, config digest and day."""

    campaign: str
    digest: str
    seqs: tuple[int, ...]
    reports: tuple[Report, ...]

    def __len__(self) -> int:
        return len(self.reports)

    def first(self) -> Batch:
        """The batch of this batch's oldest report alone."""
        return replace(self, seqs=self.seqs[:1], reports=self.reports[:1])


def _check_cap(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameter(f"{name} must be an integer >= 1, got {value!r}")
    return value


class Outbox:
    """Durable FIFO of reports in the state file; thread-safe through :class:`StateDB`."""

    def __init__(
        self,
        db: StateDB,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        keep_sent: int = DEFAULT_KEEP_SENT,
    ) -> None:
        self.db = db
        self.max_pending = _check_cap(max_pending, "max_pending")
        self.keep_sent = _check_cap(keep_sent, "keep_sent")
        #: Counts that could not be written (the state file refused writes), kept until exit.
        self._unsaved: dict[str, int] = {}
        self._pending = 0
        self.recount()

    def recount(self) -> None:
        """Read the pending count from the file again (after a write that may have failed
        between the count and the commit)."""
        with self.db.reading() as conn:
            self._pending = int(conn.execute("SELECT count(*) FROM outbox").fetchone()[0])

    # -- writing ------------------------------------------------------------------------------

    def add(self, conn: sqlite3.Connection, report: Report, *, device_day: bool = False) -> None:
        """Insert ``report`` inside the caller's transaction (see ``StateDB.transaction``).
        ``device_day``: the report carries the device's own day because the day it should
        carry (its shuffler's) was not known yet; :meth:`with_days` replaces it before it
        leaves."""
        conn.execute(
            "INSERT INTO outbox (campaign, report_id, day, payload, digest) VALUES (?, ?, ?, ?, ?)",
            (report.campaign, report.id, report.day, json.dumps(report.payload), report.digest),
        )
        if device_day:
            conn.execute("INSERT OR IGNORE INTO device_day (report_id) VALUES (?)", (report.id,))
        self._pending += 1
        if self._pending > self.max_pending:
            self._drop_oldest(conn, self._pending - self.max_pending)

    @property
    def room(self) -> int:
        """Reports that can still be added without dropping any."""
        return max(0, self.max_pending - self._pending)

    def add_many(self, reports: Sequence[Report], *, drop_oldest: bool = True) -> int:
        """Insert many reports in one transaction; returns how many were added.

        With ``drop_oldest=False`` only as many as there is :attr:`room` for are added (the
        caller sees the shortfall in the returned count); nothing pending is dropped.
        """
        if not drop_oldest:
            reports = reports[: self.room]
        rows = [(r.campaign, r.id, r.day, json.dumps(r.payload), r.digest) for r in reports]
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO outbox (campaign, report_id, day, payload, digest) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            self._pending += len(rows)
            if self._pending > self.max_pending:
                self._drop_oldest(conn, self._pending - self.max_pending)
        return len(rows)

    def _drop_oldest(self, conn: sqlite3.Connection, count: int) -> None:
        conn.execute(
            "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?)",
            (count,),
        )
        self._pending -= count
        self._bump(conn, "dropped_overflow", count)

    @staticmethod
    def _bump(conn: sqlite3.Connection, name: str, by: int) -> None:
        if by:
            conn.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (name, by),
            )

    # -- uploading ----------------------------------------------------------------------------

    def next_batch(self, limit: int, *, skip: Iterable[tuple[str, str]] = ()) -> Batch | None:
        """The oldest pending reports of the oldest (campaign, digest, day), skipping ``skip``
        (campaign, digest) pairs."""
        skip = set(skip)
        with self.db.reading() as conn:
            head = None
            for campaign, digest, day in conn.execute(
                "SELECT campaign, digest, day FROM outbox ORDER BY seq"
            ):
                if (campaign, digest) not in skip:
                    head = (campaign, digest, day)
                    break
            if head is None:
                return None
            rows = conn.execute(
                "SELECT seq, report_id, day, payload FROM outbox "
                "WHERE campaign = ? AND digest = ? AND day = ? ORDER BY seq LIMIT ?",
                (*head, limit),
            ).fetchall()
        # Objects are built after the lock is released: ``report`` never waits for this.
        return Batch(
            campaign=head[0],
            digest=head[1],
            seqs=tuple(r[0] for r in rows),
            reports=tuple(Report(head[0], r[1], r[2], json.loads(r[3]), head[1]) for r in rows),
        )

    def settle(
        self,
        batch: Batch,
        *,
        accepted: int,
        duplicate: int,
        rejected: Mapping[int, str],
        restamp: Mapping[int, str] | None = None,
    ) -> None:
        """Remove an acknowledged batch; ``rejected`` maps batch index to the collector's reason.

        ``restamp`` maps batch index to a new day: those rejected reports stay in the outbox
        with that day (the device clock was off), counted in ``restamped_skew``. Settled in
        chunks of ``SETTLE_CHUNK`` reports while the app is writing (see the comment below),
        of ``SETTLE_CHUNK_IDLE`` otherwise; each chunk is atomic.
        """
        restamp = dict(restamp or {})
        rejected = {i: r for i, r in rejected.items() if i not in restamp}
        # While the app is writing, one transaction per SETTLE_CHUNK reports, each after
        # StateDB.give_way: a whole batch in one transaction held the lock for 3-4 ms at 500
        # reports, and a report() call arriving then waited for all of it. A crash between
        # chunks leaves the unsettled reports pending: they are sent again and the collector
        # answers duplicate. The batch's counters go with the last chunk, so they never
        # count a report twice.
        size = len(batch.seqs)
        start = 0
        while True:
            busy = self.db.give_way()
            end = min(start + (SETTLE_CHUNK if busy else SETTLE_CHUNK_IDLE), size)
            chunk = range(start, end)
            # Everything is prepared before taking the lock, so the transaction is a few C
            # calls.
            kept = {batch.seqs[i]: restamp[i] for i in chunk if i in restamp}
            seqs = json.dumps([batch.seqs[i] for i in chunk])
            sent = {
                batch.seqs[i]: (
                    batch.reports[i].campaign,
                    batch.reports[i].id,
                    batch.reports[i].day,
                    json.dumps(batch.reports[i].payload),
                    "rejected: " + rejected[i][:200] if i in rejected else "acknowledged",
                )
                for i in chunk
                if i not in restamp
            }
            with self.db.transaction(background=True) as conn:
                # Only the rows still pending: the app may have deleted some while the upload
                # was in flight (consent withdrawn, the oldest dropped for room). Counting the
                # whole chunk drove the pending count below zero, after which flush() never
                # saw an empty outbox again, and the sent log the withdrawal had deleted got
                # the batch back.
                present = [q for (q,) in conn.execute(_PRESENT_SEQS, (seqs,)) if q in sent]
                conn.execute(_DELETE_SEQS, (json.dumps(present),))
                conn.execute(_DELETE_UNMARKED)
                conn.executemany(
                    "UPDATE outbox SET day = ? WHERE seq = ?", [(d, q) for q, d in kept.items()]
                )
                self._pending -= len(present)
                self._bump(conn, "restamped_skew", len(kept))
                conn.executemany(
                    "INSERT INTO sent (campaign, report_id, day, payload, outcome) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [sent[q] for q in present],
                )
                conn.execute(
                    "DELETE FROM sent WHERE seq <= (SELECT max(seq) FROM sent) - ?",
                    (self.keep_sent,),
                )
                self._bump(
                    conn, "rejected", sum(1 for q in present if sent[q][4] != "acknowledged")
                )
                if end == size:
                    self._bump(conn, "accepted", accepted)
                    self._bump(conn, "duplicate", duplicate)
            if end == size:
                return
            start = end

    def with_days(self, batch: Batch, fix: Callable[[str], str | None]) -> Batch:
        """``batch`` with each report stored with the device's own day (``add(device_day=
        True)``) given ``fix(day)`` instead, in the outbox too, once ``fix`` can say it (None:
        not yet; the report keeps its day and its mark). A shuffled report made before the
        device had heard its shuffler's clock carries the device's day, and a device clock days
        off had the collector refuse it behind the shuffler, where the device never hears of
        it: lost, and counted as sent."""
        ids = [r.id for r in batch.reports]
        with self.db.reading() as conn:
            marked = {
                rid
                for (rid,) in conn.execute(
                    "SELECT report_id FROM device_day WHERE report_id IN "
                    "(SELECT value FROM json_each(?))",
                    (json.dumps(ids),),
                )
            }
        if not marked:
            return batch
        fixed: dict[int, str] = {}
        for i, r in enumerate(batch.reports):
            if r.id in marked:
                day = fix(r.day)
                if day is not None:
                    fixed[i] = day
        if not fixed:
            return batch
        with self.db.transaction(background=True) as conn:
            for i, day in fixed.items():
                conn.execute("UPDATE outbox SET day = ? WHERE seq = ?", (day, batch.seqs[i]))
                conn.execute("DELETE FROM device_day WHERE report_id = ?", (batch.reports[i].id,))
        reports = tuple(
            replace(r, day=fixed[i]) if i in fixed else r for i, r in enumerate(batch.reports)
        )
        return replace(batch, reports=reports)

    def drop(self, campaign: str, *, reason: str, digest: str | None = None) -> int:
        """Drop every pending report of ``campaign`` (of one ``digest`` if given), counted."""
        if reason not in COUNTERS:
            raise InvalidParameter(f"unknown drop reason {reason!r}; one of {COUNTERS}")
        with self.db.transaction() as conn:
            if digest is None:
                cur = conn.execute("DELETE FROM outbox WHERE campaign = ?", (campaign,))
            else:
                cur = conn.execute(
                    "DELETE FROM outbox WHERE campaign = ? AND digest = ?", (campaign, digest)
                )
            self._pending -= cur.rowcount
            self._bump(conn, reason, cur.rowcount)
        return cur.rowcount

    def clear(self, conn: sqlite3.Connection, *, reason: str) -> int:
        """Delete every pending report inside the caller's transaction, counted."""
        cur = conn.execute("DELETE FROM outbox")
        conn.execute("DELETE FROM device_day")
        self._pending -= cur.rowcount
        self._bump(conn, reason, cur.rowcount)
        return cur.rowcount

    def bump(self, name: str, by: int = 1) -> None:
        """Add to one of :data:`COUNTERS` in its own transaction; in memory (this process
        only) when the state file cannot be written."""
        if name not in COUNTERS:
            raise InvalidParameter(f"unknown counter {name!r}; one of {COUNTERS}")
        try:
            with self.db.transaction() as conn:
                self._bump(conn, name, by)
        except StorageFailed:
            with self.db.lock:
                self._unsaved[name] = self._unsaved.get(name, 0) + by

    def drop_batch(self, batch: Batch, *, reason: str) -> None:
        """Drop the reports of one batch, counted under ``reason``."""
        with self.db.transaction() as conn:
            cur = conn.execute(_DELETE_SEQS, (json.dumps(batch.seqs),))
            self._pending -= cur.rowcount  # those still pending (see settle)
            self._bump(conn, reason, cur.rowcount)

    def note_attempt(self, batch: Batch) -> None:
        """Count one failed delivery attempt for the batch's reports."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE outbox SET attempts = attempts + 1 "
                "WHERE seq IN (SELECT value FROM json_each(?))",
                (json.dumps(batch.seqs),),
            )

    # -- reading ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Reports waiting for acknowledgement."""
        return self._pending

    def counters(self) -> dict[str, int]:
        """Every outcome counter (see the module docstring), zero when never bumped."""
        with self.db.reading() as conn:
            stored = dict(conn.execute("SELECT name, value FROM counters").fetchall())
            unsaved = dict(self._unsaved)
        return {name: int(stored.get(name, 0)) + unsaved.get(name, 0) for name in COUNTERS}

    def pending_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Reports not yet acknowledged, oldest first."""
        return self._rows(
            "SELECT campaign, report_id, day, payload, attempts FROM outbox",
            "attempts",
            campaign,
        )

    def sent_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Reports that reached the collector (acknowledged or rejected), oldest first."""
        return self._rows(
            "SELECT campaign, report_id, day, payload, outcome FROM sent", "outcome", campaign
        )

    def _rows(self, query: str, extra: str, campaign: str | None) -> list[dict[str, Any]]:
        args: tuple[str, ...] = ()
        if campaign is not None:
            query += " WHERE campaign = ?"
            args = (campaign,)
        with self.db.reading() as conn:
            rows = conn.execute(query + " ORDER BY seq", args).fetchall()
        return [
            {"campaign": c, "id": i, "day": d, "payload": json.loads(p), extra: x}
            for c, i, d, p, x in rows
        ]
