"""A deterministic, scripted LLM for unit tests of logic (agent, serving, streaming).

It never loads a model: replies come from a list (used in turn, cycling) or from a function of
the request, stream word by word, honour ``max_tokens`` (one word = one token), ``stop`` strings
and ``json_schema`` (a canned JSON document, by default a minimal instance of the schema).
Every request is recorded in ``calls`` so a test can assert on prompts and parameters.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from engine.errors import BackendUnavailable
from engine.llm.base import ChatMessage, Delta, SamplingParams, Usage

Reply = Callable[[Sequence[ChatMessage], SamplingParams], str]
JsonReply = Callable[[dict[str, Any]], Any]

_WORD = re.compile(r"\s*\S+")


def example_for_schema(schema: dict[str, Any]) -> Any:
    """A small value that satisfies common JSON schemas (object/array/enum/const/scalars)."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example_for_schema(schema[key][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: example_for_schema(sub) for name, sub in props.items()}
    if kind == "array":
        item = example_for_schema(schema.get("items", {"type": "string"}))
        return [item] * max(1, int(schema.get("minItems", 1)))
    scalars: dict[str, Any] = {
        "string": "fake",
        "integer": 0,
        "number": 0.0,
        "boolean": False,
        "null": None,
    }
    return scalars.get(kind, None)


class FakeLLM:
    """Scripted replies; ``replies`` is a list of strings (used in turn) or a function."""

    def __init__(
        self,
        replies: Sequence[str] | Reply | None = None,
        *,
        json_reply: JsonReply | Any = None,
        model_name: str = "fake-llm",
        context_length: int = 8192,
        delay_s: float = 0.0,
    ):
        self.model_name = model_name
        self.context_length = context_length
        self._replies = replies if replies is not None else ["This is a fake reply."]
        self._json_reply = json_reply
        self._delay_s = delay_s
        self._turn = 0
        self.calls: list[tuple[list[ChatMessage], SamplingParams]] = []
        self.started = False
        self.failed = False  # set by a test to simulate a dead backend

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.started = False

    def healthy(self) -> bool:
        return not self.failed

    def count_tokens(self, text: str) -> int:
        """Whitespace-separated words: cheap and predictable for budget arithmetic in tests."""
        return len(text.split())

    def _reply_text(self, messages: Sequence[ChatMessage], params: SamplingParams) -> str:
        if params.json_schema is not None:
            reply = self._json_reply
            if callable(reply):
                value = reply(params.json_schema)
            elif reply is not None:
                value = reply
            else:
                value = example_for_schema(params.json_schema)
            return value if isinstance(value, str) else json.dumps(value)
        if callable(self._replies):
            return self._replies(messages, params)
        text = self._replies[self._turn % len(self._replies)]
        self._turn += 1
        return text

    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        if self.failed:
            raise BackendUnavailable("fake LLM marked as failed")
        self.calls.append((list(messages), params))
        text = self._reply_text(messages, params)
        finish = "stop"
        for stop in params.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        words = _WORD.findall(text)
        if words and (tail := text[len("".join(words)) :]):
            words[-1] += tail  # trailing whitespace rides on the last word
        if len(words) > params.max_tokens:
            words, finish = words[: params.max_tokens], "length"
        for word in words:
            await asyncio.sleep(self._delay_s)  # also a cancellation point
            yield Delta(text=word)
        prompt = sum(self.count_tokens(m.content) for m in messages)
        yield Delta(finish_reason=finish, usage=Usage(prompt, len(words)))
