"""In-place upgrade of databases written by main at c1588c3 (schema 2), both backends.

The fixtures in tests/data were written by that commit's own collector
(tests/data/make_main_c1588c3_fixtures.py says how): a SQLite file and a PostgreSQL dump, with
what the old code answered. Opened with this code they migrate in place (PostgreSQL to
migration 3: numeric tallies in ``sums numeric[]``; SQLite keeps schema 2, whose JSON tallies
are already exact at any size) and every campaign, tally, estimate and archive date is the same;
ingest, ``tally verify`` and a new numeric campaign work on the upgraded database.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

import aggregator
from collector.campaigns import campaign_from_request
from collector.ingest import ingest_batch
from collector.storage import Storage, open_storage
from collector.storage import postgres_schema as pg_schema
from collector.storage import sqlite as sqlite_schema
from collector.tallycheck import verify_tallies
from tests.support.postgres import fresh_database

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "main-c1588c3.expected.json").read_text())
TODAY = dt.date(2026, 11, 21)


@pytest.fixture(params=["sqlite", "postgresql"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Storage]]:
    if request.param == "sqlite":
        path = tmp_path / "old.sqlite"
        shutil.copy(DATA / "main-c1588c3.sqlite", path)
        store = open_storage(f"sqlite:///{path}")
        try:
            yield "sqlite", store
        finally:
            store.close()
        return
    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((DATA / "main-c1588c3.pg.sql").read_text())  # type: ignore[arg-type]
        store = open_storage(url)
        try:
            yield "postgresql", store
        finally:
            store.close()


def _ingest(store: Storage, campaign_id: str, values: np.ndarray, tag: str) -> int:
    camp = store.get_campaign(campaign_id)
    assert camp is not None
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(values, rng=len(tag)))
    reports = [
        {"id": f"{tag}-{i:016d}", "day": TODAY.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    result = ingest_batch(
        store, camp, {"digest": camp.digest, "reports": reports}, max_reports=10_000, today=TODAY
    )
    assert result.rejected == 0, result.errors[:3]
    return result.accepted


def test_a_database_of_main_c1588c3_upgrades_in_place(old_store: tuple[str, Storage]) -> None:
    name, store = old_store
    assert store.schema_version() == EXPECTED["schema_version"] == 2
    latest = sqlite_schema.SCHEMA_VERSION if name == "sqlite" else pg_schema.SCHEMA_VERSION
    assert store.migrate() == latest
    assert store.migrate() == latest  # idempotent
    assert store.schema_version() == latest
    if name == "postgresql":
        assert latest == 8  # 3: generic tallies; 4: retention; 5: reports by day; 6: staged;
        # 7: staging in two slots; 8: tallies and counters in the slots

    # Campaigns, digests (devices' cached configs stay valid), tallies, estimates, archive.
    listed = {c.id: c for c, _ in store.list_campaigns()}
    assert set(listed) == set(EXPECTED["campaigns"])
    for cid, want in EXPECTED["campaigns"].items():
        camp = listed[cid]
        assert camp.digest == want["digest"]
        assert camp.kind == "frequency"
        tallies = store.tallies(camp)
        assert {w: t.to_dict() for w, t in tallies.items()} == want["tallies"]
        total = camp.mechanism.empty_tally()
        for t in tallies.values():
            total = total + t
        est = aggregator.estimate(camp.mechanism, total)
        np.testing.assert_allclose(est.counts, want["counts"], rtol=1e-12)
    assert store.archived() == EXPECTED["archived"]
    assert all(c.ok for c in verify_tallies(store))

    # Ingest into an old campaign still adds exactly.
    before = store.tallies(listed["occ"])[TODAY.isoformat()]
    assert _ingest(store, "occ", np.arange(40) % 4, "new-occ") == 40
    after = store.tallies(listed["occ"])[TODAY.isoformat()]
    assert after.n == before.n + 40
    assert all(c.ok for c in verify_tallies(store, "occ"))

    # A numeric campaign on the upgraded database: sums of squares stored exactly.
    camp = campaign_from_request(
        {"id": "age", "bounds": [17, 90], "mechanism": "piecewise", "epsilon": 1.0}, today=TODAY
    )
    store.create_campaign(camp)
    gen = np.random.default_rng(5)
    assert _ingest(store, "age", gen.uniform(10, 95, 500), "age-a") == 500
    assert _ingest(store, "age", gen.uniform(10, 95, 300), "age-b") == 300
    tally = store.tallies(camp)[TODAY.isoformat()]
    assert tally.n == 800 and len(tally.vector()) == len(camp.mechanism.tally_fields)
    assert all(c.ok for c in verify_tallies(store, "age"))
    mean = aggregator.estimate(camp.mechanism, tally)  # type: ignore[call-overload]
    assert 17 <= mean.ci(0.999)[1] and mean.ci(0.999)[0] <= 90
