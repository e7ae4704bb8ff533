"""HTTP mode end to end: SDK outbox and uploads -> embedded collector -> analyst API."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from client_sdk.mechanisms import create
from ldp_cli.main import cli
from simulator.adult import load_adult
from simulator.http_mode import CollectorError, HttpBackend, collector_target
from simulator.sweep import InProcessBackend, SweepSettings, run_sweep


def test_http_sweep_matches_the_inprocess_path(tmp_path) -> None:
    """Same cell, same seed: the HTTP path gives exactly the in-process estimate."""
    adult = load_adult("train")
    settings = SweepSettings(
        attributes=("race",), epsilons=(1.0,), mechanisms=("oue", "grr"), repetitions=2
    )
    with collector_target() as target, HttpBackend(target, tmp_path / "device") as backend:
        over_http = run_sweep(adult, settings, backend=backend)
    in_process = run_sweep(adult, settings, backend=InProcessBackend())
    assert over_http["mode"] == "http"
    for a, b in zip(over_http["runs"], in_process["runs"], strict=True):
        assert a["n"] == b["n"] == 32_561
        assert a["mse"] == pytest.approx(b["mse"], rel=1e-9)


def test_replay_reads_back_every_report(tmp_path) -> None:
    mech = create("ss", epsilon=1.0, domain=["a", "b", "c", "d"])
    indices = np.repeat(np.arange(4), [500, 300, 150, 50])
    with collector_target() as target, HttpBackend(target, tmp_path / "device") as backend:
        est = backend.replay("letters", mech, indices, np.random.default_rng(3))
    assert est.n == 1000
    assert est.counts.sum() == pytest.approx(1000, abs=1e-6)  # ss estimates sum to n
    assert np.all(np.abs(est.counts - [500, 300, 150, 50]) < 5 * est.std_errors)


def test_url_without_tokens_is_refused() -> None:
    with pytest.raises(CollectorError, match="LDP_ADMIN_TOKEN"):
        with collector_target("http://127.0.0.1:9"):
            pass


def test_cli_simulate_http_mode(tmp_path) -> None:
    out = tmp_path / "http-out"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--mode",
            "http",
            "-a",
            "sex",
            "-a",
            "race",
            "-e",
            "1",
            "-r",
            "1",
            "-o",
            str(out),
            "--no-plots",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "(http)" in result.output
