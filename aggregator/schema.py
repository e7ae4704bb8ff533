"""JSON form and JSON Schema of the typed results: one definition of each field's wire shape.

A result is a frozen dataclass whose fields are JSON-ready Python values (``str``, ``int``,
``float``, ``bool``, ``None``, lists, string-keyed dicts, nested result dataclasses). Two
functions read the same field declarations:

* :func:`to_json` turns a result into the dict that the HTTP API, ``ldp estimate --format
  json`` and the dashboard serve;
* :func:`json_schema` turns a result *class* into an OpenAPI 3.0 schema (nested dataclasses
  become ``$ref`` entries of a shared component table), so the published contract cannot drift
  from what is served.

A field's wire name is its Python name unless ``metadata={"json": "from"}`` says otherwise
(``from`` is a Python keyword); ``metadata={"description": ...}`` documents it and
``metadata={"format": "date"}`` adds a string format. Every field is
always present in the JSON (``required``); ``X | None`` fields may be ``null``
(``nullable: true``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from client_sdk.errors import InvalidParameter

#: Where nested dataclass schemas are referenced from (OpenAPI components).
REF_PREFIX = "#/components/schemas/"

_SCALARS: dict[type, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
}


def json_name(field: dataclasses.Field[Any]) -> str:
    """The wire name of a dataclass field."""
    return str(field.metadata.get("json", field.name))


#: Per dataclass: (attribute, wire name, holds a dataclass) of each field, in declared order.
_PLANS: dict[type, tuple[tuple[str, str, bool], ...]] = {}


def _nests_dataclass(tp: Any) -> bool:
    if dataclasses.is_dataclass(tp):
        return True
    return any(_nests_dataclass(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _plan(cls: type) -> tuple[tuple[str, str, bool], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = tuple(
            (f.name, json_name(f), _nests_dataclass(hints[f.name])) for f in dataclasses.fields(cls)
        )
        _PLANS[cls] = plan
    return plan


def to_json(value: Any) -> Any:
    """The JSON-ready form of a result: dataclasses become dicts (wire names, declared order),
    tuples become lists, everything else is returned as is.

    A field whose annotation holds no dataclass (numbers, strings, ``list[float]``,
    ``dict[str, Any]``) is taken as it is (a tuple becomes a list): trends are long lists of
    numbers, and walking them would cost more than the estimate.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for attr, wire, deep in _plan(type(value)):
            item = getattr(value, attr)
            if deep:
                out[wire] = to_json(item)
            else:
                out[wire] = list(item) if type(item) is tuple else item
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def _type_schema(tp: Any, components: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 schema of one type annotation (registers dataclasses in ``components``)."""
    if tp is Any or tp is object:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if tp is type(None):
        return {"nullable": True}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        register(tp, components)
        return {"$ref": REF_PREFIX + tp.__name__}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        kinds = {type(a) for a in args}
        schema: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            schema = {**_SCALARS[next(iter(kinds))], **schema}
        return schema
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        if len(members) == 1:
            inner = _type_schema(members[0], components)
        else:
            inner = {"oneOf": [_type_schema(a, components) for a in members]}
        if not nullable:
            return inner
        if "$ref" in inner:  # OpenAPI 3.0 ignores siblings of $ref: wrap it
            return {"allOf": [inner], "nullable": True}
        return {**inner, "nullable": True}
    if origin is list or (origin is tuple and args[-1:] == (...,)):
        return {"type": "array", "items": _type_schema(args[0] if args else Any, components)}
    if origin is tuple:
        items = [_type_schema(a, components) for a in args]
        first = items[0] if items and all(i == items[0] for i in items) else {}
        return {"type": "array", "items": first, "minItems": len(args), "maxItems": len(args)}
    if origin in (dict, Mapping):
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": _type_schema(value, components) or True}
    raise InvalidParameter(f"no JSON schema for the annotation {tp!r}")


def register(cls: type, components: dict[str, Any]) -> dict[str, Any]:
    """Add the schema of dataclass ``cls`` (and of every dataclass it nests) to ``components``
    under its class name; return the components table."""
    name = cls.__name__
    if name in components:
        return components
    components[name] = {}  # placeholder: stops recursion on self-reference
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        schema = _type_schema(hints[f.name], components)
        if "format" in f.metadata:
            schema["format"] = f.metadata["format"]
        description = f.metadata.get("description")
        if description:
            if "$ref" in schema:
                schema = {"allOf": [schema]}
            schema["description"] = description
        properties[json_name(f)] = schema
    body: dict[str, Any] = {
        "type": "object",
        "required": list(properties),
        "additionalProperties": False,
        "properties": properties,
    }
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    if doc:
        body = {"description": " ".join(doc.split()), **body}
    components[name] = body
    return components


def json_schema(tp: Any, components: dict[str, Any] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0 schema of ``tp`` (a dataclass, a union of them, or any supported type).

    Supported: ``bool``, ``int``, ``float``, ``str``, ``None``, ``Any``, ``X | None``
    (``nullable``), unions (``oneOf``), ``Literal[...]`` (``enum``), ``list[X]``,
    ``tuple[X, ...]``, fixed tuples, ``dict[str, X]``, nested dataclasses (``$ref`` into
    ``components``, which is filled in place). Raises :class:`InvalidParameter` for others.
    """
    return _type_schema(tp, {} if components is None else components)
