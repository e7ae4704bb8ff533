"""Tests that kill surviving mutants of ``client_sdk/mechanisms/__init__.py`` (issue 21).

The package loads ``Tally`` (and NumPy) lazily through a module ``__getattr__``: ``Tally``
resolves to the tally class, and every other unknown name is an ``AttributeError`` as for any
module (``hasattr`` and ``from ... import`` rely on it).
"""

from __future__ import annotations

import pytest

import client_sdk.mechanisms as mechanisms
from client_sdk.mechanisms.tally import Tally


def test_tally_is_loaded_on_first_use() -> None:
    assert mechanisms.Tally is Tally
    assert getattr(mechanisms, "Tally") is Tally  # noqa: B009
    from client_sdk.mechanisms import Tally as again

    assert again is Tally


@pytest.mark.parametrize("name", ["Aardvark", "Tall", "Tallx", "Tallz", "TALLY", "tally2", "zzz"])
def test_any_other_unknown_name_is_an_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError, match=name):
        getattr(mechanisms, name)
    assert not hasattr(mechanisms, name)
