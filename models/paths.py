"""Where prepared weights live, and their well-known names.

Weights go to a cache folder outside git: ``$BRIEF_MODEL_DIR`` or ``~/.cache/brief/models``.
Settings (``server/settings.py``) default to these paths; any of them can be overridden.
"""

from __future__ import annotations

import os
from pathlib import Path

LLM_GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
ENCODER_NAME = "all-mpnet-base-v2"
ENCODER_ST_DIR = "all-mpnet-base-v2"  # sentence-transformers folder (safetensors, tokenizer)
ENCODER_ONNX_DIR = "all-mpnet-base-v2-onnx"  # model.onnx, model_int8.onnx, tokenizer.json
ONNX_FP32 = "model.onnx"
ONNX_INT8 = "model_int8.onnx"


def model_dir() -> Path:
    """The cache folder for weights (created on demand by ``models.prepare``)."""
    env = os.environ.get("BRIEF_MODEL_DIR")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "brief" / "models"


def llm_gguf_path(root: Path | None = None) -> Path:
    return (root or model_dir()) / LLM_GGUF_NAME


def encoder_st_path(root: Path | None = None) -> Path:
    return (root or model_dir()) / ENCODER_ST_DIR


def encoder_onnx_path(root: Path | None = None) -> Path:
    return (root or model_dir()) / ENCODER_ONNX_DIR
