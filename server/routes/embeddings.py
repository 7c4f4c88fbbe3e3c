"""POST /v1/embeddings."""

from __future__ import annotations

from fastapi import APIRouter

from server.deps import Ctx
from server.protocol.embeddings import EmbeddingRequest, EmbeddingResponse

router = APIRouter()


@router.post("/v1/embeddings", response_model=EmbeddingResponse, response_model_exclude_none=True)
async def create_embeddings(req: EmbeddingRequest, ctx: Ctx) -> EmbeddingResponse:
    return await ctx.embeddings.create(req)
