"""The Square Wave mechanism (Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, SIGMOD 2020), exact.

Continuous SW: input ``v in [0, 1]``, output ``v~ in [-b, 1 + b]`` with density ``p`` where
``|v~ - v| <= b`` and ``q = p / e^eps`` elsewhere,
``b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))``.

Here: input grid ``i in [0, D]`` (``D = grid``, default 512; randomised rounding as for the mean
mechanisms), ``w = round(b D)``, output ``j in [0, D + 2w]`` standing for ``v~ = (j - w) / D``,
band ``[i, i + 2w]`` (``W = 2w + 1`` outputs), and the exact :class:`Band` sampler: band
probability ``T / 2**64``, worst ratio ``T D / ((2**64 - T) W) <= e^eps`` (proof in
:mod:`.band`: every output has one of two probabilities for every input).

The estimator (EMS, :mod:`aggregator.numeric`) needs only the output histogram, which is the
tally: one exact count per output grid point. See docs/MECHANISMS.md §19.

``integer=True`` declares an integer-valued attribute (counts, ages, hours): the bounds must be
integers and the estimator then puts the distribution on the integers in the bounds (atoms)
instead of on the grid. The device is unchanged (same rounding, same band, same wire format and
tally), so privacy is unchanged; the declaration is a parameter, hence part of the config digest
(only when set: configs without it are as before).
"""

from __future__ import annotations

import math
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.band import Band, BandOutputs
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.tally import NumericTally

#: Default input grid of Square Wave: 512 steps (513 points) between the bounds. EMS's smoothing
#: step acts on grid neighbours, so a coarse grid smears spiky data (Adult hours-per-week: 47% at
#: exactly 40): at 256 steps Square Wave lost to a 64-bin frequency oracle at eps = 4 (W1 0.80
#: vs 0.59 hours); at 1024 (the paper's bucket count) it won there but lost on age at eps = 1 and
#: EMS cost 4-6x more; at 512 its W1 beat every bin count at every eps on both (bench/numeric.py).
DEFAULT_SW_GRID = 512


def square_wave_b(epsilon: float) -> float:
    """The paper's half-width ``b`` on the unit interval (tends to 1/2 as epsilon -> 0).

    Below epsilon = 0.1 numerator and denominator are summed as power series: the closed form
    cancels catastrophically there (both are O(epsilon**2)).
    """
    e = math.exp(epsilon)
    if epsilon < 0.1:
        num = sum(epsilon**k * (k - 1) / math.factorial(k) for k in range(2, 16))
        den = 2 * e * sum(epsilon**k / math.factorial(k) for k in range(2, 16))
        return num / den
    return (epsilon * e - e + 1) / (2 * e * (math.expm1(epsilon) - epsilon))


class SquareWave(BandOutputs, NumericMechanism):
    """Square Wave on exact grids; the estimate is a distribution (EMS), not only a mean."""

    name = "square_wave"
    kind = "distribution"

    def __init__(
        self, *, epsilon: float, bounds: Any, grid: int = DEFAULT_SW_GRID, integer: bool = False
    ) -> None:
        super().__init__(epsilon=epsilon, bounds=bounds, grid=grid)
        d = self.grid.size
        self.half_width = max(0, round(square_wave_b(self.epsilon) * d))
        self.band = Band(d + 1, 2 * self.half_width + 1, self.epsilon)
        if not isinstance(integer, bool):
            raise InvalidParameter(f"integer must be true or false, got {integer!r}")
        if integer:
            low, high = self.grid.low, self.grid.high
            if not (low.is_integer() and high.is_integer()):
                raise InvalidParameter(
                    f"an integer-valued square_wave needs integer bounds, got ({low}, {high})"
                )
            if high - low > d:
                raise InvalidParameter(
                    f"an integer-valued square_wave needs at most grid + 1 = {d + 1} integers "
                    f"in its bounds, got {int(high - low) + 1} (raise grid or drop integer)"
                )
        self.integer = integer

    def params(self) -> dict[str, Any]:
        # ``integer`` only when declared: existing configs (and digests) stay as they were.
        return {**super().params(), **({"integer": True} if self.integer else {})}

    def support(self) -> Any:
        """The integers in the bounds (a float array) when ``integer``; else None."""
        import numpy as np

        if not self.integer:
            return None
        return np.arange(self.grid.low, self.grid.high + 1.0)

    @property
    def tally_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"count_{j}" for j in range(self.output_size))

    def output_positions(self) -> list[float]:
        """Grid position (``i`` units, may lie outside ``[0, D]``) that each output stands for."""
        return [float(j - self.half_width) for j in range(self.output_size)]

    def _perturb_grid(self, i: int, words: tuple[int, ...]) -> int:
        return self.band.sample(i, words[0], words[1])

    def _perturb_grid_batch(self, indices: Any, gen: Any) -> Any:
        return self.band.sample_many(indices, gen)

    def _block_sums(self, batch: Any) -> tuple[int, ...]:
        import numpy as np

        return tuple(int(c) for c in np.bincount(batch, minlength=self.output_size))

    def channel(self) -> Any:
        """``P[output j | grid input i]`` as floats (rows ``i = 0..D``), from the exact weights."""
        import numpy as np

        band = self.band
        high, low = band.high / band.denominator, band.low / band.denominator
        m = np.full((self.grid.size + 1, self.output_size), low)
        for i in range(self.grid.size + 1):
            m[i, i : i + band.width] = high
        return m

    def histogram(self, tally: NumericTally) -> Any:
        """The tally as an int64 NumPy histogram over the outputs (checked against ``n``)."""
        import numpy as np

        counts = np.asarray(self.check_tally(tally).values, dtype=np.int64)
        if int(counts.sum()) != tally.n:
            raise InvalidParameter(
                f"a square_wave tally's counts sum to {int(counts.sum())}, not n={tally.n}"
            )
        return counts
