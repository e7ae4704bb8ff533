"""Tests that kill surviving mutants of ``client_sdk/mechanisms/identity.py`` (issue 21).

``ConfigIdentity`` derives equality, hashing and the configuration digest from ``config()``:
objects with equal configurations are equal and hash alike whatever order their configuration
dicts were built in (the ``==``/``hash`` contract), different configurations are unequal, and
the digest is the sha256 of the canonical JSON (sorted keys, no spaces) that a device written
in another language recomputes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from client_sdk.mechanisms import create, from_config
from client_sdk.mechanisms.identity import ConfigIdentity


class _Fixed(ConfigIdentity):
    """A ConfigIdentity whose configuration is given (its dict's insertion order included)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config

    def config(self) -> dict[str, Any]:
        return self._config


def test_equal_configurations_in_another_order_are_equal_and_hash_alike() -> None:
    a = _Fixed({"mechanism": "x", "epsilon": 1.0, "params": {"g": 3, "h": 4}})
    b = _Fixed({"params": {"h": 4, "g": 3}, "epsilon": 1.0, "mechanism": "x"})
    assert a == b and b == a
    assert a.digest() == b.digest()
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


def test_the_digest_is_the_sha256_of_the_canonical_json() -> None:
    config = {"mechanism": "x", "epsilon": 0.5, "domain": ["b", "a"], "params": {"z": 1, "a": 2}}
    canonical = '{"domain":["b","a"],"epsilon":0.5,"mechanism":"x","params":{"a":2,"z":1}}'
    assert _Fixed(config).digest() == hashlib.sha256(canonical.encode()).hexdigest()
    mech = create("oue", epsilon=1.0, domain=["a", "b", "c"])
    blob = json.dumps(mech.config(), sort_keys=True, separators=(",", ":"))
    assert mech.digest() == hashlib.sha256(blob.encode()).hexdigest()


def test_different_configurations_are_unequal_both_ways() -> None:
    pairs = [
        (create("oue", epsilon=1.0, domain=3), create("oue", epsilon=2.0, domain=3)),
        (create("oue", epsilon=1.0, domain=3), create("sue", epsilon=1.0, domain=3)),
        (create("grr", epsilon=1.0, domain=3), create("grr", epsilon=1.0, domain=4)),
        (_Fixed({"a": 1}), _Fixed({"a": 2})),
        (_Fixed({"a": 1}), _Fixed({"b": 1})),
    ]
    for a, b in pairs:
        assert a != b and b != a
        assert not a == b and not b == a
        assert a.digest() != b.digest()


def test_equal_configurations_are_equal_and_a_rebuilt_mechanism_is_the_same() -> None:
    for mech in (
        create("olh", epsilon=1.5, domain=["x", "y", "z"]),
        create("piecewise", epsilon=1.0, bounds=(0, 10)),
        create("cms", epsilon=2.0, max_length=8, width=64, depth=4),
    ):
        again = from_config(json.loads(json.dumps(mech.config())))
        assert again == mech and mech == again and not again != mech
        assert hash(again) == hash(mech) and again.digest() == mech.digest()
    assert _Fixed({"a": 1}) == _Fixed({"a": 1})


def test_anything_else_is_never_equal() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    for other in (mech.config(), None, 1, "oue", mech.digest()):
        assert mech != other and not mech == other
