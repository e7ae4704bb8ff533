"""Bearer-token roles: admin, analyst, ingest; tokens compared in constant time.

The admin token is accepted wherever the analyst or ingest token is. A token is never stored
or logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any, TypeVar

from flask import current_app, request

from collector.errors import APIError, ConfigError

ROLES = ("admin", "analyst", "ingest")
MIN_TOKEN_LENGTH = 16
F = TypeVar("F", bound=Callable[..., Any])


def check_tokens(settings: Mapping[str, Any]) -> dict[str, str]:
    """The role -> token map from settings; :class:`ConfigError` if one is missing or weak."""
    tokens: dict[str, str] = {}
    for role in ROLES:
        token = settings.get(f"{role}_token")
        env = f"LDP_{role.upper()}_TOKEN"
        if not token:
            raise ConfigError(
                f"{env} is not set: set the three role tokens (LDP_ADMIN_TOKEN, "
                "LDP_ANALYST_TOKEN, LDP_INGEST_TOKEN), or run 'ldp serve --dev' for a local "
                "development run that generates them"
            )
        if len(token) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"{env} must be at least {MIN_TOKEN_LENGTH} characters, got {len(token)}; "
                "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        tokens[role] = token
    if len(set(tokens.values())) != len(tokens):
        raise ConfigError("the admin, analyst and ingest tokens must all be different")
    return tokens


def role_of(header: str | None, tokens: Mapping[str, str]) -> str | None:
    """The role whose token the ``Authorization: Bearer`` header carries, or None."""
    scheme, _, credentials = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():  # the scheme is case-insensitive
        return None
    # SHA-256 first: compare_digest then sees equal lengths, so not even a token's length leaks.
    given = hashlib.sha256(credentials.strip().encode("utf-8", "replace")).digest()
    found = None
    for role, token in tokens.items():
        # Compare against every token (no early exit) in constant time.
        if hmac.compare_digest(given, hashlib.sha256(token.encode()).digest()):
            found = role
    return found


def require(*roles: str) -> Callable[[F], F]:
    """View decorator: the request must carry the token of ``roles`` or admin.

    No or an unknown token: 401 (authenticate). A valid token of another role: 403 (the
    caller is known but not allowed; another token will not be asked for by a retry).
    """
    allowed = {"admin", *roles}

    def decorate(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tokens = current_app.extensions["ldp_tokens"]
            role = role_of(request.headers.get("Authorization"), tokens)
            if role is not None and role not in allowed:
                need = " or ".join(sorted(allowed))
                raise APIError(
                    403,
                    "forbidden",
                    f"the {role} token may not call this endpoint; it needs the {need} token",
                )
            if role not in allowed:
                need = " or ".join(sorted(allowed))
                raise APIError(
                    401,
                    "unauthorized",
                    f"this endpoint needs 'Authorization: Bearer <token>' with the {need} token",
                    headers={"WWW-Authenticate": 'Bearer realm="ldp"'},
                )
            return view(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
