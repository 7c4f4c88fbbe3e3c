"""POST /v1/chat/completions: find the handler, return JSON or an SSE stream."""

from __future__ import annotations

from fastapi import APIRouter
from sse_starlette.sse import EventSourceResponse

from server.deps import Ctx
from server.protocol.chat import ChatCompletionRequest, ChatCompletionResponse

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse)
async def chat_completions(req: ChatCompletionRequest, ctx: Ctx):
    service = ctx.chat_for(req)
    if req.stream:
        events = await service.open_stream(req)
        return EventSourceResponse(events, ping=15, send_timeout=60)
    return await service.create(req)
