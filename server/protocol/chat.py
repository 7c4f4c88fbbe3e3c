"""OpenAI chat-completion wire types, plus the briefing extensions (`session_id`, `brief_trace`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from server.protocol.common import OpenAIModel, UsageInfo, new_id, now


class TextPart(BaseModel):
    type: str
    text: str | None = None


class ChatMessageIn(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """Flatten content parts to text; non-text parts are refused by the serving layer."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content if p.type == "text")

    def has_non_text(self) -> bool:
        return isinstance(self.content, list) and any(p.type != "text" for p in self.content)


class JsonSchemaSpec(BaseModel):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaSpec | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(OpenAIModel):
    model: str | None = None
    messages: list[ChatMessageIn] = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    # briefing extensions (extra_body in the SDK)
    session_id: str | None = None
    brief_trace: bool = False

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> list[str] | None:
        if v is None:
            return None
        items = [v] if isinstance(v, str) else v
        if len(items) > 4:
            raise ValueError("at most 4 stop sequences")
        return items


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    annotations: list[dict[str, Any]] | None = None


class Choice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: str | None = "stop"
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[Choice]
    usage: UsageInfo
    brief_trace: dict[str, Any] | None = None


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    annotations: list[dict[str, Any]] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageInfo | None = None
    brief_trace: dict[str, Any] | None = None
