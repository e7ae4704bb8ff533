"""Square Wave's half-width, grid, channel and integer declaration, exactly (issue 21)."""

from __future__ import annotations

from decimal import Decimal, getcontext

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import DEFAULT_SW_GRID, SquareWave, create, square_wave_b


def _b_exact(epsilon: float) -> float:
    """The paper's b = (eps e - e + 1) / (2 e (e - 1 - eps)) in 60-digit decimal arithmetic."""
    getcontext().prec = 60
    eps = Decimal(epsilon)
    e = eps.exp()
    return float((eps * e - e + 1) / (2 * e * (e - 1 - eps)))


@pytest.mark.parametrize("epsilon", [1e-4, 0.01, 0.05, 0.0999, 0.1, 0.3, 1.0, 2.5, 4.0, 8.0, 16.0])
def test_half_width_is_the_papers_b(epsilon: float) -> None:
    assert square_wave_b(epsilon) == pytest.approx(_b_exact(epsilon), rel=1e-9)


def test_b_tends_to_one_half_and_shrinks_with_epsilon() -> None:
    assert square_wave_b(1e-6) == pytest.approx(0.5, rel=1e-5)
    bs = [square_wave_b(e) for e in (0.05, 0.1, 0.5, 1.0, 4.0)]
    assert all(a > b for a, b in zip(bs, bs[1:], strict=False))


@pytest.mark.parametrize("epsilon, grid", [(1.0, 512), (4.0, 64), (0.5, 33)])
def test_band_and_channel_are_the_exact_weights(epsilon: float, grid: int) -> None:
    mech = create("square_wave", epsilon=epsilon, bounds=(-1.0, 3.0), grid=grid)
    w = round(square_wave_b(epsilon) * grid)
    assert mech.half_width == w
    assert mech.output_size == grid + 2 * w + 1
    assert mech.band.positions == grid + 1 and mech.band.width == 2 * w + 1
    assert mech.output_positions()[0] == -w and mech.output_positions()[-1] == grid + w
    channel = mech.channel()
    assert channel.shape == (grid + 1, mech.output_size)
    for i in (0, 1, grid // 2, grid - 1, grid):
        den, weights = mech.output_weights(i)
        np.testing.assert_allclose(channel[i], np.array(weights, dtype=float) / den, rtol=1e-12)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)


def test_default_grid_and_params() -> None:
    assert DEFAULT_SW_GRID == 512
    mech = create("square_wave", epsilon=1.0, bounds=(0, 10))
    assert mech.grid.size == 512 and mech.params() == {"grid": 512}
    assert mech.support() is None and mech.integer is False
    declared = create("square_wave", epsilon=1.0, bounds=(0, 10), integer=True)
    assert declared.params() == {"grid": 512, "integer": True}


def test_integer_declaration_support_and_refusals() -> None:
    mech = SquareWave(epsilon=1.0, bounds=(-3, 7), integer=True)
    np.testing.assert_array_equal(mech.support(), np.arange(-3.0, 8.0))
    with pytest.raises(InvalidParameter, match="integer bounds"):
        SquareWave(epsilon=1.0, bounds=(-3, 7.5), integer=True)
    with pytest.raises(InvalidParameter, match=r"got 611 \(raise grid"):
        SquareWave(epsilon=1.0, bounds=(-10, 600), integer=True)
    assert SquareWave(epsilon=1.0, bounds=(-10, 502), integer=True).grid.size == 512
    with pytest.raises(InvalidParameter, match="integer must be true or false"):
        SquareWave(epsilon=1.0, bounds=(0, 1), integer=1)  # type: ignore[arg-type]
