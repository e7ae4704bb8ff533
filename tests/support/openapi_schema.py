"""Validate JSON against a schema of the collector's OpenAPI 3.0 document (``jsonschema_rs``).

OpenAPI 3.0's ``nullable: true`` is not JSON Schema: :func:`as_json_schema` rewrites it into
``type: [..., "null"]`` (or ``anyOf`` with null), so a standard validator checks exactly what the
document promises. References stay ``#/components/schemas/X``: the components travel along.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs


def as_json_schema(node: Any) -> Any:
    """``node`` with every OpenAPI 3.0 ``nullable`` turned into JSON Schema."""
    if isinstance(node, list):
        return [as_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def validate(document: dict[str, Any], schema_name: str, instance: Any) -> None:
    """Raise ``jsonschema_rs.ValidationError`` unless ``instance`` fits the named schema."""
    components = document["components"]["schemas"]
    root = {
        **as_json_schema(components[schema_name]),
        "components": {"schemas": as_json_schema(components)},
    }
    jsonschema_rs.validator_for(root).validate(instance)


def undeclared_fields(
    document: dict[str, Any], schema: Any, instance: Any, path: str = "$"
) -> list[str]:
    """Paths of object fields in ``instance`` that the schema does not declare (follows $ref,
    arrays, oneOf by the ``kind`` discriminator, allOf)."""
    components = document["components"]["schemas"]
    while isinstance(schema, dict) and ("$ref" in schema or "allOf" in schema):
        schema = (
            components[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema["allOf"][0]
        )
    if isinstance(schema, dict) and "oneOf" in schema and isinstance(instance, dict):
        for option in schema["oneOf"]:
            target = components[option["$ref"].rsplit("/", 1)[1]]
            if instance.get("kind") in target["properties"]["kind"].get("enum", []):
                return undeclared_fields(document, target, instance, path)
        return [f"{path} (no oneOf member for kind {instance.get('kind')!r})"]
    missing: list[str] = []
    if isinstance(instance, dict) and isinstance(schema, dict) and "properties" in schema:
        for key, value in instance.items():
            if key not in schema["properties"]:
                missing.append(f"{path}.{key}")
            else:
                missing += undeclared_fields(
                    document, schema["properties"][key], value, f"{path}.{key}"
                )
    if isinstance(instance, list) and isinstance(schema, dict) and "items" in schema:
        for i, item in enumerate(instance):
            missing += undeclared_fields(document, schema["items"], item, f"{path}[{i}]")
    return missing
