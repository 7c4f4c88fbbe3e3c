"""Briefing chat: ``/v1/chat/completions`` with ``session_id`` runs the agent over that session.

History comes from the request's messages (user/assistant pairs before the last user message);
what the agent did in those turns (operations, cited documents) is remembered per session and
matched back by the assistant text, so clients stay plain OpenAI clients.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

from engine.agent.citations import annotation
from engine.agent.pipeline import BriefingAgent, Done, TextDelta
from engine.agent.types import Turn
from engine.encoder.base import Encoder
from engine.errors import EngineError, InvalidRequest
from engine.session.store import Session, SessionStore
from engine.session.view import SessionDocuments
from server.metrics import Metrics
from server.protocol.chat import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessageOut,
    Choice,
    DeltaMessage,
)
from server.protocol.common import new_id, now
from server.serving.chat import (
    check_model,
    dump_chunk,
    sse_error,
    stream_chunk,
    to_messages,
    usage_info,
)

MAX_REMEMBERED_TURNS = 50


def _key(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:16]


class BriefService:
    def __init__(
        self, agent: BriefingAgent, sessions: SessionStore, encoder: Encoder, metrics: Metrics
    ):
        self.agent = agent
        self.sessions = sessions
        self.encoder = encoder
        self.metrics = metrics

    def _prepare(self, req: ChatCompletionRequest) -> tuple[Session, str, list[Turn]]:
        check_model(req.model, self.agent.llm.model_name)
        if req.response_format is not None and req.response_format.type != "text":
            raise InvalidRequest(
                "response_format is not supported in briefing chat", param="response_format"
            )
        session = self.sessions.get(req.session_id or "")
        messages = [m for m in to_messages(req) if m.role != "system"]
        if not messages or messages[-1].role != "user":
            raise InvalidRequest("the last message must come from the user", param="messages")
        query = messages[-1].content.strip()
        if not query:
            raise InvalidRequest("the question is empty", param="messages")
        memory = session.turns
        history: list[Turn] = []
        pending_user: str | None = None
        for m in messages[:-1]:
            if m.role == "user":
                pending_user = m.content
            elif m.role == "assistant" and pending_user is not None:
                known = memory.get(_key(m.content))
                history.append(
                    Turn(
                        user=pending_user,
                        assistant=m.content,
                        operations=known.operations if known else (),
                        documents=known.documents if known else (),
                    )
                )
                pending_user = None
        return session, query, history

    def _remember(self, session: Session, query: str, done: Done) -> None:
        memory = session.turns
        memory[_key(done.text)] = Turn(
            user=query,
            assistant=done.text,
            operations=tuple(done.operations),
            documents=tuple(dict.fromkeys(c.doc_id for c in done.citations)),
        )
        while len(memory) > MAX_REMEMBERED_TURNS:
            memory.pop(next(iter(memory)))

    def _observe(self, done: Done) -> None:
        for stage, seconds in (done.trace.get("timings") or {}).items():
            if stage.endswith("_s") and isinstance(seconds, int | float):
                self.metrics.agent_stage_seconds.labels(stage.removesuffix("_s")).observe(seconds)
        model = self.agent.llm.model_name
        self.metrics.prompt_tokens.labels(model).inc(done.usage.prompt_tokens)
        self.metrics.tokens_generated.labels(model).inc(done.usage.completion_tokens)

    async def create(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        session, query, history = self._prepare(req)
        view = SessionDocuments(session, self.encoder)
        done: Done | None = None
        async for event in self.agent.run(view, query, history):
            if isinstance(event, Done):
                done = event
        assert done is not None
        self._remember(session, query, done)
        self._observe(done)
        session.touch()
        return ChatCompletionResponse(
            model=self.agent.llm.model_name,
            choices=[
                Choice(
                    message=ChatMessageOut(
                        content=done.text, annotations=[annotation(c) for c in done.citations]
                    ),
                    finish_reason="stop",
                )
            ],
            usage=usage_info(done.usage),
            brief_trace=done.trace if req.brief_trace else None,
        )

    async def open_stream(self, req: ChatCompletionRequest) -> AsyncIterator[str]:
        """Start the agent and wait for its first event before the HTTP response begins, so a
        full LLM queue or a bad request still gets its status code."""
        session, query, history = self._prepare(req)
        started = time.perf_counter()
        run = self.agent.run(SessionDocuments(session, self.encoder), query, history)
        try:
            first = await anext(run)
        except BaseException:
            await run.aclose()
            raise
        return self._events(req, session, query, run, first, started)

    async def _events(
        self,
        req: ChatCompletionRequest,
        session: Session,
        query: str,
        run: AsyncIterator,
        first_event: TextDelta | Done,
        started: float,
    ) -> AsyncIterator[str]:
        cid, created, model = new_id("chatcmpl"), now(), self.agent.llm.model_name
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def chunk(delta: DeltaMessage, finish: str | None = None, **extra: Any) -> str:
            return stream_chunk(cid, created, model, delta, finish, **extra)

        yield chunk(DeltaMessage(role="assistant", content=""))
        done: Done | None = None
        first = True

        async def events():
            yield first_event
            async for e in run:
                yield e

        try:
            async for event in events():
                if isinstance(event, TextDelta) and event.text:
                    if first:
                        self.metrics.time_to_first_token.labels(model).observe(
                            time.perf_counter() - started
                        )
                        first = False
                    yield chunk(DeltaMessage(content=event.text))
                elif isinstance(event, Done):
                    done = event
        except EngineError as exc:
            yield sse_error(exc)
            return
        finally:
            await run.aclose()
        assert done is not None
        self._remember(session, query, done)
        self._observe(done)
        session.touch()
        yield chunk(DeltaMessage(content="", annotations=[annotation(c) for c in done.citations]))
        yield chunk(DeltaMessage(), "stop", brief_trace=done.trace if req.brief_trace else None)
        if include_usage:
            yield dump_chunk(
                ChatCompletionChunk(
                    id=cid, created=created, model=model, choices=[], usage=usage_info(done.usage)
                )
            )
        yield "[DONE]"
