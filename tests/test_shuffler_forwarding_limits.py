"""What the shuffler does when the collector refuses what it forwards (docs/SHUFFLE.md,
"When the collector refuses"), found by an exploratory QA run:

* 65 messages of 65,536 characters made one request over the collector's LDP_MAX_BODY_BYTES:
  413 for ever, and every later report stuck behind it (also after a restart). Requests now
  stay within ``--max-request-bytes``, are halved on a 413 (a collector with a smaller limit),
  and a lone message the collector refuses (413, 400, 410) is dropped with a WARNING, once the
  collector has shown it takes this shuffler's requests (an empty batch answered with counts);
* the collector's rejections were logged at INFO, which ``ldp shuffle`` never showed;
* ``ldp shuffle --database`` took the collector's own database and added a table to it;
* the 400 for an over-long message did not name the length limit.

Real ``ldp serve`` and ``ldp shuffle`` processes on loopback; the forwarder in process where
a fault cannot be caused with a real collector (a whole-request 400 or 410 for one message,
which the collector never answers to a well-formed batch).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from client_sdk.sealed import seal
from collector import create_app as create_collector
from collector.settings import DEFAULT_MAX_BODY_BYTES
from shuffler import Forwarder, Staging
from shuffler.app import create_app as create_shuffler
from shuffler.forwarder import DEFAULT_MAX_REQUEST_BYTES, request_bytes
from tests.support.answers import answer
from tests.support.faulty_proxy import Fault, FaultyProxy
from tests.support.reports import campaign_body, reports
from tests.support.server import TOKENS, CollectorProcess, running_collector
from tests.test_shuffle import ShufflerProcess

LISTENING = "ldp shuffle: listening on "
#: The longest message the shuffler takes (and the collector opens): 65,536 base64 characters.
LONGEST = 65_536


def junk(chars: int) -> str:
    """A base64 message of exactly ``chars`` characters (``chars`` a multiple of 4) that opens
    with no key: the collector rejects it in its 200."""
    return base64.b64encode(os.urandom(chars // 4 * 3)).decode()


@contextmanager
def shuffling(
    tmp_path: Path, collector: CollectorProcess, *args: str, forward_to: str | None = None
) -> Iterator[ShufflerProcess]:
    """``ldp shuffle`` with the options given as they are (no ``-b`` unless given), forwarding
    to ``collector`` or to ``forward_to`` (a proxy in front of it)."""
    shuffler = ShufflerProcess(
        tmp_path, collector, None, forward_to=forward_to, extra_args=args
    ).start()
    try:
        yield shuffler
    finally:
        shuffler.stop()


@contextmanager
def sealed_collector(tmp_path: Path, **env: str) -> Iterator[CollectorProcess]:
    with running_collector(
        tmp_path, env={"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key"), **env}
    ) as srv:
        yield srv


def create(srv: CollectorProcess, cid: str) -> dict[str, Any]:
    resp = requests.post(
        srv.url + "/v1/campaigns", json=campaign_body(cid), headers=srv.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


def sealed(srv: CollectorProcess, campaign: dict[str, Any], n: int, **kw: Any) -> list[str]:
    key = requests.get(srv.url + "/v1/sealed/key", timeout=10).json()["public_key"]
    return [seal(key, campaign["id"], campaign["digest"], r) for r in reports(campaign, n, **kw)]


def counted(srv: CollectorProcess, cid: str, n: int, timeout: float = 60.0) -> int:
    """The campaign's report count once it reaches ``n`` (or at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = requests.get(
            f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=10
        )
        got = int(resp.json()["n"]) if resp.status_code == 200 else 0
        if got >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def pending(db: Path) -> int:
    """Messages in a shuffler's staging file (read while the shuffler runs)."""
    staging = Staging(db)
    try:
        return staging.pending()
    finally:
        staging.close()


def wait_until(condition: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# -- 1. the byte budget, halving on 413, dropping what the collector never takes -------------


def test_the_default_budget_is_the_collectors_default_body_limit() -> None:
    """docs/SHUFFLE.md: ``--max-request-bytes`` defaults to the collector's default
    ``LDP_MAX_BODY_BYTES`` (4 MiB), and ``request_bytes`` is the size ``requests`` sends."""
    assert DEFAULT_MAX_REQUEST_BYTES == DEFAULT_MAX_BODY_BYTES == 4 * 1024 * 1024
    for messages in ([], ["QUFBQQ=="], [junk(LONGEST), junk(8), "a/b+c=="]):
        body = requests.Request("POST", "http://x/", json={"messages": messages}).prepare().body
        assert isinstance(body, bytes)
        assert request_bytes(messages) == len(body)


@pytest.mark.slow
def test_65_longest_messages_no_longer_block_the_shuffler(tmp_path: Path) -> None:
    """The QA repro, defaults but -b 65: 65 messages of 65,536 characters (4,260,114 bytes in
    one request) were a 413 for ever, and genuine reports submitted after them never left.
    Now they leave in two requests within 4 MiB (the collector rejects them: they open with
    no key) and the genuine batch after them is counted."""
    with sealed_collector(tmp_path) as srv, shuffling(tmp_path, srv, "-b", "65") as shuffler:
        campaign = create(srv, "after-junk")
        junks = [junk(LONGEST) for _ in range(65)]
        for m in junks:
            shuffler.submit(m)
        for m in sealed(srv, campaign, 65, seed=1):
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 65) == 65, shuffler.stderr()[-2000:]
        assert wait_until(lambda: pending(shuffler.db) == 0)
        logged = shuffler.stderr()
    assert "413" not in logged
    assert "65 rejected by the collector" in logged
    assert not any(m[:64] in logged for m in junks)


@pytest.mark.slow
def test_byte_budget_fills_requests_exactly_to_the_collectors_limit(tmp_path: Path) -> None:
    """With ``--max-request-bytes`` equal to the collector's LDP_MAX_BODY_BYTES, a request of
    exactly that size is sent and taken: 40 messages of 1,000 characters, a budget of exactly
    10 of them, make 4 requests of exactly the limit and no 413 (an estimate of the body size
    one byte short would show as 413s and halves)."""
    limit = request_bytes([junk(1000)] * 10)
    with (
        sealed_collector(tmp_path, LDP_MAX_BODY_BYTES=str(limit)) as srv,
        FaultyProxy(srv.url) as proxy,
        shuffling(
            tmp_path, srv, "-b", "40", "--max-request-bytes", str(limit), forward_to=proxy.url
        ) as shuffler,
    ):
        for _ in range(40):
            shuffler.submit(junk(1000))
        assert wait_until(lambda: pending(shuffler.db) == 0), shuffler.stderr()
    sent = proxy.requests_to("/v1/sealed")
    assert [len(r.body) for r in sent] == [limit] * 4
    assert [r.status for r in sent] == [200] * 4


@pytest.mark.slow
def test_a_collector_with_a_smaller_body_limit_gets_halved_requests(tmp_path: Path) -> None:
    """The shuffler need not know the collector's LDP_MAX_BODY_BYTES: 100 genuine reports in
    one request of about 31 KB to a collector taking 20,000 bytes is a 413; the halves are
    taken and all 100 are counted (before, the 413 repeated for ever)."""
    with (
        sealed_collector(tmp_path, LDP_MAX_BODY_BYTES="20000") as srv,
        shuffling(tmp_path, srv, "-b", "100") as shuffler,
    ):
        campaign = create(srv, "halved")
        messages = sealed(srv, campaign, 100, seed=2)
        assert request_bytes(messages) > 20_000
        for m in messages:
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 100) == 100, shuffler.stderr()[-2000:]
        logged = shuffler.stderr()
    assert "dropped" not in logged


@pytest.mark.slow
def test_a_message_too_large_for_the_collector_is_dropped_and_the_rest_forwarded(
    tmp_path: Path,
) -> None:
    """A collector taking 1,024-byte bodies never takes a 3,000-character message: each of 3
    such is dropped (WARNING naming the 413, a counter), the 7 genuine reports of the same batch
    are counted, and so is the next batch (before: 413 for ever, nothing after it counted)."""
    with (
        sealed_collector(tmp_path, LDP_MAX_BODY_BYTES="1024") as srv,
        shuffling(tmp_path, srv, "-b", "10") as shuffler,
    ):
        campaign = create(srv, "too-large")
        big = [junk(3000) for _ in range(3)]
        for m in big + sealed(srv, campaign, 7, seed=3):
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 7) == 7, shuffler.stderr()[-2000:]
        for m in sealed(srv, campaign, 10, seed=4):
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 17) == 17, shuffler.stderr()[-2000:]
        assert wait_until(lambda: pending(shuffler.db) == 0)
        logged = shuffler.stderr()
    assert logged.count("WARNING shuffler.forwarder: dropped a message") == 3
    assert "(HTTP 413, too_large)" in logged
    assert "3 dropped since start" in logged
    assert not any(m[:64] in logged for m in big)


class CollectorRefusingOne:
    """The forwarder's session in place of the network, in front of a real collector app:
    a request holding ``poison`` is answered ``status`` in the collector's envelope (a whole-
    request refusal the collector never gives a well-formed batch, so it cannot be caused for
    real); every other request goes to the collector."""

    headers: dict[str, str] = {}

    def __init__(self, app: Flask, poison: str, status: int) -> None:
        self.client = app.test_client()
        self.poison = poison
        self.status = status
        self.sizes: list[int] = []

    def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
        self.sizes.append(len(json["messages"]))
        if self.poison in json["messages"]:
            body = {"error": {"code": "refused", "message": "no", "status": self.status}}
            return answer(self.status, body)
        got = self.client.post(
            "/v1/sealed", json=json, headers={"Authorization": f"Bearer {TOKENS['ingest_token']}"}
        )
        return answer(got.status_code, text=got.get_data(as_text=True))


@pytest.fixture()
def collector_app(tmp_path: Path) -> Iterator[Flask]:
    app = create_collector(
        {"database": str(tmp_path / "c.db"), **TOKENS, "sealed_key_file": str(tmp_path / "k")}
    )
    yield app
    app.extensions["ldp_storage"].close()


@pytest.mark.parametrize("status", [400, 410, 413])
def test_one_message_refused_whole_request_is_isolated_and_dropped(
    tmp_path: Path, collector_app: Flask, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch of 8 whose every request holding one bad message is refused (400, 410, 413):
    the requests are halved down to that message, which is dropped (logged with the status,
    not its content); the 7 others are counted and the next batch leaves. Before, the batch
    stayed at the head of the queue for ever."""
    client = collector_app.test_client()
    admin = {"Authorization": f"Bearer {TOKENS['admin_token']}"}
    campaign = client.post("/v1/campaigns", json=campaign_body("one-bad"), headers=admin).json
    assert campaign is not None
    key = client.get("/v1/sealed/key").json["public_key"]  # type: ignore[index]
    good = [seal(key, "one-bad", campaign["digest"], r) for r in reports(campaign, 15, seed=5)]
    poison = junk(400)
    staging = Staging(tmp_path / "s.db")
    for m in [*good[:7], poison]:
        staging.add(m)
    fwd = Forwarder(staging, "http://collector", TOKENS["ingest_token"], batch_size=8)
    session = CollectorRefusingOne(collector_app, poison, status)
    fwd._session = session  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="shuffler.forwarder"):
        first = fwd.forward_once()
    assert (first.forwarded, first.accepted, first.dropped) == (7, 7, 1)
    assert fwd.dropped_total == 1
    assert poison not in {m for _, m in staging.all()}
    assert 0 in session.sizes  # the empty batch that showed the collector takes requests
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"(HTTP {status}, refused)" in w for w in warnings), warnings
    assert not any(poison[:32] in r.getMessage() for r in caplog.records)
    for m in good[7:]:
        staging.add(m)
    assert fwd.forward_once().accepted == 8  # the next batch is not blocked
    assert staging.pending() == 0
    staging.close()


# -- what must never be dropped ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("status", [400, 410, 413])
def test_a_proxy_refusing_everything_drops_nothing(tmp_path: Path, status: int) -> None:
    """Something between shuffler and collector answers ``status`` to every request, the empty
    batch too (a proxy, a wrong URL): the shuffler halves down to single messages but drops
    none, as nothing shows the refusal is about a message. Through the real collector later,
    all 5 are counted."""
    with sealed_collector(tmp_path) as srv:
        campaign = create(srv, "kept")
        messages = sealed(srv, campaign, 5, seed=6)
        with (
            FaultyProxy(srv.url, default=Fault.status(status)) as proxy,
            shuffling(tmp_path, srv, "-b", "5", forward_to=proxy.url) as shuffler,
        ):
            for m in messages:
                shuffler.submit(m)
            assert wait_until(lambda: "did not answer an empty batch" in shuffler.stderr())
            assert wait_until(lambda: len(proxy.requests_to("/v1/sealed")) > 20)
        assert pending(shuffler.db) == 5
        assert "dropped" not in shuffler.stderr()
        with shuffling(tmp_path, srv, "-b", "5"):
            assert counted(srv, campaign["id"], 5) == 5


@pytest.mark.parametrize("status", [401, 404, 429, 500, 502, 503])
def test_transient_failures_keep_every_message(tmp_path: Path, status: int) -> None:
    """5xx, 429, a wrong token or a collector without sealed reports: the round stops with
    everything staged, however small the request (a single message here) and although the
    collector answers an empty batch, and the next round forwards it all."""
    staging = Staging(tmp_path / "s.db")
    for _ in range(3):
        staging.add(junk(100))
    fwd = Forwarder(staging, "http://collector", "t" * 20, batch_size=3, max_request=1)
    refusals = [status] * 2

    class Flaky:
        headers: dict[str, str] = {}

        def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
            if refusals and json["messages"]:
                return answer(refusals.pop(), {"error": {"code": "x", "status": status}})
            return answer(200, {"accepted": 0, "duplicate": 0, "rejected": len(json["messages"])})

    fwd._session = Flaky()  # type: ignore[assignment]
    for _ in range(2):
        with pytest.raises(RuntimeError, match=f"collector answered {status}"):
            fwd.forward_once()
        assert staging.pending() == 3
    assert fwd.forward_once().forwarded == 3
    staging.close()


def test_an_unreachable_collector_keeps_every_message(tmp_path: Path) -> None:
    """A real connection refusal (a closed loopback port): nothing dropped, nothing lost."""
    import socket

    staging = Staging(tmp_path / "s.db")
    staging.add(junk(LONGEST))
    # Bound but not listening while used: a connection is refused, and no other process (a
    # server on port 0 in another xdist worker) can take the port, as it could once released.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        fwd = Forwarder(staging, f"http://127.0.0.1:{port}", "t" * 20, batch_size=1)
        with pytest.raises(RuntimeError, match="unreachable"):
            fwd.forward_once()
    assert (staging.pending(), fwd.dropped_total) == (1, 0)
    staging.close()


# -- 2. rejections visible, logs shown by default ------------------------------------------


@pytest.mark.slow
def test_rejections_are_a_warning_and_rounds_are_logged_by_default(tmp_path: Path) -> None:
    """``ldp shuffle`` without --log-level: a round in which the collector rejects reports
    (3 dated 2001-01-01, older than the campaign's horizon_days) is a WARNING with the counts;
    a clean round an INFO line. No message appears in the log."""
    with sealed_collector(tmp_path) as srv, shuffling(tmp_path, srv, "-b", "6") as shuffler:
        campaign = create(srv, "horizon")
        old = sealed(srv, campaign, 3, seed=7, day="2001-01-01")
        fresh = sealed(srv, campaign, 9, seed=8)
        for m in old + fresh[:3]:
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 3) == 3
        assert wait_until(lambda: "3 rejected by the collector" in shuffler.stderr())
        for m in fresh[3:]:
            shuffler.submit(m)
        assert counted(srv, campaign["id"], 9) == 9
        assert wait_until(lambda: "6 accepted" in shuffler.stderr())
        logged = shuffler.stderr()
    assert (
        "WARNING shuffler.forwarder: forwarded 6 messages: 3 accepted, 0 duplicate, "
        "3 rejected by the collector; 0 dropped" in logged
    )
    assert "horizon_days" in logged
    assert (
        "INFO shuffler.forwarder: forwarded 6 messages: 6 accepted, 0 duplicate, 0 rejected"
        in logged
    )
    assert not any(m[:64] in logged for m in old + fresh)


# -- 3. the collector's database is refused, untouched ---------------------------------------


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
    finally:
        conn.close()


@pytest.mark.slow
def test_ldp_shuffle_refuses_the_collectors_database_and_leaves_it_untouched(
    tmp_path: Path,
) -> None:
    """It used to add a ``staged`` table to the collector's database and serve. Now: exit 2,
    the option and the reason named, the file's bytes and tables as they were."""
    with sealed_collector(tmp_path) as srv:
        create(srv, "untouched")
    database = srv.db_path
    tables = _tables(database)
    digest = hashlib.sha256(database.read_bytes()).hexdigest()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    cmd = [sys.executable, "-m", "ldp_cli", "shuffle", "--collector", "http://127.0.0.1:9"]
    cmd += ["--token", "t" * 20, "--database", str(database), "-p", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it serves: the defect
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"ldp shuffle served on the collector's database: {err}")
    assert proc.returncode == 2, err
    assert "Invalid value for '--database'" in err
    assert str(database) in err and "another program's database" in err
    assert "Traceback" not in err
    assert "staged" not in _tables(database) and _tables(database) == tables
    assert hashlib.sha256(database.read_bytes()).hexdigest() == digest


def test_a_staging_file_of_an_earlier_shuffler_is_still_taken(tmp_path: Path) -> None:
    """The check refuses only foreign tables: a file ``Staging`` made (with messages) and a
    new or empty file are taken."""
    first = Staging(tmp_path / "s.db")
    first.add(junk(8))
    first.close()
    assert pending(tmp_path / "s.db") == 1
    (tmp_path / "empty.db").write_bytes(b"")
    assert pending(tmp_path / "empty.db") == 0


# -- 4. the over-long message's 400 names the limit ------------------------------------------


def test_an_over_long_message_is_refused_naming_the_length_limit(tmp_path: Path) -> None:
    staging = Staging(tmp_path / "s.db")
    client = create_shuffler(staging).test_client()
    got = client.post("/v1/submit", json={"message": "A" * (LONGEST + 4)})
    assert got.status_code == 400
    error = got.get_json()["error"]
    assert error["code"] == "invalid_message"
    assert "65,540 characters" in error["message"]
    assert "limit of 65,536 characters" in error["message"]
    assert staging.pending() == 0
    staging.close()
