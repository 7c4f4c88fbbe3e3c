"""``build_app(settings)``: the FastAPI application (no module-level app)."""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.auth import make_auth_dependency
from server.context import AppContext, build_context, close_context
from server.errors import install_error_handlers
from server.routes import chat, embeddings, files, health, models, vector_stores
from server.settings import Settings

log = logging.getLogger(__name__)


class MetricsMiddleware:
    """Pure ASGI middleware (streams stay unbuffered): latency per route template and status."""

    def __init__(self, app: ASGIApp, owner: FastAPI):
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            ctx: AppContext | None = getattr(self.owner.state, "ctx", None)
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            if ctx is not None and path != "/metrics":
                ctx.metrics.request_latency.labels(scope["method"], path, str(status)).observe(
                    time.perf_counter() - started
                )
                if status >= 400:
                    ctx.metrics.request_failures.labels(path, str(status)).inc()


def build_app(settings: Settings, context: AppContext | None = None) -> FastAPI:
    """Build the app. ``context`` lets tests inject ready engines (e.g. fakes)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        ctx = context or await build_context(settings)
        await ctx.start()
        app.state.ctx = ctx
        try:
            yield
        finally:
            app.state.ctx = None
            await ctx.stop()
            if context is None:
                await close_context(ctx)

    app = FastAPI(
        title="Brief server",
        version="0.1.0",
        description="Briefing over your own documents; OpenAI-compatible API.",
        lifespan=lifespan,
    )
    app.state.ctx = None
    install_error_handlers(app)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    v1 = APIRouter(dependencies=[Depends(make_auth_dependency(key))])
    for module in (models, chat, embeddings, files, vector_stores):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(health.router)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    app.add_middleware(MetricsMiddleware, owner=app)
    return app
