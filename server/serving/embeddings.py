"""Adapts OpenAI embedding requests to the engine's Encoder (the dynamic batcher)."""

from __future__ import annotations

import base64

import numpy as np

from engine.encoder.base import Encoder
from engine.errors import InvalidRequest, NotFound
from server.metrics import Metrics
from server.protocol.embeddings import (
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
)

MAX_INPUTS = 2048


class EmbeddingService:
    def __init__(self, encoder: Encoder, metrics: Metrics, served_name: str):
        self.encoder = encoder
        self.metrics = metrics
        self.served_name = served_name

    def _texts(self, req: EmbeddingRequest) -> list[str]:
        raw = req.input
        if isinstance(raw, str):
            texts = [raw]
        elif raw and all(isinstance(x, str) for x in raw):
            texts = list(raw)  # type: ignore[arg-type]
        elif not raw:
            raise InvalidRequest("input must not be empty", param="input")
        else:
            raise InvalidRequest("token-id inputs are not supported; send strings", param="input")
        if len(texts) > MAX_INPUTS:
            raise InvalidRequest(f"at most {MAX_INPUTS} inputs per request", param="input")
        for i, t in enumerate(texts):
            if not t.strip():
                raise InvalidRequest(f"input[{i}] is empty", param="input")
        return texts

    async def create(self, req: EmbeddingRequest) -> EmbeddingResponse:
        if req.model and req.model != self.served_name:
            raise NotFound(
                f"The model '{req.model}' does not exist; see GET /v1/models",
                param="model",
                code="model_not_found",
            )
        if req.dimensions is not None and req.dimensions != self.encoder.dimension:
            raise InvalidRequest(
                f"{self.served_name} produces {self.encoder.dimension}-d vectors; "
                "it does not support other `dimensions`",
                param="dimensions",
            )
        texts = self._texts(req)
        vectors = await self.encoder.embed(texts)
        tokens = sum(self.encoder.count_tokens(texts))
        self.metrics.embedded_texts.labels(self.served_name).inc(len(texts))
        data = [
            EmbeddingData(index=i, embedding=_encode(v, req.encoding_format))
            for i, v in enumerate(vectors)
        ]
        return EmbeddingResponse(
            data=data,
            model=self.served_name,
            usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
        )


def _encode(v: np.ndarray, fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
    return v.astype(float).tolist()
