"""Choose the LLM backend named by ``settings.llm_backend``.

Backends are named as ``"module:Class"`` strings and imported only when chosen, so importing this
module (or running with the fake) never imports llama_cpp, vllm or openai. A backend whose
optional package is missing fails here, at build time, with ``MissingExtra`` naming the extra to
install, instead of later in the middle of startup.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import MissingExtra
from engine.llm.base import LLM

if TYPE_CHECKING:
    from server.settings import Settings


@dataclass(frozen=True)
class Backend:
    target: str  # "module:Class"
    kwargs: Callable[[Settings], dict[str, Any]]  # constructor arguments from settings
    needs: str | None = None  # importable module the backend requires
    extra: str | None = None  # pip extra that provides it


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


BACKENDS: dict[str, Backend] = {
    "llamacpp": Backend(
        "engine.llm.llamacpp:LlamaCppLLM",
        lambda s: {
            "model_path": s.resolved_llm_model(),
            "served_name": s.served_llm_name(),
            "n_ctx": s.llm_context,
            "n_threads": s.llm_threads,
            "n_batch": s.llm_batch,
            "max_queue": s.llm_max_queue,
        },
        needs="llama_cpp",
        extra="cpu",
    ),
    "vllm": Backend(
        "engine.llm.vllm:VllmLLM",
        lambda s: {
            "model": s.resolved_llm_model(),
            "served_name": s.served_llm_name(),
            "max_model_len": s.llm_context,
            "gpu_memory_utilization": s.llm_gpu_memory_utilization,
            "tensor_parallel_size": s.llm_tensor_parallel,
        },
        needs="vllm",
        extra="gpu",
    ),
    "openai": Backend(
        "engine.llm.openai_remote:OpenAIRemoteLLM",
        lambda s: {
            "base_url": s.llm_base_url,
            "api_key": _secret(s.llm_api_key),
            "model": s.llm_model,
            "timeout": s.llm_timeout_s,
            "served_name": s.llm_served_name,
            "context_length": s.llm_context,
        },
    ),
    "fake": Backend(
        "engine.llm.fake:FakeLLM",
        lambda s: {"model_name": s.served_llm_name(), "context_length": s.llm_context},
    ),
}


def load_class(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_llm(settings: Settings) -> LLM:
    """An unstarted backend; the app lifespan calls ``await llm.start()``."""
    name = settings.llm_backend
    backend = BACKENDS.get(name)
    if backend is None:
        raise ValueError(f"unknown LLM backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    if backend.needs and backend.extra and importlib.util.find_spec(backend.needs) is None:
        raise MissingExtra(name, backend.needs, backend.extra)
    return load_class(backend.target)(**backend.kwargs(settings))
