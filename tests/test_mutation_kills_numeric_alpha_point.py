"""α-point rounding and memoised bits, exactly from the device's HMAC derivations (issue 21).

Given the secret, the device's offset ``alpha`` and each memoised word are known (the first 4
or 8 bytes of HMAC-SHA256(secret, domain | campaign | what)), so ``rounded`` and
``memoized_bit`` are checked exactly, not by their frequencies.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import AlphaPointMean, create
from client_sdk.mechanisms.numeric.alpha_point import DEFAULT_SEGMENTS, MIN_SECRET_BYTES

SECRETS = [hashlib.sha256(bytes([i])).digest()[:16] for i in range(60)]


def _prf(secret: bytes, campaign: str, what: bytes) -> bytes:
    """The documented derivation, written out: HMAC-SHA256 over domain | len-prefixed campaign."""
    c = campaign.encode()
    msg = b"ldp-telemetry/alpha-point/v1\x00" + struct.pack("<I", len(c)) + c + what
    return hmac.new(secret, msg, hashlib.sha256).digest()


def test_documented_defaults() -> None:
    assert DEFAULT_SEGMENTS == 64 and MIN_SECRET_BYTES == 16
    mech = create("alpha_point", epsilon=1.0, bounds=(0, 1))
    assert mech.segments == 64 and mech.params() == {"segments": 64}
    assert mech.grid.size == 64


def test_secrets_shorter_than_16_bytes_are_refused_with_their_length() -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(0, 8), segments=8)
    assert mech.perturb_memoized(3.0, bytes(16)) in (0, 1)
    assert mech.perturb_memoized(3.0, bytearray(range(40))) in (0, 1)
    for secret, length in ((bytes(15), 15), (b"abcde", 5), (b"", 0)):
        with pytest.raises(InvalidParameter, match=f"of length {length}$"):
            mech.perturb_memoized(3.0, secret)
    with pytest.raises(InvalidParameter, match="campaign must be a string"):
        mech.rounded(3.0, bytes(16), campaign=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("campaign", ["", "minutes"])
def test_rounding_is_exact_given_the_derived_offset(campaign: str) -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(-2.0, 6.0), segments=8)  # a point every 1.0
    for secret in SECRETS:
        alpha = struct.unpack("<I", _prf(secret, campaign, b"alpha")[:4])[0]
        for x in (-5.0, -2.0, 0.0, 0.25, 1.5, 2.75, 3.999, 5.5, 6.0, 9.0):
            pos = min(max(x, -2.0), 6.0) + 2.0
            base = math.floor(pos)
            up = base < 8 and alpha >= 2**32 - math.floor((pos - base) * 2**32)
            assert mech.rounded(x, secret, campaign=campaign) == base + up


@pytest.mark.parametrize("campaign", ["", "minutes"])
def test_memoised_bits_are_the_derived_words_below_the_thresholds(campaign: str) -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(0.0, 4.0), segments=4)
    ones = 0
    for secret in SECRETS:
        for r in range(5):
            word = struct.unpack("<Q", _prf(secret, campaign, b"bit" + struct.pack("<I", r))[:8])
            bit = int(word[0] < mech.threshold(r))
            assert mech.memoized_bit(r, secret, campaign=campaign) == bit
            ones += bit
        x = 2.6
        r = mech.rounded(x, secret, campaign=campaign)
        assert mech.perturb_memoized(x, secret, campaign=campaign) == mech.memoized_bit(
            r, secret, campaign=campaign
        )
    assert 0 < ones < 5 * len(SECRETS)


def test_longitudinal_epsilon_counts_distinct_values_up_to_segments_plus_one() -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(0, 8), segments=8)
    eps = mech.realised_epsilon
    assert mech.permanent_epsilon == eps
    assert mech.longitudinal_epsilon(0) == 0.0
    assert mech.longitudinal_epsilon(1) == eps
    assert mech.longitudinal_epsilon(9) == 9 * eps
    assert mech.longitudinal_epsilon(10) == 9 * eps
    for bad in (-1, -2, 1.0, True):
        with pytest.raises(InvalidParameter, match="distinct_values"):
            mech.longitudinal_epsilon(bad)  # type: ignore[arg-type]
    assert len(mech.rounded_labels()) == 9 and mech.rounded_labels()[-1] == "alpha-point/8/8"


def test_release_key_depends_on_secret_and_campaign_only() -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(0, 8), segments=8)
    key = mech.release_key(SECRETS[0], campaign="c")
    assert len(key) == 32 and key == mech.release_key(SECRETS[0], campaign="c")
    assert key != mech.release_key(SECRETS[1], campaign="c")
    assert key != mech.release_key(SECRETS[0], campaign="d")
    with pytest.raises(TypeError):
        mech.release_key(SECRETS[0], "c")  # type: ignore[misc]
