"""A shuffled batch cut short is not sent again whole: what the shuffler staged stays sent.

A shuffled campaign's batch goes to the shuffler one sealed message per report. When one
submission failed (the shuffler answered 503, as it does to everyone while a client holds its
connections, which anyone, the collector included, can do), the whole batch stayed in the
outbox and the next pass sealed and submitted every report again, those the shuffler had
already staged included. They reached the collector twice: first mixed into one batch, then,
later and together, as duplicates of report ids it had already seen, which told it that those
reports came from one device (measured: 5 reports of one device, the 3rd submission refused
once: 7 messages staged, 2 report ids twice). A refusal for good (a 4xx) dropped the whole
batch, the two staged reports counted as dropped and the two after it never sent. Now each
report of a shuffled campaign is handed to the shuffler, and settled, on its own.

A real shuffler (its app and staging file, served in-process); a fault-injecting proxy in front
of it stands for the overloaded shuffler, and a fake collector serves the config.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving
from tests.support.faulty_proxy import PASS, Fault, FaultyProxy

nacl_public = pytest.importorskip("nacl.public")
pytest.importorskip("flask")

from shuffler.staging import Staging  # noqa: E402 - needs the shuffle extra
from tests.support.shuffler import front_door  # noqa: E402

KEY = nacl_public.PrivateKey.generate()
PUBLIC = base64.b64encode(bytes(KEY.public_key)).decode()
OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
REPORTS = 5


@pytest.fixture
def shuffler(tmp_path: Path) -> Iterator[tuple[str, Staging]]:
    """A real shuffler front door on a free port (nothing forwarded) and its staging file."""
    with front_door(tmp_path / "shuffle.db") as door:
        yield door


def _staged_ids(staging: Staging) -> list[str]:
    box = nacl_public.SealedBox(KEY)
    return [json.loads(box.decrypt(base64.b64decode(m)))["report"]["id"] for _, m in staging.all()]


@pytest.mark.parametrize("refusal", [503, 400], ids=["overloaded", "refused"])
def test_messages_staged_before_a_failed_submission_are_not_sent_again(
    shuffler: tuple[str, Staging], tmp_path: Path, refusal: int
) -> None:
    shuffler_url, staging = shuffler
    with FaultyProxy(upstream=shuffler_url) as proxy:

        class Collector(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = campaign_config(self._campaign(), OUE)
                body["shuffler"] = proxy.url
                self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

        proxy.plan(PASS, PASS, Fault.status(refusal, retry_after=0), path="/v1/submit")
        with (
            serving(Collector) as url,
            TelemetryClient(
                url,
                ingest_token="t" * 20,
                state_dir=tmp_path / "device",
                campaigns=["c"],
                budget=PrivacyBudget.unlimited(),
                reports_per_window=None,  # several reports of one day: one batch
                sealed_key=PUBLIC,
                backoff_base=0.01,
                backoff_cap=0.05,
                close_timeout=0,
            ) as client,
        ):
            client._transport.jitter = 0  # type: ignore[attr-defined]
            client.prefetch()
            made = {client.report("c", "a").id for _ in range(REPORTS)}  # type: ignore[union-attr]
            client.flush(timeout=30)
            stats = client.stats()
        assert proxy.planned() == 0  # the failure happened, after two messages
    ids = _staged_ids(staging)
    assert [i for i, n in Counter(ids).items() if n > 1] == []  # no report staged twice
    assert set(ids) <= made
    if refusal == 503:  # retried: every report staged, once
        assert sorted(ids) == sorted(made) and stats["pending"] == 0
        assert stats["accepted"] == REPORTS
    else:  # refused for good: only the refused report is dropped; the others count as sent
        assert len(ids) == REPORTS - 1 and stats["pending"] == 0
        assert stats["accepted"] == REPORTS - 1 and stats["dropped_refused"] == 1
