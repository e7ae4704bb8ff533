"""Schemas of tuple annotations (``aggregator.schema``, issue 21).

A variable-length ``tuple[X, ...]`` is an array of X; a fixed-length tuple is an array of its
length whose ``items`` is the members' schema when they all agree (also for one member).
"""

from __future__ import annotations

from typing import Literal

from aggregator.schema import json_schema


def test_a_variable_length_tuple_is_an_array_of_its_member() -> None:
    assert json_schema(tuple[float, ...]) == {"type": "array", "items": {"type": "number"}}
    assert json_schema(tuple[str, ...] | None) == {
        "type": "array",
        "items": {"type": "string"},
        "nullable": True,
    }


def test_a_fixed_length_tuple_states_its_length_and_its_members() -> None:
    assert json_schema(tuple[str]) == {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "maxItems": 1,
    }
    assert json_schema(tuple[float, float]) == {
        "type": "array",
        "items": {"type": "number"},
        "minItems": 2,
        "maxItems": 2,
    }
    assert json_schema(tuple[str, float]) == {
        "type": "array",
        "items": {},
        "minItems": 2,
        "maxItems": 2,
    }


def test_literal_schemas() -> None:
    assert json_schema(Literal["mean"]) == {"type": "string", "enum": ["mean"]}
    assert json_schema(Literal[1, "a"]) == {"enum": [1, "a"]}
    # An empty Literal admits no value: an empty enum, not a crash.
    assert json_schema(Literal[()]) == {"enum": []}
