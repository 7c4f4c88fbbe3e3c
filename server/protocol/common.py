"""Wire types shared by several endpoints (pydantic only: no fastapi, no engine imports)."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OpenAIModel(BaseModel):
    """Base for request bodies: unknown fields are ignored, like OpenAI's own server does for
    options we do not implement (they are listed in the README)."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int | None = 0
    total_tokens: int = 0


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "brief"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
