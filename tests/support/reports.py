"""Building campaigns and report batches for collector tests."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

import numpy as np

from client_sdk.mechanisms import Mechanism, from_config

LABELS = [f"value-{i}" for i in range(6)]


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def campaign_body(cid: str, mechanism: str = "oue", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": cid,
        "description": f"test campaign {cid}",
        "domain": LABELS,
        "mechanism": mechanism,
        "epsilon": 1.0,
    }
    body.update(extra)
    return body


def mechanism_of(campaign: dict[str, Any]) -> Mechanism:
    return from_config(campaign["mechanism"])


def reports(
    campaign: dict[str, Any], n: int, *, seed: int = 0, day: str | None = None
) -> list[dict[str, Any]]:
    """``n`` real perturbed reports with fresh random ids."""
    mech = mechanism_of(campaign)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, mech.k, n)
    payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
    day = day or today()
    return [{"id": secrets.token_hex(16), "day": day, "payload": p} for p in payloads]


def batch(campaign: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"digest": campaign["digest"], "reports": items}
