"""all-mpnet-base-v2 through onnxruntime, producing exactly sentence-transformers' embeddings.

The ONNX graph is the bare transformer (``last_hidden_state``); like infinity's
``encode_pre / encode_core / encode_post`` we tokenise (truncate to 384, no padding), pad each
batch only to its own longest text, mean-pool over the attention mask and L2-normalise, which is
what sentence-transformers' Pooling + Normalize modules do. CPU uses the int8 model built by
``models.export``; CUDA uses fp32 (dynamic int8 is a CPU optimisation).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from engine.cpus import available_cpus
from engine.encoder.base import Tokenized
from engine.errors import BackendUnavailable, MissingExtra
from models import paths

log = logging.getLogger(__name__)

PREPARE_HINT = "run `brief prepare-models` (or `python -m models.prepare --only encoder`)"


class OnnxEmbeddingModel:
    """Implements ``EmbeddingModel`` with an onnxruntime session and a HF ``tokenizers`` tokenizer."""

    def __init__(
        self,
        path: Path,
        quantized: bool = True,
        device: Literal["cpu", "cuda"] = "cpu",
        threads: int | None = None,
        max_length: int = 384,
        model_name: str = paths.ENCODER_NAME,
    ):
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtra(
                "onnx", exc.name or "onnxruntime", "gpu" if device == "cuda" else "models"
            ) from exc
        path = Path(path)
        if device == "cuda" and quantized:
            log.info(
                "int8 dynamic quantisation is a CPU optimisation; using the fp32 model on CUDA"
            )
            quantized = False
        model_file = path / (paths.ONNX_INT8 if quantized else paths.ONNX_FP32)
        tokenizer_file = path / "tokenizer.json"
        for needed in (model_file, tokenizer_file):
            if not needed.is_file():
                raise BackendUnavailable(
                    f"encoder file {needed} is missing; {PREPARE_HINT}", code="model_not_prepared"
                )
        config = _read_config(path)
        self.model_name = model_name
        self.quantized = quantized
        self.device = device
        self.max_length = min(max_length, int(config.get("max_seq_length", max_length)))
        self.normalize = bool(config.get("normalize", True))

        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_padding()  # tokenizer.json ships with fixed padding to 128
        self.tokenizer.enable_truncation(max_length=self.max_length)
        pad_token = "<pad>"
        pad_id = self.tokenizer.token_to_id(pad_token)
        self.pad_id = 1 if pad_id is None else pad_id

        self.session = ort.InferenceSession(
            str(model_file),
            sess_options=_session_options(ort, threads),
            providers=_providers(ort, device),
        )
        self.input_names = {i.name for i in self.session.get_inputs()}
        output = self.session.get_outputs()[0]
        self.output_name = output.name
        dim = output.shape[-1]
        self.dimension = int(dim) if isinstance(dim, int) else int(config.get("dimension", 768))

    def tokenize(self, texts: Sequence[str]) -> list[Tokenized]:
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return [Tokenized(ids=enc.ids) for enc in encodings]

    def embed_tokens(self, batch: Sequence[Tokenized]) -> np.ndarray:
        if not batch:
            return np.zeros((0, self.dimension), dtype=np.float32)
        longest = max(len(t) for t in batch)
        ids = np.full((len(batch), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), longest), dtype=np.int64)
        for row, tok in enumerate(batch):
            ids[row, : len(tok)] = tok.ids
            mask[row, : len(tok)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(
            [self.output_name], {k: v for k, v in feed.items() if k in self.input_names}
        )[0]
        return pool(hidden, mask, normalize=self.normalize)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Convenience for scripts and tests: one batch, no batcher."""
        return self.embed_tokens(self.tokenize(texts))

    def warmup(self) -> None:
        """First runs allocate buffers and pick kernels; pay that before serving."""
        self.embed(["warm-up " * 8, "a short one"])


def pool(hidden: np.ndarray, mask: np.ndarray, *, normalize: bool = True) -> np.ndarray:
    """Mean over real tokens, then L2 (sentence-transformers: clamp counts at 1e-9, eps 1e-12)."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden.astype(np.float32) * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    if normalize:
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return pooled.astype(np.float32, copy=False)


def _read_config(path: Path) -> dict:
    try:
        return json.loads((path / "encoder_config.json").read_text())
    except (OSError, ValueError):
        return {}


def _session_options(ort, threads: int | None):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # onnxruntime sizes its pool by the node's cores; under a tighter container CPU limit
    # (cgroup quota, affinity) use the limit instead.
    limit = available_cpus()
    if threads or limit < (os.cpu_count() or limit):
        options.intra_op_num_threads = threads or limit
    options.inter_op_num_threads = 1
    return options


def _providers(ort, device: str) -> list[str]:
    if device == "cpu":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise BackendUnavailable(
            "encoder_device=cuda but onnxruntime has no CUDAExecutionProvider "
            f"(available: {', '.join(available)}); install onnxruntime-gpu instead of onnxruntime "
            "(pip install 'brief-server[gpu]') or set BRIEF_ENCODER_DEVICE=cpu",
            code="cuda_unavailable",
        )
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]
