"""``ldp serve --log-level debug`` logs no request path (third sweep: gunicorn's default
``pre_request`` hook logged ``POST /v1/campaigns/<id>/reports`` for every upload, in order and
timed, which the access log's route templates leave out on purpose: docs/COLLECTOR.md)."""

from __future__ import annotations

from pathlib import Path

import requests

from tests.support.server import running_collector


def test_debug_logging_names_no_campaign_of_an_upload(tmp_path: Path) -> None:
    with running_collector(tmp_path, extra_args=["--log-level", "debug"]) as srv:
        body = {"id": "quietcampaign", "domain": ["a", "b"], "mechanism": "grr", "epsilon": 1.0}
        assert srv.post_campaign(body).status_code == 201
        r = requests.get(
            f"{srv.url}/v1/campaigns/quietcampaign", headers=srv.headers("ingest"), timeout=30
        )
        assert r.status_code == 200
        r = requests.post(
            f"{srv.url}/v1/campaigns/quietcampaign/reports",
            json={"digest": r.json()["digest"], "reports": []},
            headers=srv.headers("ingest"),
            timeout=30,
        )
        assert r.status_code in (200, 400), r.text
        log = srv.stderr_path.read_text()
    assert "DEBUG" in log  # the level took effect
    assert "quietcampaign" not in log, log[-3000:]
