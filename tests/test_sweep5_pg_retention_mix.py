"""PostgreSQL retention while a mix moves staged reports of the aged windows (fifth sweep).

1. ``drop_aged_partitions`` took each campaign's count of a partition's reports from the
   settled tallies before it detached the partition: reports a mix moved into the partition
   in between (their tallies folded with them) were dropped with it and counted nowhere (not
   staged any more, so ``purge_reports`` did not count them either). The counts are now read
   once the partition is detached (no move can reach it any more).
2. ``purge_reports`` walked ``reports`` first and deleted the staged reports of the aged
   windows last: reports a mix moved in between were in neither place, outlived the sweep
   (below the purge mark) and were not counted. The staged ones are now deleted first.

The mix is run at the exact point with a wrapper of the sweep's connection (real sessions).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.errors import StorageBusy
from collector.ingest import ingest_batch
from collector.retention import sweep
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


class _Before:
    """A connection that runs ``then`` once before the first statement starting with
    ``prefix`` (and with ``param`` as its first parameter, if given)."""

    def __init__(
        self, conn: Any, prefix: str, param: str | None, then: list[Callable[[], None]]
    ) -> None:
        self._conn, self._prefix, self._param, self._then = conn, prefix, param, then

    def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        params = args[0] if args else ()
        if (
            self._then
            and str(sql).startswith(self._prefix)
            and (self._param is None or params[:1] == (self._param,))
        ):
            self._then.pop()()
        return self._conn.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def mix_before(
    monkeypatch: pytest.MonkeyPatch, prefix: str, mixer: PostgresStorage, param: str | None = None
) -> list[Any]:
    """Every connection of the sweeping storage runs one mix (by ``mixer``, another worker)
    just before the first statement starting with ``prefix``; the mix results."""
    done: list[Any] = []

    def mix() -> None:
        try:
            done.append(mixer.mix(wait=False))
        except StorageBusy as exc:
            done.append(exc)

    then = [mix]
    real = PostgresStorage._conn

    @contextmanager
    def wrapped(self: PostgresStorage) -> Iterator[Any]:
        with real(self) as conn:
            yield conn if self is mixer else _Before(conn, prefix, param, then)

    monkeypatch.setattr(PostgresStorage, "_conn", wrapped)
    return done


def upload(
    store: PostgresStorage, campaign: Campaign, items: list[dict[str, Any]], day: Any
) -> Any:
    body = {"digest": campaign.digest, "reports": items}
    return ingest_batch(store, campaign, body, max_reports=1000, today=day)


def staged_then_mixed(url: str, *, keep_other: bool) -> tuple[PostgresStorage, Campaign, Any]:
    """Eight reports of one old day: five mixed, three staged (their day a partition)."""
    store = PostgresStorage(url, staging=True)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x", horizon_days=2, retention_days=2))
    store.create_campaign(campaign)
    if keep_other:  # a campaign that keeps its reports: the day's partition is not dropped
        store.create_campaign(campaign_from_request(campaign_body("y", horizon_days=2)))
    day = dt.date.today() - dt.timedelta(days=400)
    store.prepare_partitions(day)
    old = reports(campaign.to_record(), 8, seed=4, day=day.isoformat())
    assert upload(store, campaign, old[:5], day).accepted == 5
    assert store.mix().moved == 5
    assert upload(store, campaign, old[5:], day).accepted == 3
    return store, campaign, day


def test_a_partition_dropped_counts_the_reports_a_mix_moved_into_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, campaign, day = staged_then_mixed(url, keep_other=False)
    mixer = PostgresStorage(url, staging=True)
    mixer.prepare_partitions(day)  # knows the day's partition: makes none
    try:
        done = mix_before(monkeypatch, "ALTER TABLE reports DETACH", mixer)
        [result] = sweep(store, today=day + dt.timedelta(days=10)) or []
        monkeypatch.undo()
        assert [d.moved for d in done] == [3]  # the mix ran, and moved the staged three
        assert result.deleted == 8, result
        assert store.count_reports(campaign) == 0
    finally:
        mixer.close()
        store.close()


def test_a_purge_deletes_the_reports_a_mix_moved_meanwhile(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, campaign, day = staged_then_mixed(url, keep_other=True)
    mixer = PostgresStorage(url, staging=True)
    try:
        done = mix_before(monkeypatch, "DELETE FROM staged_reports", mixer)
        results = {r.campaign: r for r in sweep(store, today=day + dt.timedelta(days=10)) or []}
        monkeypatch.undo()
        assert [d.moved for d in done] == [3]
        assert results["x"].deleted == 8, results
        assert store.count_reports(campaign) == 0
    finally:
        mixer.close()
        store.close()
