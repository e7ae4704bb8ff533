"""Repeated collection of a counter: 1BitMean with α-point rounding and memoisation.

Ding, Kulkarni, Yekhanin (NeurIPS 2017, §3): the range is cut into ``s`` segments (grid
points ``r = 0..s``). A device draws once a private offset ``alpha`` and rounds its value at
position ``pos in [0, s]`` to ``r = floor(pos + alpha)``: a deterministic function of the value,
unbiased over ``alpha`` (``P[up] = frac(pos)``). It memoises one 1BitMean response per rounded
value and replays it, so a value that stays in its rounding window sends the same bit forever.

Here both draws are *derived* from a device secret, as RAPPOR's permanent bits
(client_sdk/mechanisms/longitudinal.py): HMAC-SHA256(secret, tag | campaign | what) gives
``alpha`` (32 bits, so ``P[up] = floor(frac 2**32) / 2**32``, bias below 2**-32 segment) and, per
rounded value ``r``, a 64-bit word compared with 1BitMean's integer threshold ``T(r)``; nothing
keyed by the value is stored.

Privacy (exact, from the thresholds): one report, over the device's secret, is a mixture of
1BitMean channels on the ``s``-grid, so ``realised_epsilon <= epsilon``. A device whose reports
take ``m`` distinct rounded values reveals ``m`` memoised bits: ``longitudinal_epsilon(m) =
min(m, s + 1) * realised_epsilon`` bounds what any number of reports reveals *among devices with
the same pattern of changes* (the paper's guarantee). When the rounded value changes is not
hidden by memoisation: α-point rounding makes the moment of change depend on the secret offset,
which is the paper's argument, not a differential-privacy bound. The paper's optional output
perturbation (re-flipping memoised bits) is not implemented.
"""

from __future__ import annotations

import hmac
import math
import struct
from hashlib import sha256
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.grid import check_grid, check_value
from client_sdk.mechanisms.numeric.mean import OneBitMean

#: Default number of rounding segments ``s``.
DEFAULT_SEGMENTS = 64
#: Shortest device secret accepted, in bytes (as RAPPOR's memoisation).
MIN_SECRET_BYTES = 16
_PRF_DOMAIN = b"ldp-telemetry/alpha-point/v1\x00"


def _length_prefixed(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<I", len(raw)) + raw


class AlphaPointMean(OneBitMean):
    """1BitMean on ``s`` segments with α-point rounding and HMAC-derived memoised bits.

    ``perturb``/``perturb_many`` simulate fresh devices (randomised rounding and fresh bits, the
    same distribution as a fresh secret); :meth:`perturb_memoized` is the device path for a
    counter reported again and again. Estimation is 1BitMean's on the ``s``-grid.
    """

    name = "alpha_point"
    memoized = True

    def __init__(self, *, epsilon: float, bounds: Any, segments: int = DEFAULT_SEGMENTS) -> None:
        # Checked under its own name: the grid check's message named a "grid" the campaign
        # never declared.
        super().__init__(epsilon=epsilon, bounds=bounds, grid=check_grid(segments, name="segments"))

    @property
    def segments(self) -> int:
        return self.grid.size

    def params(self) -> dict[str, Any]:
        return {"segments": self.segments}

    @property
    def permanent_epsilon(self) -> float:
        """What any number of reports of one rounded value reveal: its one memoised bit, so
        ``realised_epsilon`` (as RAPPOR's, per distinct value). A device's reports over
        ``m`` distinct rounded values reveal :meth:`longitudinal_epsilon` ``(m)``, at most
        ``segments + 1`` of them (:meth:`rounded_labels`)."""
        return self.realised_epsilon

    def rounded_labels(self) -> tuple[str, ...]:
        """Public names of the ``segments + 1`` rounded values a device can memoise (what the
        budget ledger counts distinct values over; no value of any device)."""
        return tuple(f"alpha-point/{self.segments}/{r}" for r in range(self.segments + 1))

    def longitudinal_epsilon(self, distinct_values: int) -> float:
        """What reports with ``distinct_values`` distinct rounded values reveal together."""
        if isinstance(distinct_values, bool) or not isinstance(distinct_values, int):
            raise InvalidParameter("distinct_values must be an int >= 0")
        if distinct_values < 0:
            raise InvalidParameter(f"distinct_values must be >= 0, got {distinct_values}")
        return min(distinct_values, self.segments + 1) * self.realised_epsilon

    def _prf(self, secret: bytes, campaign: str, what: bytes) -> bytes:
        if not isinstance(secret, (bytes, bytearray)) or len(secret) < MIN_SECRET_BYTES:
            raise InvalidParameter(
                f"secret must be at least {MIN_SECRET_BYTES} random bytes, "
                f"got {type(secret).__name__} of length {len(secret) if secret else 0}"
            )
        if not isinstance(campaign, str):
            raise InvalidParameter(f"campaign must be a string, got {type(campaign).__name__}")
        msg = _PRF_DOMAIN + _length_prefixed(campaign) + what
        return hmac.new(bytes(secret), msg, sha256).digest()

    def rounded(self, x: float, secret: bytes, *, campaign: str = "") -> int:
        """The α-point rounding of ``x`` for this device: a grid point in ``[0, segments]``."""
        pos = self.grid.position(check_value(x))
        alpha = struct.unpack("<I", self._prf(secret, campaign, b"alpha")[:4])[0]
        base = math.floor(pos)
        if base >= self.segments:
            return self.segments
        # Up iff frac + alpha/2**32 >= 1, i.e. alpha >= 2**32 - floor(frac * 2**32).
        return base + int(alpha >= (1 << 32) - math.floor((pos - base) * (1 << 32)))

    def memoized_bit(self, r: int, secret: bytes, *, campaign: str = "") -> int:
        """The device's permanent 1BitMean response for rounded value ``r``."""
        word = struct.unpack("<Q", self._prf(secret, campaign, b"bit" + struct.pack("<I", r))[:8])[
            0
        ]
        return int(word < self.threshold(r))

    def release_scope(self, campaign: str) -> str:
        """The ``campaign`` argument a device derives this config's memoised answers under
        (:meth:`rounded`, :meth:`memoized_bit`, :meth:`release_key`): the campaign id and what
        fixes the channel: the bounds and segments (which grid point a value rounds to) and the
        thresholds (which the epsilon sets). Configs of one campaign with the same channel
        replay the same answers; a config with other bounds, another epsilon or segment count
        gets independent ones, a new release the ledger charges.

        Keyed by the campaign id alone, the word behind the memoised bit of a grid point was
        the same in every config of the campaign. Every config's threshold at the middle grid
        point is exactly one half, so a device there sent the same bit under epsilon 1 and
        under epsilon 2, while a device below the middle could send (1, 0) and one above it
        (0, 1): the two reports told the collector which half the value is in, with no
        epsilon bound at all, where the ledger charged 1 + 2.

        Without the bounds, a collector that served the campaign again with other bounds (same
        epsilon and segments) had the same offset and words round the same value to other grid
        points: two reports agreed for certain when the value rounds to the same point in both
        configs (a value at the lower bound, say) and disagreed half the time otherwise
        (measured at epsilon 0.1, bounds [0, 100] then [0, 200]: never for 0, 50% for 50),
        a test of the value with no epsilon bound, where the ledger charged 0.1 + 0.1."""
        if not isinstance(campaign, str):
            raise InvalidParameter(f"campaign must be a string, got {type(campaign).__name__}")
        low, high = self.grid.low, self.grid.high
        return (
            f"{campaign}\x00{self.segments}/{float(low).hex()}/{float(high).hex()}/"
            f"{self.threshold(0)}/{self.threshold(self.segments)}"
        )

    def release_key(self, secret: bytes, *, campaign: str = "") -> str:
        """Names this device's memoised answers (secret, segments, thresholds, and with
        ``campaign`` the :meth:`release_scope`, which holds the bounds) for the budget ledger
        without revealing the secret or any value; a new key is charged again."""
        tag = struct.pack("<I", self.segments) + b"".join(
            struct.pack("<Q", self.threshold(r)) for r in (0, self.segments)
        )
        return self._prf(secret, campaign, b"release" + tag).hex()[:32]

    def perturb_memoized(self, x: float, secret: bytes, *, campaign: str = "") -> int:
        """This device's report of ``x``: equal rounded values always give the same bit."""
        return self.memoized_bit(
            self.rounded(x, secret, campaign=campaign), secret, campaign=campaign
        )
