"""bench/accuracy.py's common random numbers: estimators of one mechanism read one tally.

The peers themselves are not installed here (they live only in the benchmark's own venv), so
the peer table is replaced by stand-ins whose estimator is our unbiased ``none`` estimate: read
from the same tally it must reproduce ``ours none`` repetition by repetition, and the paired
interval of two identical columns must collapse to the point.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from tests.support.bench import bench_module


@pytest.fixture(scope="module")
def accuracy() -> ModuleType:
    return bench_module("accuracy")


def test_config_key_treats_subset_selection_with_one_item_as_grr(accuracy: ModuleType) -> None:
    assert accuracy.config_key("ss", {"d": 1}) == accuracy.config_key("grr", {})
    assert accuracy.config_key("ss", {"d": 2}) != accuracy.config_key("ss", {"d": 3})
    assert accuracy.config_key("olh", {"g": 4}) == accuracy.config_key("olh", {"g": 4})
    assert accuracy.config_key("oue", {}) != accuracy.config_key("grr", {})


def test_paired_interval_is_tighter_than_the_independent_one(accuracy: ModuleType) -> None:
    rng = np.random.default_rng(7)
    shared = rng.gamma(2.0, 100.0, 400)
    a, b = shared * 0.98 + rng.normal(0, 1, 400), shared
    r, lo, hi = accuracy.paired_ratio_ci(a, b)
    ri, loi, hii = accuracy.ratio_ci(a, b)
    assert r == pytest.approx(ri)
    assert lo < r < hi and hi < 1.0
    assert hi - lo < (hii - loi) / 10
    assert accuracy.paired_ratio_ci(b, b) == (1.0, 1.0, 1.0)


def _stand_in_peers(accuracy: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer of our ``auto`` configuration and one of another (OUE, which ``auto`` never
    picks at these sizes)."""

    def peers(k: int, epsilon: float) -> dict:
        from client_sdk.mechanisms import create

        domain = [str(i) for i in range(k)]
        ours = create("auto", epsilon=epsilon, domain=domain)
        assert ours.name != "oue"

        def unbiased(name: str, params: dict):  # type: ignore[no-untyped-def]
            m = create(name, epsilon=epsilon, domain=domain, **params)
            return lambda c, n: (c - n * m.q_star) / (m.p_star - m.q_star) / n

        return {
            "same": (ours.name, ours.params(), {"raw": unbiased(ours.name, ours.params())}),
            "other OUE": ("oue", {}, {"raw": unbiased("oue", {})}),
        }

    monkeypatch.setattr(accuracy, "peer_estimators", peers)


@pytest.mark.parametrize("paired", [True, False])
def test_run_cell_feeds_our_tally_to_the_peers_of_our_mechanism(
    accuracy: ModuleType, monkeypatch: pytest.MonkeyPatch, paired: bool
) -> None:
    labels = [str(i) for i in range(6)]
    _stand_in_peers(accuracy, monkeypatch)
    counts = np.array([900, 500, 300, 200, 80, 20])
    cell = accuracy.run_cell(labels, counts, 2.0, 3, seed=11, paired=paired)
    mse = cell["mse"]
    assert cell["paired"] == (["same raw"] if paired else [])
    same = np.allclose(mse["same raw"], mse["ours none"], rtol=1e-9)
    assert same is paired
    assert not np.allclose(mse["other OUE raw"], mse["ours none"], rtol=1e-3)
    assert cell["supports"].shape == (3, 6)


def test_run_cell_scores_our_pattern_tally_and_pairs_the_peers_on_its_support(
    accuracy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At epsilon 2 on 14 values auto is SS d = 2 keeping its pattern counts: the peers of that
    # configuration read the support counts of the very tallies our auto scored by the pattern
    # MLE (its mle on them is another number).
    assert accuracy.config_key("ss", {"d": 2, "patterns": True}) == accuracy.config_key(
        "ss", {"d": 2}
    )
    labels = [str(i) for i in range(14)]
    _stand_in_peers(accuracy, monkeypatch)
    counts = np.array(
        [3770, 3650, 4140, 4099, 3721, 1350, 2002, 3295, 1597, 1490, 912, 9, 645, 1038]
    )
    cell = accuracy.run_cell(labels, counts, 2.0, 2, seed=5, paired=True)
    assert cell["params"] == {"d": 2, "patterns": True}
    mse = cell["mse"]
    assert np.allclose(mse["same raw"], mse["ours none"], rtol=1e-9)
    assert not np.allclose(mse["ours auto"], mse["ours mle"], rtol=1e-6)
