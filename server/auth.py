"""Bearer-key check for the /v1 API, active only when ``BRIEF_API_KEY`` is set."""

from __future__ import annotations

import secrets

from fastapi import Request

from server.errors import AuthError


def make_auth_dependency(api_key: str | None):
    async def check(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthError("missing API key: send `Authorization: Bearer <key>`")
        if not secrets.compare_digest(token.strip(), api_key):
            raise AuthError("invalid API key", code="invalid_api_key")

    return check
