"""What every open-domain mechanism provides (issue 16): the contract, written once.

An open-domain mechanism is built from ``epsilon`` and ``max_length`` (bytes of UTF-8 after NFC,
:mod:`.strings`) instead of a domain. Then:

* ``perturb(value)``: one report for any string (OS randomness, pure Python, no NumPy);
* ``perturb_many(values, rng=...)``: a batch array (simulator and tests);
* ``encode_many`` / ``check_payload`` / ``decode_many``: the JSON wire form and its strict parser;
* ``tally(reports)``: a :class:`~.tally.SketchTally` of exact integers, mergeable by addition,
  whose size is fixed by the sketch parameters, never by the number of reports;
* ``output_distribution(value)``: the exact output distribution (Fractions from the integer
  thresholds) over the whole output space, for small sketches (the exact-ratio test);
* ``realised_epsilon``: ln of the largest output-probability ratio, never above ``epsilon``.

Privacy: ``P[y | s] <= e^realised_epsilon P[y | s']`` for all strings ``s, s'`` and outputs
``y``: every random choice that does not depend on the value (row, column, prefix level) is
uniform and independent of it, and the value-dependent bits are randomised by thresholds over
2**64 whose worst ratio is the realised epsilon. The hash functions are public.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.identity import ConfigIdentity
from client_sdk.mechanisms.openended.strings import check_max_length, normalise
from client_sdk.mechanisms.randomness import RandomSource, as_generator
from client_sdk.mechanisms.validation import check_epsilon

if TYPE_CHECKING:
    import numpy as np

    from client_sdk.mechanisms.openended.tally import SketchTally


#: Reports decoded and counted at a time by ``tally`` (bounds its memory, see there).
TALLY_CHUNK = 1 << 16


class OpenDomainMechanism(ConfigIdentity, ABC):
    """An epsilon-LDP randomiser of one string from an unlisted (open) domain."""

    name: ClassVar[str]
    #: What the estimator returns: counts of strings asked about, or discovered.
    kind: ClassVar[Literal["open_domain"]] = "open_domain"
    #: Whether ``aggregator.discover`` finds heavy hitters without candidates.
    discovers: ClassVar[bool] = False

    # -- capabilities (the same names as ``Mechanism``'s) ------------------------------------
    postprocessable: ClassVar[bool] = False
    exact_channel: ClassVar[bool] = False
    memoized: ClassVar[bool] = False

    @property
    def permanent_epsilon(self) -> float | None:
        return None

    @property
    def exact_support_size(self) -> int | None:
        return None

    def __init__(self, *, epsilon: float, max_length: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.max_length = check_max_length(max_length)

    # -- identity ---------------------------------------------------------------------------

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Public parameters that fix the mechanism besides epsilon and max_length."""

    def config(self) -> dict[str, Any]:
        """Everything a device needs to rebuild this mechanism; JSON-safe."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "max_length": self.max_length,
            "params": self.params(),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, max_length={self.max_length}, "
            f"params={self.params()})"
        )

    # -- privacy and size -------------------------------------------------------------------

    @property
    @abstractmethod
    def realised_epsilon(self) -> float:
        """ln of the largest output-probability ratio of the sampler that runs (<= epsilon)."""

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Information content of one report in bits."""

    @property
    def report_bytes(self) -> int:
        return math.ceil(self.report_bits / 8)

    # -- reports ----------------------------------------------------------------------------

    def normalise(self, value: object) -> bytes:
        """The value's bytes (NFC, UTF-8, at most ``max_length``), or a clear error."""
        return normalise(value, self.max_length)

    def perturb(self, value: str, *, rng: RandomSource = None) -> list[Any]:
        """The wire report of one device holding ``value`` (OS randomness unless ``rng``)."""
        return self._perturb_one(self.normalise(value), as_generator(rng))

    @abstractmethod
    def _perturb_one(self, data: bytes, gen: np.random.Generator | None) -> list[Any]:
        """One report for normalised bytes; ``gen`` None means OS randomness."""

    def perturb_many(self, values: Iterable[str], *, rng: RandomSource = None) -> np.ndarray:
        """A batch array of reports for many devices (simulator and tests)."""
        from client_sdk.mechanisms.randomness import require_generator, require_numpy

        require_numpy()
        if isinstance(values, (str, bytes)):
            raise InvalidParameter("values must be a sequence of strings, not one string")
        cache: dict[str, bytes] = {}
        datas = []
        for v in values:
            d = cache.get(v) if isinstance(v, str) else None
            if d is None:
                d = self.normalise(v)
                cache[v] = d
            datas.append(d)
        return self._perturb_batch(datas, require_generator(rng))

    @abstractmethod
    def _perturb_batch(self, datas: list[bytes], gen: np.random.Generator) -> np.ndarray:
        """Vectorised reports for normalised bytes."""

    @abstractmethod
    def encode_many(self, batch: np.ndarray) -> list[Any]:
        """Wire payloads (JSON-safe lists) of a batch array."""

    @abstractmethod
    def _check(self, payload: list[Any]) -> list[Any]:
        """A list payload in canonical form, or :class:`InvalidReport` (no index)."""

    def check_payload(self, payload: object) -> list[Any]:
        """``payload`` in canonical form, or :class:`InvalidReport` saying why."""
        if not isinstance(payload, list):
            raise self._bad(f"a {self.name} report is a JSON list, got {type(payload).__name__}")
        try:
            return self._check(payload)
        except InvalidReport as exc:
            raise self._bad(exc.reason) from None

    @abstractmethod
    def _decode_checked(self, payloads: list[list[Any]]) -> np.ndarray:
        """Batch array of payloads that passed :meth:`check_payload`."""

    def _decode_fast(self, payloads: Sequence[object]) -> np.ndarray | None:
        """The batch array of well-formed payloads, vectorised, or None to check one by one."""
        return None

    def decode_many(self, payloads: Sequence[object], *, offset: int = 0) -> np.ndarray:
        """Batch array of wire payloads; :class:`InvalidReport` names the first bad index
        (counted from ``offset``: the position of ``payloads[0]`` in a longer batch)."""
        if payloads:
            fast = self._decode_fast(payloads)
            if fast is not None:
                return fast
        checked = []
        for i, payload in enumerate(payloads, start=offset):
            try:
                checked.append(self.check_payload(payload))
            except InvalidReport as exc:
                raise InvalidReport(f"report #{i}: {exc.reason}", index=i) from None
        return self._decode_checked(checked)

    def _bad(self, message: str) -> InvalidReport:
        return InvalidReport(f"{message} (mechanism {self.name})")

    # -- aggregation ------------------------------------------------------------------------

    @property
    @abstractmethod
    def tally_size(self) -> int:
        """Integers in this mechanism's tally (fixed by the sketch parameters)."""

    @abstractmethod
    def _counts(self, batch: np.ndarray) -> np.ndarray:
        """The tally counts of a batch array."""

    def tally(self, reports: np.ndarray | Iterable[object]) -> SketchTally:
        """The exact, mergeable tally of a batch array or of wire payloads (any iterable).

        Reports are decoded and counted ``TALLY_CHUNK`` at a time, so the memory used beyond
        the caller's input is bounded by the chunk and the sketch, never by the number of
        reports (an iterator is consumed chunk by chunk). A bad payload raises
        :class:`InvalidReport` with its index in the whole input, and nothing is tallied.
        """
        import numpy as np

        from client_sdk.mechanisms.openended.tally import SketchTally

        counts = np.zeros(self.tally_size, dtype=np.int64)
        n = 0
        if isinstance(reports, np.ndarray):
            for start in range(0, reports.shape[0], TALLY_CHUNK):
                counts += self._counts(reports[start : start + TALLY_CHUNK])
            return SketchTally(int(reports.shape[0]), counts)
        if isinstance(reports, Sequence):
            chunks: Iterable[Sequence[object]] = (
                reports[i : i + TALLY_CHUNK] for i in range(0, len(reports), TALLY_CHUNK)
            )
        else:
            it = iter(reports)
            chunks = iter(lambda: list(itertools.islice(it, TALLY_CHUNK)), [])
        for chunk in chunks:
            counts += self._counts(self.decode_many(chunk, offset=n))
            n += len(chunk)
        return SketchTally(n, counts)

    def empty_tally(self) -> SketchTally:
        from client_sdk.mechanisms.openended.tally import SketchTally

        return SketchTally.empty(self.tally_size)

    def check_tally(self, tally: object) -> SketchTally:
        from client_sdk.mechanisms.openended.tally import SketchTally

        if not isinstance(tally, SketchTally) or tally.size != self.tally_size:
            raise InvalidParameter(
                f"expected a {self.name} sketch tally of {self.tally_size} counts, got {tally!r}"
            )
        return tally

    def tally_from(self, n: int, vector: Sequence[int]) -> SketchTally:
        """Rebuild a tally from its generic form ``(n, vector())``; checks the layout."""
        import numpy as np

        from client_sdk.mechanisms.openended.tally import SketchTally

        if len(vector) != self.tally_size:
            raise InvalidParameter(
                f"a {self.name} tally has {self.tally_size} counts, got {len(vector)}"
            )
        return SketchTally(n, np.asarray(vector))  # checked there (state.count_array)

    # -- exact output distribution ----------------------------------------------------------

    @abstractmethod
    def output_distribution(self, value: str) -> dict[Hashable, Fraction]:
        """``P[report | value]`` exactly over the whole output space (small sketches only)."""

    @abstractmethod
    def output_key(self, payload: object) -> Hashable:
        """The key of a wire payload in :meth:`output_distribution`."""
