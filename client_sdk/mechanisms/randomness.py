"""Where a mechanism's random bits come from, and how probabilities are realised exactly.

On a device every draw comes from the operating system (``os.urandom``). Tests and the simulator
may pass an int seed or a ``numpy.random.Generator`` instead; that is the only way to make a
mechanism deterministic.

The one-device path (``perturb`` with OS randomness) is pure Python: this module imports NumPy
only inside the vectorised helpers (``bernoulli``, ``below``, ``u32_array``) and when a seed or
generator is passed, so an app that only reports never loads it.

Constant time: a per-device sampler draws all of its random words in one call (:func:`words`)
and turns coins into outputs by arithmetic (:func:`select`, :func:`coins_below`), never by a
branch, so its running time does not depend on the hidden coins. The only data-dependent step
is rejection sampling (:func:`uniform_below`), whose retries depend on random words alone (and
happen with probability below ``m / 2**64``).

Every Bernoulli decision compares a uniform 64-bit integer ``u`` with an integer threshold ``T``:
the event ``u < T`` has probability exactly ``T / 2**64``. Vectorised code draws the high 32 bits
first and the low 32 bits only where the high word ties with the threshold's (probability
2**-32), which realises the same exact probability at the cost of 32-bit draws. Mechanisms pick
their thresholds with :func:`largest_threshold` so the realised privacy ratio never exceeds
``e**epsilon`` (and falls short of it by less than 1e-12 relative), and report the realised epsilon.
"""

from __future__ import annotations

import functools
import math
import os
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, TypeAlias

from client_sdk.errors import InvalidParameter

if TYPE_CHECKING:
    import numpy as np

#: 2**64: every sampling probability is ``threshold / SCALE``.
SCALE = 1 << 64
_HALF = 1 << 32
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_D64 = struct.Struct("<d")
_F64 = struct.Struct("<q")  # a float's bits, as the int ordered like floats >= 0

#: Where a draw's randomness comes from: None (the OS), an int seed or a NumPy generator.
RandomSource: TypeAlias = "np.random.Generator | int | None"


def require_numpy() -> None:
    """Raise a clear error when the batch path is used without NumPy installed."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise ImportError(
            "the batch path (perturb_many, report_many, tally, decode_many) needs NumPy, which "
            "the SDK alone does not install: pip install 'ldp-telemetry[batch]'"
        ) from None


def as_generator(rng: RandomSource) -> np.random.Generator | None:
    """``None`` for OS randomness, else a NumPy generator (an int is used as a seed).

    NumPy is imported only when ``rng`` is not None.
    """
    if rng is None:
        return None
    import numpy as np

    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, int) and not isinstance(rng, bool):
        return np.random.default_rng(rng)
    raise InvalidParameter(
        "rng must be None (OS randomness), an int seed or a numpy Generator, "
        f"got {type(rng).__name__}"
    )


def require_generator(rng: RandomSource) -> np.random.Generator:
    """The generator for a vectorised draw: the OS seeds a fresh PCG64 when ``rng`` is None."""
    import numpy as np

    gen = as_generator(rng)
    if gen is None:
        return np.random.Generator(np.random.PCG64(int.from_bytes(os.urandom(32), "little")))
    return gen


def u64(gen: np.random.Generator | None) -> int:
    """One uniform 64-bit integer."""
    if gen is None:
        return int(_U64.unpack(os.urandom(8))[0])
    return int(gen.bit_generator.random_raw())


def draw(count: int, gen: np.random.Generator | None) -> bytes:
    """``count`` uniform 64-bit words as ``8 * count`` bytes, in one draw (one ``os.urandom``
    call on a device; ``Generator.bytes`` when seeded)."""
    if gen is None:
        return os.urandom(8 * count)
    return gen.bytes(8 * count)


def word(raw: bytes, i: int) -> int:
    """Word ``i`` of a :func:`draw` as an int (for uniform choices, never for coins)."""
    return int.from_bytes(raw[8 * i : 8 * i + 8], "little")


def coin(raw: bytes, i: int, threshold: int) -> int:
    """1 if word ``i`` of ``raw`` is below ``threshold`` (probability exactly
    ``threshold / 2**64``), else 0, computed without a comparison.

    ``2**64 + u`` always has the same size, and adding ``2**64 - threshold`` carries into bit
    65 exactly when ``u >= threshold``: CPython runs the same instructions whatever the coin
    (a comparison would branch on it inside the interpreter, which timing shows).
    """
    marked = int.from_bytes(raw[8 * i : 8 * i + 8] + b"\x01", "little")
    return 2 - ((marked + (SCALE - threshold)) >> 64)


def words(count: int, gen: np.random.Generator | None) -> tuple[int, ...]:
    """``count`` uniform 64-bit integers in one draw."""
    raw = draw(count, gen)
    return tuple(word(raw, i) for i in range(count))


def uniform_below(m: int, w: int, gen: np.random.Generator | None) -> int:
    """A uniform integer in ``[0, m)`` from the uniform 64-bit word ``w``, exactly.

    ``w`` is used when it lies below the largest multiple of ``m`` (so ``word % m`` is
    uniform); otherwise, with probability below ``m / 2**64``, fresh words are drawn. The retry
    depends on the random word only, never on a coin or a true value.
    """
    limit = _limit(m)
    while w >= limit:
        w = u64(gen)
    return w % m


@functools.lru_cache(maxsize=256)
def _limit(m: int) -> int:
    """The largest multiple of ``m`` not above ``2**64``."""
    return SCALE - SCALE % m


def at_least(a: int, b: int) -> int:
    """1 if ``a >= b`` else 0, for ints in ``[0, 2**64)``, computed without a comparison."""
    return (a + (2 * SCALE - b)) >> 65


def select(flag: int, if_true: int, if_false: int) -> int:
    """``if_true`` when ``flag`` (0 or 1) is 1, else ``if_false``: an index, not a branch."""
    return (if_false, if_true)[flag]


#: Byte value 1 -> coin 1 (below the threshold), 2 -> coin 0; see :func:`coins_below`.
_LANE_TO_COIN = bytes([0, 1, 0] + [0] * 253)
_COIN_TO_ASCII = bytes([48, 49] + [0] * 254)  # 0 -> "0", 1 -> "1"
#: Lane top byte 1 (coin 1) -> "1", 2 (coin 0) -> "0": coins straight to binary digits.
_LANE_TO_ASCII = bytes([0, 49, 48] + [0] * 253)


def lane_offsets(count: int, threshold: int) -> int:
    """``sum_i (2**64 - threshold) << 72 i``: added to ``count`` lanes, carries tell the coins."""
    return sum((SCALE - threshold) << (72 * i) for i in range(count))


def draw_lanes(count: int, gen: np.random.Generator | None) -> bytearray:
    """``count`` uniform 64-bit words, each in a 72-bit lane topped by a marker byte 1, plus a
    final marker byte: the input of :func:`coins_below` and :func:`lane_coin`."""
    lanes = bytearray(os.urandom(9 * count + 1) if gen is None else gen.bytes(9 * count + 1))
    lanes[8::9] = b"\x01" * count  # overwrite the random bytes there: lane i = 2**64 + u_i
    lanes[-1] = 1  # one more on top, so the big integer's size never varies
    return lanes


def coins_below(lanes: bytearray, count: int, offsets: int) -> bytearray:
    """Coins ``[u_i < threshold]`` for the first ``count`` lanes of :func:`draw_lanes`, as bytes
    0/1; ``offsets`` is ``lane_offsets(count, threshold)``.

    All at once and without a branch on any coin: one big addition adds ``2**64 - threshold``
    to every lane ``2**64 + u``, whose top byte is then 1 if ``u < threshold`` else 2. Lanes
    cannot carry into each other (each stays below ``2**66``). Only C loops of fixed length.
    """
    size = 9 * count + 1
    total = int.from_bytes(lanes[: size - 1] + b"\x01", "little") + offsets
    return bytearray(total.to_bytes(size, "little")[8 : 9 * count : 9]).translate(_LANE_TO_COIN)


def lane_coin(lanes: bytearray, i: int, threshold: int) -> int:
    """The coin ``[u_i < threshold]`` of lane ``i`` alone, by the same carry arithmetic."""
    marked = int.from_bytes(lanes[9 * i : 9 * i + 9], "little")
    return 2 - ((marked + (SCALE - threshold)) >> 64)


def lane_digits(lanes: bytearray, offsets: int) -> bytearray:
    """The coins of every lane of :func:`draw_lanes` as ASCII binary digits (``b"1"``: below).

    ``offsets`` holds each lane's own ``2**64 - threshold`` at bit ``72 i`` (lanes may differ),
    so one big addition yields all coins; ``int(digits[::-1], 2)`` packs them. Same carry
    arithmetic as :func:`coins_below`, with no copy of the lanes and no second translation.
    """
    total = int.from_bytes(lanes, "little") + offsets
    return bytearray(total.to_bytes(len(lanes), "little")[8::9].translate(_LANE_TO_ASCII))


def pack_coins(coins: bytes | bytearray) -> bytes:
    """Bytes 0/1 packed into bits (little-endian bit order, ``ceil(n/8)`` bytes), no branches."""
    text = coins.translate(_COIN_TO_ASCII)[::-1]
    return int(text, 2).to_bytes((len(coins) + 7) // 8, "little")


def u32_array(gen: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
    """Uniform 32-bit integers from a generator, as fast as NumPy can make them."""
    import numpy as np

    count = int(np.prod(size))
    raw = gen.bit_generator.random_raw((count + 1) // 2)
    return raw.view(np.uint32)[:count].reshape(size)


def below(gen: np.random.Generator, high: np.ndarray, threshold: int) -> np.ndarray:
    """The events ``u < threshold`` for uniform 64-bit ``u`` whose high words are ``high``.

    Low words are drawn only where the high word equals the threshold's, so the result has
    probability exactly ``threshold / 2**64`` per element.
    """
    import numpy as np

    if not 0 < threshold < SCALE:
        raise InvalidParameter(f"threshold must lie in (0, 2**64), got {threshold}")
    t_high, t_low = divmod(threshold, _HALF)
    out = high < np.uint32(t_high)
    ties = np.flatnonzero(high == np.uint32(t_high))
    if ties.size:
        out.flat[ties] = u32_array(gen, ties.size) < np.uint64(t_low)
    return out


def bernoulli(gen: np.random.Generator, size: int | tuple[int, ...], threshold: int) -> np.ndarray:
    """Independent events of probability exactly ``threshold / 2**64``."""
    return below(gen, u32_array(gen, size), threshold)


def randbelow(m: int, gen: np.random.Generator | None) -> int:
    """A uniform integer in ``[0, m)`` with no modulo bias (rejection sampling)."""
    if m <= 1:
        return 0
    if gen is not None:
        return int(gen.integers(0, m))
    limit = _HALF - (_HALF % m)
    while True:
        u: int = _U32.unpack(os.urandom(4))[0]
        if u < limit:
            return u % m


def exact_threshold(probability: float) -> int:
    """``floor(probability * 2**64)`` computed exactly from the float's binary value."""
    return max(0, min(SCALE, math.floor(Fraction(probability) * SCALE)))


def ratio_at_most(numerator: int, denominator: int, epsilon: float) -> bool:
    """Whether ``numerator / denominator <= e^epsilon``, safely below float rounding of ``exp``."""
    bound = Fraction(math.exp(epsilon)) * (1 - Fraction(1, 1 << 50))
    return Fraction(numerator, denominator) <= bound


def largest_threshold(ok: Callable[[int], bool], guess: float) -> int:
    """The largest ``T`` in ``[1, 2**64)`` with ``ok(T)``, for ``ok`` true up to a point then false.

    ``guess`` is the ideal real-valued probability; the search starts at its threshold.
    """
    lo = max(1, min(SCALE - 2, exact_threshold(guess)))
    step = 1
    if ok(lo):
        hi = lo + 1
        while hi < SCALE and ok(hi):
            lo, hi, step = hi, min(SCALE, hi + step), step * 2
    else:
        hi = lo
        lo = max(1, hi - 1)
        while not ok(lo):
            if lo == 1:
                raise InvalidParameter("no sampling threshold satisfies the privacy bound")
            hi, lo, step = lo, max(1, lo - step), step * 2
    while hi - lo > 1:  # ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def log_ratio(numerator: int, denominator: int) -> float:
    """``ln(numerator / denominator)`` for large integers, accurate to float precision."""
    return math.log1p(float(Fraction(numerator - denominator, denominator)))


def covering_epsilon(numerator: int, denominator: int) -> float:
    """The smallest float ``eps`` with ``eps >= log_ratio(numerator, denominator)`` and
    ``e**eps >= numerator / denominator`` exactly.

    For mechanisms whose probabilities are fixed by the caller (``p=``) rather than searched
    for: their stated epsilon must never fall below the one their thresholds realise, even by
    float rounding.
    """
    eps = log_ratio(numerator, denominator)
    ratio = Fraction(numerator, denominator)

    def covers(x: float) -> bool:
        return Fraction(math.exp(x)) >= ratio

    if covers(eps):
        return eps
    if eps < 0:  # a ratio below 1 (no mechanism has one): one float at a time is enough
        while not covers(eps):
            eps = math.nextafter(eps, math.inf)
        return eps
    # Near 0, exp's result moves by one float only every ~2**52 / (2**52 eps) floats of eps,
    # so stepping one float at a time may never finish (p = 0.5 + 1e-12): gallop, then
    # bisect, over the floats >= 0 ordered as their bit patterns.
    lo = _F64.unpack(_D64.pack(eps))[0]  # not covering
    step = 1
    while not covers(_D64.unpack(_F64.pack(lo + step))[0]):
        lo, step = lo + step, step * 2
    hi = lo + step  # covering
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if covers(_D64.unpack(_F64.pack(mid))[0]):
            hi = mid
        else:
            lo = mid
    return float(_D64.unpack(_F64.pack(hi))[0])
