"""``ldp simulate --open-domain zipf|adult``: discovering strings nobody listed (issue 16).

Devices hold one string each and report it through ``pem`` (the Prefix Extending Method with
its library defaults: CMS oracle with optimized flips, sketch 1024 x 16 per prefix level), run
in-process (``perturb_many``, a seeded generator per setting); the collector side is
``aggregator.discover(mech, tally, top=k)`` for k = 10 and 50. Populations
(:mod:`simulator.openended_data`):

* ``zipf``: Zipf(1.1) over 10**5 synthetic strings of 3 to 16 bytes; at each ``n`` of the
  sweep the population's counts are ``n p_i`` (largest remainders);
* ``adult``: Adult (train) ``native-country`` as unknown strings (42 values, 90% one value);
  smaller ``n`` are random subsamples (a new one per repetition), the largest is all 32,561.

For every epsilon, ``n`` and repetition:

* **precision, recall, F1** of the discovered list against the population's true top k
  (``strings[:k]``; Adult has only 42 values, so its "top 50" is all 42);
* **count error**: the RMSE of the discovered items' estimated counts against their true counts
  among the ``n`` devices (0 for a string nobody holds), the square root of the issue's "count
  MSE of the discovered items";
* which true top-10 values are **found**: listed by ``discover(top=10)`` *and* significant
  (above the Bonferroni threshold). The **smallest n** of a value at an epsilon is the smallest
  ``n`` of the grid from which on (that ``n`` and every larger one) it is found in at least half
  the repetitions; none if it is not found so at the largest ``n``.

Only perturbed reports reach the estimator; the true values serve as the yardstick. HTTP mode
is not offered: this tree's collector has no open-domain campaigns yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.openended import discover
from client_sdk.mechanisms.openended import OpenDomainMechanism, create_open
from simulator.errors import InvalidSetting
from simulator.openended_data import adult_population, devices, prf, zipf_population
from simulator.sweep import check_setting_epsilon

#: The populations ``--open-domain`` offers.
OPEN_DATA = ("zipf", "adult")
#: The discovery mechanism and its parameters (the library defaults).
OPEN_MECHANISM = "pem"
DEFAULT_OPEN_EPSILONS = (1.0, 2.0, 4.0, 8.0)
DEFAULT_OPEN_REPETITIONS = 3
#: The largest n of the default Zipf sweep (``--max-devices`` raises it, e.g. to 10**6).
DEFAULT_MAX_DEVICES = 100_000
#: Steps of the n grid below the largest n (about half a decade apart).
SIZE_STEPS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000)
#: The list lengths discovered and scored.
TOPS = (10, 50)
#: Values whose smallest n is reported: the true top ``FOUND_TOP``.
FOUND_TOP = 10
#: Distinct strings of the Zipf population and its exponent.
ZIPF_DISTINCT = 100_000
ZIPF_EXPONENT = 1.1
#: Devices perturbed and tallied at once (bounds memory at large n).
CHUNK = 100_000


def default_sizes(data: str, max_devices: int = DEFAULT_MAX_DEVICES) -> tuple[int, ...]:
    """The n grid: ``SIZE_STEPS`` below the largest n, then the largest n (Adult: 32,561)."""
    top = int(_population(data).counts.sum()) if data == "adult" else max_devices
    return (*(s for s in SIZE_STEPS if s < top), top)


@dataclass(frozen=True)
class OpenDomainSettings:
    """What to run: the population, epsilons, the n grid (increasing), repetitions, seed."""

    data: str = "zipf"
    epsilons: tuple[float, ...] = DEFAULT_OPEN_EPSILONS
    sizes: tuple[int, ...] = (1_000, 3_000, 10_000, 30_000, DEFAULT_MAX_DEVICES)
    repetitions: int = DEFAULT_OPEN_REPETITIONS
    seed: int = 0

    def __post_init__(self) -> None:
        if self.data not in OPEN_DATA:
            raise InvalidSetting(f"open-domain data must be one of {OPEN_DATA}, got {self.data!r}")
        if not self.epsilons:
            raise InvalidSetting("give at least one epsilon")
        for e in self.epsilons:
            check_setting_epsilon(e)  # every mechanism's range, before any cell runs
        r = self.repetitions
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise InvalidSetting(f"repetitions must be an integer >= 1, got {r!r}")
        if not self.sizes or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 100 for n in self.sizes
        ):
            raise InvalidSetting(f"sizes must be integers >= 100, got {self.sizes!r}")
        if list(self.sizes) != sorted(set(self.sizes)):
            raise InvalidSetting(f"sizes must be strictly increasing, got {self.sizes!r}")
        if self.data == "adult":
            full = int(_population("adult").counts.sum())
            if self.sizes[-1] > full:
                raise InvalidSetting(
                    f"Adult native-country has {full:,} devices; sizes must not exceed it, "
                    f"got {self.sizes[-1]:,}"
                )


@dataclass(frozen=True)
class Population:
    """A ranked population: ``values[i]`` holds ``counts[i]`` devices, largest first."""

    data: str
    description: str
    values: list[str]
    counts: np.ndarray
    max_length: int


@dataclass(frozen=True)
class TopKScore:
    """One discovered list scored against the true top ``k``."""

    k: int
    precision: float
    recall: float
    f1: float
    #: RMSE of the listed items' counts against their true counts; None if nothing was listed.
    count_rmse: float | None
    listed: int
    significant: int


@dataclass(frozen=True)
class OpenDomainRun:
    """One run: ``n`` devices at ``epsilon``, repetition ``repetition``."""

    epsilon: float
    n: int
    repetition: int
    scores: list[TopKScore]
    #: 1-based ranks of the true top-10 values found (listed by top=10 and significant).
    found_ranks: list[int]
    seconds: float


@dataclass(frozen=True)
class OpenDomainPoint:
    """The runs at one (epsilon, n, k), over the repetitions: means, F1's spread, pooled RMSE."""

    epsilon: float
    n: int
    k: int
    repetitions: int
    precision: float
    recall: float
    f1: float
    f1_std: float
    #: sqrt of the mean over repetitions of the count MSE (None if no run listed anything).
    count_rmse: float | None
    significant: float


@dataclass(frozen=True)
class FirstFound:
    """A true top-10 value and the smallest n at which it is found, per epsilon."""

    rank: int
    value: str
    share: float
    #: aligned with the settings' epsilons; None: not found (so) at the largest n.
    smallest_n: list[int | None]
    #: ``[epsilon][size]``: the fraction of repetitions in which it was found.
    found_fraction: list[list[float]]


@dataclass(frozen=True)
class OpenDomainResults:
    """Everything the scenario measured (``to_dict`` is JSON-safe)."""

    settings: OpenDomainSettings
    description: str
    distinct: int
    max_length: int
    mechanism: dict[str, Any]
    top_counts: list[int]
    runs: list[OpenDomainRun]
    points: list[OpenDomainPoint]
    first_found: list[FirstFound]
    seconds: float
    tops: tuple[int, ...] = field(default=TOPS)

    def point(self, epsilon: float, n: int, k: int) -> OpenDomainPoint:
        return next(p for p in self.points if (p.epsilon, p.n, p.k) == (epsilon, n, k))

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


_POPULATIONS: dict[str, Population] = {}


def _population(data: str) -> Population:
    """The population's ranking (Zipf: at 10**6 devices, the ranking of ``p_i``)."""
    if data not in _POPULATIONS:
        if data == "zipf":
            values, counts = zipf_population(10**6, distinct=ZIPF_DISTINCT, s=ZIPF_EXPONENT)
            desc = f"Zipf({ZIPF_EXPONENT:g}) over {ZIPF_DISTINCT:,} synthetic strings"
            max_length = 16
        elif data == "adult":
            values, counts = adult_population()
            desc = f"Adult (train) native-country as unknown strings ({len(values)} values)"
            max_length = max(len(v.encode()) for v in values)
        else:
            raise InvalidSetting(f"open-domain data must be one of {OPEN_DATA}, got {data!r}")
        _POPULATIONS[data] = Population(data, desc, values, counts, max_length)
    return _POPULATIONS[data]


def _devices_at(pop: Population, n: int, rep: int, seed: int) -> list[str]:
    """The ``n`` devices of one repetition: Zipf at ``n``; Adult subsampled (all at full n)."""
    shuffle = seed * 1_000_003 + rep
    if pop.data == "zipf":
        values, counts = zipf_population(n, distinct=ZIPF_DISTINCT, s=ZIPF_EXPONENT)
        return devices(values, counts, shuffle)
    return devices(pop.values, pop.counts, shuffle)[:n]


def _run_one(
    pop: Population, mech: OpenDomainMechanism, held: list[str], gen: np.random.Generator
) -> tuple[list[TopKScore], list[int]]:
    tally = mech.empty_tally()
    for start in range(0, len(held), CHUNK):
        tally = tally + mech.tally(mech.perturb_many(held[start : start + CHUNK], rng=gen))
    truth: dict[str, int] = {}
    for v in held:
        truth[v] = truth.get(v, 0) + 1
    scores: list[TopKScore] = []
    found: list[int] = []
    for top in TOPS:
        k = min(top, len(pop.values))
        result = discover(mech, tally, top=top)
        listed = result.values
        p, r, f = prf(listed, pop.values[:k])
        errors = [(i.count - truth.get(i.value, 0)) ** 2 for i in result.items]
        scores.append(
            TopKScore(
                k=k,
                precision=p,
                recall=r,
                f1=f,
                count_rmse=math.sqrt(float(np.mean(errors))) if errors else None,
                listed=len(listed),
                significant=sum(i.significant for i in result.items),
            )
        )
        if top == FOUND_TOP:
            rank = {v: i + 1 for i, v in enumerate(pop.values[:FOUND_TOP])}
            found = sorted(rank[i.value] for i in result.items if i.significant and i.value in rank)
    return scores, found


def run_open_domain(
    settings: OpenDomainSettings, progress: Callable[[str], Any] | None = None
) -> OpenDomainResults:
    """Run the scenario (see the module docstring)."""
    start = time.perf_counter()
    pop = _population(settings.data)
    runs: list[OpenDomainRun] = []
    mech_config: dict[str, Any] = {}
    for eps in settings.epsilons:
        mech = create_open(OPEN_MECHANISM, epsilon=eps, max_length=pop.max_length)
        mech_config = {"mechanism": mech.name, "max_length": mech.max_length, **mech.params()}
        for n in settings.sizes:
            t0 = time.perf_counter()
            for rep in range(settings.repetitions):
                r0 = time.perf_counter()
                held = _devices_at(pop, n, rep, settings.seed)
                gen = np.random.default_rng([settings.seed, rep, n, int(round(eps * 1000))])
                scores, found = _run_one(pop, mech, held, gen)
                runs.append(OpenDomainRun(eps, n, rep, scores, found, time.perf_counter() - r0))
            if progress:
                progress(
                    f"eps {eps:g}, n {n:,}: {settings.repetitions} runs in "
                    f"{time.perf_counter() - t0:.1f} s"
                )
    largest = settings.sizes[-1]
    if settings.data == "zipf":
        top_counts = zipf_population(largest, distinct=ZIPF_DISTINCT, s=ZIPF_EXPONENT)[1]
    else:
        top_counts = pop.counts
    return OpenDomainResults(
        settings=settings,
        description=pop.description,
        distinct=len(pop.values),
        max_length=pop.max_length,
        mechanism=mech_config,
        top_counts=[int(c) for c in top_counts[: max(TOPS)]],
        runs=runs,
        points=_points(settings, runs),
        first_found=_first_found(settings, pop, runs),
        seconds=time.perf_counter() - start,
    )


def _points(settings: OpenDomainSettings, runs: list[OpenDomainRun]) -> list[OpenDomainPoint]:
    points = []
    for eps in settings.epsilons:
        for n in settings.sizes:
            mine = [r for r in runs if r.epsilon == eps and r.n == n]
            for j, _top in enumerate(TOPS):
                sc = [r.scores[j] for r in mine]
                f1 = np.array([s.f1 for s in sc])
                mses = [s.count_rmse**2 for s in sc if s.count_rmse is not None]
                points.append(
                    OpenDomainPoint(
                        epsilon=eps,
                        n=n,
                        k=sc[0].k,
                        repetitions=len(sc),
                        precision=float(np.mean([s.precision for s in sc])),
                        recall=float(np.mean([s.recall for s in sc])),
                        f1=float(f1.mean()),
                        f1_std=float(f1.std(ddof=1)) if f1.size > 1 else 0.0,
                        count_rmse=math.sqrt(float(np.mean(mses))) if mses else None,
                        significant=float(np.mean([s.significant for s in sc])),
                    )
                )
    return points


def _first_found(
    settings: OpenDomainSettings, pop: Population, runs: list[OpenDomainRun]
) -> list[FirstFound]:
    total = float(pop.counts.sum())
    out = []
    for rank in range(1, min(FOUND_TOP, len(pop.values)) + 1):
        fractions: list[list[float]] = []
        smallest: list[int | None] = []
        for eps in settings.epsilons:
            row = []
            for n in settings.sizes:
                mine = [r for r in runs if r.epsilon == eps and r.n == n]
                row.append(sum(rank in r.found_ranks for r in mine) / len(mine))
            fractions.append(row)
            first: int | None = None
            for n, frac in zip(reversed(settings.sizes), reversed(row), strict=True):
                if frac < 0.5:
                    break
                first = n
            smallest.append(first)
        out.append(
            FirstFound(
                rank=rank,
                value=pop.values[rank - 1],
                share=float(pop.counts[rank - 1]) / total,
                smallest_n=smallest,
                found_fraction=fractions,
            )
        )
    return out


def _rmse(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def table_lines(results: OpenDomainResults) -> list[str]:
    """The scenario's tables as Markdown lines (also printed by ``ldp simulate``)."""
    s = results.settings
    m = results.mechanism
    largest = s.sizes[-1]
    eps_cols = " | ".join(f"ε={e:g}" for e in s.epsilons)
    bar = "|---:" * len(s.epsilons) + "|"
    k50 = min(TOPS[-1], results.distinct)
    params = ", ".join(f"{k} {v}" for k, v in m.items() if k not in ("mechanism", "max_length"))
    lines = [
        f"# Open-domain discovery: {results.description}",
        "",
        f"{m.get('mechanism')} ({params}), max_length {results.max_length} bytes; "
        f"n in {', '.join(f'{n:,}' for n in s.sizes)}; {s.repetitions} repetition(s); "
        f"seed {s.seed}; {results.seconds:.1f} s in-process.",
        f"True top-10 counts at n = {largest:,}: {results.top_counts[:10]}; "
        f"{min(50, results.distinct)}th: {results.top_counts[min(50, results.distinct) - 1]}.",
        "",
        f"## Against epsilon (n = {largest:,})",
        "",
        "Mean over repetitions (F1 ± its standard deviation); count RMSE over the listed items "
        "(true count 0 if nobody holds it); sig: listed items above the threshold.",
        "",
        f"| ε | top-10 P / R / F1 | count RMSE | sig | top-{k50} P / R / F1 | count RMSE | sig |",
        "|---:|---|---:|---:|---|---:|---:|",
    ]
    for eps in s.epsilons:
        cells = []
        for k in TOPS:
            p = results.point(eps, largest, min(k, results.distinct))
            cells.append(
                f"{p.precision:.2f} / {p.recall:.2f} / {p.f1:.2f} ± {p.f1_std:.2f} | "
                f"{_rmse(p.count_rmse)} | {p.significant:.1f}"
            )
        lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Against n: F1 of the top 10 / top {k50} (count RMSE of the top 10)",
        "",
        f"| n | {eps_cols} |",
        "|---:" + bar,
    ]
    for n in s.sizes:
        cells = []
        for eps in s.epsilons:
            a = results.point(eps, n, min(10, results.distinct))
            b = results.point(eps, n, k50)
            cells.append(f"{a.f1:.2f} / {b.f1:.2f} ({_rmse(a.count_rmse)})")
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Smallest n at which each true top-10 value is found",
        "",
        "Found: listed by `discover(top=10)` and significant. Smallest n: from it on, found in "
        f"at least half the repetitions at every n of the grid; '> {largest:,}': not so.",
        "",
        f"| rank | value | share | {eps_cols} |",
        "|---:|---|---:" + bar,
    ]
    for f in results.first_found:
        cells = [f"{n:,}" if n is not None else f"> {largest:,}" for n in f.smallest_n]
        lines.append(f"| {f.rank} | {f.value} | {f.share:.2%} | " + " | ".join(cells) + " |")
    return lines


def write_open_domain_outputs(
    results: OpenDomainResults, out_dir: str | Path, *, plots: bool = True
) -> list[Path]:
    """Write ``openended_<data>.md``, ``.json`` and (``plots``) the PNGs; report first."""
    from simulator.report import write_scenario_outputs

    def make_plots(out: Path) -> list[Path]:
        from simulator.openended_plots import open_domain_plots

        return open_domain_plots(results, out)

    stem = f"openended_{results.settings.data}"
    return write_scenario_outputs(
        out_dir, stem, table_lines(results), results.to_dict(), make_plots if plots else None
    )
