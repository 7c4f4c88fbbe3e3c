"""Adapts OpenAI chat requests to the engine's LLM protocol (plain chat, no session).

A briefing request (``session_id`` set) is handed to the briefing agent when one is installed;
this module only owns the plain-LLM path and the shared streaming envelope.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from engine.errors import EngineError, InvalidRequest, NotFound
from engine.llm.base import LLM, ChatMessage, Delta, SamplingParams, Usage
from server.errors import ERROR_TABLE, error_body
from server.metrics import Metrics
from server.protocol.chat import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessageOut,
    Choice,
    ChunkChoice,
    DeltaMessage,
)
from server.protocol.common import UsageInfo, new_id, now

_ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def to_messages(req: ChatCompletionRequest) -> list[ChatMessage]:
    out = []
    for i, m in enumerate(req.messages):
        if m.role not in _ROLE_MAP:
            raise InvalidRequest(f"role '{m.role}' is not supported", param=f"messages.{i}.role")
        if m.has_non_text():
            raise InvalidRequest(
                "only text content parts are supported", param=f"messages.{i}.content"
            )
        out.append(ChatMessage(role=_ROLE_MAP[m.role], content=m.text()))
    return out


def to_params(req: ChatCompletionRequest, default_max_tokens: int) -> SamplingParams:
    if req.n != 1:
        raise InvalidRequest("only n=1 is supported", param="n")
    schema = None
    rf = req.response_format
    if rf is not None and rf.type == "json_schema":
        if rf.json_schema is None or not rf.json_schema.schema_:
            raise InvalidRequest(
                "response_format.json_schema.schema is required", param="response_format"
            )
        schema = rf.json_schema.schema_
    elif rf is not None and rf.type == "json_object":
        schema = {"type": "object"}
    return SamplingParams(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        max_tokens=req.max_completion_tokens or req.max_tokens or default_max_tokens,
        stop=tuple(req.stop or ()),
        seed=req.seed,
        json_schema=schema,
    )


def usage_info(u: Usage | None) -> UsageInfo:
    u = u or Usage()
    return UsageInfo(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.total_tokens,
    )


def check_model(requested: str | None, served: str) -> None:
    """A request may omit ``model``; a named model must be the one served (404 otherwise)."""
    if requested and requested != served:
        raise NotFound(
            f"The model '{requested}' does not exist; see GET /v1/models",
            param="model",
            code="model_not_found",
        )


def stream_chunk(
    cid: str, created: int, model: str, delta: DeltaMessage, finish: str | None = None, **extra
) -> str:
    """One SSE payload of a chat stream with a single choice."""
    return dump_chunk(
        ChatCompletionChunk(
            id=cid,
            created=created,
            model=model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish)],
            **extra,
        )
    )


def dump_chunk(chunk: ChatCompletionChunk) -> str:
    """Serialise like OpenAI: ``finish_reason: null`` stays, empty delta fields and absent
    ``usage`` / ``brief_trace`` go."""
    d = chunk.model_dump()
    for key in ("usage", "brief_trace"):
        if d[key] is None:
            del d[key]
    for choice in d["choices"]:
        choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
    return json.dumps(d, ensure_ascii=False)


def sse_error(exc: EngineError) -> str:
    _, type_ = ERROR_TABLE.get(exc.kind, ERROR_TABLE["internal"])
    return json.dumps(error_body(exc.message, type_, exc.param, exc.code))


class ChatService:
    """Plain chat completions on the configured LLM."""

    def __init__(self, llm: LLM, metrics: Metrics, default_max_tokens: int):
        self.llm = llm
        self.metrics = metrics
        self.default_max_tokens = default_max_tokens

    def check_model(self, requested: str | None) -> None:
        check_model(requested, self.llm.model_name)

    def _account(self, usage: Usage | None) -> None:
        if usage:
            self.metrics.prompt_tokens.labels(self.llm.model_name).inc(usage.prompt_tokens)
            self.metrics.tokens_generated.labels(self.llm.model_name).inc(usage.completion_tokens)

    async def create(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        self.check_model(req.model)
        messages, params = to_messages(req), to_params(req, self.default_max_tokens)
        parts: list[str] = []
        last = Delta(finish_reason="stop")
        async for delta in self.llm.stream(messages, params):
            parts.append(delta.text)
            if delta.finish_reason:
                last = delta
        self._account(last.usage)
        return ChatCompletionResponse(
            model=self.llm.model_name,
            choices=[
                Choice(
                    message=ChatMessageOut(content="".join(parts)),
                    finish_reason=last.finish_reason,
                )
            ],
            usage=usage_info(last.usage),
        )

    async def open_stream(self, req: ChatCompletionRequest) -> AsyncIterator[str]:
        """Validate and start generating *before* the HTTP response begins, so that errors such
        as a full queue still get their proper status code; then stream SSE payloads."""
        self.check_model(req.model)
        messages, params = to_messages(req), to_params(req, self.default_max_tokens)
        started = time.perf_counter()
        source = self.llm.stream(messages, params).__aiter__()
        first = await anext(source, Delta(finish_reason="stop"))
        self.metrics.time_to_first_token.labels(self.llm.model_name).observe(
            time.perf_counter() - started
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return self._events(first, source, include_usage)

    async def _events(
        self, first: Delta, source: AsyncIterator[Delta], include_usage: bool
    ) -> AsyncIterator[str]:
        cid, created, model = new_id("chatcmpl"), now(), self.llm.model_name

        def chunk(delta: DeltaMessage, finish: str | None = None) -> str:
            return stream_chunk(cid, created, model, delta, finish)

        yield chunk(DeltaMessage(role="assistant", content=""))
        delta: Delta | None = first
        usage: Usage | None = None
        try:
            while delta is not None:
                if delta.text:
                    yield chunk(DeltaMessage(content=delta.text))
                if delta.finish_reason:
                    usage = delta.usage
                    yield chunk(DeltaMessage(), delta.finish_reason)
                delta = await anext(source, None)
        except EngineError as exc:
            yield sse_error(exc)
            return
        finally:
            await source.aclose()  # type: ignore[attr-defined]
        self._account(usage)
        if include_usage:
            yield dump_chunk(
                ChatCompletionChunk(
                    id=cid, created=created, model=model, choices=[], usage=usage_info(usage)
                )
            )
        yield "[DONE]"
