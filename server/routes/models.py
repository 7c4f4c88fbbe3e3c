"""GET /v1/models: the chat model and the embedding model."""

from __future__ import annotations

from fastapi import APIRouter

from engine.errors import NotFound
from server.deps import Ctx
from server.protocol.common import ModelCard, ModelList

router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def list_models(ctx: Ctx) -> ModelList:
    return ModelList(
        data=[
            ModelCard(id=ctx.llm.model_name, owned_by="brief:" + ctx.settings.llm_backend),
            ModelCard(id=ctx.embeddings.served_name, owned_by="brief:encoder"),
        ]
    )


@router.get("/v1/models/{model_id:path}", response_model=ModelCard)
async def get_model(model_id: str, ctx: Ctx) -> ModelCard:
    for card in (await list_models(ctx)).data:
        if card.id == model_id:
            return card
    raise NotFound(f"The model '{model_id}' does not exist", param="model", code="model_not_found")
