"""Hypothesis strategies for hostile input: valid JSON documents with one place broken."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from tests.support.server import TOKENS

#: The role tokens of the collectors the property tests build in-process.


def bearer(role: str) -> dict[str, str]:
    """The Authorization header of ``role`` (admin, analyst or ingest)."""
    return {"Authorization": f"Bearer {TOKENS[f'{role}_token']}"}


def json_values(
    extra: Sequence[Any] = (), keys: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[Any]:
    """Any JSON value (NaN and infinities included: Python's json writes them), with ``extra``
    leaves mixed in (numbers beyond the float range, names the parser looks for, ...) and
    object keys from ``keys`` (short text by default)."""
    leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
    if extra:
        leaves |= st.sampled_from(list(extra))
    names = keys if keys is not None else st.text(max_size=8)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
        max_leaves=8,
    )


@st.composite
def mutated(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any]) -> Any:
    """``base`` (a JSON document, not changed) with one place, a field, an element or a
    nested value, replaced by a draw from ``values`` or removed; the whole document may be
    replaced too."""
    out = copy.deepcopy(base)
    places: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        places.append(path)
        if isinstance(node, dict | list):
            for key, child in node.items() if isinstance(node, dict) else enumerate(node):
                walk(child, [*path, key])

    walk(out, [])
    path = draw(st.sampled_from(places))
    if not path:
        return draw(values)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        parent[path[-1]] = draw(values)
    else:
        del parent[path[-1]]
    return out
