"""Remote backend: any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, OpenAI, ...).

Errors are mapped to engine errors so the server answers like the other backends: no connection,
a timeout or a 5xx is ``BackendUnavailable`` (503), 429 is ``Overloaded``, 400/422 is
``InvalidRequest``. ``healthy()`` reflects the last contact with the remote.

Usage: requested in streams with ``stream_options={"include_usage": True}``. Servers that ignore
it (llama-cpp-python's) get an estimate: one token per streamed content chunk (these servers
send one chunk per token) and ``count_tokens`` of the messages for the prompt.

JSON schema: sent the standard way (``{"type": "json_schema", ...}``); a server whose error for
that request names ``response_format`` (400/422, or 500 from llama-cpp-python) is asked again with the llama.cpp extension
``{"type": "json_object", "schema": ...}`` and that choice is remembered.

``count_tokens`` is an approximation, because the remote tokenizer cannot be called
synchronously: ``ceil(len(text) / 3.5)``, which over-counts English prose a little (Qwen/Llama
tokenizers give about 4 characters a token), so budgets built on it err on the safe side.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

from engine.errors import BackendUnavailable, EngineError, InvalidRequest, Overloaded
from engine.llm.base import ChatMessage, Delta, SamplingParams, Usage

CHARS_PER_TOKEN = 3.5


def _map_error(exc: Exception, base_url: str) -> EngineError:
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return BackendUnavailable(f"cannot reach the LLM at {base_url}: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status, detail = exc.status_code, _detail(exc)
        if status == 429:
            return Overloaded(f"the remote LLM is over capacity: {detail}")
        if status in (400, 413, 422):
            return InvalidRequest(f"the remote LLM refused the request: {detail}")
        if status == 404:
            return BackendUnavailable(f"the remote LLM does not know the model: {detail}")
        return BackendUnavailable(f"the remote LLM failed ({status}): {detail}")
    return BackendUnavailable(f"the remote LLM failed: {exc}")


def _detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        return str(body.get("detail", body))[:500]
    return str(exc)[:500]


class OpenAIRemoteLLM:
    """Chat completions from a remote OpenAI-compatible server through the official SDK."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 300.0,
        *,
        served_name: str | None = None,
        context_length: int = 8192,
        max_retries: int = 1,
    ):
        self.base_url = base_url
        self.model = model
        self.model_name = served_name or model or "remote"
        self.context_length = context_length
        self._served_name = served_name
        self._api_key = api_key or "not-needed"
        self._timeout, self._max_retries = timeout, max_retries
        self._client: Any = None
        self._healthy = False
        self._json_mode = "json_schema"  # or "json_object" once a server refused the former

    async def start(self) -> None:
        try:
            import openai
        except ImportError as exc:  # a core dependency, but say so clearly if it is missing
            raise BackendUnavailable("the Python package 'openai' is not installed") from exc
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self._timeout,
            max_retries=self._max_retries,
        )
        try:
            models = [m async for m in self._client.models.list()]
        except Exception as exc:
            self._healthy = False
            if self.model is None:  # we cannot guess which model to ask for
                raise self._fail(exc) from exc
            return  # the remote may come up later; health shows it meanwhile
        self._healthy = True
        if not models and self.model is None:
            raise BackendUnavailable(f"the LLM at {self.base_url} lists no models")
        chosen = next((m for m in models if m.id == self.model), None) or models[0]
        self.model = self.model or chosen.id
        self.model_name = self._served_name or self.model
        extra = getattr(chosen, "model_extra", None) or {}
        if isinstance(extra.get("max_model_len"), int):  # vLLM tells its context length
            self.context_length = extra["max_model_len"]

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def healthy(self) -> bool:
        return self._client is not None and self._healthy

    def count_tokens(self, text: str) -> int:
        """Approximate (see the module docstring): the remote tokenizer is not at hand."""
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def _fail(self, exc: Exception) -> EngineError:
        err = _map_error(exc, self.base_url)
        if isinstance(err, BackendUnavailable):
            self._healthy = False
        return err

    def _request(self, messages: Sequence[ChatMessage], params: SamplingParams) -> dict[str, Any]:
        req: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if params.stop:
            req["stop"] = list(params.stop)
        if params.seed is not None:
            req["seed"] = params.seed
        if params.json_schema is not None:
            if self._json_mode == "json_schema":
                spec = {"name": "output", "schema": params.json_schema, "strict": True}
                req["response_format"] = {"type": "json_schema", "json_schema": spec}
            else:
                req["response_format"] = {"type": "json_object", "schema": params.json_schema}
        return req

    async def _open(self, messages: Sequence[ChatMessage], params: SamplingParams) -> Any:
        import openai

        if self._client is None:
            raise BackendUnavailable("the remote LLM client is not started")
        try:
            return await self._client.chat.completions.create(**self._request(messages, params))
        except openai.APIStatusError as exc:
            # llama-cpp-python's server answers its validation errors with 500, hence 500 here
            refused = exc.status_code in (400, 422, 500) and "response_format" in str(exc)
            if params.json_schema is None or self._json_mode != "json_schema" or not refused:
                raise self._fail(exc) from exc
            self._json_mode = "json_object"  # llama.cpp-style servers; remembered
            try:
                return await self._client.chat.completions.create(**self._request(messages, params))
            except Exception as exc2:
                raise self._fail(exc2) from exc2
        except Exception as exc:
            raise self._fail(exc) from exc

    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        response = await self._open(messages, params)
        self._healthy = True
        finish, usage, chunks = None, None, 0
        try:
            async for chunk in response:
                if chunk.usage is not None:
                    usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for choice in chunk.choices[:1]:
                    text = choice.delta.content if choice.delta else None
                    if text:
                        chunks += 1
                        yield Delta(text=text)
                    if choice.finish_reason:
                        finish = "length" if choice.finish_reason == "length" else "stop"
        except Exception as exc:  # the connection broke mid-reply
            self._healthy = False
            raise BackendUnavailable(f"the remote LLM broke off the reply: {exc}") from exc
        finally:
            await response.close()  # closes the HTTP stream: the server stops generating
        if finish is None:  # e.g. llama-cpp-python's server failing inside the stream
            raise BackendUnavailable("the remote LLM ended the stream without finishing the reply")
        if usage is None:  # the server ignored include_usage: estimate (module docstring)
            prompt = sum(self.count_tokens(m.content) + 4 for m in messages)
            usage = Usage(prompt, chunks)
        yield Delta(finish_reason=finish, usage=usage)
