"""The shuffler path: sealed reports, ``POST /v1/sealed``, ``ldp shuffle``, central (ε, δ).

Real parts throughout: the collector endpoint through its Flask app on a real SQLite file, then
``ldp serve`` and ``ldp shuffle`` as subprocesses on free loopback ports, SDK clients sending
through the shuffler, and SIGKILLs of the shuffler (nothing lost, nothing counted twice).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from aggregator import amplified_epsilon, default_delta
from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.sealed import seal
from collector import create_app
from ldp_cli.main import cli
from shuffler import Forwarder, Staging
from tests.support.answers import answer
from tests.support.reports import LABELS, batch, campaign_body, reports
from tests.support.server import TOKENS, CollectorProcess, running_collector
from tests.support.waiting import eventually

LISTENING = "ldp shuffle: listening on "


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role + '_token']}"}


# -- the collector endpoint -------------------------------------------------------------------


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(
        {
            "database": str(tmp_path / "c.db"),
            **TOKENS,
            "sealed_key_file": str(tmp_path / "sealed.key"),
        }
    )
    yield app
    app.extensions["ldp_storage"].close()


@pytest.fixture()
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def make_campaign(client: FlaskClient, cid: str, **extra: Any) -> dict[str, Any]:
    resp = client.post("/v1/campaigns", json=campaign_body(cid, **extra), headers=auth("admin"))
    assert resp.status_code == 201, resp.json
    return resp.json  # type: ignore[no-any-return]


def public_key(client: FlaskClient) -> str:
    resp = client.get("/v1/sealed/key")
    assert resp.status_code == 200
    assert resp.json["algorithm"].startswith("libsodium-sealed-box")
    return resp.json["public_key"]  # type: ignore[no-any-return]


def test_key_file_is_created_private_and_reused(app: Flask, tmp_path: Path) -> None:
    path = tmp_path / "sealed.key"
    assert path.stat().st_mode & 0o777 == 0o600
    first = app.test_client().get("/v1/sealed/key").json["public_key"]
    again = create_app({"database": str(tmp_path / "c.db"), **TOKENS, "sealed_key_file": str(path)})
    try:
        assert again.test_client().get("/v1/sealed/key").json["public_key"] == first
    finally:
        again.extensions["ldp_storage"].close()
    assert len(base64.b64decode(first)) == 32


def _load_public_key(path: str) -> str:
    from collector.sealed import SealedKey

    return SealedKey.load(path).public_b64


def test_workers_starting_together_share_one_key(tmp_path: Path) -> None:
    """Two gunicorn workers load the key at once: neither may fail, and both get the same key.

    Creating the file with O_EXCL and then reading it let the loser see no key or half of it;
    the worker failed to boot and gunicorn stopped the whole server (CI saw connection refused).
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = str(tmp_path / f"race-{attempt}.key")
        with ctx.Pool(6) as pool:
            keys = pool.map(_load_public_key, [path] * 12)
        assert len(set(keys)) == 1
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".race")) == []


def test_sealed_reports_are_stored_once_and_bad_messages_refused_alone(
    client: FlaskClient,
) -> None:
    campaign = make_campaign(client, "sealed-a")
    key = public_key(client)
    items = reports(campaign, 5, seed=1)
    good = [seal(key, campaign["id"], campaign["digest"], r) for r in items]
    from nacl.public import PrivateKey

    other = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()
    bad = [
        "not base64!",
        seal(other, campaign["id"], campaign["digest"], items[0]),  # someone else's key
        seal(key, "no-such-campaign", campaign["digest"], items[0]),
        seal(key, campaign["id"], "0" * 64, items[0]),  # stale digest
        seal(key, campaign["id"], campaign["digest"], {**items[0], "payload": "garbage"}),
    ]
    messages = good[:3] + bad + good[3:]
    resp = client.post("/v1/sealed", json={"messages": messages}, headers=auth("ingest"))
    assert resp.status_code == 200, resp.json
    body = resp.json
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (5, 0, 5)
    assert [e["index"] for e in body["errors"]] == [3, 4, 5, 6, 7]
    text = str(body)
    for item in items:  # the shuffler learns nothing from inside a message
        assert item["id"] not in text and str(item["payload"]) not in text
    assert "stale_config" in body["errors"][3]["reason"]
    # Forwarded again (a shuffler crash after the collector's answer): counted once.
    again = client.post("/v1/sealed", json={"messages": good}, headers=auth("ingest")).json
    assert (again["accepted"], again["duplicate"]) == (0, 5)
    est = client.get(f"/v1/campaigns/{campaign['id']}/estimates", headers=auth("analyst")).json
    assert est["n"] == 5
    assert "central_epsilon" not in est  # this campaign names no shuffler


def test_sealed_endpoint_needs_the_ingest_token_and_a_key(client: FlaskClient, tmp_path: Path):
    assert client.post("/v1/sealed", json={"messages": []}).status_code == 401
    resp = client.post("/v1/sealed", json={"messages": "x"}, headers=auth("ingest"))
    assert resp.status_code == 400 and resp.json["error"]["code"] == "invalid_batch"
    plain = create_app({"database": str(tmp_path / "p.db"), **TOKENS})
    try:
        resp = plain.test_client().get("/v1/sealed/key")
        assert resp.status_code == 404
        assert resp.json["error"]["code"] == "sealed_not_configured"
    finally:
        plain.extensions["ldp_storage"].close()


def test_shuffled_campaign_states_its_central_guarantee(
    client: FlaskClient, tmp_path: Path
) -> None:
    campaign = make_campaign(client, "sealed-b", shuffler="http://127.0.0.1:9/")
    assert campaign["shuffler"] == "http://127.0.0.1:9/"
    key = public_key(client)
    items = reports(campaign, 400, seed=2)
    messages = [seal(key, campaign["id"], campaign["digest"], r) for r in items]
    resp = client.post("/v1/sealed", json={"messages": messages}, headers=auth("ingest"))
    assert resp.json["accepted"] == 400
    est = client.get(f"/v1/campaigns/{campaign['id']}/estimates", headers=auth("analyst")).json
    eps0 = campaign["realised_epsilon"]
    assert est["central_epsilon"] == amplified_epsilon(eps0, 400, default_delta(400))
    assert est["central_delta"] == default_delta(400)
    assert 0 < est["central_epsilon"] < eps0
    # The dashboard and `ldp estimate` state the same guarantee (one answer form).
    assert client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]}).status_code in (
        200,
        303,
    )
    page = client.get(f"/dashboard/campaigns/{campaign['id']}").get_data(as_text=True)
    assert f"{est['central_epsilon']:.4g}" in page and "central (shuffled)" in page
    run = CliRunner().invoke(cli, ["estimate", campaign["id"], "--db", str(tmp_path / "c.db")])
    assert run.exit_code == 0, run.output
    assert f"shuffled: the release is ({est['central_epsilon']:.4g}" in run.output
    direct = client.post(
        f"/v1/campaigns/{campaign['id']}/reports",
        json=batch(campaign, reports(campaign, 3, seed=9)),
        headers=auth("ingest"),
    )
    assert direct.status_code == 409 and direct.json["error"]["code"] == "shuffled_campaign"
    bad = client.post(
        "/v1/campaigns", json=campaign_body("sealed-c", shuffler="ftp://x"), headers=auth("admin")
    )
    assert bad.status_code == 400 and "shuffler" in bad.json["error"]["message"]


# -- the shuffler's staging and forwarding, in process ----------------------------------------


def test_a_crash_after_the_collector_answered_counts_nothing_twice(
    app: Flask, client: FlaskClient, tmp_path: Path
) -> None:
    """Forwarded, then killed before forgetting: the resend is all duplicates."""
    campaign = make_campaign(client, "sealed-d")
    key = public_key(client)
    staging = Staging(tmp_path / "s.db")
    for r in reports(campaign, 30, seed=3):
        staging.add(seal(key, campaign["id"], campaign["digest"], r))

    class TestSession:  # the Flask test client in place of the network
        headers: dict[str, str] = {}

        def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
            got = client.post("/v1/sealed", json=json, headers=auth("ingest"))
            return answer(got.status_code, text=got.get_data(as_text=True))

    fwd = Forwarder(staging, "http://collector", TOKENS["ingest_token"], batch_size=40)
    fwd._session = TestSession()  # type: ignore[assignment]
    assert fwd.forward_once().forwarded == 0  # 30 < B = 40: it waits
    fwd.batch_size = 30

    def die(keys: list[int]) -> None:
        raise KeyboardInterrupt("killed after the collector's answer")

    real_remove = staging.remove
    staging.remove = die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        fwd.forward_once()
    staging.remove = real_remove  # type: ignore[method-assign]
    assert staging.pending() == 30
    result = fwd.forward_once()
    assert (result.forwarded, result.accepted, result.duplicate) == (30, 0, 30)
    assert staging.pending() == 0
    est = client.get(f"/v1/campaigns/{campaign['id']}/estimates", headers=auth("analyst")).json
    assert est["n"] == 30
    staging.close()


def test_concurrent_submissions_share_commits_and_all_stay(tmp_path: Path) -> None:
    """Group commit: while one commit is in progress, 15 more submissions queue and are then
    written by one commit; each ``add`` returns only after its message is in the file."""
    import threading

    staging = Staging(tmp_path / "g.db")
    late: list[str] = []

    def submit(t: int) -> None:
        m = base64.b64encode(f"message {t}".encode()).decode()
        staging.add(m)
        other = Staging(tmp_path / "g.db")  # a fresh connection: the message is committed
        if m not in {x for _, x in other.all()}:
            late.append(m)
        other.close()

    with staging._lock:  # the first writer blocks on the file; the others must queue
        threads = [threading.Thread(target=submit, args=(t,)) for t in range(16)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with staging._groups:
                queued = len(staging._open.messages) if staging._open else 0
            if queued == 15:
                break
            time.sleep(0.01)
        assert queued == 15
    for th in threads:
        th.join()
    assert late == []
    assert staging.commits == 2  # the first message alone, then the 15 that queued
    assert staging.pending() == 16 == len({m for _, m in staging.all()})
    staging.close()


def test_forwarded_order_is_a_fresh_permutation(tmp_path: Path) -> None:
    """The batch leaves in an order unrelated to arrival (2 of 20! orders agree by chance)."""
    staging = Staging(tmp_path / "s.db")
    sent: list[list[str]] = []

    class Capture:
        headers: dict[str, str] = {}

        def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
            sent.append(list(json["messages"]))
            return answer(200, {"accepted": len(sent[-1]), "duplicate": 0, "rejected": 0})

    fwd = Forwarder(staging, "http://c", "t" * 20, batch_size=20)
    fwd._session = Capture()  # type: ignore[assignment]
    orders = []
    for _ in range(2):
        arrival = [base64.b64encode(os.urandom(12)).decode() for _ in range(20)]
        for m in arrival:
            staging.add(m)
        fwd.forward_once()
        assert sorted(sent[-1]) == sorted(arrival)
        orders.append([arrival.index(m) for m in sent[-1]])
    assert orders[0] != list(range(20)) or orders[1] != list(range(20))
    assert orders[0] != orders[1]
    # 25 staged at B = 10: the 20 oldest leave, the 5 newest wait for a whole batch.
    arrival = [base64.b64encode(os.urandom(12)).decode() for _ in range(25)]
    for m in arrival:
        staging.add(m)
    fwd.batch_size = 10
    assert fwd.forward_once().forwarded == 20
    assert sorted(sent[-1]) == sorted(arrival[:20])
    assert [m for _, m in staging.all()] == arrival[20:]
    staging.close()


def test_a_batch_cut_short_leaves_whole_on_the_next_round(tmp_path: Path) -> None:
    """B = 20 sent 5 per request; the collector refuses the third request. The 10 left are
    fewer than B but belong to a released batch: the next round sends them, and only them."""
    staging = Staging(tmp_path / "cut.db")
    sent: list[list[str]] = []
    refuse = [False, False, True]

    class Collector:
        def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
            if refuse.pop(0) if refuse else False:
                return answer(503, text="busy")
            sent.append(list(json["messages"]))
            return answer(200, {"accepted": len(sent[-1]), "duplicate": 0, "rejected": 0})

    fwd = Forwarder(staging, "http://c", "t" * 20, batch_size=20, max_request=5)
    fwd._session = Collector()  # type: ignore[assignment]
    batch = [base64.b64encode(os.urandom(12)).decode() for _ in range(20)]
    later = [base64.b64encode(os.urandom(12)).decode() for _ in range(7)]
    for m in batch + later:
        staging.add(m)
    with pytest.raises(RuntimeError, match="503"):
        fwd.forward_once()
    assert staging.pending() == 10 + 7
    assert fwd.forward_once().forwarded == 10  # the rest of the batch, not the 7 newer
    assert sorted(m for chunk in sent for m in chunk) == sorted(batch)
    assert sorted(m for _, m in staging.all()) == sorted(later)
    assert fwd.forward_once().forwarded == 0  # 7 < B wait
    staging.close()


# -- ldp serve + ldp shuffle ------------------------------------------------------------------


class ShufflerProcess:
    def __init__(
        self,
        tmp_path: Path,
        collector: CollectorProcess,
        batch_size: int | None,
        *,
        forward_to: str | None = None,
        max_request: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.db = tmp_path / "shuffle.db"
        self.stderr_path = tmp_path / "shuffle.stderr"
        self.collector = collector
        self.batch_size = batch_size
        self.forward_to = forward_to  # another address of the collector (a proxy), if any
        self.max_request = max_request
        self.extra_args = tuple(extra_args)  # further `ldp shuffle` options, as given
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> ShufflerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
        env["LDP_INGEST_TOKEN"] = self.collector.ingest_token
        with open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "ldp_cli", "shuffle",
                    "--collector", self.forward_to or self.collector.url,
                    "--database", str(self.db),
                    *(["-b", str(self.batch_size)] if self.batch_size is not None else []),
                    "--retry-seconds", "0.2",
                    "-p", "0",
                    *(["--max-request", str(self.max_request)] if self.max_request else []),
                    *self.extra_args,
                ],
                stderr=err,
                env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for line in self.stderr_path.read_text().splitlines():
                if line.startswith(LISTENING):
                    self.url = line[len(LISTENING) :].strip()
                    return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("ldp shuffle did not start: " + self.stderr())

    def stderr(self) -> str:
        """Everything the shuffler wrote to stderr so far (all its starts)."""
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def submit(self, message: str) -> None:
        resp = requests.post(self.url + "/v1/submit", json={"message": message}, timeout=10)
        assert resp.status_code == 202, resp.text

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None


@contextmanager
def stack(tmp_path: Path, batch_size: int) -> Iterator[tuple[CollectorProcess, ShufflerProcess]]:
    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with running_collector(tmp_path, env=env) as srv:
        shuffler = ShufflerProcess(tmp_path, srv, batch_size).start()
        try:
            yield srv, shuffler
        finally:
            shuffler.stop()


def create(srv: CollectorProcess, cid: str, **extra: Any) -> dict[str, Any]:
    resp = requests.post(
        srv.url + "/v1/campaigns",
        json=campaign_body(cid, **extra),
        headers=srv.headers("admin"),
        timeout=10,
    )
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


def estimate(srv: CollectorProcess, cid: str) -> dict[str, Any]:
    resp = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=10
    )
    return resp.json() if resp.status_code == 200 else {"n": 0}  # type: ignore[no-any-return]


def wait_for(srv: CollectorProcess, cid: str, n: int, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        est = estimate(srv, cid)
        if est["n"] >= n or time.monotonic() > deadline:
            return est
        time.sleep(0.1)


@pytest.mark.slow
def test_end_to_end_estimates_equal_direct_ingest(tmp_path: Path) -> None:
    with stack(tmp_path, batch_size=120) as (srv, shuffler):  # one batch: all 120
        shuffled = create(srv, "via-shuffler", shuffler=shuffler.url)
        direct = create(srv, "direct")
        assert shuffled["mechanism"] == direct["mechanism"]
        key = requests.get(srv.url + "/v1/sealed/key", timeout=10).json()["public_key"]
        items = reports(shuffled, 120, seed=4)
        for r in items:
            shuffler.submit(seal(key, shuffled["id"], shuffled["digest"], r))
        resp = requests.post(
            f"{srv.url}/v1/campaigns/direct/reports",
            json=batch(direct, [{**r, "id": r["id"][::-1]} for r in items]),
            headers=srv.headers("ingest"),
            timeout=10,
        )
        assert resp.json()["accepted"] == 120
        via = wait_for(srv, "via-shuffler", 120)
        plain = estimate(srv, "direct")
        assert via["n"] == plain["n"] == 120
        for a, b in zip(via["values"], plain["values"], strict=True):
            assert a["raw_count"] == b["raw_count"] and a["count"] == b["count"]
        eps0 = shuffled["realised_epsilon"]
        assert via["central_epsilon"] == amplified_epsilon(eps0, 120, default_delta(120))
        assert via["central_delta"] == default_delta(120)
        assert "central_epsilon" not in plain
        # The shuffler logged no request (an access log would hold device addresses).
        assert "POST" not in shuffler.stderr_path.read_text()


@pytest.mark.slow
def test_sdk_devices_send_through_the_shuffler(tmp_path: Path) -> None:
    with stack(tmp_path, batch_size=12) as (srv, shuffler):
        campaign = create(srv, "sdk-shuffled", shuffler=shuffler.url)
        for i in range(12):
            with TelemetryClient(
                srv.url,
                ingest_token=srv.ingest_token,
                state_dir=tmp_path / f"device-{i}",
                budget=PrivacyBudget.unlimited(),
                backoff_base=0.01,
                backoff_cap=0.2,
            ) as device:
                device._transport.jitter = 0.01  # type: ignore[attr-defined]
                device.prefetch(campaign["id"])
                assert device.report(campaign["id"], LABELS[i % len(LABELS)])
                assert device.flush(timeout=30)
        est = wait_for(srv, campaign["id"], 12)
        assert est["n"] == 12
        assert est["central_delta"] == default_delta(12)
        # Direct uploads of this campaign never happened: the SDK used the shuffler.
        assert (tmp_path / "shuffle.db").exists()


@pytest.mark.slow
def test_sigkill_of_the_shuffler_loses_nothing_and_counts_nothing_twice(tmp_path: Path) -> None:
    with stack(tmp_path, batch_size=1000) as (srv, shuffler):
        campaign = create(srv, "killed", shuffler=shuffler.url)
        key = requests.get(srv.url + "/v1/sealed/key", timeout=10).json()["public_key"]
        items = reports(campaign, 300, seed=5)
        for r in items[:200]:  # staged, below B: nothing forwarded yet
            shuffler.submit(seal(key, campaign["id"], campaign["digest"], r))
        shuffler.kill()
        assert estimate(srv, campaign["id"])["n"] == 0
        shuffler.batch_size = 300
        shuffler.start()
        for r in items[200:]:
            shuffler.submit(seal(key, campaign["id"], campaign["digest"], r))
        shuffler.kill()  # right after the last 202: before, during or after forwarding
        shuffler.start()
        est = wait_for(srv, campaign["id"], 300)
        staging = Staging(shuffler.db)
        try:
            deadline = time.monotonic() + 30
            while staging.pending() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert staging.pending() == 0
        finally:
            staging.close()
        assert estimate(srv, campaign["id"])["n"] == est["n"] == 300


@pytest.mark.slow
def test_sigkill_of_the_collector_while_forwarding_counts_each_report_once(
    tmp_path: Path,
) -> None:
    """The collector is SIGKILLed (master and workers) twice while the shuffler forwards 400
    sealed reports 20 per request; the shuffler retries what was not answered (what is left
    of the released batch, though fewer than B), and the report ids inside the ciphertexts
    make the retries count once."""
    from tests.support.faulty_proxy import FaultyProxy

    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with (
        running_collector(tmp_path, workers=2, env=env) as srv,
        FaultyProxy(upstream=srv.url) as proxy,
    ):
        shuffler = ShufflerProcess(
            tmp_path, srv, batch_size=400, forward_to=proxy.url, max_request=20
        ).start()
        try:
            campaign = create(srv, "collector-killed", shuffler=shuffler.url)
            key = requests.get(srv.url + "/v1/sealed/key", timeout=10).json()["public_key"]
            for r in reports(campaign, 400, seed=11):
                shuffler.submit(seal(key, campaign["id"], campaign["digest"], r))
            counted = []
            relayed = 0
            for _ in range(2):  # forwarding has begun: the batch of 400 is whole
                # Killed once the proxy has relayed one more forwarding request since the last
                # start (a fixed 0.3 s could pass before forwarding began on a loaded machine,
                # and then nothing was killed while forwarding), or once nothing is left.
                def moved_on(n: int, before: int = relayed) -> bool:
                    return n > before or _staged(shuffler.db) == 0

                eventually(
                    lambda: len(proxy.requests_to("/v1/sealed")),
                    moved_on,
                    what="a forwarding request relayed, or nothing left to forward",
                )
                srv.kill()
                srv.start()
                proxy.upstream = srv.url
                relayed = len(proxy.requests_to("/v1/sealed"))
                counted.append(estimate(srv, campaign["id"])["n"])
            est = wait_for(srv, campaign["id"], 400)
            staging = Staging(shuffler.db)
            try:
                deadline = time.monotonic() + 60
                while staging.pending() and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert staging.pending() == 0
            finally:
                staging.close()
            assert est["n"] == estimate(srv, campaign["id"])["n"] == 400, counted
        finally:
            shuffler.stop()


def _staged(db: Path) -> int:
    """Messages in a running shuffler's staging file."""
    staging = Staging(db)
    try:
        return staging.pending()
    finally:
        staging.close()


def test_ldp_shuffle_help_has_an_example_and_is_documented() -> None:
    from click.testing import CliRunner

    from ldp_cli.main import cli

    result = CliRunner().invoke(cli, ["shuffle", "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output and "--batch-size" in result.output
    docs = Path(__file__).resolve().parents[1] / "docs"
    assert "ldp shuffle" in (docs / "SHUFFLE.md").read_text()
    assert "ldp shuffle" in (docs / "COLLECTOR.md").read_text()
