"""Sweeps over attributes x epsilons x mechanisms x repetitions, with baselines and theory.

Each cell replays every row of one attribute as a device through one mechanism at one epsilon,
``repetitions`` times, through a :class:`Backend`: :class:`InProcessBackend` (vectorised
``perturb_many`` -> ``tally`` -> ``aggregator.estimate``) or the HTTP backend of
:mod:`simulator.http_mode` (the SDK's outbox and upload code, a collector, the analyst API).
Both use the one mechanism definition in ``client_sdk.mechanisms``.

For every cell the result holds the metrics of :mod:`simulator.metrics` (mean and spread over
repetitions), the mechanism's closed-form theory (``count_variance(n, true_counts)``: expected
MSE, RMSE and MAE of the counts), and the same metrics for the central Laplace and Gaussian
baselines at the same epsilon on the true histogram, with the ratio local/central.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from aggregator import Estimate, estimate
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import AUTO_CANDIDATES, MECHANISMS, Mechanism, create
from client_sdk.mechanisms.registry import PRESETS
from client_sdk.mechanisms.validation import check_epsilon
from simulator.adult import Dataset
from simulator.central import CentralBaseline, gaussian_baseline, laplace_baseline
from simulator.errors import InvalidSetting
from simulator.metrics import all_metrics, summarise

DEFAULT_ATTRIBUTES = ("occupation", "education", "marital-status", "race", "native-country")
DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 4.0)
DEFAULT_MECHANISMS = ("auto",)
DEFAULT_REPETITIONS = 20
DEFAULT_SEED = 2026
DEFAULT_LEVEL = 0.95

Progress = Callable[[int], None]


def expand_mechanisms(requested: Sequence[str], k: int) -> list[str]:
    """The mechanism names a cell list uses for a domain of ``k`` values.

    ``all`` stands for every registered mechanism that accepts ``k`` values (``rr`` only when
    k = 2) plus ``auto``; presets (``rr-two-coin``, ``sue-book``) and single names pass through.
    """
    known = {*MECHANISMS, "auto", "all", *PRESETS}
    out: list[str] = []
    for name in requested:
        if name not in known:
            raise InvalidSetting(
                f"unknown mechanism {name!r}; choose from: {', '.join(sorted(known))}"
            )
        names = [*AUTO_CANDIDATES, "rr", "auto"] if name == "all" else [name]
        for each in names:
            if each in ("rr", "rr-two-coin") and k != 2:
                if name == "all":
                    continue
                raise InvalidSetting(
                    f"mechanism {each!r} needs a binary attribute (k = 2), got k = {k}; "
                    "use grr, or an attribute such as sex or income"
                )
            if each not in out:
                out.append(each)
    return out


@dataclass(frozen=True)
class Cell:
    """One setting of a sweep: what a backend must replay."""

    attribute: str
    labels: tuple[str, ...]
    indices: np.ndarray = field(repr=False)
    epsilon: float
    mechanism: str  # as requested: a name, a preset or "auto"


class Backend(Protocol):
    """Turns the rows of a cell into an estimate through some path (in-process, HTTP)."""

    name: str

    def prepare(self, cell: Cell) -> Mechanism:
        """The mechanism that will perturb this cell's reports (``auto`` resolved)."""

    def run(self, cell: Cell, mech: Mechanism, rng: np.random.Generator) -> Estimate:
        """Replay every row once and return the analyst's estimate."""


class InProcessBackend:
    """Vectorised replay: ``perturb_many`` -> ``tally`` -> ``aggregator.estimate``."""

    name = "inprocess"

    def prepare(self, cell: Cell) -> Mechanism:
        return create(cell.mechanism, epsilon=cell.epsilon, domain=list(cell.labels))

    def run(self, cell: Cell, mech: Mechanism, rng: np.random.Generator) -> Estimate:
        batch = mech.perturb_many(cell.indices, rng=rng)
        return estimate(mech, mech.tally(batch))


@dataclass(frozen=True)
class SweepSettings:
    """What to sweep. ``missing`` says how missing values are treated (dropped by default)."""

    attributes: tuple[str, ...] = DEFAULT_ATTRIBUTES
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    repetitions: int = DEFAULT_REPETITIONS
    seed: int = DEFAULT_SEED
    missing: str = "drop"
    level: float = DEFAULT_LEVEL
    example_attribute: str | None = None  # truth-vs-estimate plot; default: the first attribute
    example_epsilon: float | None = None  # default: 1.0 if swept, else the middle epsilon

    def __post_init__(self) -> None:
        if not self.attributes:
            raise InvalidSetting("give at least one attribute, e.g. --attribute occupation")
        if not self.epsilons:
            raise InvalidSetting("give at least one epsilon, e.g. --epsilon 1")
        for eps in self.epsilons:
            # Every mechanism's own range, checked before any cell runs (a central baseline at
            # 1e-300 overflowed before the mechanism could refuse it).
            check_setting_epsilon(eps)
        # A repeated attribute or epsilon would replay the same cell twice under another seed
        # and list it twice in the report; like repeated mechanisms, it counts once.
        object.__setattr__(self, "attributes", tuple(dict.fromkeys(self.attributes)))
        object.__setattr__(self, "epsilons", tuple(dict.fromkeys(float(e) for e in self.epsilons)))
        for name in self.mechanisms:
            if name in PRESETS:
                _check_preset_epsilons(name, self.epsilons)
        if not isinstance(self.repetitions, int) or self.repetitions < 1:
            raise InvalidSetting(f"repetitions must be an integer >= 1, got {self.repetitions!r}")
        if self.missing not in ("drop", "keep"):
            raise InvalidSetting(f"missing must be 'drop' or 'keep', got {self.missing!r}")


def check_setting_epsilon(eps: object) -> float:
    """``eps`` as a float if every mechanism accepts it (a finite number in
    [``MIN_EPSILON``, ``MAX_EPSILON``]); else :class:`InvalidSetting` with the rule."""
    try:
        return check_epsilon(eps)
    except InvalidParameter as exc:
        raise InvalidSetting(str(exc)) from None


def _check_preset_epsilons(name: str, epsilons: Sequence[float]) -> None:
    """A preset (``sue-book``, ``rr-two-coin``) fixes its own epsilon: every swept epsilon must
    be it, or no cell of the preset could run."""
    base, params = PRESETS[name]
    fixed = create(name, domain=["a", "b"]).epsilon
    for eps in epsilons:
        if not math.isclose(eps, fixed, rel_tol=1e-9):
            raise InvalidSetting(
                f"mechanism {name!r} is a preset at a fixed epsilon, {fixed!r} ({base} with "
                f"{', '.join(f'{k} = {v:g}' for k, v in params.items())}); sweep it with "
                f"--epsilon {fixed!r} alone (got {eps:g}), or use {base!r} at any epsilon"
            )


def theory(mech: Mechanism, truth: np.ndarray) -> dict[str, float]:
    """Closed-form errors of the unbiased counts: expected MSE, RMSE, and MAE (normal approx.)."""
    n = int(truth.sum())
    var = np.asarray(mech.count_variance(n, truth), dtype=float)
    return {
        "mse": float(var.mean()),
        "rmse": float(math.sqrt(var.mean())),
        "mae": float(np.mean(np.sqrt(var)) * math.sqrt(2 / math.pi)),
        "std_error_unheld": float(math.sqrt(n * mech.v0)),
    }


def _central_cell(
    base: CentralBaseline, truth: np.ndarray, repetitions: int, rng: np.random.Generator
) -> dict[str, Any]:
    n = float(truth.sum())
    runs, sq = [], []
    for _ in range(repetitions):
        noisy = base.release(truth, rng=rng)
        runs.append(all_metrics(truth, noisy, n))
        sq.append(float(np.mean((noisy - truth) ** 2)))
    return {
        **base.to_dict(),
        "theory": {
            "mse": base.variance,
            "rmse": base.std,
            "mae": base.mean_abs_error,
        },
        "mse": float(np.mean(sq)),
        "metrics": summarise(runs),
    }


def _example_epsilon(settings: SweepSettings) -> float:
    if settings.example_epsilon is not None:
        return settings.example_epsilon
    if 1.0 in settings.epsilons:
        return 1.0
    return sorted(settings.epsilons)[len(settings.epsilons) // 2]


def count_cells(dataset: Dataset, settings: SweepSettings) -> int:
    """Number of (attribute, epsilon, mechanism, repetition) replays a sweep performs."""
    total = 0
    for attribute in settings.attributes:
        k = len(dataset.column(attribute, missing=settings.missing).labels)  # type: ignore[arg-type]
        total += len(expand_mechanisms(settings.mechanisms, k))
    return total * len(settings.epsilons) * settings.repetitions


def run_sweep(
    dataset: Dataset,
    settings: SweepSettings,
    *,
    backend: Backend | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run every cell; return the JSON-safe results (the content of ``results.json``).

    Randomness: the cell at positions (a, e, m) of the attribute, epsilon and mechanism lists
    draws from ``default_rng([seed, a, e, m])``: the same settings give the same numbers, and a
    cell's numbers do not depend on how many repetitions other cells ran. ``progress(1)`` is
    called after each replay.
    """
    backend = backend or InProcessBackend()
    started = time.perf_counter()
    attributes: dict[str, Any] = {}
    central: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    example: dict[str, Any] | None = None
    example_attr = settings.example_attribute or settings.attributes[0]
    example_eps = _example_epsilon(settings)
    replays = 0
    for a_i, attribute in enumerate(settings.attributes):
        labels, indices = dataset.column(attribute, missing=settings.missing)  # type: ignore[arg-type]
        k, n = len(labels), int(indices.size)
        if k < 2:
            raise InvalidSetting(
                f"attribute {attribute!r} has {k} value(s) after missing values were "
                f"{'dropped' if settings.missing == 'drop' else 'kept'}; a domain needs >= 2"
            )
        truth = np.bincount(indices, minlength=k).astype(float)
        attributes[attribute] = {"labels": list(labels), "n": n, "truth": truth.tolist()}
        names = expand_mechanisms(settings.mechanisms, k)
        for e_i, eps in enumerate(settings.epsilons):
            crng = np.random.default_rng([settings.seed, a_i, e_i, 1_000_003])
            lap = _central_cell(laplace_baseline(eps), truth, settings.repetitions, crng)
            gau = _central_cell(gaussian_baseline(eps, n=n), truth, settings.repetitions, crng)
            central.append(
                {"attribute": attribute, "epsilon": eps, "laplace": lap, "gaussian": gau}
            )
            for m_i, name in enumerate(names):
                cell = Cell(attribute, tuple(labels), indices, float(eps), name)
                mech = backend.prepare(cell)
                rng = np.random.default_rng([settings.seed, a_i, e_i, m_i])
                metric_runs, sq = [], []
                last: Estimate | None = None
                for _ in range(settings.repetitions):
                    last = backend.run(cell, mech, rng)
                    metric_runs.append(all_metrics(truth, last.counts, n))
                    sq.append(float(np.mean((last.counts - truth) ** 2)))
                    replays += 1
                    if progress:
                        progress(1)
                th = theory(mech, truth)
                summary = summarise(metric_runs)
                mse = float(np.mean(sq))
                runs.append(
                    {
                        "attribute": attribute,
                        "epsilon": float(eps),
                        "mechanism": name,
                        "resolved": mech.name,
                        "params": mech.params(),
                        "realised_epsilon": mech.realised_epsilon,
                        "k": k,
                        "n": n,
                        "theory": th,
                        "mse": mse,
                        "mse_over_theory": mse / th["mse"],
                        "metrics": summary,
                        "rmse_over_laplace": summary["rmse"]["mean"]
                        / lap["metrics"]["rmse"]["mean"],
                        "rmse_over_gaussian": summary["rmse"]["mean"]
                        / gau["metrics"]["rmse"]["mean"],
                        "theory_rmse_over_laplace": th["rmse"] / lap["theory"]["rmse"],
                    }
                )
                preferred = "auto" if "auto" in names else names[0]
                if last is not None and example is None and attribute == example_attr:
                    if math.isclose(eps, example_eps) and name == preferred:
                        example = _example(last, truth, crng, attribute, eps, settings.level, name)
    return {
        "mode": backend.name,
        "settings": asdict(settings),
        "dataset": {
            "name": dataset.name,
            "n_rows": dataset.n_rows,
            "attribution": dataset.attribution,
        },
        "attributes": attributes,
        "central": central,
        "runs": runs,
        "example": example,
        "replays": replays,
        "seconds": time.perf_counter() - started,
    }


def _example(
    est: Estimate,
    truth: np.ndarray,
    rng: np.random.Generator,
    attribute: str,
    eps: float,
    level: float,
    requested: str,
) -> dict[str, Any]:
    lo, hi = est.ci(level)
    lap = laplace_baseline(eps).release(truth, rng=rng)
    return {
        "attribute": attribute,
        "epsilon": eps,
        "mechanism": requested,
        "resolved": est.mechanism.name,
        "level": level,
        "labels": list(est.labels),
        "truth": truth.tolist(),
        "estimate": est.counts.tolist(),
        "std_error": est.std_errors.tolist(),
        "ci_low": lo.tolist(),
        "ci_high": hi.tolist(),
        "laplace": lap.tolist(),
    }


def mse_agreement(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per resolved mechanism: pooled empirical MSE over theory MSE across its cells.

    The pooled ratio is ``sum(empirical MSE) / sum(theory MSE)`` over every cell, plus the
    smallest and largest per-cell ratio. 1.0 means the closed-form variance is exact.
    """
    out: dict[str, dict[str, float]] = {}
    for name in sorted({r["resolved"] for r in results["runs"]}):
        rows = [r for r in results["runs"] if r["resolved"] == name]
        ratios = [r["mse_over_theory"] for r in rows]
        out[name] = {
            "cells": len(rows),
            "pooled": sum(r["mse"] for r in rows) / sum(r["theory"]["mse"] for r in rows),
            "min": min(ratios),
            "max": max(ratios),
        }
    return out
