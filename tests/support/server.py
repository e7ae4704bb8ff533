"""Run ``ldp serve`` as a real subprocess for tests: port 0, a temp SQLite file, known tokens.

with running_collector(tmp_path) as srv:
    requests.get(srv.url + "/healthz")
    srv.restart()           # same database, new process
    srv.kill()              # SIGKILL, for durability tests; then srv.start()
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
ANALYST_TOKEN = "analyst-token-for-tests-0123456789"
INGEST_TOKEN = "ingest-token-for-tests-0123456789"
#: The three role tokens as settings of an in-process collector (``create_app(TOKENS | ...)``).
TOKENS = {"admin_token": ADMIN_TOKEN, "analyst_token": ANALYST_TOKEN, "ingest_token": INGEST_TOKEN}
LISTENING = "ldp serve: listening on "
START_DEADLINE = 30.0


class CollectorProcess:
    """One ``ldp serve`` subprocess; restartable on the same database file."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        workers: int = 1,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        db_path: Path | None = None,
        db_url: str | None = None,
    ) -> None:
        self.tmp_path = Path(tmp_path)
        self.db_path = Path(db_path) if db_path else self.tmp_path / "collector.db"
        #: What ``--database`` gets: a postgresql:// URL when given, else the SQLite file.
        self.db_url = db_url or str(self.db_path)
        self.workers = workers
        self.admin_token = ADMIN_TOKEN
        self.analyst_token = ANALYST_TOKEN
        self.ingest_token = INGEST_TOKEN
        self.extra_args = list(extra_args)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")} | {
            "LDP_ADMIN_TOKEN": ADMIN_TOKEN,
            "LDP_ANALYST_TOKEN": ANALYST_TOKEN,
            "LDP_INGEST_TOKEN": INGEST_TOKEN,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.stderr_path = self.tmp_path / "collector.stderr"
        self._starts = 0
        self._pump: threading.Thread | None = None

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> CollectorProcess:
        """Start ``ldp serve -p 0``, read the listening line, wait for /healthz (deadline)."""
        self._starts += 1
        stderr = open(self.stderr_path, "a")  # noqa: SIM115 - kept open for the child
        cmd = [
            sys.executable,
            "-m",
            "ldp_cli",
            "serve",
            "-p",
            "0",
            "--workers",
            str(self.workers),
            "--database",
            self.db_url,
            "--log-level",
            "warning",
            # Create the test's database on the first start (a no-op on an existing one).
            "--init",
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=self.env
        )
        stderr.close()
        lines: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=_pump, args=(self.process, lines), daemon=True)
        self._pump.start()
        deadline = time.monotonic() + START_DEADLINE
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(f"ldp serve did not print its URL in time:\n{self.stderr()}")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"ldp serve exited early:\n{self.stderr()}")
            if line.startswith(LISTENING):
                self.url = line[len(LISTENING) :].strip()
                break
        self.wait_healthy(deadline)
        return self

    def wait_healthy(self, deadline: float) -> None:
        while True:
            try:
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ldp serve exited:\n{self.stderr()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ldp serve never became healthy:\n{self.stderr()}")
            time.sleep(0.05)

    def stop(self) -> int | None:
        """SIGTERM (graceful), then SIGKILL if it lingers; returns the exit code."""
        proc, self.process = self.process, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        _close(proc, self._pump)
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL the master and its workers at once (no graceful shutdown)."""
        proc, self.process = self.process, None
        if proc is None:
            return
        children = _children(proc.pid)
        proc.kill()
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=15)
        for pid in children:
            _wait_gone(pid)
        _close(proc, self._pump)

    def restart(self) -> CollectorProcess:
        self.stop()
        return self.start()

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text()[-4000:]
        except OSError:
            return ""

    # -- HTTP helpers -----------------------------------------------------------------------

    def headers(self, role: str) -> dict[str, str]:
        token = {
            "admin": self.admin_token,
            "analyst": self.analyst_token,
            "ingest": self.ingest_token,
        }[role]
        return {"Authorization": f"Bearer {token}"}

    def post_campaign(self, body: Mapping[str, object]) -> requests.Response:
        """``POST /v1/campaigns`` as the admin."""
        return requests.post(
            self.url + "/v1/campaigns", json=body, headers=self.headers("admin"), timeout=30
        )

    def upload(
        self, campaign: Mapping[str, Any], payloads: Sequence[Any], day: str | None = None
    ) -> dict[str, Any]:
        """``POST .../reports`` of ``payloads`` (fresh ids, ``day`` or today, UTC) as ingest;
        asserts a 200 and returns the answer."""
        day = day or dt.datetime.now(dt.UTC).date().isoformat()
        body = {
            "digest": campaign["digest"],
            "reports": [{"id": secrets.token_hex(16), "day": day, "payload": p} for p in payloads],
        }
        return self._ok("POST", f"/v1/campaigns/{campaign['id']}/reports", "ingest", json=body)

    def estimates(self, cid: str, **params: str) -> dict[str, Any]:
        """``GET .../estimates`` of campaign ``cid`` with query ``params`` as the analyst;
        asserts a 200 and returns the answer."""
        return self._ok("GET", f"/v1/campaigns/{cid}/estimates", "analyst", params=params)

    def _ok(self, method: str, path: str, role: str, **kwargs: Any) -> dict[str, Any]:
        """``method path`` as ``role``; asserts a 200 and returns the JSON answer."""
        r = requests.request(
            method, self.url + path, headers=self.headers(role), timeout=60, **kwargs
        )
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    def verify_tallies(self, cid: str) -> None:
        """``ldp tally verify`` of campaign ``cid``: every window ok, stored == recomputed."""
        from click.testing import CliRunner

        from ldp_cli.main import cli

        args = ["tally", "verify", "--database", self.db_url, "--campaign", cid, "--format", "json"]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        answer = json.loads(result.output)
        assert answer["ok"] and answer["windows"]
        for c in answer["windows"]:  # exact: the very same integers
            assert c["ok"] and c["stored"] == c["recomputed"]


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def _close(proc: subprocess.Popen[str], pump: threading.Thread | None) -> None:
    """Close the stdout pipe once the reader thread has seen EOF (no leaked file)."""
    if pump is not None:
        pump.join(timeout=10)
    if proc.stdout is not None:
        try:
            proc.stdout.close()
        except OSError:
            pass


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        stat = Path(f"/proc/{pid}/stat")
        try:
            if stat.read_text().split()[2] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.02)


@contextmanager
def running_collector(
    tmp_path: Path,
    *,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    db_path: Path | None = None,
    db_url: str | None = None,
) -> Iterator[CollectorProcess]:
    """A started ``ldp serve`` subprocess, stopped in ``finally``.

    The handle has ``.url``, ``.admin_token``, ``.analyst_token``, ``.ingest_token``,
    ``.db_path``, ``.process``, ``.headers(role)``, ``.restart()``, ``.kill()``, ``.start()``.
    Re-entering with the same ``db_path`` also reuses the database. ``db_url`` (e.g. a
    ``postgresql://`` URL from ``tests.support.postgres``) replaces the SQLite file.
    """
    server = CollectorProcess(
        tmp_path, workers=workers, env=env, extra_args=extra_args, db_path=db_path, db_url=db_url
    )
    server.start()
    try:
        yield server
    except BaseException as exc:
        # A failure seen from the client (a reset, a 5xx) is explained by the server's side:
        # pytest prints the note under the traceback.
        exc.add_note(f"ldp serve's stderr (last 4000 characters):\n{server.stderr()}")
        raise
    finally:
        server.stop()


@contextmanager
def collector_on(backend: str, tmp_path: Path, *, workers: int = 1) -> Iterator[CollectorProcess]:
    """``running_collector`` on ``backend`` ("sqlite": a file in ``tmp_path``; "postgresql": a
    fresh database, dropped afterwards)."""
    from tests.support.postgres import collector_database

    with (
        collector_database(backend, tmp_path) as db,
        running_collector(tmp_path, workers=workers, db_url=db) as server,
    ):
        yield server


@contextmanager
def seeded_collector(
    tmp_path: Path, campaign: Mapping[str, Any], counts: Mapping[Any, int], *, rng: int
) -> Iterator[CollectorProcess]:
    """:func:`running_collector` holding ``campaign`` (a create body) with ``counts[v]``
    devices reporting each value ``v``, through the real SDK (``simulate_devices``), uploaded."""
    from client_sdk import TelemetryClient

    with running_collector(tmp_path) as server:
        r = server.post_campaign(campaign)
        assert r.status_code == 201, r.text
        values = [v for v, n in counts.items() for _ in range(n)]
        with TelemetryClient(
            server.url, ingest_token=server.ingest_token, state_dir=tmp_path / "device"
        ) as client:
            client.report_many(campaign["id"], values, simulate_devices=True, rng=rng)
            assert client.flush(timeout=60)
        yield server
