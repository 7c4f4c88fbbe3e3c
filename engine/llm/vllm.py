"""GPU backend: vLLM's async engine in process (continuous batching, so no queue of our own).

Kept thin on purpose: vLLM schedules, batches and pages the KV cache. We apply the tokenizer's
chat template, pass the prompt as token ids (so the prompt count is exact), constrain JSON with
structured outputs, turn vLLM's cumulative outputs into deltas and abort the request in the
engine when the consumer goes away. The structured-outputs API changed across versions:
``SamplingParams(structured_outputs=StructuredOutputsParams(json=...))`` in current vLLM
(``guided_*`` fields were removed in 0.12), ``guided_decoding=GuidedDecodingParams(json=...)``
before; both are found by feature detection. Same policy as the CPU backend for the context: an
over-long prompt is ``InvalidRequest``, ``max_tokens`` is clipped to the room left.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from types import ModuleType
from typing import Any

from engine.errors import BackendUnavailable, InvalidRequest, MissingExtra
from engine.llm.base import ChatMessage, Delta, SamplingParams, Usage

log = logging.getLogger(__name__)


def new_text(previous: str, current: str) -> str:
    """The part of vLLM's cumulative ``current`` text not yet sent (``previous`` was sent)."""
    if not current.startswith(previous):
        # The detokenizer revised text already sent (rare, at multi-byte boundaries): sent text
        # cannot be taken back, so send only what lies beyond it.
        log.debug("vLLM revised streamed text; continuing after %d chars", len(previous))
    return current[len(previous) :]


def structured_output_kwargs(sampling_module: ModuleType | Any, schema: dict) -> dict[str, Any]:
    """SamplingParams keyword for a JSON-schema constraint in this vLLM version."""
    if hasattr(sampling_module, "StructuredOutputsParams"):
        return {"structured_outputs": sampling_module.StructuredOutputsParams(json=schema)}
    if hasattr(sampling_module, "GuidedDecodingParams"):
        return {"guided_decoding": sampling_module.GuidedDecodingParams(json=schema)}
    raise InvalidRequest("this vLLM version offers no structured outputs", param="response_format")


class VllmLLM:
    """A Hugging Face chat model served by vLLM on the GPU(s) of this machine."""

    def __init__(
        self,
        model: str,
        served_name: str | None = None,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.85,
        tensor_parallel_size: int = 1,
        seed: int = 0,
    ):
        self.model = model
        self.model_name = served_name or model
        self._max_model_len = max_model_len
        self._gpu_memory_utilization = gpu_memory_utilization
        self._tensor_parallel_size = tensor_parallel_size
        self._seed = seed
        self._engine: Any = None
        self._tokenizer: Any = None
        self._sampling: Any = None  # the vllm.sampling_params module
        self.context_length = max_model_len or 0

    async def start(self) -> None:
        try:
            import vllm.sampling_params as sampling
            from vllm.engine.arg_utils import AsyncEngineArgs
        except ImportError as exc:
            raise MissingExtra("vllm", "vllm", "gpu") from exc
        try:
            from vllm.v1.engine.async_llm import AsyncLLM as Engine
        except ImportError:  # vLLM before the V1 engine
            from vllm import AsyncLLMEngine as Engine
        args = AsyncEngineArgs(
            model=self.model,
            served_model_name=self.model_name,
            max_model_len=self._max_model_len,
            gpu_memory_utilization=self._gpu_memory_utilization,
            tensor_parallel_size=self._tensor_parallel_size,
            seed=self._seed,
        )
        self._sampling = sampling
        self._engine = Engine.from_engine_args(args)
        tokenizer = self._engine.get_tokenizer()
        self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        config = getattr(self._engine, "model_config", None)
        if config is None:  # older AsyncLLMEngine
            config = await self._engine.get_model_config()
        self.context_length = int(config.max_model_len)

    async def close(self) -> None:
        if self._engine is not None:
            shutdown = getattr(self._engine, "shutdown", None)
            if shutdown is not None:
                shutdown()
            self._engine = None

    def healthy(self) -> bool:
        return self._engine is not None and not getattr(self._engine, "errored", False)

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            raise BackendUnavailable("the vLLM engine is not started")
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def _sampling_params(self, params: SamplingParams, max_tokens: int) -> Any:
        extra = {}
        if params.json_schema is not None:
            extra = structured_output_kwargs(self._sampling, params.json_schema)
        return self._sampling.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=max_tokens,
            stop=list(params.stop) or None,
            seed=params.seed,
            **extra,
        )

    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        if self._engine is None or not self.healthy():
            raise BackendUnavailable("the vLLM engine is not running")
        chat = [{"role": m.role, "content": m.content} for m in messages]
        text = self._tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = self._tokenizer.encode(text, add_special_tokens=False)
        room = self.context_length - len(ids)
        if room < 1:
            raise InvalidRequest(
                f"the prompt has {len(ids)} tokens, more than this model's context of "
                f"{self.context_length} tokens allows; shorten the messages",
                param="messages",
                code="context_length_exceeded",
            )
        sampling = self._sampling_params(params, min(params.max_tokens, room))
        request_id = f"brief-{uuid.uuid4().hex}"
        outputs = self._engine.generate({"prompt_token_ids": ids}, sampling, request_id)
        sent, finished = "", False
        try:
            async for out in outputs:
                choice = out.outputs[0]
                piece = new_text(sent, choice.text)
                sent = choice.text
                if piece:
                    yield Delta(text=piece)
                if out.finished:
                    finished = True
                    reason = "length" if choice.finish_reason == "length" else "stop"
                    prompt = len(out.prompt_token_ids or ids)
                    usage = Usage(prompt, len(choice.token_ids))
                    yield Delta(finish_reason=reason, usage=usage)
        except ValueError as exc:  # vLLM's request validation errors
            raise InvalidRequest(str(exc)) from exc
        except Exception as exc:
            log.exception("vLLM generation failed")
            raise BackendUnavailable(f"the vLLM engine failed: {exc}") from exc
        finally:
            if not finished:  # consumer gone or error: free the sequence's KV cache now
                await outputs.aclose()
                await self._engine.abort(request_id)
