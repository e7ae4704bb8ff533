"""A campaign with reports on consecutive days, for retention tests (one definition)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import BatchResult, ingest_batch
from collector.storage import Storage


def daily_campaign(
    store: Storage,
    cid: str,
    *,
    start: dt.date,
    days: int,
    retention_days: int,
    per_day: int = 10,
    horizon_days: int = 3,
) -> Campaign:
    """Create an oue campaign over 4 values (created on ``start``, keeping ``retention_days``)
    and ingest ``per_day`` reports on each of ``days`` days from ``start``, each upload on its
    own day (the clock ingest is given)."""
    body = {
        "id": cid,
        "domain": ["a", "b", "c", "d"],
        "mechanism": "oue",
        "epsilon": 1.0,
        "horizon_days": horizon_days,
        "retention_days": retention_days,
    }
    camp = campaign_from_request(body, today=start)
    store.create_campaign(camp)
    mech: Any = camp.mechanism  # a categorical campaign (mypy sees every kind)
    for i in range(days):
        day = start + dt.timedelta(days=i)
        payloads = mech.encode_many(mech.perturb_many(np.arange(per_day) % 4, rng=i))
        reports = [
            {"id": f"{cid}-{day.isoformat()}-{j:08d}", "day": day.isoformat(), "payload": p}
            for j, p in enumerate(payloads)
        ]
        done = ingest_batch(
            store, camp, {"digest": camp.digest, "reports": reports}, max_reports=100, today=day
        )
        assert done.accepted == per_day
    return camp


def short_campaign(cid: str = "occ", today: dt.date = dt.date(2026, 1, 1)) -> Campaign:
    """An oue campaign over four labels with a 3-day horizon and 3-day retention (created
    ``today``): the shortest life, for races between ingest and the retention sweep."""
    body = {
        "id": cid,
        "domain": ["a", "b", "c", "d"],
        "mechanism": "oue",
        "epsilon": 1.0,
        "horizon_days": 3,
        "retention_days": 3,
    }
    return campaign_from_request(body, today=today)


def batch_body(camp: Campaign, day: dt.date, ids: list[str]) -> dict[str, Any]:
    """An upload body of reports with ``ids``, all of ``day`` (seeded payloads)."""
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(len(ids)) % 4, rng=7))
    return {
        "digest": camp.digest,
        "reports": [
            {"id": rid, "day": day.isoformat(), "payload": p}
            for rid, p in zip(ids, payloads, strict=True)
        ],
    }


def upload_ids(
    store: Storage, camp: Campaign, day: dt.date, ids: list[str], today: dt.date
) -> BatchResult:
    """One upload of ``ids`` for ``day``, checked against the horizon as of ``today``."""
    return ingest_batch(store, camp, batch_body(camp, day, ids), max_reports=10_000, today=today)
