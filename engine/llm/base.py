"""The LLM protocol shared by every backend (llama.cpp, vLLM, remote OpenAI-compatible).

A backend streams :class:`Delta` objects; the last one carries ``finish_reason`` and ``usage``.
``complete`` is derived from ``stream`` so a backend implements one method.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class SamplingParams:
    """Generation settings; ``json_schema`` constrains the output to that JSON schema."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    stop: Sequence[str] = ()
    seed: int | None = None
    json_schema: dict[str, Any] | None = None
    priority: int = 0  # lower is served first where a backend queues; background work uses 10


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Delta:
    """One streamed piece of text. The final delta has ``finish_reason`` and ``usage`` set."""

    text: str = ""
    finish_reason: str | None = None  # "stop" | "length" | None while streaming
    usage: Usage | None = None


@dataclass
class Completion:
    text: str
    finish_reason: str
    usage: Usage = field(default_factory=Usage)


@runtime_checkable
class LLM(Protocol):
    """What the server and the agent need from a language model."""

    model_name: str
    context_length: int

    async def start(self) -> None:
        """Load weights / open connections. Called once from the app lifespan."""

    async def close(self) -> None:
        """Free the model."""

    def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        """Stream the assistant reply. Cancelling the consumer stops generation."""

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer (used for token budgets)."""

    def healthy(self) -> bool:
        """False once the backend has died; shown by ``/health``."""


async def complete(llm: LLM, messages: Sequence[ChatMessage], params: SamplingParams) -> Completion:
    """Run ``llm.stream`` to the end and gather the text, finish reason and usage."""
    parts: list[str] = []
    finish = "stop"
    usage = Usage()
    async for delta in llm.stream(messages, params):
        parts.append(delta.text)
        if delta.finish_reason:
            finish = delta.finish_reason
        if delta.usage:
            usage = delta.usage
    return Completion(text="".join(parts), finish_reason=finish, usage=usage)
