"""Multi-attribute configs with declared values (0272801): what the eighth mutation sweep
found unchecked (docs/MUTATION.md, "eighth sweep").

``from_config`` rebuilds a stored config's numeric attributes by the mean mechanisms its
``per_attribute`` names, except for an ``auto`` config: ``auto`` chooses them itself (and
refuses to be told), and the per-attribute list is then only checked against its choice. An
``auto`` config that carries the list ``auto`` rebuilds to is taken.
"""

from __future__ import annotations

from client_sdk.mechanisms.multi import create, from_config

ATTRIBUTES = {"sex": ["F", "M"], "age": {"bounds": [17, 90]}}


def test_an_auto_config_with_the_per_attribute_list_it_rebuilds_to_is_taken() -> None:
    chosen = create("auto", epsilon=2.0, attributes=ATTRIBUTES)
    config = {
        "mechanism": "auto",
        "epsilon": 2.0,
        "attributes": ATTRIBUTES,
        "params": {"per_attribute": chosen.params()["per_attribute"]},
    }
    assert from_config(config).config() == chosen.config()
