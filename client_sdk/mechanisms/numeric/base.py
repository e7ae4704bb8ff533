"""What every numeric mechanism provides: the contract of issue 15, written once.

A numeric mechanism is built from ``epsilon`` and ``bounds = (low, high)``; the device clips its
value into the bounds and rounds it onto the declared input grid (:mod:`.grid`). Then:

* ``perturb(x)``: one report (an ``int`` on the declared output grid), OS randomness, no NumPy;
* ``perturb_many(values, rng=...)``: a NumPy int64 array of reports (simulator and tests);
* ``check_payload`` / ``decode_many`` / ``encode_many``: the wire form (a JSON integer in
  ``[0, output_size)``) and its strict parser;
* ``tally(reports)``: a :class:`NumericTally` of exact integers, mergeable by addition;
* ``output_weights(i)``: the **exact** output distribution for grid input ``i`` as integer
  weights over one denominator, so tests compute the worst privacy ratio exactly;
* ``realised_epsilon``: ln of that worst ratio for the thresholds in use, never above
  ``epsilon``.

Privacy: every report satisfies ``P[y | x] <= e^realised_epsilon * P[y | x']`` for all inputs
``x, x'`` (any real numbers: clipping and randomised rounding are mixtures over grid points)
and every output ``y``. Every probability is an integer threshold over 2**64 or an exactly uniform
integer draw (Mironov, CCS 2012: no floating-point sampling anywhere on the device).
"""

from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.identity import ConfigIdentity
from client_sdk.mechanisms.index_wire import check_index, decode_indices
from client_sdk.mechanisms.numeric.device import four_u64
from client_sdk.mechanisms.numeric.grid import DEFAULT_GRID, Grid
from client_sdk.mechanisms.numeric.tally import NumericTally
from client_sdk.mechanisms.state import exact_int
from client_sdk.mechanisms.validation import check_epsilon

#: Most reports summed per NumPy block when tallying; fewer when a block's int64 sums could
#: overflow (:meth:`NumericMechanism.tally_block`).
_BLOCK = 1 << 20
_INT64_MAX = (1 << 63) - 1
#: Values perturbed per NumPy chunk by ``perturb_many``. Its int64/float64 temporaries are then
#: 64 KiB, below glibc's 128 KiB mmap threshold: each is reused from the heap instead of being
#: mapped and page-faulted afresh (2**15 ran at 16 M values/s here, 2**13 at 40 M, 2**11 at 14 M:
#: NumPy's per-call overhead; bench/numeric.py --only speed).
_CHUNK = 1 << 13
_FOUR_U64 = struct.Struct("<4Q")


class NumericMechanism(ConfigIdentity, ABC):
    """An epsilon-LDP randomiser of one bounded number, exact on declared grids."""

    name: ClassVar[str]
    #: What the estimator returns: ``"mean"`` or ``"distribution"``.
    kind: ClassVar[Literal["mean", "distribution"]]
    #: Names of the integer sums in a :class:`NumericTally` of this mechanism.
    tally_fields: ClassVar[tuple[str, ...]]

    # -- capabilities (the same names as ``Mechanism``'s; see there) --------------------------

    #: The frequency post-processors do not apply to numeric estimates.
    postprocessable: ClassVar[bool] = False
    #: No closed-form frequency MLE: not a frequency oracle.
    exact_channel: ClassVar[bool] = False
    #: Whether a device reports through ``perturb_memoized(x, secret, campaign=...)``.
    memoized: ClassVar[bool] = False

    @property
    def permanent_epsilon(self) -> float | None:
        """What unlimited reports by one device reveal, for :attr:`memoized` mechanisms; None."""
        return None

    @property
    def exact_support_size(self) -> int | None:
        """Not a frequency oracle: None."""
        return None

    def __init__(self, *, epsilon: float, bounds: Any, grid: int = DEFAULT_GRID) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.grid = Grid(bounds, grid)

    # -- identity ---------------------------------------------------------------------------

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.grid.low, self.grid.high)

    def params(self) -> dict[str, Any]:
        """Parameters that fix the mechanism besides epsilon and bounds."""
        return {"grid": self.grid.size}

    def config(self) -> dict[str, Any]:
        """Everything a device needs to rebuild this mechanism; JSON-safe."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "bounds": [self.grid.low, self.grid.high],
            "params": self.params(),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, bounds={self.bounds!r}, "
            f"params={self.params()})"
        )

    # -- privacy ----------------------------------------------------------------------------

    @property
    @abstractmethod
    def realised_epsilon(self) -> float:
        """ln of the largest output-probability ratio of the sampler that runs (<= epsilon)."""

    @property
    @abstractmethod
    def output_size(self) -> int:
        """Reports are integers in ``[0, output_size)``."""

    @abstractmethod
    def output_weights(self, i: int) -> tuple[int, list[int]]:
        """``(denominator, weights)``: ``P[report = y | grid input i] = weights[y] / denominator``.

        Exact integers; the weights sum to the denominator.
        """

    def worst_inputs(self) -> tuple[int, ...]:
        """Grid inputs among which the worst privacy ratio is attained (see the subclass proof)."""
        return (0, self.grid.size)

    # -- reports ----------------------------------------------------------------------------

    def perturb(self, x: float) -> int:
        """The wire report of one device holding the number ``x`` (OS randomness, no NumPy).

        ``x`` is clipped into the bounds and seen only here.
        """
        # One OS call per report: a word for the rounding, three for the mechanism.
        r, *words = _FOUR_U64.unpack(os.urandom(32))
        return self._perturb_grid(self.grid.round(x, r), words)  # type: ignore[arg-type]

    def perturb_index(self, i: int) -> int:
        """The report for grid input ``i`` in ``[0, grid]``, OS randomness."""
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= self.grid.size:
            raise InvalidParameter(f"grid index must be an int in [0, {self.grid.size}], got {i!r}")
        return self._perturb_grid(i, four_u64()[1:])

    @abstractmethod
    def _perturb_grid(self, i: int, words: tuple[int, ...]) -> int:
        """One report for grid input ``i`` from three uniform 64-bit OS ``words``."""

    def perturb_many(self, values: Any, *, rng: Any = None) -> Any:
        """Reports (int64 array) for an array of numbers; vectorised, for simulation and tests.

        ``rng`` is an int seed or ``numpy.random.Generator``; None seeds one from the OS.
        """
        import numpy as np

        from client_sdk.mechanisms.randomness import require_generator

        gen = require_generator(rng)
        try:
            arr = np.asarray(values, dtype=float)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(f"values must be numbers: {exc}") from None
        if arr.ndim != 1:
            raise InvalidParameter("values must be a 1-D sequence of numbers")
        out = np.empty(arr.size, dtype=np.int64)
        for start in range(0, arr.size, _CHUNK):
            chunk = arr[start : start + _CHUNK]
            out[start : start + chunk.size] = self._perturb_grid_batch(
                self.grid.round_many(chunk, gen), gen
            )
        return out

    def perturb_grid_many(self, indices: Any, *, rng: Any = None) -> Any:
        """Reports for an array of grid inputs (int, ``[0, grid]``)."""
        import numpy as np

        from client_sdk.mechanisms.randomness import require_generator

        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise InvalidParameter("grid indices must be a 1-D integer array")
        if idx.size and (idx.min() < 0 or idx.max() > self.grid.size):
            raise InvalidParameter(f"grid indices must lie in [0, {self.grid.size}]")
        return self._perturb_grid_batch(idx.astype(np.int64, copy=False), require_generator(rng))

    @abstractmethod
    def _perturb_grid_batch(self, indices: Any, gen: Any) -> Any:
        """Vectorised reports for int64 grid inputs."""

    # -- wire form --------------------------------------------------------------------------

    def _bad(self, message: str, index: int | None = None) -> InvalidReport:
        where = f"report #{index}: " if index is not None else ""
        return InvalidReport(f"{where}{message} (mechanism {self.name})", index=index)

    def check_payload(self, payload: object) -> int:
        """``payload`` if it is an integer in ``[0, output_size)``, else :class:`InvalidReport`."""
        return check_index(payload, self.output_size, self._bad)

    def encode_many(self, batch: Any) -> list[int]:
        """Wire payloads (JSON integers) of a batch array."""
        return [int(v) for v in batch.tolist()]

    def decode_many(self, payloads: Sequence[object]) -> Any:
        """int64 array of wire payloads; :class:`InvalidReport` names the first bad index."""
        return decode_indices(payloads, self.output_size, self.check_payload)

    # -- aggregation ------------------------------------------------------------------------

    def tally(self, reports: Any | Iterable[object]) -> NumericTally:
        """The exact tally of a batch array or of a sequence of wire payloads."""
        import numpy as np

        if isinstance(reports, np.ndarray):
            batch = reports
            if batch.ndim != 1 or (batch.size and not np.issubdtype(batch.dtype, np.integer)):
                raise InvalidParameter("a report batch is a 1-D integer array")
            if batch.size and (batch.min() < 0 or batch.max() >= self.output_size):
                raise InvalidParameter(f"batch reports must lie in [0, {self.output_size})")
            batch = batch.astype(np.int64, copy=False)
        else:
            batch = self.decode_many(list(reports))
        sums = [0] * len(self.tally_fields)
        block = self.tally_block
        for start in range(0, batch.size, block):
            for f, v in enumerate(self._block_sums(batch[start : start + block])):
                sums[f] += v
        return NumericTally(int(batch.size), tuple(sums))

    @property
    def tally_block(self) -> int:
        """Reports per NumPy block in :meth:`tally`: at most 2**20, and few enough that no int64
        sum of a block can overflow (each of a block's summed terms is at most
        :meth:`_largest_tally_term`), so the tally is exact for every grid."""
        return max(1, min(_BLOCK, _INT64_MAX // max(1, self._largest_tally_term())))

    def _largest_tally_term(self) -> int:
        """The largest term one report adds to a NumPy sum of :meth:`_block_sums`: the largest
        report by default (sums of reports or counts); the square of it for sums of squares."""
        return self.output_size - 1

    @abstractmethod
    def _block_sums(self, batch: Any) -> tuple[int, ...]:
        """The tally sums of at most :attr:`tally_block` reports, as Python ints."""

    def empty_tally(self) -> NumericTally:
        """The tally of no reports (the neutral element of ``+``)."""
        return NumericTally.empty(len(self.tally_fields))

    def tally_from(self, n: int, vector: Sequence[int]) -> NumericTally:
        """Rebuild a tally from its generic form ``(n, vector())``; checks the layout."""
        return self.check_tally(
            NumericTally(exact_int(n, "a tally's n"), tuple(exact_int(v, "a sum") for v in vector))
        )

    def clip(self, x: float) -> float:
        """``x`` clipped into the bounds (what the device reports; NaN is refused)."""
        from client_sdk.mechanisms.numeric.grid import check_value

        value = check_value(x)
        return min(max(value, self.grid.low), self.grid.high)

    def check_tally(self, tally: NumericTally) -> NumericTally:
        """``tally`` if its layout fits this mechanism, else :class:`InvalidParameter`."""
        if not isinstance(tally, NumericTally):
            raise InvalidParameter(f"expected a NumericTally, got {type(tally).__name__}")
        if len(tally.values) != len(self.tally_fields):
            raise InvalidParameter(
                f"a {self.name} tally has {len(self.tally_fields)} sums "
                f"({', '.join(self.tally_fields)}), got {len(tally.values)}"
            )
        return tally
