"""Writes the upgrade fixtures with the collector of main at c1588c3 (schema 2).

Run with the *old* code on the path, from a checkout of this repository:

    git archive c1588c3 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/data/make_main_c1588c3_fixtures.py \\
        tests/data POSTGRES_URL_OF_AN_EMPTY_DATABASE
    pg_dump --no-owner --no-privileges --inserts URL | grep -v '^\\\\' \\
        > tests/data/main-c1588c3.pg.sql   # without psql's \\restrict meta-commands

It stores the same campaigns and reports in a SQLite file (``main-c1588c3.sqlite``) and in the
PostgreSQL database, and writes what the old code answered (``main-c1588c3.expected.json``:
tallies and estimated counts per campaign) for tests/test_storage_upgrade.py to compare.
Reports are dated 2026-11-20 and 2026-11-21 (ingested with ``today`` = 2026-11-21).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from pathlib import Path

import numpy as np

import aggregator
from collector.campaigns import campaign_from_request
from collector.ingest import ingest_batch
from collector.storage import open_storage

LABELS = ["Sales", "Tech", "Other", "Admin"]
TODAY = dt.date(2026, 11, 21)
CAMPAIGNS = [
    {"id": "occ", "domain": LABELS, "mechanism": "oue", "epsilon": 1.0},
    {"id": "city", "domain": LABELS, "mechanism": "grr", "epsilon": 2.0, "window": "week"},
    {"id": "old", "domain": LABELS, "mechanism": "olh", "epsilon": 1.0},
]


def fill(url: str) -> dict[str, object]:
    store = open_storage(url)
    store.migrate()
    expected: dict[str, object] = {"schema_version": store.schema_version(), "campaigns": {}}
    for n, body in enumerate(CAMPAIGNS):
        camp = campaign_from_request(dict(body), today=TODAY)
        store.create_campaign(camp)
        mech = camp.mechanism
        rng = np.random.default_rng(1000 + n)
        for d, day in enumerate(("2026-11-20", "2026-11-21")):
            values = rng.integers(0, mech.k, 300 + 50 * d)
            payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
            reports = [
                {"id": f"{camp.id}-{day}-{i:012d}", "day": day, "payload": p}
                for i, p in enumerate(payloads)
            ]
            ingest_batch(
                store,
                camp,
                {"digest": camp.digest, "reports": reports},
                max_reports=10_000,
                today=TODAY,
            )
        tallies = store.tallies(camp)
        total = sum(tallies.values(), start=type(next(iter(tallies.values()))).empty(mech.k))
        est = aggregator.estimate(mech, total)
        expected["campaigns"][camp.id] = {  # type: ignore[index]
            "digest": camp.digest,
            "tallies": {w: t.to_dict() for w, t in tallies.items()},
            "counts": est.counts.tolist(),
        }
    store.archive_campaign(store.get_campaign("old"), "2026-11-21")  # type: ignore[arg-type]
    expected["archived"] = store.archived()
    store.close()
    return expected


def main() -> None:
    out = Path(sys.argv[1])
    sqlite_path = out / "main-c1588c3.sqlite"
    sqlite_path.unlink(missing_ok=True)
    expected = fill(f"sqlite:///{sqlite_path}")
    conn = sqlite3.connect(sqlite_path)  # one self-contained file: fold the WAL in
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    if len(sys.argv) > 2:
        assert fill(sys.argv[2]) == expected  # the same answers from both backends
    (out / "main-c1588c3.expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
