"""Shared helpers of the reliability suite: campaigns, SDK uploaders and end-state checks.

The end-state check is the suite's promise in code: every report the devices generated is
stored exactly once, each window's running tally equals the tally recomputed from the
devices' own payloads, and SQLite's ``PRAGMA integrity_check`` answers ``ok``.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import Tally, from_config
from tests.support.server import CollectorProcess

LABELS = ["Zebra-Keeper", "Quokka-Tamer", "Narwhal-Pilot", "Axolotl-Chef", "Lemur-Baker"]
_ids = itertools.count()


def create_campaign(
    srv: CollectorProcess, mechanism: str = "oue", *, epsilon: float = 1.0, **extra: Any
) -> dict[str, Any]:
    """A fresh campaign on ``srv`` (unique id); returns its resource."""
    cid = f"rel{next(_ids)}-{mechanism}-{int(time.time() * 1000) % 100000}"
    body = {"id": cid, "domain": LABELS, "mechanism": mechanism, "epsilon": epsilon, **extra}
    r = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=30
    )
    assert r.status_code == 201, r.text
    return r.json()


@dataclass
class Device:
    """One SDK client on its own thread, reporting ``n`` values at a steady pace."""

    url: str
    token: str
    state_dir: Path
    campaigns: Sequence[str]
    n: int
    pause: float = 0.0
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    made: list[tuple[str, str, Any]] = field(default_factory=list)  # (campaign, id, payload)
    client: TelemetryClient | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def open(self) -> TelemetryClient:
        options = {
            "reports_per_window": None,
            "budget": PrivacyBudget.unlimited(),
            "batch_size": 20,
            "flush_interval": 0.05,
            "backoff_base": 0.02,
            "backoff_cap": 0.3,
            "timeout": (1.0, 3.0),
            "close_timeout": 0.5,
            **self.options,
        }
        self.client = TelemetryClient(
            self.url, ingest_token=self.token, state_dir=self.state_dir, **options
        )
        self.client.prefetch(*self.campaigns)
        return self.client

    def _run(self) -> None:
        rng = np.random.default_rng(self.seed)
        try:
            assert self.client is not None
            for i in range(self.n):
                campaign = self.campaigns[i % len(self.campaigns)]
                report = self.client.report(campaign, LABELS[int(rng.integers(len(LABELS)))])
                self.made.append((campaign, report.id, report.payload))
                if self.pause:
                    time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def start(self) -> None:
        """Open the client (fetching the configs) and start reporting on a thread."""
        self.open()
        self.start_thread()

    def start_thread(self) -> None:
        """Start reporting on a thread with the client already opened."""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(120)
        assert not self.thread.is_alive(), "a device thread did not finish"
        if self.error is not None:
            raise self.error

    def drain(self, timeout: float = 90.0) -> dict[str, Any]:
        """Flush until the outbox is empty; returns the client's stats and closes it."""
        assert self.client is not None
        assert self.client.flush(timeout=timeout), f"outbox not empty: {self.client.stats()}"
        stats = self.client.stats()
        self.client.close()
        return stats


def _is_postgres(database: Path | str) -> bool:
    return str(database).startswith(("postgresql://", "postgres://"))


def _pg_rows(database: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(database) as conn:
        return conn.execute(sql, params).fetchall()


def stored_reports(db_path: Path | str, campaign: str) -> list[tuple[str, str, str]]:
    """(report id, window, payload JSON) of every stored report of ``campaign``, mixed into
    ``reports`` or still staged (unlinkable storage)."""
    sql = (
        "SELECT r.report_id, r.window_start, r.payload FROM (SELECT campaign, report_id, "
        "window_start, payload FROM reports UNION ALL SELECT campaign, report_id, window_start, "
        "payload FROM staged_reports) r JOIN campaigns c ON c.pk = r.campaign WHERE c.id = {p}"
    )
    if _is_postgres(db_path):
        return [
            (a, str(b), c) for a, b, c in _pg_rows(str(db_path), sql.format(p="%s"), (campaign,))
        ]
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(sql.format(p="?"), (campaign,)).fetchall()
    conn.close()
    return rows


def stored_tallies(db_path: Path | str, campaign: str) -> dict[str, Tally]:
    """The running tally of each window (PostgreSQL: its shards summed)."""
    if _is_postgres(db_path):
        rows = _pg_rows(
            str(db_path),
            # Settled rows and both staging slots' (docs/COLLECTOR.md "Unlinkable storage").
            "SELECT t.window_start, t.n, t.support FROM (SELECT campaign, window_start, n, "
            "support FROM tally_shards UNION ALL SELECT campaign, window_start, n, support "
            "FROM staged_tallies) t JOIN campaigns c ON c.pk = t.campaign WHERE c.id = %s",
            (campaign,),
        )
        out: dict[str, Tally] = {}
        for w, n, support in rows:
            shard = Tally(int(n), np.asarray(support, dtype=np.int64))
            out[str(w)] = out[str(w)] + shard if str(w) in out else shard
        return out
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT t.window_start, t.n, t.support FROM tallies t "
            "JOIN campaigns c ON c.pk = t.campaign WHERE c.id = ?",
            (campaign,),
        ).fetchall()
    conn.close()
    return {w: Tally(int(n), np.asarray(json.loads(s), dtype=np.int64)) for w, n, s in rows}


def integrity(db_path: Path | str) -> str:
    """SQLite's ``PRAGMA integrity_check``; on PostgreSQL, ``ldp tally verify`` (every stored
    tally equals its recomputation from the stored reports) as the equivalent check."""
    if _is_postgres(db_path):
        done = subprocess.run(
            [sys.executable, "-m", "ldp_cli", "tally", "verify", "--database", str(db_path),
             "--format", "json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return "ok" if done.returncode == 0 and json.loads(done.stdout)["ok"] else done.stdout
    with sqlite3.connect(db_path) as conn:
        result = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    return str(result)


def assert_exactly_once(
    db_path: Path | str, campaigns: dict[str, dict[str, Any]], devices: Sequence[Device]
) -> dict[str, int]:
    """Every generated report stored once, tallies equal recomputation, integrity ok.

    Returns ``{"generated": n, "stored": n, "lost": 0, "duplicates": 0}``.
    """
    generated = stored_total = 0
    for cid, resource in campaigns.items():
        made = [(rid, payload) for d in devices for c, rid, payload in d.made if c == cid]
        ids = [rid for rid, _ in made]
        assert len(set(ids)) == len(ids), "a device generated the same report id twice"
        rows = stored_reports(db_path, cid)
        stored_ids = [r[0] for r in rows]
        lost = set(ids) - set(stored_ids)
        extra = set(stored_ids) - set(ids)
        assert not lost, f"{len(lost)} generated reports of {cid} were lost"
        assert not extra, f"{len(extra)} stored reports of {cid} were never generated"
        assert len(stored_ids) == len(ids)
        # The running tallies equal the tally recomputed from the devices' own payloads.
        mech = from_config(resource["mechanism"])
        expected = mech.tally([payload for _, payload in made])
        tallies = stored_tallies(db_path, cid)
        total = sum(tallies.values(), Tally.empty(expected.k))
        assert total.n == expected.n == len(ids)
        assert total == expected, f"the stored tally of {cid} differs from recomputation"
        generated += len(ids)
        stored_total += len(stored_ids)
    assert integrity(db_path) == "ok"
    return {"generated": generated, "stored": stored_total, "lost": 0, "duplicates": 0}


def assert_error_envelope(r: requests.Response) -> dict[str, Any]:
    """An error answer is JSON in the one envelope, ``status`` equal to the HTTP status."""
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}, body
    err = body["error"]
    assert err["status"] == r.status_code, body
    assert isinstance(err["code"], str) and err["code"], body
    assert isinstance(err["message"], str) and err["message"], body
    return err
