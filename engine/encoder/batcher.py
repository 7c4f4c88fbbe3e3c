"""Dynamic batching in front of an ``EmbeddingModel`` (after infinity's batch_handler and TEI's queue).

Why: the encoder is far more efficient on batches of similar length than on single texts, and
callers (HTTP requests, ingestion of many paragraphs) arrive one by one. Each text gets its own
future; one background asyncio task collects what is queued (waiting at most ``max_wait_ms`` after
the first arrival, less when a full batch is already there), sorts a window of items by length and
cuts it into batches bounded by count *and* padded tokens (longest x count, TEI's token budget),
then runs them one at a time in a single worker thread, so one encoder never runs two batches at
once. A full queue answers ``Overloaded`` (HTTP 429) instead of growing without bound. If the task
dies, ``healthy()`` turns False and every waiting caller gets ``BackendUnavailable``: never a
silent hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.encoder.base import EmbeddingModel, Tokenized
from engine.errors import BackendUnavailable, EngineError, Overloaded, TooLarge

log = logging.getLogger(__name__)

TOKENIZE_INLINE_CHARS = 16_384  # larger requests are tokenised in a thread, off the event loop
PADDING_RATIO = 2.0  # cut a batch when padded tokens would exceed this multiple of real tokens
PADDING_FLOOR = 512  # ... unless the batch is this small anyway (per-run overhead dominates)


class BatchObserver(Protocol):
    """Metrics hook; the server passes a Prometheus-backed implementation."""

    def queue_depth(self, n: int) -> None: ...

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        """One batch ran: ``size`` texts, ``tokens`` real (unpadded) tokens, model seconds."""


class NullObserver:
    def queue_depth(self, n: int) -> None:
        pass

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        pass


@dataclass
class BatcherStats:
    """Plain counters for tests and benchmarks (metrics go through the observer)."""

    batches: int = 0
    items: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    failed_batches: int = 0
    skipped_cancelled: int = 0
    largest_batch: int = 0


@dataclass(eq=False)
class _Item:
    tokens: Tokenized
    future: asyncio.Future[np.ndarray]
    enqueued: float


def plan_batches(
    lengths: Sequence[int],
    max_batch_size: int,
    max_batch_tokens: int,
    max_padding: float = PADDING_RATIO,
) -> list[list[int]]:
    """Indices sorted by length, cut greedily so that ``len(batch) * longest <= max_batch_tokens``.

    A batch is also cut when padding would dominate (padded tokens > ``max_padding`` x real
    tokens, beyond ``PADDING_FLOOR`` padded tokens): a 2-token text must not be padded to 384
    because a long one came along. Padding costs compute, and with int8 dynamic quantisation it
    also widens the activation range of the whole batch. A text longer than the whole budget
    still forms a batch of one. The benchmark reuses this to feed the raw model the same shapes.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:  # ascending, so lengths[i] is the longest of current + [i]
        padded = lengths[i] * (len(current) + 1)
        if current and (
            len(current) >= max_batch_size
            or padded > max_batch_tokens
            or (padded > PADDING_FLOOR and padded > max_padding * (real + lengths[i]))
        ):
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += lengths[i]
    if current:
        batches.append(current)
    return batches


class BatchedEncoder:
    """Implements ``Encoder`` on top of an ``EmbeddingModel``."""

    def __init__(
        self,
        model: EmbeddingModel,
        max_batch_size: int = 32,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 5.0,
        max_queue: int = 2048,
        observer: BatchObserver | None = None,
        sort_window: int | None = None,
    ):
        if min(max_batch_size, max_batch_tokens, max_queue) < 1 or max_wait_ms < 0:
            raise ValueError("batch sizes and queue length must be >= 1, max_wait_ms >= 0")
        self.model = model
        self.model_name = model.model_name
        self.dimension = model.dimension
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000
        self.max_queue = max_queue
        # Items sorted together: bounds how long the oldest item can be overtaken by shorter ones.
        self.sort_window = sort_window or max_batch_size * 8
        self.observer: BatchObserver = observer or NullObserver()
        self.stats = BatcherStats()
        self._queue: deque[_Item] = deque()
        self._queued_tokens = 0
        self._inflight: list[_Item] = []
        self._wakeup = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closed = False

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._check_usable()
        if self._task is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="encoder")
            self._task = asyncio.create_task(self._run(), name="encoder-batcher")

    async def warmup(self) -> None:
        """Run the model's own warm-up (if any) in the worker thread."""
        await self.start()
        warm = getattr(self.model, "warmup", None)
        if warm is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, warm)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_pending(BackendUnavailable("the encoder is shutting down"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def healthy(self) -> bool:
        if self._closed or self._error is not None:
            return False
        return self._task is None or not self._task.done()

    @property
    def queue_size(self) -> int:
        return len(self._queue)

    # --- Encoder protocol -------------------------------------------------------------------

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t) for t in self.model.tokenize(texts)]

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if len(texts) > self.max_queue:
            raise TooLarge(
                f"{len(texts)} texts in one request; the encoder queue holds at most "
                f"{self.max_queue}, so send them in smaller requests",
                param="input",
            )
        self._check_capacity(len(texts))
        await self.start()
        if sum(len(t) for t in texts) <= TOKENIZE_INLINE_CHARS:
            tokens = self.model.tokenize(texts)
        else:
            tokens = await asyncio.to_thread(self.model.tokenize, texts)
        self._check_capacity(len(texts))  # others may have queued while we tokenised
        self._check_usable()
        loop = asyncio.get_running_loop()
        now = loop.time()
        items = [_Item(t, loop.create_future(), now) for t in tokens]
        self._queue.extend(items)
        self._queued_tokens += sum(len(t) for t in tokens)
        self._observe(self.observer.queue_depth, len(self._queue))
        self._wakeup.set()
        try:
            vectors = await asyncio.gather(*(item.future for item in items))
        except BaseException:
            for item in items:  # the rest is not needed any more: let the worker skip it
                if item.future.done() and not item.future.cancelled():
                    item.future.exception()  # mark retrieved
                item.future.cancel()
            raise
        return np.stack(vectors)

    # --- worker -----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._wait_for_items(loop)
                self._inflight = self._pop_window()
                lengths = [len(item.tokens) for item in self._inflight]
                for indices in plan_batches(lengths, self.max_batch_size, self.max_batch_tokens):
                    batch = [
                        self._inflight[i] for i in indices if not self._inflight[i].future.done()
                    ]
                    self.stats.skipped_cancelled += len(indices) - len(batch)
                    if batch:
                        await self._run_batch(loop, batch)
                self._inflight = []
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug or a fatal error: never die silently
            self._error = exc
            log.exception("encoder batcher died; embeddings are unavailable until restart")
            self._fail_pending(
                BackendUnavailable(f"the encoder worker stopped ({type(exc).__name__}: {exc})")
            )

    async def _wait_for_items(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._queue:
            self._wakeup.clear()
            await self._wakeup.wait()
        deadline = self._queue[0].enqueued + self.max_wait_s
        while (
            len(self._queue) < self.max_batch_size and self._queued_tokens < self.max_batch_tokens
        ):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _pop_window(self) -> list[_Item]:
        window: list[_Item] = []
        while self._queue and len(window) < self.sort_window:
            item = self._queue.popleft()
            self._queued_tokens -= len(item.tokens)
            if item.future.done():  # cancelled by its caller
                self.stats.skipped_cancelled += 1
            else:
                window.append(item)
        self._observe(self.observer.queue_depth, len(self._queue))
        return window

    async def _run_batch(self, loop: asyncio.AbstractEventLoop, batch: list[_Item]) -> None:
        tokens = [item.tokens for item in batch]
        started = time.perf_counter()
        try:
            vectors = await loop.run_in_executor(self._executor, self.model.embed_tokens, tokens)
            if vectors.shape != (len(batch), self.dimension):
                raise RuntimeError(f"model returned shape {vectors.shape} for {len(batch)} texts")
        except Exception as exc:  # one bad batch fails its callers, not the whole encoder
            self.stats.failed_batches += 1
            log.exception("encoder batch of %d texts failed", len(batch))
            error = (
                exc
                if isinstance(exc, EngineError)
                else BackendUnavailable(f"the encoder failed on a batch ({type(exc).__name__})")
            )
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        seconds = time.perf_counter() - started
        for item, vector in zip(batch, vectors, strict=True):
            if not item.future.done():
                item.future.set_result(vector)
        real = sum(len(t) for t in tokens)
        self.stats.batches += 1
        self.stats.items += len(batch)
        self.stats.tokens += real
        self.stats.padded_tokens += max(len(t) for t in tokens) * len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        self._observe(self.observer.batch, len(batch), real, seconds)

    # --- helpers ----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._error is not None:
            raise BackendUnavailable(
                f"the encoder worker stopped ({type(self._error).__name__}); restart the server"
            )
        if self._closed:
            raise BackendUnavailable("the encoder is closed")

    def _check_capacity(self, n: int) -> None:
        if len(self._queue) + n > self.max_queue:
            raise Overloaded(
                f"the embedding queue is full ({len(self._queue)} texts waiting, limit "
                f"{self.max_queue}); retry later",
                code="encoder_queue_full",
            )

    def _fail_pending(self, error: EngineError) -> None:
        pending = [*self._inflight, *self._queue]
        self._queue.clear()
        self._queued_tokens = 0
        self._inflight = []
        for item in pending:
            if not item.future.done():
                item.future.set_exception(error)

    @staticmethod
    def _observe(fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # metrics must never break embedding
            log.exception("batch observer failed")
