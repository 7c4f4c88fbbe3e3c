"""Server settings (pydantic-settings, env prefix ``BRIEF_``).

Nothing reads the environment at import time: ``Settings()`` is built by the CLI or a test and
handed to ``build_app(settings)``. Every default can be overridden by an env var, e.g.
``BRIEF_LLM_BACKEND=openai BRIEF_LLM_BASE_URL=http://gpu-box:8000/v1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from models import paths


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BRIEF_", env_file=None, extra="ignore")

    # --- HTTP ---
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: SecretStr | None = Field(
        default=None, description="If set, every /v1 request needs `Authorization: Bearer <key>`."
    )
    cors_origins: list[str] = Field(default_factory=list)
    max_request_mb: float = 2.0  # JSON bodies (chat, embeddings); uploads have their own limit
    shutdown_timeout_s: float = Field(
        default=5.0, ge=0, description="On SIGTERM, how long streaming answers may finish."
    )

    # --- weights ---
    model_dir: Path = Field(default_factory=paths.model_dir)

    # --- LLM ---
    llm_backend: Literal["llamacpp", "vllm", "openai", "fake"] = "llamacpp"
    llm_model: str | None = Field(
        default=None,
        description="GGUF path (llamacpp), HF folder or model id (vllm), remote model name (openai). "
        "Defaults to the prepared Qwen2.5-Coder-0.5B-Instruct GGUF.",
    )
    llm_served_name: str | None = Field(default=None, description="Name shown in /v1/models.")
    llm_context: int = 8192
    llm_threads: int | None = None
    llm_batch: int = 512
    llm_max_queue: int = 64  # waiting requests before 429
    llm_base_url: str | None = None  # openai backend
    llm_api_key: SecretStr | None = None  # openai backend
    llm_timeout_s: float = 300.0
    llm_gpu_memory_utilization: float = 0.85  # vllm
    llm_tensor_parallel: int = 1  # vllm

    # --- encoder ---
    encoder_backend: Literal["onnx", "fake"] = "onnx"
    encoder_path: Path | None = Field(
        default=None, description="Folder with model.onnx / model_int8.onnx and tokenizer.json."
    )
    encoder_quantized: bool = Field(default=True, description="Use the int8 model (CPU).")
    encoder_device: Literal["cpu", "cuda"] = "cpu"
    encoder_threads: int | None = None
    encoder_max_length: int = 384
    encoder_served_name: str = paths.ENCODER_NAME
    batch_max_size: int = 32
    batch_max_tokens: int = 8192
    batch_max_wait_ms: float = 5.0
    batch_max_queue: int = 2048  # queued texts before 429

    # --- sessions and ingestion ---
    max_file_mb: float = 64.0
    max_storage_mb: float = 2048.0  # all files held in memory, every session together
    max_sessions: int = 64
    max_files_per_session: int = 50
    max_session_mb: float = 256.0
    session_ttl_hours: float = 24.0  # idle sessions expire (vector store `expires_after` wins)
    pdf_backend: Literal["pypdfium2", "docling"] = "pypdfium2"
    describe_documents: bool = True
    fetch_timeout_s: float = 30.0
    fetch_max_redirects: int = 5
    fetch_block_private: bool = Field(
        default=False,
        description="Refuse URLs resolving to private/loopback addresses (SSRF guard for "
        "shared deployments).",
    )

    # --- briefing agent (engine/agent/config.py documents each) ---
    agent_history_turns: int = 3
    agent_search_k: int = Field(default=4, ge=1, le=20)
    agent_route_keep_ratio: float = Field(default=0.5, ge=0.0, le=1.0)
    agent_window_before: int = Field(default=1, ge=0, le=5)
    agent_window_after: int = Field(default=1, ge=0, le=5)
    agent_semantic_window: int = Field(default=2, ge=0, le=10)
    agent_fusion: Literal["rrf", "convex"] = "rrf"
    agent_split_tokens: int = Field(default=1800, ge=200)
    agent_max_splits: int = Field(default=6, ge=1)
    agent_truncation: Literal["stop", "skip_similar"] = "skip_similar"
    agent_mapper_concurrency: int = Field(default=2, ge=1)
    agent_answer_tokens: int = Field(default=384, ge=16)
    agent_mapper_tokens: int = Field(default=256, ge=16)
    agent_citation_min_overlap: float = Field(default=0.4, ge=0.0, le=1.0)
    agent_unsupported_figures: Literal["drop", "keep"] = "drop"

    # --- generation defaults ---
    default_max_tokens: int = 512

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.llm_backend == "openai" and not self.llm_base_url:
            raise ValueError("llm_backend=openai needs BRIEF_LLM_BASE_URL")
        if self.host not in ("127.0.0.1", "localhost", "::1") and self.api_key is None:
            # Refuse an unsafe default: an open, unauthenticated server on a public interface.
            raise ValueError(
                f"host={self.host} exposes the server beyond loopback; set BRIEF_API_KEY as well"
            )
        return self

    # Resolved paths -----------------------------------------------------------------
    def resolved_llm_model(self) -> str:
        if self.llm_model:
            return self.llm_model
        return str(paths.llm_gguf_path(self.model_dir))

    def resolved_encoder_path(self) -> Path:
        return self.encoder_path or paths.encoder_onnx_path(self.model_dir)

    def agent_config(self):
        from engine.agent.config import AgentConfig

        return AgentConfig(
            history_turns=self.agent_history_turns,
            search_k=self.agent_search_k,
            route_keep_ratio=self.agent_route_keep_ratio,
            window_before=self.agent_window_before,
            window_after=self.agent_window_after,
            semantic_window=self.agent_semantic_window,
            fusion=self.agent_fusion,
            split_tokens=self.agent_split_tokens,
            max_splits=self.agent_max_splits,
            truncation=self.agent_truncation,
            mapper_concurrency=self.agent_mapper_concurrency,
            answer_tokens=self.agent_answer_tokens,
            mapper_tokens=self.agent_mapper_tokens,
            citation_min_overlap=self.agent_citation_min_overlap,
            unsupported_figures=self.agent_unsupported_figures,
        )

    def served_llm_name(self) -> str:
        if self.llm_served_name:
            return self.llm_served_name
        return Path(self.resolved_llm_model()).name.removesuffix(".gguf")
