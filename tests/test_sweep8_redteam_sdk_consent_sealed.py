"""Consent withdrawn while a shuffled batch trickles out stops it: nothing deleted leaves after.

A shuffled campaign's batch leaves one sealed message at a time, each after a random pause of
up to 0.2 s, so a batch of 500 reports takes about 50 s. ``set_upload_enabled(False)`` deleted
the pending reports and returned, yet the upload thread went on submitting the rest of the
batch it had read before (measured: 30 reports, consent withdrawn once the first was staged,
29 more submitted over the next 3.5 s). Only an upload already sent may still arrive; now
each message asks first.

A real shuffler (its app and staging file, in-process); a fake collector serves the config.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving
from tests.support.waiting import eventually

nacl_public = pytest.importorskip("nacl.public")
pytest.importorskip("flask")

from shuffler.staging import Staging  # noqa: E402 - needs the shuffle extra
from tests.support.shuffler import front_door  # noqa: E402

PUBLIC = base64.b64encode(bytes(nacl_public.PrivateKey.generate().public_key)).decode()
OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
REPORTS = 30


@pytest.fixture
def shuffler(tmp_path: Path) -> Iterator[tuple[str, Staging]]:
    """A real shuffler front door on a free port (nothing forwarded) and its staging file."""
    with front_door(tmp_path / "shuffle.db") as door:
        yield door


def test_withdrawing_consent_stops_a_shuffled_batch_midway(
    shuffler: tuple[str, Staging], tmp_path: Path
) -> None:
    shuffler_url, staging = shuffler

    class Collector(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            body = campaign_config(self._campaign(), OUE)
            body["shuffler"] = shuffler_url
            self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

    with (
        serving(Collector) as url,
        TelemetryClient(
            url,
            ingest_token="t" * 20,
            state_dir=tmp_path / "device",
            campaigns=["c"],
            budget=PrivacyBudget.unlimited(),
            reports_per_window=None,
            sealed_key=PUBLIC,
            batch_size=REPORTS,  # the size trigger: one batch of them all
            close_timeout=0,
        ) as client,
    ):
        client.prefetch()
        for _ in range(REPORTS):
            assert client.report("c", "a")
        eventually(staging.pending, lambda n: n >= 1, what="the first message staged")
        client.set_upload_enabled(False)
        assert client.stats()["pending"] == 0
        eventually(
            lambda: client._uploader._idle,  # type: ignore[attr-defined]
            bool,
            what="the upload pass to end",
        )
        staged = staging.pending()
    # The first, and at most the few already past the check when consent was withdrawn.
    assert staged < REPORTS // 2, f"{staged} of {REPORTS} reports left after consent was withdrawn"
