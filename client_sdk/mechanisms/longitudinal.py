"""Memoised two-stage unary encoding (RAPPOR without the Bloom filter): longitudinal privacy.

A device one-hot encodes its value ``v`` into ``B`` (k bits) and reports in two stages:

1. **Permanent randomized response (PRR)**, memoised: ``B'_l = B_l XOR F_l`` for every label ``l``
   with ``P[F_l = 1] = 1 - t1`` (``t1 = T1 / 2**64``). On a device, ``F_l`` is *derived*, not
   drawn, and keyed by the label the bit stands for, never by its position:
   ``K = HMAC-SHA256(secret, tag | campaign | v | T1)``, ``F_l = [BLAKE2b_K(l) < 2**64 - T1]``
   (first 8 bytes, little-endian). The same value always gives the same ``B'_l`` for the same
   label, in *any* config of the campaign with the same permanent threshold: a reordered,
   extended or shrunk domain shows the collector the same permanent answers for the labels it
   already had and fresh independent ones for new labels, i.e. one permanent release over the
   union of the domains. A changed ``epsilon_permanent`` (another ``T1``) gives independent
   answers: a new release, which the device's ledger charges (:meth:`RapporUnary.release_key`).
   Nothing keyed by the value is stored.
2. **Instantaneous randomized response (IRR)**, fresh for every report:
   ``S_i = B'_i XOR G_i`` with ``P[G_i = 1] = 1 - s`` (``s = TS / 2**64``), OS randomness.

Privacy (exact, from the integer thresholds):

* one report: the effective channel is ``P[S_i = 1 | B_i = 1] = p* = t1 s + (1-t1)(1-s)`` and
  ``P[S_i = 1 | B_i = 0] = q* = 1 - p*``; two bits change with the value, so
  ``realised_epsilon = ln((p*(1-q*)) / ((1-p*) q*)) = 2 ln(p*/(1-p*)) <= epsilon``.
* any number of reports of one value: everything an observer sees is a function of ``B'`` and
  fresh noise, so ``permanent_epsilon = 2 ln(t1/(1-t1)) <= epsilon_permanent`` bounds what
  averaging infinitely many reports reveals (RAPPOR's epsilon_infinity). A device whose value
  changes composes one ``permanent_epsilon`` per distinct value it reports.

Utility: reports of different devices are independent with the same ``p*``/``q*``, so the
aggregator's unbiased estimator ``(C_v - n q*)/(p* - q*)`` and its variance
``n q*(1-q*)/(p*-q*)^2`` (``beta = 0`` since ``p* + q* = 1``) apply unchanged.
``perturb_many`` and ``perturb`` without a secret simulate fresh devices (fresh PRR bits).

Wire report: k bits, packed and base64-encoded exactly like ``oue``/``sue``.
"""

from __future__ import annotations

import base64
import hmac
import math
import struct
from collections.abc import Hashable, Sequence
from fractions import Fraction
from hashlib import blake2b, sha256
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import bitvector
from client_sdk.mechanisms.base import Payload, bit_vector_distribution
from client_sdk.mechanisms.bitvector_base import BitVectorMechanism
from client_sdk.mechanisms.randomness import (
    SCALE,
    RandomSource,
    as_generator,
    bernoulli,
    coins_below,
    draw_lanes,
    lane_offsets,
    largest_threshold,
    log_ratio,
    pack_coins,
    ratio_at_most,
)
from client_sdk.mechanisms.validation import MAX_EPSILON, finite_float, number_text

if TYPE_CHECKING:
    import numpy as np

#: Default ratio ``epsilon_permanent / epsilon`` (RAPPOR's defaults give about 4.1).
DEFAULT_PERMANENT_FACTOR = 4.0
#: Largest permanent epsilon accepted.
MAX_PERMANENT_EPSILON = 4 * MAX_EPSILON
#: Shortest device secret accepted by :meth:`RapporUnary.perturb_memoized`, in bytes.
MIN_SECRET_BYTES = 16
_PRF_DOMAIN = b"ldp-telemetry/rappor/v2\x00"
_RELEASE_DOMAIN = b"ldp-telemetry/rappor/release/v2\x00"
_BLOCK = 1 << 21  # rows x k random draws per vectorised block


def _length_prefixed(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<I", len(raw)) + raw


class RapporUnary(BitVectorMechanism):
    """Memoised two-stage unary encoding: ``epsilon`` per report, ``epsilon_permanent`` forever.

    Privacy: each report is ``realised_epsilon``-LDP (``<= epsilon``); any number of reports of
    one value by one device (with :meth:`perturb_memoized` and a fixed secret) is together
    ``permanent_epsilon``-LDP (``<= epsilon_permanent``). Both are computed from the integer
    thresholds that run.
    Utility: ``Var[count_v] = n q*(1-q*)/(p*-q*)^2`` with the effective ``p*``, ``q*``.
    Not covered: a device reporting k distinct values composes k permanent epsilons; a new
    device secret or another permanent threshold starts a fresh permanent response (a new
    :meth:`release_key`, which the client's ledger charges again).
    """

    name = "rappor"
    max_k = 4096
    memoized = True

    def __init__(
        self,
        *,
        epsilon: float,
        domain: Sequence[str] | int,
        epsilon_permanent: float | None = None,
    ) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        if epsilon_permanent is None:
            eps_perm = min(DEFAULT_PERMANENT_FACTOR * self.epsilon, MAX_PERMANENT_EPSILON)
        else:
            finite = finite_float(epsilon_permanent)
            if finite is None or not isinstance(epsilon_permanent, (int, float)):
                raise InvalidParameter(
                    "epsilon_permanent must be a finite number, got "
                    + number_text(epsilon_permanent)
                )
            eps_perm = finite
        if not self.epsilon < eps_perm <= MAX_PERMANENT_EPSILON:
            raise InvalidParameter(
                f"epsilon_permanent must be greater than epsilon={self.epsilon:g} (the "
                f"instantaneous noise needs room) and at most {MAX_PERMANENT_EPSILON:g}, "
                f"got {eps_perm!r}; omit it for {DEFAULT_PERMANENT_FACTOR:g} x epsilon"
            )
        self.epsilon_permanent = eps_perm
        # Stage 1: largest T1 with (T1/(S-T1))^2 <= e^eps_perm.
        half = math.exp(eps_perm / 2)
        self.threshold_permanent = largest_threshold(
            lambda t: ratio_at_most(t * t, (SCALE - t) ** 2, eps_perm), half / (half + 1)
        )
        # Stage 2: largest TS with (A/B)^2 <= e^epsilon for the effective channel A/S^2 = p*.
        t1 = self.threshold_permanent
        p_target = math.exp(self.epsilon / 2) / (math.exp(self.epsilon / 2) + 1)
        guess = 0.5 * (1 + (2 * p_target - 1) / (2 * t1 / SCALE - 1))
        eps = self.epsilon

        def ok(ts: int) -> bool:
            a = self._effective_numerator(t1, ts)
            return ratio_at_most(a * a, (SCALE * SCALE - a) ** 2, eps)

        self.threshold_instant = largest_threshold(ok, min(guess, 1.0))
        self._flip_permanent = SCALE - self.threshold_permanent
        self._flip_instant = SCALE - self.threshold_instant
        # Lane offsets for the branch-free coins of the one-device path (randomness.coins_below).
        self._lanes_permanent = lane_offsets(self.k, self._flip_permanent)
        self._lanes_instant = lane_offsets(self.k, self._flip_instant)
        self._nbytes = (self.k + 7) // 8
        self._labels = [_length_prefixed(label) for label in self.domain]

    @staticmethod
    def _effective_numerator(t1: int, ts: int) -> int:
        """``p* * 2**128``: keep-keep plus flip-flip."""
        return t1 * ts + (SCALE - t1) * (SCALE - ts)

    def params(self) -> dict[str, Any]:
        return {"epsilon_permanent": self.epsilon_permanent}

    # -- privacy ----------------------------------------------------------------------------

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """A fresh device (permanent and instant stages together): independent bits, each
        equal to the true bit w.p. ``p* = a / 2**128`` (a: keep-keep plus flip-flip)."""
        a = Fraction(self._effective_numerator(self.threshold_permanent, self.threshold_instant))
        keep = a / (SCALE * SCALE)
        return bit_vector_distribution(self.k, index, keep, 1 - keep)

    @property
    def realised_epsilon(self) -> float:
        """Per-report epsilon of the effective (two-stage) channel."""
        a = self._effective_numerator(self.threshold_permanent, self.threshold_instant)
        return log_ratio(a * a, (SCALE * SCALE - a) ** 2)

    @property
    def permanent_epsilon(self) -> float:
        """Longitudinal epsilon: what unlimited reports of one value reveal (epsilon_infinity)."""
        t1 = self.threshold_permanent
        return log_ratio(t1 * t1, (SCALE - t1) ** 2)

    # -- estimation constants -----------------------------------------------------------------

    @property
    def p_star(self) -> float:
        a = self._effective_numerator(self.threshold_permanent, self.threshold_instant)
        return float(Fraction(a, SCALE * SCALE))

    @property
    def q_star(self) -> float:
        a = self._effective_numerator(self.threshold_permanent, self.threshold_instant)
        return float(Fraction(SCALE * SCALE - a, SCALE * SCALE))

    @property
    def prr_keep(self) -> float:
        """``P[B'_i = B_i]``: probability that a permanent bit equals the true bit."""
        return self.threshold_permanent / SCALE

    @property
    def irr_keep(self) -> float:
        """``P[S_i = B'_i]``: probability that a reported bit equals the permanent bit."""
        return self.threshold_instant / SCALE

    @property
    def report_bits(self) -> int:
        return self.k

    # -- memoisation --------------------------------------------------------------------------

    def permanent_bits(self, value: str, secret: bytes, *, campaign: str = "") -> int:
        """The memoised permanent response ``B'`` of ``value`` as an int bitmask (bit i = item i).

        Bit i's flip is keyed by (secret, campaign, value, permanent threshold) and by the
        *label* ``domain[i]``, not by i: another config of the campaign lays the same answers
        out in its own order. Equal inputs give equal bits; nothing is stored. Every label is
        hashed and compared the same way whatever the bits are.
        """
        index = self.index_of(value)
        self._check_secret(secret)
        if not isinstance(campaign, str):
            raise InvalidParameter(f"campaign must be a string, got {type(campaign).__name__}")
        key = hmac.digest(
            bytes(secret),
            _PRF_DOMAIN
            + _length_prefixed(campaign)
            + _length_prefixed(self.domain[index])
            + struct.pack("<Q", self.threshold_permanent),
            "sha256",
        )
        flip = self._flip_permanent
        prf = blake2b(key=key, digest_size=8)
        bits = 1 << index
        for i, label in enumerate(self._labels):
            h = prf.copy()
            h.update(label)
            bits ^= int(int.from_bytes(h.digest(), "little") < flip) << i
        return bits

    @staticmethod
    def _check_secret(secret: object) -> None:
        if not isinstance(secret, (bytes, bytearray)) or len(secret) < MIN_SECRET_BYTES:
            raise InvalidParameter(
                f"secret must be at least {MIN_SECRET_BYTES} random bytes, "
                f"got {type(secret).__name__} of length {len(secret) if secret else 0}"  # type: ignore[arg-type]
            )

    def release_key(self, secret: bytes) -> str:
        """Names this device's permanent answers under this permanent threshold (32 hex chars).

        Configs with the same key share their permanent answers (label by label); a new secret
        or another ``epsilon_permanent`` gives a new key: a new release to charge. The key
        reveals neither the secret nor any value.
        """
        self._check_secret(secret)
        return hmac.new(
            bytes(secret), _RELEASE_DOMAIN + struct.pack("<Q", self.threshold_permanent), sha256
        ).hexdigest()[:32]

    def perturb_memoized(
        self, value: str, secret: bytes, *, campaign: str = "", rng: RandomSource = None
    ) -> Payload:
        """One report of a device with ``secret``: its memoised ``B'`` plus fresh IRR noise.

        ``value`` is seen only here. The IRR noise comes from the OS unless ``rng`` (tests) is
        given. Reports of the same value by the same device average to an affine function of
        ``B'``, never of the true value.
        """
        bits = self.permanent_bits(value, secret, campaign=campaign)
        return self._encode(bits ^ self._instant_flips(as_generator(rng)))

    def _instant_flips(self, gen: np.random.Generator | None) -> int:
        """Bit i set with probability ``1 - threshold_instant / 2**64``, no branch on a coin."""
        coins = coins_below(draw_lanes(self.k, gen), self.k, self._lanes_instant)
        return int.from_bytes(pack_coins(coins), "little")

    def _encode(self, bits: int) -> str:
        return base64.b64encode(bits.to_bytes(self._nbytes, "little")).decode("ascii")

    # -- fresh devices ------------------------------------------------------------------------

    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        # Both stages' coins from one draw, decided by two big additions: the running time
        # does not depend on any coin (bench/timing.py).
        k = self.k
        lanes = draw_lanes(2 * k, gen)
        permanent = coins_below(lanes, k, self._lanes_permanent)
        instant = coins_below(lanes[9 * k :], k, self._lanes_instant)
        flips = int.from_bytes(pack_coins(permanent), "little") ^ int.from_bytes(
            pack_coins(instant), "little"
        )
        return self._encode((1 << index) ^ flips)

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        import numpy as np  # the batch path only; one device never needs NumPy

        n, k = indices.size, self.k
        out = np.empty((n, self._nbytes), dtype=np.uint8)
        step = max(1, _BLOCK // k)
        for start in range(0, n, step):
            idx = indices[start : start + step]
            m = idx.size
            bits = bernoulli(gen, (m, k), self._flip_permanent)
            bits ^= bernoulli(gen, (m, k), self._flip_instant)
            rows = np.arange(m)
            bits[rows, idx] = ~bits[rows, idx]
            out[start : start + m] = bitvector.pack_rows(bits)
        return out

    # -- wire form ----------------------------------------------------------------------------
