"""The black-box privacy audit: sound (never above the claim), powerful, and catches a leak."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from aggregator.privacy_audit import DEFAULT_SAMPLES, audit, clopper_pearson
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, OptimizedUnaryEncoding, bitvector, create
from ldp_cli.main import cli


def build(name: str, epsilon: float, k: int = 14):
    return create(name, epsilon=epsilon, domain=2 if name == "rr" else k)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_bound_is_sound_and_reaches_80_percent_of_the_claim(name: str, epsilon: float) -> None:
    mech = build(name, epsilon)
    result = audit(mech, path="vectorised", rng=np.random.default_rng(29))
    assert result.samples == DEFAULT_SAMPLES
    assert result.epsilon_lower <= mech.realised_epsilon  # never above the claim
    assert not result.violation
    assert result.power >= 0.8, f"only {result.power:.2%} of the claim"


@pytest.mark.parametrize("preset", ["rr-two-coin", "sue-book"])
def test_presets_audit_to_their_book_epsilon(preset: str) -> None:
    mech = create(preset, domain=2 if preset.startswith("rr") else 14)
    result = audit(mech, path="vectorised", rng=np.random.default_rng(3))
    assert 0.8 * mech.epsilon <= result.epsilon_lower <= mech.epsilon


def test_device_path_audits_the_sdks_own_perturb() -> None:
    """One perturb call per report, serialised and parsed back as a collector would."""
    mech = create("grr", epsilon=1.0, domain=14)
    result = audit(mech, samples=200_000, path="device", rng=np.random.default_rng(8))
    assert result.path == "device"
    assert 0.8 <= result.epsilon_lower <= mech.realised_epsilon


class LeakyUnaryEncoding(OptimizedUnaryEncoding):
    """A broken OUE: the true bit is left unperturbed (always 1)."""

    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        packed = super()._perturb_batch(indices, gen)
        bits = np.unpackbits(packed, axis=1, bitorder="little")[:, : self.k]
        bits[np.arange(indices.size), indices] = 1
        return bitvector.pack_rows(bits.astype(bool))


def test_the_audit_catches_a_bit_left_unperturbed() -> None:
    broken = LeakyUnaryEncoding(epsilon=1.0, domain=14)
    result = audit(broken, samples=100_000, path="vectorised", rng=np.random.default_rng(1))
    assert result.violation
    assert result.epsilon_lower > 2 * broken.epsilon


def test_clopper_pearson_known_values() -> None:
    # Exact interval for 0 of 10: [0, 1 - (alpha/2)^(1/10)].
    lo, hi = clopper_pearson(0, 10, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025**0.1, rel=1e-9)
    lo, hi = clopper_pearson(10, 10, 0.05)
    assert lo == pytest.approx(0.025**0.1, rel=1e-9) and hi == 1.0
    lo, hi = clopper_pearson(50, 100, 0.05)
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo, rel=1e-9)


def test_audit_refuses_bad_arguments() -> None:
    mech = create("grr", epsilon=1.0, domain=5)
    with pytest.raises(InvalidParameter, match="samples must be an integer >= 100"):
        audit(mech, samples=5)
    with pytest.raises(InvalidParameter, match="alpha must be in"):
        audit(mech, alpha=1.5)
    with pytest.raises(InvalidParameter, match="path must be one of"):
        audit(mech, path="gpu")
    with pytest.raises(InvalidParameter, match="two distinct indices"):
        audit(mech, pair=(2, 2))


def test_cli_audit_prints_the_bound_next_to_the_claim() -> None:
    result = CliRunner().invoke(
        cli, ["audit", "oue", "--epsilon", "1", "--samples", "50000", "--seed", "4"]
    )
    assert result.exit_code == 0, result.output
    assert "oue: claimed epsilon 1" in result.output
    assert "empirical lower bound" in result.output
    result = CliRunner().invoke(
        cli,
        ["audit", "rr-two-coin", "--samples", "20000", "--seed", "4", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["violation"] is False and data["k"] == 2
    result = CliRunner().invoke(cli, ["audit", "oue", "--epsilon", "-1"])
    assert result.exit_code == 1 and "epsilon must be a finite number > 0" in result.output
