"""Choose the encoder backend from settings; heavy imports happen only for the chosen one.

The engine does not import the server: ``EncoderSettings`` names the fields this module reads,
and ``server.settings.Settings`` satisfies it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from engine.encoder.base import EmbeddingModel
from engine.encoder.batcher import BatchedEncoder, BatchObserver
from engine.errors import BackendUnavailable, MissingExtra
from models import paths


class EncoderSettings(Protocol):
    encoder_backend: str
    encoder_quantized: bool
    encoder_device: str
    encoder_threads: int | None
    encoder_max_length: int
    encoder_served_name: str
    batch_max_size: int
    batch_max_tokens: int
    batch_max_wait_ms: float
    batch_max_queue: int

    def resolved_encoder_path(self) -> Path: ...


def build_model(settings: EncoderSettings) -> EmbeddingModel:
    """The synchronous model core for ``settings.encoder_backend``."""
    backend = settings.encoder_backend
    if backend == "fake":
        from engine.encoder.fake import FakeEmbeddingModel

        return FakeEmbeddingModel(
            max_length=settings.encoder_max_length, model_name=settings.encoder_served_name
        )
    if backend == "onnx":
        extra = "gpu" if settings.encoder_device == "cuda" else "models"
        for module in ("onnxruntime", "tokenizers"):
            try:
                __import__(module)
            except ImportError as exc:
                raise MissingExtra("onnx", module, extra) from exc
        path = settings.resolved_encoder_path()
        model_file = path / (paths.ONNX_INT8 if settings.encoder_quantized else paths.ONNX_FP32)
        if not path.is_dir() or not model_file.is_file():
            raise BackendUnavailable(
                f"encoder weights not found at {model_file}; run `brief prepare-models`",
                code="model_not_prepared",
            )
        from engine.encoder.onnx import OnnxEmbeddingModel

        return OnnxEmbeddingModel(
            path,
            quantized=settings.encoder_quantized,
            device=settings.encoder_device,  # type: ignore[arg-type]
            threads=settings.encoder_threads,
            max_length=settings.encoder_max_length,
            model_name=settings.encoder_served_name,
        )
    raise ValueError(f"unknown encoder backend {backend!r}; choose 'onnx' or 'fake'")


def build_encoder(
    settings: EncoderSettings, observer: BatchObserver | None = None
) -> BatchedEncoder:
    """The batcher the server serves from; call ``await encoder.start()`` in the lifespan."""
    return BatchedEncoder(
        build_model(settings),
        max_batch_size=settings.batch_max_size,
        max_batch_tokens=settings.batch_max_tokens,
        max_wait_ms=settings.batch_max_wait_ms,
        max_queue=settings.batch_max_queue,
        observer=observer,
    )
