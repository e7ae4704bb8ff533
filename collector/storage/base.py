"""The storage interface every backend implements (SQLite now; PostgreSQL as a new module).

Guarantees a backend must keep:

* per report only the campaign, the window, the report id and the wire payload are stored;
* ``ingest`` is one transaction: the new reports and the tally increments of exactly those
  reports commit together or not at all, and a report id already stored for the campaign
  (PostgreSQL, whose reports are partitioned by day: for the campaign and window) is neither
  stored nor counted again (so retries, which carry their report's original day, are safe
  across workers and processes);
* a successful ``ingest`` is durable when it returns;
* a busy or unreachable database raises :class:`StorageBusy` / :class:`StorageUnavailable`,
  never leaving anything partial;
* with ``staging`` on (docs/COLLECTOR.md "Unlinkable storage"), ``ingest`` writes the new
  reports to the durable staging table ``staged_reports`` (their tallies and counters are
  updated in the same transaction, as before) and :meth:`Storage.mix` later moves every staged
  report into ``reports`` in an order drawn from OS randomness (one transaction on PostgreSQL,
  slices of that order on SQLite, each one transaction); a report id
  stays unique per campaign across both tables. Every read (``iter_reports``,
  ``count_reports``, tallies, estimates) counts staged reports as stored.
"""

from __future__ import annotations

import datetime as dt
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

from client_sdk.mechanisms import AggregateState, Payload
from collector.campaigns import Campaign
from collector.errors import StorageError

#: Reports deleted per write transaction by :meth:`Storage.purge_reports` (SQLite: a few ms of
#: write lock per chunk); the retention sweep's default.
PURGE_CHUNK = 500

#: One validated report ready to store: (report id, payload as canonical JSON text).
ReportRow = tuple[str, str]


@dataclass(frozen=True)
class WindowBatch:
    """The validated reports of one upload that fall in one window.

    ``rows`` have distinct report ids. ``tally(positions)`` is the tally of the rows at those
    positions (``None``: all rows); the collector decodes the payloads before the write
    transaction, so a backend only selects and adds while it holds the lock.
    """

    rows: Sequence[ReportRow]
    tally: Callable[[Sequence[int] | None], AggregateState]


@dataclass(frozen=True)
class IngestCounts:
    """What one ``ingest`` call did: reports newly stored, and ids already stored."""

    accepted: int
    duplicate: int


@dataclass(frozen=True)
class ReportCounters:
    """Lifetime report outcomes of one campaign (for metrics)."""

    campaign: str
    accepted: int
    duplicate: int
    rejected: int


@dataclass(frozen=True)
class PurgeResult:
    """What one ``purge_reports`` call did: reports deleted, in how many write transactions,
    and the longest of them (seconds from holding the write lock, SQLite, or from sending the
    statement, PostgreSQL, to the commit: the longest an ingest could have waited on it)."""

    deleted: int
    chunks: int
    longest_chunk: float


@dataclass(frozen=True)
class MixResult:
    """What one ``mix`` call did: staged reports moved into ``reports`` and the seconds it
    took (the move and the cleanup after it)."""

    moved: int
    seconds: float


@dataclass(frozen=True)
class PartitionDrop:
    """What one ``drop_aged_partitions`` call did: the partitions dropped, the reports they
    held per campaign id, and the longest detach + drop (seconds)."""

    partitions: tuple[str, ...]
    deleted: dict[str, int]
    longest: float


@dataclass(frozen=True)
class CampaignUsage:
    """Stored reports of one campaign and their bytes (report id + payload as stored), and
    the window start before which its reports were deleted by retention (None: none were)."""

    campaign: str
    reports: int
    bytes: int
    purged_before: str | None


class Storage(ABC):
    """A narrow storage interface: campaigns, idempotent ingest, tallies, raw reports."""

    @abstractmethod
    def migrate(self) -> int:
        """Create or upgrade the schema; returns the schema version. Safe to run concurrently."""

    @abstractmethod
    def create_campaign(self, campaign: Campaign) -> None:
        """Store a new campaign; :class:`CampaignExists` when the id is taken."""

    @abstractmethod
    def get_campaign(self, campaign_id: str) -> Campaign | None:
        """The campaign, or None."""

    @abstractmethod
    def list_campaigns(self) -> list[tuple[Campaign, int]]:
        """Every campaign with its number of stored reports, ordered by id."""

    @abstractmethod
    def archive_campaign(self, campaign: Campaign, day: str) -> str:
        """Archive the campaign as of ``day`` (ISO date); the archive date (the first one if it
        was archived already). Once this returns, no ingest of the campaign commits."""

    @abstractmethod
    def archived(self) -> dict[str, str]:
        """Campaign id -> archive date of every archived campaign (read fresh, not cached)."""

    @abstractmethod
    def ingest(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        *,
        rejected: int = 0,
        duplicate: int = 0,
    ) -> IngestCounts:
        """Store reports grouped by window start (ISO date) in one transaction.

        Report ids must be distinct within the call. Only reports whose id is new for the
        campaign (PostgreSQL: for the campaign and window) are stored and added to the window's
        running tally (``WindowBatch.tally``).
        ``rejected`` is added to the campaign's rejected counter and ``duplicate`` (the
        upload's repeats of an id within itself, dropped before this call) to its duplicate
        counter, in the same transaction; the returned ``duplicate`` counts only the ids this
        call found already stored.
        """

    @abstractmethod
    def tallies(
        self, campaign: Campaign, start: str | None = None, end: str | None = None
    ) -> dict[str, AggregateState]:
        """Running tallies by window start, for windows in ``[start, end]`` (ISO dates).

        Each is the campaign mechanism's own state (``mech.tally_from(n, vector)``): a
        :class:`Tally` for a frequency oracle, a ``NumericTally`` for a numeric mechanism.
        """

    @abstractmethod
    def iter_reports(
        self, campaign: Campaign, window: str | None = None
    ) -> Iterator[tuple[str, Payload]]:
        """Every stored ``(window start, payload)`` of the campaign (or of one window)."""

    @abstractmethod
    def count_reports(self, campaign: Campaign) -> int:
        """Stored reports of the campaign, counted from the reports themselves."""

    @abstractmethod
    def schema_version(self) -> int:
        """The applied schema version (0 for an empty database)."""

    @abstractmethod
    def report_counters(self) -> list[ReportCounters]:
        """Accepted / duplicate / rejected report counts per campaign."""

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`StorageError` unless the database is reachable and writable."""

    @abstractmethod
    def close(self) -> None:
        """Release this process's connections."""

    # -- retention (docs/COLLECTOR.md "Retention") -------------------------------------------

    @abstractmethod
    def purge_reports(
        self, campaign: Campaign, before: str, *, chunk: int = PURGE_CHUNK
    ) -> PurgeResult:
        """Delete the campaign's reports (and so their ids) in windows starting before
        ``before`` (ISO date), keeping those windows' tallies.

        First records ``before`` as the campaign's purge mark (never moved back), so estimates
        and ``tally verify`` treat those windows as report-less at once; then deletes in
        write transactions of at most ``chunk`` reports, so ingest waits at most one chunk.
        Idempotent: an interrupted purge is finished by the next one.
        """

    @abstractmethod
    def purged_before(self, campaign: Campaign) -> str | None:
        """The window start before which the campaign's reports were deleted, or None."""

    @abstractmethod
    def usage(self, *, refresh: bool = False) -> list[CampaignUsage]:
        """Per campaign (by id): stored reports and bytes as of the last ``refresh=True`` call
        (which measures them from the reports, O(reports), and stores the figures); zeros
        for a campaign never measured. Cheap without ``refresh`` (what /metrics reads)."""

    # -- unlinkable storage (docs/COLLECTOR.md "Unlinkable storage") -----------------------

    @abstractmethod
    def mix(self, *, wait: bool = True) -> MixResult:
        """Move every report staged before the call into ``reports``, inserted in an order
        drawn from OS randomness (PostgreSQL: one transaction per batch; SQLite: consecutive
        slices of that order, one transaction each, the write lock free between them), then
        scrub what the move left
        behind where the backend can (SQLite: ``secure_delete`` and a truncating WAL
        checkpoint; PostgreSQL: ``TRUNCATE`` of the staging slot it emptied). Safe to run
        concurrently with ingest and with another ``mix``: each staged report is moved exactly
        once. A no-op when nothing is staged. ``wait=False`` (the service's mixer): return at
        once, moving nothing, if another mix is running (PostgreSQL: its lock; SQLite: its
        lease row, renewed at every slice)."""

    @abstractmethod
    def staged_count(self) -> int:
        """Reports staged and not yet mixed (all campaigns)."""

    @abstractmethod
    def claim_run(self, name: str, interval_seconds: float) -> bool:
        """True for exactly one caller, across processes and machines, per ``interval_seconds``
        (a lease row updated in one short write transaction); False for every other caller."""

    # -- partitions (PostgreSQL; a backend without them keeps these no-ops) ----------------

    def prepare_partitions(self, today: dt.date) -> list[str]:
        """Create the report partitions the next days need ahead of time; the names created."""
        return []

    def drop_aged_partitions(self, marks: Sequence[tuple[Campaign, str | None]]) -> PartitionDrop:
        """Given every campaign's purge mark (None: keeps its reports forever), drop whole the
        report partitions whose every day lies before all the marks, after recording each
        mark. What is left of aged windows is for :meth:`purge_reports`. Default: nothing."""
        return PartitionDrop((), {}, 0.0)


class CampaignRows:
    """The campaign rows' per-process cache, shared by both backends.

    A stored campaign never changes (a new version is a new campaign id), so each process
    decodes a campaign once (its mechanism, built on first use, then stays with it) and
    remembers the integer key (``pk``) that its report and tally rows refer to. A backend
    supplies its driver's parameter placeholder and a read connection.
    """

    #: The driver's parameter placeholder: ``?`` (sqlite3) or ``%s`` (psycopg).
    PLACEHOLDER: ClassVar[str]

    def __init__(self) -> None:
        self._pks: dict[str, int] = {}
        self._campaigns: dict[str, Campaign] = {}

    def _reading(self) -> AbstractContextManager[Any]:
        """A connection for one read (the backend's own)."""
        raise NotImplementedError

    def _pk(self, conn: Any, campaign: Campaign) -> int:
        """The campaign's row key; :class:`StorageError` when the campaign is not stored."""
        pk = self._pks.get(campaign.id)
        if pk is None:
            row = conn.execute(
                f"SELECT pk FROM campaigns WHERE id = {self.PLACEHOLDER}", (campaign.id,)
            ).fetchone()
            if row is None:
                raise StorageError(f"campaign {campaign.id!r} is not stored")
            pk = self._pks[campaign.id] = int(row[0])
        return pk

    def get_campaign(self, campaign_id: str) -> Campaign | None:
        """The campaign, or None; decoded once per process."""
        cached = self._campaigns.get(campaign_id)
        if cached is not None:
            return cached
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT pk, record FROM campaigns WHERE id = {self.PLACEHOLDER}",
                (campaign_id,),
            ).fetchone()
        if row is None:
            return None
        # Campaigns are immutable: cache per process (the mechanism is then built once).
        campaign = Campaign.from_record(json.loads(row[1]))
        self._pks[campaign_id] = int(row[0])
        self._campaigns[campaign_id] = campaign
        return campaign
