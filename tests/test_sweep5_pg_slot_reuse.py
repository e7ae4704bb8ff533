"""PostgreSQL staging slots: an upload must notice that the slot it writes was mixed and became
the written slot again since it read ``mix_slots`` (fifth sweep).

An upload reads which slot to write, and whether the other one may hold live rows, then
stages. It checked afterwards only that the written slot was still the same one. If, between
its read and its insert, one mix took its slot through to clean and a second switched back to
it, the slot read is the same but the other slot is live again, holding reports the upload
never looked at: a retry of the same report id staged there meanwhile was stored in both
slots, its tally and the ``accepted`` counter added twice, and the second move dropped the
duplicate row (``ON CONFLICT DO NOTHING``) while its tally stayed (``tally verify`` fails).

The interleaving is forced with real PostgreSQL sessions: the upload is held right after its
read of ``mix_slots`` (a wrapper of the connection it stages with), while a full mix, the
retry of the same reports and a second mix that fails after its switch (a lock timeout at the
seal) run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from collector.campaigns import campaign_from_request
from collector.errors import StorageBusy
from collector.tallycheck import verify_tallies
from tests.support.pg_interleave import HeldAfterRead, upload
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage import postgres as pg  # noqa: E402
from collector.storage.postgres import PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def test_an_upload_held_across_two_switches_checks_the_slot_live_again(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStorage(url, staging=True)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x"))
    store.create_campaign(campaign)
    other = PostgresStorage(url, staging=True)  # another worker: uploads and mixes
    failing = PostgresStorage(url, staging=True, busy_timeout_ms=100)  # mixer whose seal fails
    items = reports(campaign.to_record(), 6, seed=5)
    first, twin = items[:2], items[2:]
    try:
        assert upload(store, campaign, first).accepted == 2  # slot 0 holds rows

        def meanwhile() -> None:
            # The upload read (writing 0, other clean). A full mix: slot 0 moved and clean,
            # uploads now write slot 1.
            assert other.mix().moved == 2
            # The same reports, retried to another worker: staged in slot 1.
            assert upload(other, campaign, twin).accepted == 4
            # A second mix switches back to slot 0 and fails at the seal of slot 1 (an upload
            # still writing it, here a session holding its lock): slot 1 stays live.
            with psycopg.connect(url) as blocker:
                blocker.execute("LOCK TABLE staged_reports_1 IN ROW EXCLUSIVE MODE")
                with pytest.raises(StorageBusy):
                    failing.mix()
                blocker.rollback()
            with psycopg.connect(url, autocommit=True) as conn:
                assert conn.execute(pg._READ_SLOTS).fetchone()[:2] == (0, "writers")

        real = PostgresStorage._stage
        calls: list[int] = []

        def held(self: PostgresStorage, conn: Any, *args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                conn = HeldAfterRead(conn, meanwhile)
            return real(self, conn, *args)

        monkeypatch.setattr(PostgresStorage, "_stage", held)
        result = upload(store, campaign, twin)
        monkeypatch.undo()
        assert (result.accepted, result.duplicate) == (0, 4)
        store.mix()
        store.mix()
        assert store.staged_count() == 0
        assert store.count_reports(campaign) == 6
        assert sum(t.n for t in store.tallies(campaign).values()) == 6
        checks = verify_tallies(store)
        assert checks and all(c.ok for c in checks), [c.to_dict() for c in checks]
        [counters] = store.report_counters()
        assert (counters.accepted, counters.duplicate) == (6, 4)
    finally:
        failing.close()
        other.close()
        store.close()
