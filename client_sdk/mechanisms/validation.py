"""Argument checks shared by every mechanism; messages give the rule, the value and the fix."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

from client_sdk.errors import InvalidParameter, ValueNotInDomain

#: Largest epsilon a mechanism accepts. Above it a 32-bit sampling threshold for the rarest
#: output gets so small that the realised epsilon drifts visibly below the requested one,
#: and no useful privacy is left anyway.
MAX_EPSILON = 16.0
#: Smallest epsilon a mechanism accepts. The sampling thresholds keep a margin of 2**-50 below
#: e^epsilon (docs/MECHANISMS.md §8), so below about 9e-16 no threshold keeps the true value
#: more often than another and the "mechanism" would realise a ratio above its claim; far above
#: that, no estimate is useful either (a frequency's standard error is about 2/(epsilon sqrt n):
#: +-1% at 1e-12 takes 4e28 reports). Numeric mechanisms with a large grid refuse a few times
#: more than this themselves ("too small for a grid").
MIN_EPSILON = 1e-12
#: Longest domain label in characters.
MAX_LABEL_LENGTH = 200


def finite_float(value: object) -> float | None:
    """``value`` as a float if it is a finite real number, else None: a bool, NaN, an
    infinity or an int beyond the float range (whose ``float`` raises OverflowError) is not."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def number_text(value: object) -> str:
    """``value`` for an error message: its repr, but not for an int beyond the float range,
    whose repr could run to thousands of digits (or raise, past Python's digit limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and finite_float(value) is None:
        return "an integer beyond the float range"
    return repr(value)


def check_epsilon(epsilon: object) -> float:
    """Return ``epsilon`` as a float, or raise if it is not a finite number in [1e-12, 16]."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise InvalidParameter(
            f"epsilon must be a finite number > 0, got {epsilon!r} ({type(epsilon).__name__})"
        )
    try:
        value = float(epsilon)
    except OverflowError:  # its repr could be thousands of digits: not quoted
        raise InvalidParameter(
            f"epsilon must be a number in [{MIN_EPSILON:g}, {MAX_EPSILON:g}], got an integer "
            "beyond the float range"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise InvalidParameter(f"epsilon must be a finite number > 0, got {value!r}")
    if value < MIN_EPSILON:
        raise InvalidParameter(
            f"epsilon must be >= {MIN_EPSILON:g} (64-bit sampling thresholds cannot realise "
            f"less, and no estimate would be useful), got {value!r}"
        )
    if value > MAX_EPSILON:
        raise InvalidParameter(
            f"epsilon must be <= {MAX_EPSILON:g} (larger values give no meaningful privacy), "
            f"got {value!r}"
        )
    return value


#: Keyword arguments of ``create``: a config's ``params`` may not set these (they would clash
#: with the config's own fields, or change what kind of mechanism is built).
CREATE_KEYWORDS = frozenset(
    {"name", "epsilon", "domain", "bounds", "max_report_bytes", "expected", "attributes",
     "pairs", "max_length"}
)  # fmt: skip


def config_parts(
    config: object, field: str, what: str, *, splat: bool = True
) -> tuple[str, Any, Any, dict[str, Any]]:
    """``(name, epsilon, config[field], params)`` of a mechanism config from outside the
    process (a collector's campaign resource, a stored record): the output of ``config()``.

    Checks the shape only (an object with a string ``mechanism``, ``epsilon``, ``field``,
    and ``params`` an object with string keys); the constructor checks the values. With
    ``splat`` (the params become ``create``'s keyword arguments) the params may not name any
    of :data:`CREATE_KEYWORDS`. ``what`` names the kind with its article ("a numeric
    mechanism"); the :class:`InvalidParameter` says "not <what> config: <the rule>".
    """
    if not isinstance(config, Mapping):
        raise InvalidParameter(
            f"not {what} config: an object is needed, got {type(config).__name__}"
        )
    missing = [key for key in ("mechanism", "epsilon", field) if key not in config]
    if missing:
        raise InvalidParameter(f"not {what} config: missing {', '.join(map(repr, missing))}")
    name = config["mechanism"]
    if not isinstance(name, str):
        raise InvalidParameter(
            f"not {what} config: 'mechanism' must be a mechanism name (a string), got {name!r}"
        )
    params = config.get("params") or {}
    if not isinstance(params, Mapping) or not all(isinstance(key, str) for key in params):
        raise InvalidParameter(f"not {what} config: its params must be an object, got {params!r}")
    clash = sorted(set(params) & CREATE_KEYWORDS) if splat else []
    if clash:
        raise InvalidParameter(
            f"not {what} config: its params may not set {', '.join(map(repr, clash))} (a field "
            "of the config itself)"
        )
    return name, config["epsilon"], config[field], dict(params)


def check_implied_epsilon(p: float, implied: float) -> None:
    """Refuse a keep probability ``p`` whose epsilon falls below :data:`MIN_EPSILON`."""
    if implied < MIN_EPSILON:
        raise InvalidParameter(
            f"p={p!r} implies epsilon={implied!r}, below the smallest epsilon a mechanism "
            f"accepts ({MIN_EPSILON:g}): use a p further from 1/2"
        )


def _check_domain_size(size: int, *, max_k: int, mechanism: str) -> None:
    if size < 2:
        raise InvalidParameter(f"a domain needs at least 2 values, got {size}")
    if size > max_k:
        raise InvalidParameter(
            f"mechanism {mechanism!r} allows at most {max_k} domain values, got {size}; "
            "use 'olh' or 'hr' for large domains"
        )


def check_domain(domain: object, *, max_k: int, mechanism: str) -> tuple[str, ...]:
    """Return the domain as a tuple of labels.

    ``domain`` is a sequence of distinct non-empty strings, or an int ``k`` meaning the labels
    ``"0" .. "k-1"``. At least 2 and at most ``max_k`` values.
    """
    if isinstance(domain, bool):
        raise InvalidParameter(f"domain must be a list of labels or a size k, got {domain!r}")
    if isinstance(domain, int):
        size = domain
        # The size is checked first: the labels of domain=10**12 would never finish building.
        _check_domain_size(size, max_k=max_k, mechanism=mechanism)
        labels: tuple[str, ...] = tuple(str(i) for i in range(domain))
    elif isinstance(domain, str) or not isinstance(domain, Sequence):
        raise InvalidParameter(
            f"domain must be a list of labels or a size k, got {type(domain).__name__}"
        )
    else:
        labels = tuple(domain)
        size = len(labels)
    _check_domain_size(size, max_k=max_k, mechanism=mechanism)
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label:
            raise InvalidParameter(f"domain label #{i} must be a non-empty string, got {label!r}")
        if len(label) > MAX_LABEL_LENGTH:
            raise InvalidParameter(
                f"domain label #{i} is {len(label)} characters; at most {MAX_LABEL_LENGTH} allowed"
            )
    if len(set(labels)) != len(labels):
        seen: set[str] = set()
        for dup in labels:
            if dup in seen:
                raise InvalidParameter(
                    f"domain labels must be distinct; {dup!r} appears more than once"
                )
            seen.add(dup)
    return labels


def value_error(
    value: object, domain: Sequence[str], where: str = "the domain"
) -> ValueNotInDomain:
    """Build the error for a value outside ``domain``, with a close match when there is one."""
    hint = ""
    if isinstance(value, str):
        import difflib  # only on this error path: importing the SDK stays light

        close = difflib.get_close_matches(value, list(domain), n=1)
        if close:
            hint = f"; did you mean {close[0]!r}?"
    return ValueNotInDomain(f"value {value!r} is not in {where} ({len(domain)} values{hint})")
