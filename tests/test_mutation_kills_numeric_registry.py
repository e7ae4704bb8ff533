"""``client_sdk.mechanisms.numeric.registry``: names, ``auto``, errors and configs (issue 21)."""

from __future__ import annotations

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import NUMERIC_MECHANISMS, choose_mean
from client_sdk.mechanisms.numeric.registry import create, from_config

BOUNDS = (-3.0, 7.0)


@pytest.mark.parametrize("name", sorted(NUMERIC_MECHANISMS))
def test_every_name_builds_its_own_class_and_round_trips(name: str) -> None:
    mech = create(name, epsilon=1.5, bounds=BOUNDS)
    assert type(mech) is NUMERIC_MECHANISMS[name]
    assert mech.name == name and mech.epsilon == 1.5 and mech.bounds == BOUNDS
    again = from_config(mech.config())
    assert type(again) is type(mech) and again.config() == mech.config()


def test_auto_is_the_choice_of_choose_mean() -> None:
    for eps in (0.3, 1.0, 4.0):
        chosen = create("auto", epsilon=eps, bounds=BOUNDS, grid=1024)
        expected = choose_mean(epsilon=eps, bounds=BOUNDS, grid=1024).chosen
        assert type(chosen) is type(expected) and chosen.config() == expected.config()
    assert create("auto", epsilon=0.3, bounds=BOUNDS).name == "duchi"


def test_unknown_names_are_refused_with_a_hint_and_the_list() -> None:
    with pytest.raises(InvalidParameter) as info:
        create("piecewse", epsilon=1.0, bounds=BOUNDS)
    message = str(info.value)
    assert "unknown numeric mechanism 'piecewse'; did you mean 'piecewise'?" in message
    assert message.endswith(
        "(choose one of: duchi, piecewise, hybrid, 1bitmean, square_wave, alpha_point, auto)"
    )
    with pytest.raises(InvalidParameter) as info:
        create("zzzz", epsilon=1.0, bounds=BOUNDS)
    assert "did you mean" not in str(info.value)
    with pytest.raises(InvalidParameter, match="unknown numeric mechanism 3"):
        create(3, epsilon=1.0, bounds=BOUNDS)  # type: ignore[arg-type]


def test_an_unknown_parameter_is_an_invalid_parameter() -> None:
    with pytest.raises(InvalidParameter, match="^duchi: "):
        create("duchi", epsilon=1.0, bounds=BOUNDS, segments=4)
    with pytest.raises(InvalidParameter, match="^alpha_point: "):
        create("alpha_point", epsilon=1.0, bounds=BOUNDS, grid=4)


def test_create_takes_keyword_arguments_only() -> None:
    with pytest.raises(TypeError):
        create("duchi", 1.0, BOUNDS)  # type: ignore[misc]


def test_from_config_refuses_what_is_not_a_config() -> None:
    good = create("square_wave", epsilon=2.0, bounds=BOUNDS, grid=64).config()
    assert from_config(good).params() == {"grid": 64}
    assert from_config({**good, "params": None}).params() == {"grid": 512}
    for missing in ("mechanism", "epsilon", "bounds"):
        with pytest.raises(InvalidParameter, match="not a numeric mechanism config"):
            from_config({k: v for k, v in good.items() if k != missing})
    with pytest.raises(InvalidParameter, match="not a numeric mechanism config"):
        from_config(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="params must be an object"):
        from_config({**good, "params": [["grid", 64]]})
