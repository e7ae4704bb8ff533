"""The audit path's result type (issue 21, aggregator/audit.py).

A mutation survivor showed that nothing checked that a window's audit result is immutable: an
audit record that can be edited after the comparison could report ``ok`` for a tally it never
compared. Here it is frozen, and ``ok``/``to_dict`` follow the comparison exactly.
"""

from __future__ import annotations

import dataclasses

import pytest

from aggregator.audit import WindowAudit, audit_windows
from client_sdk.mechanisms import create


def test_window_audit_is_frozen_and_reports_the_comparison() -> None:
    mech = create("grr", epsilon=1.0, domain=3)
    payloads = [mech.perturb(v, rng=seed) for seed, v in enumerate(mech.domain + ("1",))]
    tally = mech.tally(payloads)
    (good,) = audit_windows(mech, {"w": tally}, lambda _: payloads)
    assert isinstance(good, WindowAudit) and good.ok
    assert good.to_dict() == {
        "window": "w",
        "ok": True,
        "stored": tally.to_dict(),
        "recomputed": tally.to_dict(),
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        good.stored = mech.tally(payloads[:1])  # type: ignore[misc]
    (bad,) = audit_windows(mech, {"w": tally}, lambda _: payloads[:3])
    assert not bad.ok and bad.to_dict()["ok"] is False
