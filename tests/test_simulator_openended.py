"""``ldp simulate --open-domain``: the open-domain discovery scenario (issue 16's simulator).

* Structure: one run per (epsilon, n, repetition), two points (top 10, top 50) per (epsilon,
  n), the true top 10 in rank order with a smallest n from the grid, JSON without NaN; the
  scores agree with each other (hits = precision x listed = recall x k).
* Statistics, derived: on Adult (n = 32,561, 26-byte strings, so 26 PEM levels of n/26
  reports each) ``United-States`` holds 29,170 devices. Its count at one level, scaled by
  ``f = 26``, has variance ``f^2 (w/(w-1))^2 (n_t v_other + c_t (v_hold - v_other))`` from the
  randomisation plus ``c (f - 1)`` from the level sampling (``aggregator.openended``); the
  pooled count has no larger variance, and every prefix of the string holds at least those
  29,170 devices, so it survives every level of the walk. The test computes that standard
  deviation from the mechanism's own ``v_hold``/``v_other`` and checks the count is more than
  8 of them above the significance threshold (``z sigma0`` with ``z`` at most the Bonferroni
  quantile over 10**6 candidates): it is then found in every run but with probability below
  1e-15. This is asserted at epsilon 2 and 8.
* The smallest-n rule on hand-made runs; bad settings; the CLI option writes its report, JSON
  and plots, and refuses what it cannot do.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import pytest
from click.testing import CliRunner

from client_sdk.mechanisms.openended import PrefixExtending, create_open
from ldp_cli.main import cli
from simulator.errors import InvalidSetting
from simulator.openended_data import adult_population
from simulator.openended_scenario import (
    OPEN_MECHANISM,
    TOPS,
    OpenDomainResults,
    OpenDomainRun,
    OpenDomainSettings,
    TopKScore,
    _first_found,
    _population,
    default_sizes,
    run_open_domain,
    write_open_domain_outputs,
)

ADULT_N = 32_561
EPSILONS = (2.0, 8.0)
REPS = 2


@pytest.fixture(scope="module")
def adult() -> OpenDomainResults:
    settings = OpenDomainSettings(
        data="adult", epsilons=EPSILONS, sizes=(ADULT_N,), repetitions=REPS, seed=7
    )
    return run_open_domain(settings)


def test_adult_results_are_structurally_right(adult: OpenDomainResults) -> None:
    values, counts = adult_population()
    assert len(values) == 42 and int(counts.sum()) == ADULT_N
    assert adult.distinct == 42 and adult.max_length == max(len(v.encode()) for v in values)
    assert adult.mechanism["mechanism"] == OPEN_MECHANISM
    assert len(adult.runs) == len(EPSILONS) * REPS
    assert len(adult.points) == len(EPSILONS) * len(TOPS)
    assert adult.top_counts[:3] == [29_170, 643, 583]
    for run in adult.runs:
        assert [s.k for s in run.scores] == [10, 42]  # only 42 values: the "top 50" is all
        for s, top in zip(run.scores, TOPS, strict=True):
            assert 0 < s.listed <= top and 0 <= s.significant <= s.listed
            hits = s.precision * s.listed
            assert hits == pytest.approx(round(hits)) and hits == pytest.approx(s.recall * s.k)
            assert 0.0 <= s.f1 <= 1.0
            assert s.count_rmse is not None and s.count_rmse >= 0
        # every found value is listed by top=10, so the recall of the top 10 counts it
        assert run.scores[0].recall >= len(run.found_ranks) / 10 - 1e-12
        assert run.found_ranks == sorted(set(run.found_ranks))
    for p in adult.points:
        j = 1 if p.k == 42 else 0
        f1s = [r.scores[j].f1 for r in adult.runs if r.epsilon == p.epsilon]
        assert len(f1s) == REPS and p.f1 == pytest.approx(sum(f1s) / REPS)
    assert [f.rank for f in adult.first_found] == list(range(1, 11))
    assert [f.value for f in adult.first_found] == values[:10]
    assert adult.first_found[0].share == pytest.approx(29_170 / ADULT_N)
    for f in adult.first_found:
        assert len(f.smallest_n) == len(EPSILONS)
        for smallest, row in zip(f.smallest_n, f.found_fraction, strict=True):
            assert (smallest == ADULT_N) == (row[-1] >= 0.5)
    json.dumps(adult.to_dict(), allow_nan=False)


def _sd_bound(epsilon: float, count: int) -> tuple[float, float]:
    """(standard deviation of one level's scaled count of ``count`` devices, null sigma0)."""
    length = max(len(v.encode()) for v in adult_population()[0])
    mech = create_open(OPEN_MECHANISM, epsilon=epsilon, max_length=length)
    assert isinstance(mech, PrefixExtending)
    sk = mech.sketches[0]
    f = length
    n_t, c_t = ADULT_N / f, count / f
    scale = (sk.width / (sk.width - 1)) ** 2
    randomisation = f * f * scale * (n_t * sk.v_other + c_t * (sk.v_hold - sk.v_other))
    sigma0 = f * math.sqrt(scale * n_t * sk.v_other)
    return math.sqrt(randomisation + count * (f - 1)), sigma0


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_dominant_adult_value_is_found(adult: OpenDomainResults, epsilon: float) -> None:
    count = 29_170
    sd, sigma0 = _sd_bound(epsilon, count)
    z_max = NormalDist().inv_cdf(1 - 0.05 / 10**6)
    assert count - z_max * sigma0 > 8 * sd  # the derivation's premise (module docstring)
    runs = [r for r in adult.runs if r.epsilon == epsilon]
    assert runs and all(1 in r.found_ranks for r in runs)
    assert adult.first_found[0].smallest_n[EPSILONS.index(epsilon)] == ADULT_N


def _run(eps: float, n: int, rep: int, found: list[int]) -> OpenDomainRun:
    score = TopKScore(k=10, precision=0, recall=0, f1=0, count_rmse=None, listed=0, significant=0)
    return OpenDomainRun(eps, n, rep, [score, score], found, 0.0)


def test_smallest_n_is_where_found_from_then_on_in_half_the_repetitions() -> None:
    settings = OpenDomainSettings(
        data="zipf", epsilons=(1.0,), sizes=(1_000, 3_000, 10_000), repetitions=2
    )
    found = {  # n -> found ranks in each of the two repetitions
        1_000: [[1, 3], [1]],
        3_000: [[1], [2]],
        10_000: [[1, 2], [1, 3]],
    }
    runs = [_run(1.0, n, rep, ranks) for n, reps in found.items() for rep, ranks in enumerate(reps)]
    first = _first_found(settings, _population("zipf"), runs)
    assert [f.rank for f in first] == list(range(1, 11))
    # 1: found at every n; 2: half at 3k and 10k; 3: half at 1k and 10k but not at 3k
    assert [f.smallest_n[0] for f in first[:4]] == [1_000, 3_000, 10_000, None]
    assert first[2].found_fraction == [[0.5, 0.0, 0.5]]
    assert first[1].value == _population("zipf").values[1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"data": "words"}, "must be one of"),
        ({"epsilons": (0.0,)}, "epsilon must be"),
        ({"sizes": (3_000, 1_000)}, "strictly increasing"),
        ({"sizes": (10,)}, ">= 100"),
        ({"repetitions": 0}, "repetitions"),
        ({"data": "adult", "sizes": (1_000, 40_000)}, "32,561 devices"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidSetting, match=message):
        OpenDomainSettings(**kwargs)


def test_default_sizes() -> None:
    assert default_sizes("zipf") == (1_000, 3_000, 10_000, 30_000, 100_000)
    assert default_sizes("zipf", 10**6)[-3:] == (100_000, 300_000, 1_000_000)
    assert default_sizes("adult") == (1_000, 3_000, 10_000, 30_000, ADULT_N)


def test_outputs_without_plots(adult: OpenDomainResults, tmp_path) -> None:
    paths = write_open_domain_outputs(adult, tmp_path, plots=False)
    assert [p.name for p in paths] == ["openended_adult.md", "openended_adult.json"]
    text = paths[0].read_text()
    assert "| 1 | United-States | 89.59% |" in text
    assert json.loads(paths[1].read_text())["settings"]["sizes"] == [ADULT_N]


def test_cli_open_domain_zipf_writes_report_and_plots(tmp_path) -> None:
    out = tmp_path / "open"
    result = CliRunner().invoke(
        cli,
        ["simulate", "--open-domain", "zipf", "--max-devices", "2000", "-e", "8", "-r", "1"]
        + ["-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "## Against epsilon (n = 2,000)" in result.output
    assert "## Smallest n at which each true top-10 value is found" in result.output
    data = json.loads((out / "openended_zipf.json").read_text())
    assert data["settings"]["sizes"] == [1_000, 2_000] and data["settings"]["epsilons"] == [8.0]
    assert len(data["runs"]) == 2 and len(data["first_found"]) == 10
    for name in ("vs_epsilon", "vs_n", "first_found"):
        png = out / f"openended_zipf_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--open-domain", "zipf", "--mode", "http"], "in-process only"),
        (["--open-domain", "zipf", "--scenario", "numeric"], "not both"),
        (["--open-domain", "adult", "--max-devices", "1000"], "zipf only"),
        (["--max-devices", "1000", "-a", "sex"], "zipf only"),
        (["--open-domain", "zipf", "-r", "0"], "repetitions must be"),
    ],
)
def test_cli_refusals(tmp_path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", str(tmp_path)])
    assert result.exit_code != 0
    assert message in result.output
