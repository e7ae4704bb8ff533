"""Report outcome counters (``ldp_reports_total`` on ``GET /metrics``) agree with the upload
answers, on a real ``ldp serve`` over SQLite and PostgreSQL (docs/COLLECTOR.md, "Metrics").

Found by the third collector sweep: an id repeated within one upload was answered as a
duplicate but never reached the stored counter, so the metric counted fewer duplicates than
the answers did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.postgres import BACKENDS
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import CollectorProcess, collector_on


def _outcomes(server: CollectorProcess, cid: str) -> dict[str, float]:
    """``ldp_reports_total`` of campaign ``cid`` by outcome, read with prometheus_client."""
    r = requests.get(server.url + "/metrics", headers=server.headers("analyst"), timeout=30)
    assert r.status_code == 200, r.text
    return {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
        if s.name == "ldp_reports_total" and s.labels.get("campaign") == cid
    }


def _upload(server: CollectorProcess, cid: str, body: dict[str, Any]) -> dict[str, Any]:
    r = requests.post(
        f"{server.url}/v1/campaigns/{cid}/reports",
        json=body,
        headers=server.headers("ingest"),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_id_repeated_within_one_upload_is_counted_as_a_duplicate(
    backend: str, tmp_path: Path
) -> None:
    with collector_on(backend, tmp_path, workers=2) as server:
        created = server.post_campaign(campaign_body("repeats"))
        assert created.status_code == 201, created.text
        campaign = created.json()
        items = reports(campaign, 6, seed=3)
        # Three ids sent twice in the same upload, plus one garbage payload.
        bad = {**items[0], "id": "garbage-0123456789abcdef", "payload": "zz"}
        first = _upload(server, "repeats", batch(campaign, items + items[:3] + [bad]))
        assert (first["accepted"], first["duplicate"], first["rejected"]) == (6, 3, 1)
        # A retry of the first two, one of them twice: three duplicates again.
        second = _upload(server, "repeats", batch(campaign, items[:2] + items[:1]))
        assert (second["accepted"], second["duplicate"], second["rejected"]) == (0, 3, 0)

        assert _outcomes(server, "repeats") == {"accepted": 6, "duplicate": 6, "rejected": 1}
        server.verify_tallies("repeats")
