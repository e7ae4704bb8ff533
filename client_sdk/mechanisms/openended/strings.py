"""How a device turns an open-ended value into the bytes every open-domain mechanism hashes.

Normalisation (documented in docs/MECHANISMS.md, "Open-ended values"): the value must be a
``str``; it is put in Unicode NFC form and encoded as UTF-8. The result must be 1 to
``max_length`` bytes and hold no NUL byte (NUL pads prefixes in the discovery protocol, so it
marks "the string ended here"). Nothing else is changed: case, whitespace and punctuation are
the application's business. Too long or otherwise bad values raise :class:`ValueTooLong` /
:class:`InvalidParameter` on the device, before any randomness is drawn.
"""

from __future__ import annotations

import unicodedata

from client_sdk.errors import InvalidParameter

#: Largest ``max_length`` (bytes) a campaign may declare.
MAX_LENGTH_LIMIT = 64


class ValueTooLong(InvalidParameter):
    """A value is longer than the campaign's ``max_length`` once normalised."""


def check_max_length(max_length: object) -> int:
    """``max_length`` as an int in ``[1, MAX_LENGTH_LIMIT]``, or :class:`InvalidParameter`."""
    if (
        isinstance(max_length, bool)
        or not isinstance(max_length, int)
        or not 1 <= max_length <= MAX_LENGTH_LIMIT
    ):
        raise InvalidParameter(
            f"max_length must be an integer number of bytes in [1, {MAX_LENGTH_LIMIT}], "
            f"got {max_length!r}"
        )
    return max_length


def normalise(value: object, max_length: int) -> bytes:
    """The bytes of ``value``: NFC, UTF-8, 1 to ``max_length`` bytes, no NUL."""
    if not isinstance(value, str):
        raise InvalidParameter(f"an open-ended value is a str, got {type(value).__name__}")
    try:
        data = unicodedata.normalize("NFC", value).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParameter("the value is not valid Unicode (lone surrogate)") from None
    if not data:
        raise InvalidParameter("an open-ended value must not be empty")
    if len(data) > max_length:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ValueTooLong(
            f"value {shown!r} is {len(data)} bytes of UTF-8 after NFC normalisation; "
            f"this campaign allows at most max_length={max_length}"
        )
    if b"\x00" in data:
        raise InvalidParameter("an open-ended value must not contain the NUL character")
    return data


def to_text(data: bytes) -> str:
    """The string of normalised bytes (NUL padding removed; invalid UTF-8 replaced)."""
    return data.rstrip(b"\x00").decode("utf-8", errors="replace")
