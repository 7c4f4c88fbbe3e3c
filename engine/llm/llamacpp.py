"""CPU backend: llama-cpp-python in process, one model, requests served one at a time.

Why it looks like this:

* One ``Llama`` object cannot run two generations at once, so requests take a ``PriorityGate``
  (interactive before background work, FIFO within a priority) and at most ``max_queue`` may wait for it; the next one gets ``Overloaded`` (429).
* The blocking generation runs on one dedicated worker thread; tokens reach the event loop via
  ``loop.call_soon_threadsafe`` into an ``asyncio.Queue``. When the consumer goes away
  (cancelled, client gone, generator closed) a stop flag makes the thread break the llama
  iterator within one token (or one prompt chunk while the prompt is evaluated), and the lock is
  released only once the thread is idle again.
* Generation uses ``create_chat_completion(stream=True)`` with the GGUF's own chat template and
  ``response_format={"type": "json_object", "schema": ...}`` (llama-cpp-python compiles it to a
  grammar; we compile it first so an unsupported schema is a 400 rather than a silent fallback to
  free-form JSON). Its stream carries no usage, so we count exactly ourselves: prompt tokens by
  formatting and tokenizing the prompt the same way, completion tokens with a logits processor
  that runs once per sampled token. Stop strings are applied here, not by llama, so that the
  count stays exact (llama's own accounting counts the token that completes a stop string).
* Context guard: a prompt that leaves no room in ``n_ctx`` is an ``InvalidRequest``; otherwise
  ``max_tokens`` is clipped to the room left (``finish_reason="length"`` tells the caller), as
  llama.cpp itself does, so a default ``max_tokens`` never turns a long prompt into an error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.cpus import available_cpus
from engine.errors import BackendUnavailable, InvalidRequest, MissingExtra, Overloaded
from engine.llm.base import ChatMessage, Delta, SamplingParams, Usage
from engine.llm.gate import PriorityGate

log = logging.getLogger(__name__)


_CONTROL = re.compile(r"<\|(?:im_start|im_end|endoftext|fim_[a-z]+|file_sep|repo_name)\|>")


def strip_control(text: str) -> str:
    """Remove chat-template control tokens (``<|im_start|>`` …) from message text."""
    return _CONTROL.sub("", text)


class StopScanner:
    """Cuts streamed text at the first stop string, holding back a possible partial match."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit now, whether a stop string was hit)."""
        buf = self._pending + text
        hits = [buf.index(s) for s in self.stops if s in buf]
        if hits:
            self._pending = ""
            return buf[: min(hits)], True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:n]):
                    hold = n
                    break
        self._pending = buf[len(buf) - hold :]
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out


class _Stopped(Exception):
    """The consumer went away; the worker stops quietly."""


@dataclass
class _Job:
    messages: Sequence[ChatMessage]
    params: SamplingParams
    tokens: list[int]  # the formatted prompt, tokenized
    max_tokens: int  # already clipped to the context
    stop: threading.Event
    emit: Callable[[Delta | BaseException], None]


class LlamaCppLLM:
    """A GGUF chat model served by llama-cpp-python on the CPU."""

    def __init__(
        self,
        model_path: str | Path,
        served_name: str | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        max_queue: int = 64,
        seed: int | None = None,
    ):
        self.model_path = Path(model_path).expanduser()
        self.model_name = served_name or self.model_path.name.removesuffix(".gguf")
        self._n_ctx, self._n_threads, self._n_batch = n_ctx, n_threads, n_batch
        self._max_queue, self._seed = max_queue, seed
        self._llama: Any = None
        self._formatter: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock: PriorityGate | None = None  # made in start(), on the serving loop
        self._waiting = 0
        self._current_stop: threading.Event | None = None
        self._dead: str | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def context_length(self) -> int:
        if self._llama is None:
            return self._n_ctx
        # llama.cpp pads n_ctx up to a multiple of 256, but llama-cpp-python sizes its token
        # buffer with the requested value: the smaller one is the real limit.
        return min(self._llama.n_ctx(), len(self._llama.input_ids))

    async def start(self) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise MissingExtra("llamacpp", "llama_cpp", "cpu") from exc
        if not self.model_path.is_file():
            raise BackendUnavailable(
                f"GGUF model not found at {self.model_path}; run `brief prepare-models`",
                code="model_missing",
            )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="llamacpp")
        self._lock = PriorityGate()
        loop = asyncio.get_running_loop()
        try:
            self._llama = await loop.run_in_executor(self._executor, self._load, llama_cpp)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self._dead = None

    def _load(self, llama_cpp: Any) -> Any:
        # llama-cpp-python defaults to half the node's cores; prompt evaluation is
        # compute-bound, so use every CPU the container may use (not the node's) unless told.
        threads = self._n_threads or available_cpus()
        kwargs: dict[str, Any] = {"n_threads": threads, "n_threads_batch": threads}
        if self._seed is not None:
            kwargs["seed"] = self._seed
        llama = llama_cpp.Llama(
            model_path=str(self.model_path),
            n_ctx=self._n_ctx,
            n_batch=self._n_batch,
            verbose=False,
            **kwargs,
        )
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            llama.close()
            raise BackendUnavailable(f"{self.model_path.name} carries no chat template")
        llama.chat_format = "chat_template.default"  # the GGUF's template, never a guess

        def text(token: int) -> str:
            return (
                ""
                if token < 0
                else llama.detokenize([token], special=True).decode(errors="replace")
            )

        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        eos = llama.token_eos()
        self._formatter = Jinja2ChatFormatter(
            template=template, eos_token=text(eos), bos_token=text(llama.token_bos()),
            stop_token_ids=[eos],
        )  # fmt: skip
        return llama

    async def close(self) -> None:
        if self._current_stop is not None:
            self._current_stop.set()
        if self._executor is not None and self._llama is not None:
            llama, self._llama = self._llama, None
            await asyncio.get_running_loop().run_in_executor(self._executor, llama.close)
            self._executor.shutdown(wait=False)
            self._executor = None

    def healthy(self) -> bool:
        return self._llama is not None and self._dead is None

    def count_tokens(self, text: str) -> int:
        llama = self._require()
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _require(self) -> Any:
        if self._dead is not None:
            raise BackendUnavailable(f"the llama.cpp worker failed: {self._dead}")
        if self._llama is None:
            raise BackendUnavailable("the llama.cpp model is not loaded")
        return self._llama

    # -- request preparation (runs before queueing, so bad requests fail fast) -------------
    def _prepare(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> tuple[list[int], int]:
        """Returns (prompt tokens, max_tokens clipped to the room left in the context).

        Formats and tokenizes exactly as llama-cpp-python's chat handler does, so the count is
        the real prompt length. Runs on a helper thread: llama_tokenize only reads the vocab.
        """
        llama = self._require()
        if not messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        if params.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
        if params.json_schema is not None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            try:
                json_schema_to_gbnf(json.dumps(params.json_schema))
            except Exception as exc:
                raise InvalidRequest(
                    f"unsupported JSON schema for grammar-constrained output: {exc}",
                    param="response_format",
                ) from exc
        # Text from users and documents must not smuggle in control tokens: the prompt is
        # tokenized with special=True (the template's own markers must parse).
        prompt = self._formatter(
            messages=[{"role": m.role, "content": strip_control(m.content)} for m in messages]
        )
        tokens = llama.tokenize(
            prompt.prompt.encode("utf-8"), add_bos=not prompt.added_special, special=True
        )
        room = self.context_length - len(tokens)
        if room < 1:
            raise InvalidRequest(
                f"the prompt has {len(tokens)} tokens, more than this model's context of "
                f"{self.context_length} tokens allows; shorten the messages",
                param="messages",
                code="context_length_exceeded",
            )
        return tokens, min(params.max_tokens, room)

    # -- streaming --------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        tokens, max_tokens = await asyncio.to_thread(self._prepare, messages, params)
        lock = self._lock
        if lock is None:
            raise BackendUnavailable("the llama.cpp model is not loaded")
        if lock.locked() and self._waiting >= self._max_queue:
            raise Overloaded(
                f"the LLM queue is full ({self._max_queue} requests waiting); retry later"
            )
        self._waiting += 1
        try:
            await lock.acquire(params.priority)
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delta | BaseException] = asyncio.Queue()
        stop = threading.Event()
        self._current_stop = stop

        def emit(item: Delta | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody listens any more
                stop.set()

        try:
            self._require()
            job = _Job(messages, params, tokens, max_tokens, stop, emit)
            future = loop.run_in_executor(self._executor, self._work, job)
        except BaseException:
            lock.release()
            raise
        future.add_done_callback(lambda _: lock.release())
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            stop.set()  # no-op when finished; otherwise the worker stops at the next token

    def _work(self, job: _Job) -> None:
        try:
            self._generate(job)
        except _Stopped:
            pass
        except Exception as exc:  # a crashed worker: log it, fail the request, mark unhealthy
            log.exception("llama.cpp generation failed")
            self._dead = f"{type(exc).__name__}: {exc}"
            job.emit(BackendUnavailable(f"the llama.cpp worker failed: {self._dead}"))

    def _prefill(self, tokens: list[int], stop: threading.Event) -> None:
        """Evaluate the uncached part of the prompt in chunks, checking the stop flag between
        them (llama's own generate() would evaluate a long prompt in one uninterruptible go)."""
        llama = self._llama
        cached = llama.input_ids[: llama.n_tokens].tolist()
        same = 0
        for a, b in zip(cached, tokens, strict=False):
            if a != b:
                break
            same += 1
        if same >= len(tokens):
            return  # fully cached: generate() reuses it
        if same == 0:
            llama.reset()
        llama.n_tokens = same  # eval() drops the KV cache beyond this point
        step = min(self._n_batch, 256)
        for i in range(same, len(tokens), step):
            if stop.is_set():
                raise _Stopped
            llama.eval(tokens[i : i + step])

    def _generate(self, job: _Job) -> None:
        from llama_cpp import LogitsProcessorList

        llama, params, stop, emit = self._llama, job.params, job.stop, job.emit
        self._prefill(job.tokens, stop)
        sampled = 0

        def count(_ids: Any, scores: Any) -> Any:
            nonlocal sampled
            sampled += 1
            return scores

        kwargs: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in job.messages],
            "stream": True,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": job.max_tokens,
            "seed": params.seed,
            "logits_processor": LogitsProcessorList([count]),
        }
        if params.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": params.json_schema}
        scanner = StopScanner(params.stop)
        finish, by_stop_string = "stop", False
        chunks = llama.create_chat_completion(**kwargs)
        try:
            for chunk in chunks:
                if stop.is_set():
                    raise _Stopped
                choice = chunk["choices"][0]
                text, hit = scanner.feed(choice["delta"].get("content") or "")
                if text:
                    emit(Delta(text=text))
                if hit:
                    by_stop_string = True
                    break
                finish = choice.get("finish_reason") or finish
        finally:
            chunks.close()  # ends llama's generator: no token is sampled after this
        if not by_stop_string and (rest := scanner.flush()):
            emit(Delta(text=rest))
        # llama does not count the end-of-generation token it sampled; a stop string's token counts
        completion = sampled - 1 if finish == "stop" and not by_stop_string else sampled
        emit(Delta(finish_reason=finish, usage=Usage(len(job.tokens), completion)))
