"""Scenario book-ch13: chapter 13 of 'Programming Differential Privacy' on the Adult data.

Fixed seed; every tolerance comes from the closed-form variance 0.75 n (see simulator/book.py):
bias within z sigma / sqrt(R), mean |error| within theory +- z sigma sqrt(1 - 2/pi) / sqrt(R),
the theory SD inside the chi-square CI of the measured SD, all at 99.9% two-sided.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from simulator.adult import load_adult
from simulator.book import run_book_ch13, write_book_outputs

R = 200
LEVEL = 0.999
Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)


@pytest.fixture(scope="module")
def results() -> dict:
    return run_book_ch13(load_adult("train"), repetitions=R, seed=2026, level=LEVEL)


def test_json_safe(results: dict) -> None:
    json.dumps(results, allow_nan=False)


def test_rr_setting_matches_the_book(results: dict) -> None:
    rr = results["rr"]
    assert rr["n"] == 32_561
    assert rr["truth"] == 3_650
    assert rr["epsilon"] == pytest.approx(math.log(3))
    assert rr["checks"]["theory_sd"] == pytest.approx(math.sqrt(0.75 * 32_561))
    assert rr["checks"]["theory_sd"] == pytest.approx(156.3, abs=0.05)


def test_rr_book_estimator_is_the_mechanism_debiasing(results: dict) -> None:
    rr = results["rr"]
    assert rr["estimator_identity_ok"]
    assert rr["estimator_identity_max_gap"] == 0.0


def _assert_checks(c: dict, sigma: float) -> None:
    r = c["count"]
    # bias: the mean of r unbiased errors has SD sigma / sqrt(r)
    assert abs(c["mean_error"]) <= Z * sigma / math.sqrt(r)
    assert c["bias_ok"]
    # mean |error|: half-normal mean sigma sqrt(2/pi), SD sigma sqrt(1 - 2/pi)
    theory = sigma * math.sqrt(2 / math.pi)
    tol = Z * sigma * math.sqrt(1 - 2 / math.pi) / math.sqrt(r)
    assert c["theory_mean_abs_error"] == pytest.approx(theory)
    assert c["mean_abs_error_interval"] == pytest.approx([theory - tol, theory + tol])
    assert theory - tol <= c["mean_abs_error"] <= theory + tol
    assert c["mean_abs_error_ok"]
    assert c["theory_in_mean_abs_error_ci"]
    # SD: theory inside the chi-square CI of the measured SD
    lo, hi = c["sd_ci"]
    assert lo <= sigma <= hi
    assert c["theory_in_sd_ci"]


def test_rr_errors_agree_with_theory(results: dict) -> None:
    rr = results["rr"]
    c = rr["checks"]
    assert c["count"] == R
    errors = np.asarray(rr["errors"])
    assert errors.shape == (R,)
    assert c["mean_abs_error"] == pytest.approx(np.mean(np.abs(errors)))
    _assert_checks(c, math.sqrt(0.75 * rr["n"]))


def test_unary_errors_agree_with_theory(results: dict) -> None:
    ue = results["unary"]
    assert (ue["n"], ue["k"]) == (30_718, 14)
    assert ue["epsilon"] == pytest.approx(math.log(9))
    assert ue["beta"] == 0.0
    sigma = math.sqrt(0.75 * ue["n"])
    assert ue["checks"]["count"] == R * 14
    _assert_checks(ue["checks"], sigma)
    # per value, Bonferroni over the 14 values so the family holds at LEVEL
    z_value = NormalDist().inv_cdf(0.5 + (1 - (1 - LEVEL) / 14) / 2)
    for v in ue["per_value"]:
        assert v["theory_sd"] == pytest.approx(sigma)
        assert abs(v["mean_estimate"] - v["truth"]) <= z_value * sigma / math.sqrt(R), v
        assert v["sd_ci"][0] <= sigma <= v["sd_ci"][1], v
    assert ue["all_bias_ok"] and ue["all_sd_ok"]


def test_central_laplace_comparison(results: dict) -> None:
    for exp in (results["rr"], results["unary"]):
        lap = exp["laplace"]
        assert lap["theory_mean_abs_error"] == pytest.approx(1 / exp["epsilon"])
        assert lap["mean_abs_error_ok"]
        ratio = exp["checks"]["mean_abs_error"] * exp["epsilon"]
        assert exp["local_over_laplace"] == pytest.approx(ratio)
        assert exp["local_over_laplace"] > 50  # local DP costs two orders of magnitude here


def test_same_seed_same_results() -> None:
    ds = load_adult("train")
    a = run_book_ch13(ds, repetitions=3, seed=7)
    b = run_book_ch13(ds, repetitions=3, seed=7)
    assert a["rr"]["estimates"] == b["rr"]["estimates"]
    assert a["unary"]["errors"] == b["unary"]["errors"]


def test_writes_report_and_histograms(results: dict, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    paths = write_book_outputs(results, tmp_path / "out")
    names = [p.name for p in paths]
    assert names == [
        "book-ch13.md",
        "book-ch13.json",
        "book-ch13-rr-errors.png",
        "book-ch13-unary-errors.png",
    ]
    for p in paths:
        assert p.is_file() and p.stat().st_size > 0
    assert json.loads(paths[1].read_text())["rr"]["truth"] == 3_650
    for p in paths[2:]:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = paths[0].read_text()
    assert "3,650" in text and "156.27" in text and "Becker" in text
    assert "**NO**" not in text


def test_rejects_bad_settings() -> None:
    from simulator.errors import InvalidSetting

    with pytest.raises(InvalidSetting, match="repetitions"):
        run_book_ch13(load_adult("train"), repetitions=1)
