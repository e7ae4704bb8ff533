"""Tests that kill surviving mutants of ``client_sdk/mechanisms/multi/__init__.py`` (issue 21).

``create``'s and ``from_config``'s refusals, ``compare_protocols`` on attributes no protocol
accepts, and the frozen ``ProtocolChoice``.
"""

from __future__ import annotations

import dataclasses

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.multi import compare_protocols, create, from_config

ATTRS = {"colour": ["red", "green", "blue"], "size": ["S", "M", "L", "XL"]}


def test_auto_takes_no_oracle_and_no_weights() -> None:
    assert create("auto", epsilon=1.0, attributes=ATTRS).name in ("spl", "smp", "rsfd")
    for kwargs in (
        {"oracle": "grr"},
        {"oracle": "abc"},
        {"weights": [1, 1]},
        {"weights": "optimal"},
    ):
        with pytest.raises(InvalidParameter, match="give neither"):
            create("auto", epsilon=1.0, attributes=ATTRS, **kwargs)  # type: ignore[arg-type]


def test_a_named_protocol_is_built_as_asked() -> None:
    for name in ("spl", "smp", "rsfd"):
        assert create(name, epsilon=1.0, attributes=ATTRS, oracle="grr").name == name
    with pytest.raises(InvalidParameter, match="unknown multi-attribute mechanism"):
        create("bogus", epsilon=1.0, attributes=ATTRS)


def test_compare_refuses_what_no_protocol_accepts() -> None:
    with pytest.raises(InvalidParameter):
        compare_protocols(epsilon=1.0, attributes={"only": ["a"]})
    with pytest.raises(InvalidParameter):
        compare_protocols(epsilon=-1.0, attributes=ATTRS)


def test_the_choice_is_frozen() -> None:
    choice = compare_protocols(epsilon=1.0, attributes=ATTRS)
    assert set(choice.criteria) == {"spl", "smp", "rsfd"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.chosen = choice.chosen  # type: ignore[misc]


def test_from_config_refuses_incomplete_or_tampered_configs() -> None:
    mech = create("smp", epsilon=1.0, attributes=ATTRS, oracle="grr")
    config = mech.config()
    assert from_config(config) == mech
    assert from_config({**config, "params": None}).name == "smp"
    for bad in ({}, {"mechanism": "smp"}, None, []):
        with pytest.raises(InvalidParameter, match="not a multi-attribute config"):
            from_config(bad)  # type: ignore[arg-type]
    params = dict(config["params"])
    per = params["per_attribute"]
    tampered = [{**per[0], "mechanism": "oue"}, *per[1:]]
    with pytest.raises(InvalidParameter, match="per-attribute"):
        from_config({**config, "params": {**params, "per_attribute": tampered}})
    assert from_config({**config, "params": {**params, "per_attribute": per}}) == mech


class _ItemsOnly:
    """Indexable by key but without ``.get``: not a config."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def __getitem__(self, key: str) -> object:
        return self.data[key]


def test_from_config_refuses_an_object_without_get() -> None:
    config = create("spl", epsilon=1.0, attributes=ATTRS, oracle="grr").config()
    with pytest.raises(InvalidParameter, match="not a multi-attribute config"):
        from_config(_ItemsOnly(config))  # type: ignore[arg-type]


def test_from_config_restores_the_attribute_order_a_store_sorted_away() -> None:
    attrs = {"size": ATTRS["size"], "colour": ATTRS["colour"]}  # not in sorted order
    mech = create("smp", epsilon=1.0, attributes=attrs, oracle="grr")
    config = mech.config()
    stored = {**config, "attributes": dict(sorted(config["attributes"].items()))}
    assert list(stored["attributes"]) == ["colour", "size"]
    rebuilt = from_config(stored)
    assert rebuilt == mech and list(rebuilt.config()["attributes"]) == ["size", "colour"]


@pytest.mark.parametrize("protocol", ["spl", "rsfd"])
def test_only_smp_has_a_sampling_term(protocol: str) -> None:
    attrs = {"a": ["x", "y", "z"], "b": ["u", "v"]}
    mech = create(protocol, epsilon=1.0, attributes=attrs)
    assert mech.sampling_probabilities == (1.0,) * mech.d
    assert [mech.sampling_factor(j) for j in range(mech.d)] == [0.0] * mech.d
    smp = create("smp", epsilon=1.0, attributes=attrs)
    assert [smp.sampling_factor(j) for j in range(smp.d)] == [1.0, 1.0]
