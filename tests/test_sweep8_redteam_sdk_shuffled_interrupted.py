"""A shuffled batch cut short by the app (``close()``, or the process killed) is not sent again.

A shuffled campaign's reports leave one sealed message each, after a random pause of up to
0.2 s: 30 reports take about 3 s, 500 about 50 s. They were settled in the outbox only once
the whole batch had gone. An app that closed the client meanwhile (``close()`` gives up after
``close_timeout``) or was killed (as mobile systems do to apps in the background) left every
message already staged by the shuffler pending, and the next run sent them all again: later,
together, duplicates of report ids the collector had already seen, which told it they came
from one device. Measured: 30 reports, the client closed once 3 were staged: the upload thread
went on and staged all 30 after ``close()`` returned, none settled, and the next run staged
the 30 again (30 report ids twice); killed with SIGKILL once 5 were staged, those were sent
again. Now each report is settled as soon as the shuffler staged it, and a closing client
sends nothing more: at most the one message in flight can be sent twice.

A real shuffler (its app and staging file, in-process); a fake collector serves the config.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving
from tests.support.waiting import eventually

nacl_public = pytest.importorskip("nacl.public")
pytest.importorskip("flask")

from shuffler.staging import Staging  # noqa: E402 - needs the shuffle extra
from tests.support.shuffler import front_door  # noqa: E402

KEY = nacl_public.PrivateKey.generate()
PUBLIC = base64.b64encode(bytes(KEY.public_key)).decode()
OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
REPORTS = 30
ROOT = Path(__file__).resolve().parents[1]

#: A device in a process of its own: makes REPORTS reports, says so, then uploads until killed.
DEVICE = """
import sys
from client_sdk import PrivacyBudget, TelemetryClient
url, state, key, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = TelemetryClient(url, ingest_token="t" * 20, state_dir=state, campaigns=["c"],
                         budget=PrivacyBudget.unlimited(), reports_per_window=None,
                         sealed_key=key, batch_size=n)
client.prefetch()
for _ in range(n):
    assert client.report("c", "a")
print("reported", flush=True)
client.flush(timeout=600)
"""


@pytest.fixture
def shuffler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Staging]]:
    """A fake collector whose campaign ``c`` names a real shuffler front door (nothing
    forwarded), and that shuffler's staging file."""
    with front_door(tmp_path_factory.mktemp("shuffler") / "shuffle.db") as (shuffler_url, staging):

        class Collector(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = campaign_config(self._campaign(), OUE)
                body["shuffler"] = shuffler_url
                self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

        with serving(Collector) as url:
            yield url, staging


def _device(url: str, state: Path, **options: Any) -> TelemetryClient:
    return TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=state,
        campaigns=["c"],
        budget=PrivacyBudget.unlimited(),
        reports_per_window=None,
        sealed_key=PUBLIC,
        batch_size=REPORTS,  # the size trigger: one pass for them all
        **options,
    )


def _staged_twice(staging: Staging) -> tuple[int, int]:
    """(messages staged, report ids staged more than once)."""
    box = nacl_public.SealedBox(KEY)
    ids = [json.loads(box.decrypt(base64.b64decode(m)))["report"]["id"] for _, m in staging.all()]
    return len(ids), sum(1 for n in Counter(ids).values() if n > 1)


def _next_run_sends_the_rest(url: str, state: Path) -> None:
    with _device(url, state, close_timeout=5) as again:
        assert again.flush(timeout=120)


def test_a_client_closed_mid_batch_sends_nothing_more_and_nothing_twice(
    shuffler: tuple[str, Staging], tmp_path: Path
) -> None:
    url, staging = shuffler
    client = _device(url, tmp_path, close_timeout=0.2)
    client.prefetch()
    for _ in range(REPORTS):
        assert client.report("c", "a")
    eventually(staging.pending, lambda n: n >= 3, what="3 messages staged")
    client.close()  # the app quits; its process goes on
    thread = client._uploader._thread  # type: ignore[attr-defined]
    eventually(thread.is_alive, lambda alive: not alive, what="the upload thread to end")
    at_close = staging.pending()
    _next_run_sends_the_rest(url, tmp_path)
    staged, twice = _staged_twice(staging)
    assert at_close < REPORTS  # nothing went on leaving after close()
    assert staged >= REPORTS and twice <= 1, f"{twice} report ids staged twice"


def test_a_device_killed_mid_batch_sends_nothing_twice(
    shuffler: tuple[str, Staging], tmp_path: Path
) -> None:
    url, staging = shuffler
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", DEVICE, url, str(tmp_path), PUBLIC, str(REPORTS)],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"reported"
        eventually(staging.pending, lambda n: n >= 5, what="5 messages staged")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    _next_run_sends_the_rest(url, tmp_path)
    staged, twice = _staged_twice(staging)
    assert staged >= REPORTS and twice <= 1, f"{twice} report ids staged twice"
