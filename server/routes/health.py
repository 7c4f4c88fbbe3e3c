"""GET /health (liveness of every engine component) and GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from server.deps import Ctx

router = APIRouter()


@router.get("/health")
async def health(ctx: Ctx) -> JSONResponse:
    components = ctx.health()
    ok = all(components.values())
    return JSONResponse(
        {"status": "ok" if ok else "unhealthy", "components": components},
        status_code=200 if ok else 503,
    )


@router.get("/metrics")
async def metrics(ctx: Ctx) -> Response:
    for name, up in ctx.health().items():
        ctx.metrics.engine_healthy.labels(name).set(1 if up else 0)
    return Response(ctx.metrics.render(), media_type=ctx.metrics.content_type)


@router.get("/stats")
async def stats(ctx: Ctx) -> dict:
    """What the server holds in memory now (sessions, files, chunks, vectors)."""
    sessions = ctx.sessions.list()
    chunks = embedded = 0
    for s in sessions:
        for level in s.index.stats().values():
            chunks += level["chunks"]
            embedded += level["embedded"]
    return {
        "sessions": len(sessions),
        "files": len(ctx.files),
        "file_bytes": ctx.files.total_bytes,
        "chunks": chunks,
        "vectors": embedded,
        "encoder_queue": getattr(ctx.encoder, "queue_size", None),
    }
