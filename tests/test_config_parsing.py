"""Mechanism configs from outside the process: ``from_config`` of every kind refuses what it
cannot use with :class:`InvalidParameter`, never another exception.

A device rebuilds its campaign's mechanism from the config the collector serves, and the device
does not trust the collector (tests/test_sdk_hostile_config.py drives that through the SDK).
The property mutates valid configs of every registered kind, one place at a time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, create, from_config
from client_sdk.mechanisms.criterion import check_expected
from client_sdk.mechanisms.multi import from_config as multi_from_config
from client_sdk.mechanisms.numeric.grid import check_bounds
from client_sdk.mechanisms.validation import (
    CREATE_KEYWORDS,
    check_epsilon,
    config_parts,
    finite_float,
)
from tests.support.garbage import json_values, mutated


def configs() -> list[dict[str, Any]]:
    out = [
        create(
            name, epsilon=1.0, domain=["a", "b"] if name == "rr" else ["a", "b", "c", "d"]
        ).config()
        for name in MECHANISMS
    ]
    for name in ("duchi", "1bitmean", "piecewise", "hybrid", "square_wave", "alpha_point"):
        out.append(create(name, epsilon=1.0, bounds=(0, 100)).config())
    out += [create(name, epsilon=4.0, max_length=8).config() for name in ("pem", "cms", "hcms")]
    for name in ("spl", "smp", "rsfd"):
        out.append(
            create(name, epsilon=2.0, attributes={"o": ["x", "y"], "s": ["a", "b"]}).config()
        )
    out.append(
        create(
            "auto",
            epsilon=2.0,
            attributes={"o": ["x", "y"], "age": {"bounds": [0, 9]}},
            pairs=[["o", "age"]],
        ).config()
    )
    return out


CONFIGS = configs()
values = json_values(
    [10**400, -(10**400), 5e-324, "oue", "auto", ["a", "b"], [0, 1]],
    keys=st.sampled_from(["mechanism", "epsilon", "d", "grid", "bounds"]),
)


@settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(config=st.sampled_from(CONFIGS).flatmap(lambda c: mutated(c, values)))
def test_from_config_refuses_with_invalid_parameter_only(config: Any) -> None:
    try:
        mech = from_config(config)
    except InvalidParameter as exc:
        assert str(exc)
        return
    assert 0 < mech.realised_epsilon <= 16
    assert from_config(mech.config()).config() == mech.config()


# -- the places the property found, one by one --------------------------------------------------

GOOD = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "not a mechanism config: an object is needed, got NoneType"),
        ({"mechanism": "oue"}, "missing 'epsilon', 'domain'"),
        ({**GOOD, "mechanism": ["oue"]}, "'mechanism' must be a mechanism name (a string)"),
        ({**GOOD, "mechanism": {"mechanism": "oue"}}, "must be a mechanism name"),
        ({**GOOD, "params": [["d", 2]]}, "its params must be an object"),
        ({**GOOD, "params": {1: 2}}, "its params must be an object"),
        ({**GOOD, "params": {"epsilon": 2.0}}, "its params may not set 'epsilon'"),
        ({**GOOD, "params": {"bounds": [0, 1], "name": "x"}}, "may not set 'bounds', 'name'"),
        ({**GOOD, "epsilon": 10**400}, "got an integer beyond the float range"),
    ],
)
def test_frequency_configs(config: Any, message: str) -> None:
    with pytest.raises(InvalidParameter) as exc:
        from_config(config)
    assert message in str(exc.value)


def test_each_kind_names_itself_and_keeps_its_own_params() -> None:
    numeric = create("piecewise", epsilon=1.0, bounds=(0, 1)).config()
    open_domain = create("cms", epsilon=4.0, max_length=8).config()
    multi = create("spl", epsilon=2.0, attributes={"o": ["x", "y"], "s": ["a", "b"]}).config()
    for config, what in (
        (numeric, "not a numeric mechanism config"),
        (open_domain, "not an open-domain mechanism config"),
        (multi, "not a multi-attribute config"),
    ):
        with pytest.raises(InvalidParameter, match=what):
            from_config({**config, "mechanism": [config["mechanism"]]})
    with pytest.raises(InvalidParameter, match="may not set 'bounds'"):
        from_config({**numeric, "params": {"bounds": [0, 2]}})
    with pytest.raises(InvalidParameter, match="may not set 'epsilon'"):
        from_config({**open_domain, "params": {"epsilon": 1.0}})
    # A multi-attribute config's params are its own (pairs, order, ...), not create()'s.
    assert config_parts(multi, "attributes", "a multi-attribute", splat=False)[3] == multi["params"]
    assert "pairs" in CREATE_KEYWORDS and from_config(multi).config() == multi


def test_multi_attribute_configs() -> None:
    base = create("spl", epsilon=2.0, attributes={"o": ["x", "y"], "s": ["a", "b"]}).config()
    cases = [
        ({**base, "params": {**base["params"], "order": 7}}, "order names other attributes"),
        ({**base, "params": {**base["params"], "order": [1, 2]}}, "order names other"),
        (
            {**base, "params": {}, "attributes": {"o": ["x", {"y": 1}], "s": ["a", "b"]}},
            "labels must be strings",
        ),
        (
            {**base, "params": {**base["params"], "pairs": [["o", ["s"]]]}},
            "two different declared attributes",
        ),
        (
            {**base, "params": {**base["params"], "pairs": [["o", "o"]]}},
            "two different declared attributes",
        ),
        (
            {
                **base,
                "params": {},
                "attributes": {"o": ["x", "y"], "age": {"bounds": [0, 10**400]}},
            },
            "attribute 'age': bounds high must be a finite number, got an integer beyond",
        ),
        (
            {**base, "params": {}, "attributes": {"o": ["x", "y"], "age": {"bounds": [5, 5]}}},
            "attribute 'age': bounds need low < high",
        ),
    ]
    for config, message in cases:
        with pytest.raises(InvalidParameter) as exc:
            multi_from_config(config)
        assert message in str(exc.value), (config, str(exc.value))


def test_finite_float() -> None:
    assert finite_float(1) == 1.0 and isinstance(finite_float(1), float)
    assert finite_float(np.int64(3)) == 3.0 and finite_float(np.float32(0.5)) == 0.5
    assert finite_float(-2.5) == -2.5 and finite_float(5e-324) == 5e-324
    for bad in (True, False, None, "1", math.nan, math.inf, -math.inf, 10**400, -(10**400), [1]):
        assert finite_float(bad) is None, bad


def test_numeric_and_rappor_parameters_beyond_the_float_range() -> None:
    for epsilon in (10**400, -(10**400), 10**5000):  # 10**5000 has no repr under 3.11's limit
        with pytest.raises(InvalidParameter, match="integer beyond the float range"):
            check_epsilon(epsilon)
    with pytest.raises(InvalidParameter, match="bounds low must be a finite number, got an int"):
        check_bounds((-(10**400), 0))
    with pytest.raises(InvalidParameter, match="epsilon_permanent must be a finite number"):
        create("rappor", epsilon=1.0, domain=["a", "b"], epsilon_permanent=10**400)
    assert check_bounds((0, 10**300)) == (0.0, 1e300)


def test_expected_weights_are_finite_numbers() -> None:
    assert check_expected([1, 3], 2) == (0.25, 0.75)
    assert check_expected(np.array([1.0, 1.0]), 2) == (0.5, 0.5)
    for bad in ([10**400, 1], ["0.5", "0.5"], [True, 1], [math.nan, 1], [-1, 2], [0, 0]):
        with pytest.raises(InvalidParameter, match="finite, >= 0 and not all 0"):
            check_expected(bad, 2)
    for bad in (5, None):
        if bad is None:
            assert check_expected(bad, 2) is None
            continue
        with pytest.raises(InvalidParameter, match="a list of numbers"):
            check_expected(bad, 2)
