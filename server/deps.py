"""FastAPI dependency aliases (``Annotated[..., Depends(...)]``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from engine.errors import BackendUnavailable
from server.context import AppContext


def get_ctx(request: Request) -> AppContext:
    ctx = getattr(request.app.state, "ctx", None)
    if ctx is None:
        raise BackendUnavailable("the server is still starting")
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]
