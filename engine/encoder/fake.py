"""A deterministic stand-in for the ONNX encoder, for unit tests of logic.

Why bag-of-words hashing rather than random vectors: texts that share words get similar vectors,
so retrieval logic (HNSW, hybrid fusion, dedup) can be unit-tested with meaningful rankings, while
the same text always yields the same vector across processes (no Python ``hash`` salt).

Test hooks: ``calls`` records every batch's token lengths; ``gate`` (a threading.Event) makes
``embed_tokens`` block until it is set; ``fail_with`` makes the next batches raise.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import zlib
from collections.abc import Sequence

import numpy as np

from engine.encoder.base import Tokenized

_WORD = re.compile(r"\w+", re.UNICODE)
BOS, EOS, VOCAB = 0, 2, 30_000


class FakeEmbeddingModel:
    """Implements ``EmbeddingModel``: one token per word, a pooled hashed vector per text."""

    def __init__(
        self,
        dimension: int = 768,
        max_length: int = 384,
        model_name: str = "fake-encoder",
        delay_s: float = 0.0,
    ):
        self.model_name = model_name
        self.dimension = dimension
        self.max_length = max_length
        self.delay_s = delay_s
        self.calls: list[list[int]] = []
        self.gate: threading.Event | None = None
        self.fail_with: BaseException | None = None
        self._token_vectors: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def tokenize(self, texts: Sequence[str]) -> list[Tokenized]:
        out = []
        for text in texts:
            words = _WORD.findall(text.lower())[: self.max_length - 2]
            ids = [BOS, *((zlib.crc32(w.encode()) % VOCAB) + 5 for w in words), EOS]
            out.append(Tokenized(ids=ids))
        return out

    def embed_tokens(self, batch: Sequence[Tokenized]) -> np.ndarray:
        with self._lock:
            self.calls.append([len(t) for t in batch])
        if self.gate is not None:
            self.gate.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        if not batch:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._vector(t.ids) for t in batch])

    def warmup(self) -> None:
        self.embed_tokens(self.tokenize(["warm up"]))
        self.calls.clear()

    def _vector(self, ids: list[int]) -> np.ndarray:
        words = ids[1:-1] or ids  # an empty text still gets a (constant) vector
        vec = np.sum([self._token_vector(i) for i in words], axis=0)
        norm = float(np.linalg.norm(vec))
        return (vec / norm if norm > 0 else vec).astype(np.float32)

    def _token_vector(self, token: int) -> np.ndarray:
        vec = self._token_vectors.get(token)
        if vec is None:
            seed = int.from_bytes(
                hashlib.blake2b(token.to_bytes(4, "little")).digest()[:8], "little"
            )
            vec = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            self._token_vectors[token] = vec
        return vec
