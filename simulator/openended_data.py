"""Populations of open-ended strings (issue 16), one definition for the simulator and bench/.

* :func:`zipf_population`: ``n`` devices over ``distinct`` (default 10**5) pseudo-words and host
  names of 3 to 16 bytes (:func:`synthetic_strings`), counts ``n p_i`` rounded by largest
  remainders with ``p_i`` proportional to ``i**-s`` (default ``s = 1.1``). Deterministic:
  generated here, never downloaded.
* :func:`adult_population`: Adult (train, the bundled checksum-verified file) ``native-country``
  treated as unknown strings: 42 values (``"?"`` included), ``United-States`` holding 90%.
* :func:`devices`: one value per device, shuffled; :func:`prf`: precision, recall and F1 of a
  discovered list against the true top-k.

Every population is ranked by decreasing count (ties by value), so ``strings[:k]`` is the true
top-k. The true values serve as the yardstick only: mechanisms see them one device at a time.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "ch", "st"]
SUFFIXES = ["", "", "", "", ".com", ".net", ".org", ".io", "-app", "2"]


@lru_cache(maxsize=4)
def _synthetic(count: int, seed: int) -> tuple[str, ...]:
    gen = np.random.default_rng(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        parts = gen.integers(0, len(SYLLABLES), size=int(gen.integers(2, 6)))
        word = "".join(SYLLABLES[i] for i in parts.tolist())[: int(gen.integers(3, 13))]
        word += SUFFIXES[int(gen.integers(0, len(SUFFIXES)))]
        if 3 <= len(word) <= 16 and word not in seen:
            seen.add(word)
            out.append(word)
    return tuple(out)


def synthetic_strings(count: int = 100_000, seed: int = 2026) -> list[str]:
    """``count`` distinct lowercase words and host names of 3 to 16 bytes, deterministic
    (the same ``count`` and ``seed`` give the same list; computed once per process)."""
    return list(_synthetic(count, seed))


def zipf_population(
    n: int, distinct: int = 100_000, s: float = 1.1
) -> tuple[list[str], np.ndarray]:
    """The strings by rank and their counts (summing to n, largest remainders)."""
    strings = synthetic_strings(distinct)
    p = np.arange(1, distinct + 1, dtype=float) ** -s
    p /= p.sum()
    raw = n * p
    counts = np.floor(raw).astype(np.int64)
    short = n - int(counts.sum())
    counts[np.argsort(-(raw - counts), kind="stable")[:short]] += 1
    return strings, counts


def adult_population() -> tuple[list[str], np.ndarray]:
    """Adult (train) ``native-country`` with ``"?"`` kept as a value: the values by decreasing
    count (ties by value) and their counts (32,561 in all)."""
    from simulator.adult import load_adult

    values = load_adult("train").counts("native-country", missing="keep")
    ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ranked], np.array([v for _, v in ranked], dtype=np.int64)


def devices(strings: list[str], counts: np.ndarray, seed: int) -> list[str]:
    """One value per device, shuffled (deterministic)."""
    idx = np.repeat(np.arange(len(strings)), counts)
    np.random.default_rng(seed).shuffle(idx)
    arr = np.array(strings, dtype=object)
    return list(arr[idx])


def prf(found: list[str], true: list[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of the ``found`` list against the ``true`` list (0 if empty)."""
    hit = len(set(found) & set(true))
    p = hit / len(found) if found else 0.0
    r = hit / len(true)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)
