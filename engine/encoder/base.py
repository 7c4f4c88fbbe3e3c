"""The Encoder protocol: text in, L2-normalised float32 vectors out.

``EmbeddingModel`` is the synchronous core a batcher drives (tokenise, run, pool); ``Encoder`` is
what the rest of the engine awaits (usually the dynamic batcher in front of a model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Tokenized:
    """One text after tokenisation (truncated to the model's max length)."""

    ids: list[int]

    def __len__(self) -> int:
        return len(self.ids)


@runtime_checkable
class EmbeddingModel(Protocol):
    """Synchronous model core, following infinity's encode_pre / encode_core split."""

    model_name: str
    dimension: int
    max_length: int

    def tokenize(self, texts: Sequence[str]) -> list[Tokenized]:
        """Tokenise (cheap, called on the event loop thread)."""

    def embed_tokens(self, batch: Sequence[Tokenized]) -> np.ndarray:
        """Run the model on a batch (blocking; called in a worker thread). Shape (n, dimension)."""


@runtime_checkable
class Encoder(Protocol):
    """Async embedding service (the batcher implements it)."""

    model_name: str
    dimension: int

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dimension) float32 array of L2-normalised embeddings."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts (after truncation) of each text."""

    def healthy(self) -> bool:
        """False once the batcher's worker has died."""
