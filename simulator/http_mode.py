"""HTTP mode: every row is a device whose report travels the real path.

The SDK's own outbox and upload code (``TelemetryClient.report_many(..., simulate_devices=True)``,
one report per simulated device) sends to a collector, started embedded on a temporary SQLite
file or given by URL; the estimate is read back through the analyst API. Each replay gets a
campaign of its own, so repetitions never mix.

The analyst API answers the unbiased counts ``(C - n q*)/(p* - q*)``; since that map is affine
with known constants, the integer support counts ``C`` are recovered exactly (rounding a float
error far below 0.5) and rebuilt into the same :class:`aggregator.Estimate` the in-process mode
produces, so both modes feed identical downstream code.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from aggregator import Estimate, estimate
from client_sdk import TelemetryClient
from client_sdk.mechanisms import Mechanism, Tally, create
from client_sdk.transport import json_of
from simulator.errors import SimulatorError
from simulator.sweep import Cell

#: Reports per upload; the collector's default limit is 5,000.
UPLOAD_BATCH = 2000
FLUSH_TIMEOUT = 300.0
_TIMEOUT = 60


class CollectorError(SimulatorError):
    """The collector refused a request or could not be reached."""


@dataclass(frozen=True)
class Target:
    """Where to send: a collector URL and its three role tokens."""

    url: str
    admin_token: str
    analyst_token: str
    ingest_token: str


@contextlib.contextmanager
def collector_target(
    url: str | None = None,
    *,
    admin_token: str | None = None,
    analyst_token: str | None = None,
    ingest_token: str | None = None,
) -> Iterator[Target]:
    """A collector to talk to: the one at ``url``, or an embedded one on a temporary SQLite file."""
    if url:
        missing = [
            name
            for name, token in (
                ("LDP_ADMIN_TOKEN", admin_token),
                ("LDP_ANALYST_TOKEN", analyst_token),
                ("LDP_INGEST_TOKEN", ingest_token),
            )
            if not token
        ]
        if missing:
            raise CollectorError(
                f"--url needs the collector's tokens; set {', '.join(missing)} in the environment"
            )
        yield Target(url.rstrip("/"), admin_token, analyst_token, ingest_token)  # type: ignore[arg-type]
        return
    from collector.embedded import EmbeddedCollector

    with tempfile.TemporaryDirectory(prefix="ldp-sim-") as tmp:
        with EmbeddedCollector(Path(tmp) / "collector.db") as col:
            yield Target(col.url, col.admin_token, col.analyst_token, col.ingest_token)


def _call(method: str, url: str, token: str, **kwargs: Any) -> dict[str, Any]:
    try:
        resp = requests.request(
            method, url, headers={"Authorization": f"Bearer {token}"}, timeout=_TIMEOUT, **kwargs
        )
    except requests.RequestException as exc:
        raise CollectorError(f"{method} {url} failed: {exc}") from None
    if resp.status_code >= 400:
        raise CollectorError(f"{method} {url} answered {resp.status_code}: {resp.text[:300]}")
    try:
        answer: dict[str, Any] = json_of(resp)
    except ValueError:
        raise CollectorError(
            f"{method} {url} answered {resp.status_code} with a body that is not the "
            f"collector's JSON (is --url the collector's address?): {resp.text[:120]!r}"
        ) from None
    return answer


def create_campaign(target: Target, campaign_id: str, mech: Mechanism, **extra: Any) -> dict:
    """Create a campaign for ``mech`` (already resolved) through the admin API."""
    body = {
        "id": campaign_id,
        "description": extra.pop("description", f"simulated {campaign_id}"),
        "domain": list(mech.domain),
        "mechanism": mech.name,
        "epsilon": mech.epsilon,
        "params": mech.params(),
        **extra,
    }
    created = _call("POST", f"{target.url}/v1/campaigns", target.admin_token, json=body)
    if created["mechanism"] != mech.config():
        raise CollectorError(
            f"the collector resolved campaign {campaign_id!r} to {created['mechanism']}, "
            f"not {mech.config()}"
        )
    return created


def read_estimate(target: Target, campaign_id: str, mech: Mechanism) -> Estimate:
    """The campaign's estimate through the analyst API, as an :class:`aggregator.Estimate`."""
    answer = _call(
        "GET",
        f"{target.url}/v1/campaigns/{campaign_id}/estimates",
        target.analyst_token,
        params={"postprocess": "none"},
    )
    n = int(answer["n"])
    raw = np.array([v["raw_count"] for v in answer["values"]], dtype=float)
    support = np.rint(raw * (mech.p_star - mech.q_star) + n * mech.q_star).astype(np.int64)
    est = estimate(mech, Tally(n, support))
    if not np.allclose(est.counts, raw, rtol=1e-9, atol=1e-6):
        raise CollectorError(f"campaign {campaign_id!r}: the answer is not a tally of n reports")
    return est


class HttpBackend:
    """Replays a cell through the SDK, a collector and the analyst API (see module docstring)."""

    name = "http"

    def __init__(self, target: Target, state_dir: str | Path) -> None:
        self.target = target
        self.client = TelemetryClient(
            target.url,
            ingest_token=target.ingest_token,
            state_dir=state_dir,
            batch_size=UPLOAD_BATCH,
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> HttpBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prepare(self, cell: Cell) -> Mechanism:
        return create(cell.mechanism, epsilon=cell.epsilon, domain=list(cell.labels))

    def replay(self, campaign_id: str, mech: Mechanism, indices: np.ndarray, rng: Any) -> Estimate:
        """Create the campaign, send one report per row through the SDK, read the estimate."""
        create_campaign(self.target, campaign_id, mech)
        self.client.report_many(campaign_id, indices, simulate_devices=True, rng=rng)
        if not self.client.flush(timeout=FLUSH_TIMEOUT):
            raise CollectorError(f"upload did not finish: {self.client.stats()}")
        return read_estimate(self.target, campaign_id, mech)

    def run(self, cell: Cell, mech: Mechanism, rng: np.random.Generator) -> Estimate:
        campaign_id = f"sim-{cell.attribute[:40]}-{secrets.token_hex(6)}".lower()
        return self.replay(campaign_id, mech, cell.indices, rng)
