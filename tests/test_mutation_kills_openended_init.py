"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/__init__.py`` (issue 21).

``create_open`` takes ``epsilon`` and ``max_length`` by keyword only and refuses unknown names
and bad parameters with :class:`InvalidParameter`; ``open_from_config`` rebuilds the same
mechanism (its parameters included) and refuses anything that is not such a configuration
with :class:`InvalidParameter`, never a raw Python error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.openended import OPEN_MECHANISMS, create_open, open_from_config


def test_epsilon_and_max_length_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        create_open("cms", 1.0, 8)  # type: ignore[misc]
    with pytest.raises(TypeError):
        create_open("cms", 1.0, max_length=8)  # type: ignore[misc]
    assert create_open("cms", epsilon=1.0, max_length=8).name == "cms"


def test_every_name_is_built_and_unknown_ones_refused() -> None:
    for name, cls in OPEN_MECHANISMS.items():
        mech = create_open(name, epsilon=1.0, max_length=4)
        assert type(mech) is cls and mech.max_length == 4
    with pytest.raises(InvalidParameter, match="unknown open-domain mechanism 'cmx'"):
        create_open("cmx", epsilon=1.0, max_length=4)


def test_bad_parameters_are_refused_as_invalid_parameters() -> None:
    with pytest.raises(InvalidParameter, match="bad parameters for 'cms'"):
        create_open("cms", epsilon=1.0, max_length=4, bogus=1)
    with pytest.raises(InvalidParameter, match="bad parameters for 'pem'"):
        open_from_config(
            {"mechanism": "pem", "epsilon": 1.0, "max_length": 4, "params": {"bogus": 1}}
        )


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("cms", {"width": 64, "depth": 4, "flips": "symmetric"}),
        ("hcms", {"width": 256, "depth": 8}),
        ("pem", {"width": 64, "depth": 4}),
    ],
)
def test_a_config_rebuilds_the_same_mechanism_with_its_parameters(
    name: str, params: dict[str, Any]
) -> None:
    mech = create_open(name, epsilon=2.0, max_length=6, **params)
    again = open_from_config(json.loads(json.dumps(mech.config())))
    assert again == mech and again.config() == mech.config()
    for key, value in params.items():
        assert again.config()["params"][key] == value


class _NoGet:
    """Subscriptable like a config but without ``.get``."""

    def __getitem__(self, key: str) -> object:
        return {"mechanism": "cms", "epsilon": 1.0, "max_length": 4}[key]


@pytest.mark.parametrize(
    "config",
    [
        {"epsilon": 1.0, "max_length": 4},
        {"mechanism": "cms", "max_length": 4},
        {"mechanism": "cms", "epsilon": 1.0},
        ["cms", 1.0, 4],
        None,
        _NoGet(),
    ],
)
def test_what_is_not_a_config_is_refused(config: Any) -> None:
    with pytest.raises(InvalidParameter, match="not an open-domain mechanism config"):
        open_from_config(config)
