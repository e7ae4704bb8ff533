"""The audit path: recompute tallies from stored reports; they must equal the running tallies.

Invariant 4 of the architecture: the tally of a window always equals what recomputing from its
stored reports gives. :func:`audit_windows` checks it window by window.

:func:`recompute_tally` is ``mech.tally(payloads)``: bit-vector reports are decoded vectorised
in ``client_sdk.mechanisms.bitvector``, which accepts exactly what the per-report parser accepts
and falls back to it for the precise error; tests pin that both paths agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_sdk.mechanisms import (
    Mechanism,
    Payload,
    Tally,
)


@dataclass(frozen=True)
class WindowAudit:
    """One window: the running tally, the tally recomputed from its reports, and whether equal."""

    window: str
    stored: Tally
    recomputed: Tally

    @property
    def ok(self) -> bool:
        return self.stored == self.recomputed

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "ok": self.ok,
            "stored": self.stored.to_dict(),
            "recomputed": self.recomputed.to_dict(),
        }


def recompute_tally(mechanism: Mechanism, payloads: Sequence[Payload]) -> Tally:
    """The tally of ``payloads`` (wire form), recomputed with the mechanism's own parser.

    Bit-vector reports are decoded vectorised by ``client_sdk.mechanisms.bitvector``.
    """
    return mechanism.tally(payloads)


def audit_windows(
    mechanism: Mechanism,
    stored: Mapping[str, Tally],
    payloads_of: Callable[[str], Iterable[Payload]],
) -> list[WindowAudit]:
    """Recompute every window of ``stored`` from ``payloads_of(window)`` and compare.

    A window's result is ``ok`` only if the recomputed tally equals the stored one exactly
    (same n, same support counts).
    """
    out = []
    for window in sorted(stored):
        payloads = list(payloads_of(window))
        out.append(WindowAudit(window, stored[window], recompute_tally(mechanism, payloads)))
    return out
