"""Dynamic batcher logic, driven by the fake model (no timing assertions)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from engine.encoder.batcher import BatchedEncoder, plan_batches
from engine.encoder.fake import FakeEmbeddingModel
from engine.errors import BackendUnavailable, Overloaded, TooLarge


@pytest.fixture
def model():
    m = FakeEmbeddingModel()
    yield m
    if m.gate is not None:
        m.gate.set()  # never leave the worker thread blocked


async def until(cond) -> None:
    """Poll a condition set by the worker thread (no event to await there)."""
    async with asyncio.timeout(5):
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.002)


def words(n: int) -> str:
    """A text of n fake tokens (n - 2 words plus BOS/EOS)."""
    return " ".join(f"w{i}" for i in range(n - 2))


class Recorder:
    def __init__(self):
        self.depths: list[int] = []
        self.batches: list[tuple[int, int, float]] = []

    def queue_depth(self, n: int) -> None:
        self.depths.append(n)

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        self.batches.append((size, tokens, seconds))


def test_plan_batches_sorts_and_respects_both_limits():
    lengths = [10, 3, 7, 3, 50, 8, 2]
    batches = plan_batches(lengths, max_batch_size=3, max_batch_tokens=24)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 24
    assert [lengths[i] for i in batches[-1]] == [50]  # over budget alone: a batch of one


def test_plan_batches_limits_padding_waste():
    lengths = [2, 3, 4, 5, 380, 384]
    batches = plan_batches(lengths, max_batch_size=32, max_batch_tokens=8192)
    assert [[lengths[i] for i in b] for b in batches] == [[2, 3, 4, 5], [380, 384]]
    small = plan_batches([2, 3, 40], max_batch_size=32, max_batch_tokens=8192)
    assert small == [[0, 1, 2]]  # tiny batches may pad: one run beats two


async def test_results_match_the_model_in_order(model):
    enc = BatchedEncoder(model, max_batch_size=4)
    texts = [words(n) for n in (9, 3, 5, 12, 4, 7)]
    try:
        got = await enc.embed(texts)
        singles = await asyncio.gather(*(enc.embed([t]) for t in texts))
    finally:
        await enc.close()
    want = model.embed_tokens(model.tokenize(texts))
    assert np.array_equal(got, want)
    assert np.array_equal(np.concatenate(singles), want)
    assert (await _empty(model)).shape == (0, 768)


async def _empty(model):
    enc = BatchedEncoder(model)
    try:
        return await enc.embed([])
    finally:
        await enc.close()


async def test_concurrent_callers_are_batched_by_size_tokens_and_sorted(model):
    rec = Recorder()
    enc = BatchedEncoder(model, max_batch_size=4, max_batch_tokens=40, max_wait_ms=50, observer=rec)
    lengths = [12, 3, 9, 5, 20, 4, 7, 3, 15, 6]
    try:
        await asyncio.gather(*(enc.embed([words(n)]) for n in lengths))
    finally:
        await enc.close()
    for call in model.calls:
        assert len(call) <= 4
        assert len(call) == 1 or max(call) * len(call) <= 40
        assert call == sorted(call)
    flat = [n for call in model.calls for n in call]
    assert flat == sorted(lengths)  # one window: sorted across batches too
    assert enc.stats.items == len(lengths) and enc.stats.batches == len(model.calls) < len(lengths)
    assert [b[0] for b in rec.batches] == [len(c) for c in model.calls]
    assert [b[1] for b in rec.batches] == [sum(c) for c in model.calls]
    assert max(rec.depths) == len(lengths) and rec.depths[-1] == 0


async def test_waits_for_more_items_then_fires_when_full(model):
    enc = BatchedEncoder(model, max_batch_size=4, max_wait_ms=10_000)
    try:
        first = asyncio.create_task(enc.embed([words(5)]))
        await asyncio.sleep(0.05)
        assert not first.done() and model.calls == []  # still inside the wait window
        rest = [asyncio.create_task(enc.embed([words(n)])) for n in (3, 4, 6)]
        await asyncio.wait_for(asyncio.gather(first, *rest), 5)  # full batch: no 10 s wait
    finally:
        await enc.close()
    assert model.calls == [[3, 4, 5, 6]]


async def test_zero_wait_runs_a_lone_item(model):
    enc = BatchedEncoder(model, max_batch_size=32, max_wait_ms=0)
    try:
        await asyncio.wait_for(enc.embed(["alone"]), 5)
    finally:
        await enc.close()
    assert model.calls == [[3]]


async def test_cancelled_callers_are_skipped(model):
    model.gate = threading.Event()
    enc = BatchedEncoder(model, max_batch_size=1, max_wait_ms=0)
    try:
        t1 = asyncio.create_task(enc.embed([words(3)]))
        await until(lambda: len(model.calls) == 1)  # worker is busy with t1
        t2 = asyncio.create_task(enc.embed([words(5)]))
        t3 = asyncio.create_task(enc.embed([words(4)]))
        await until(lambda: enc.queue_size == 2)
        t2.cancel()
        model.gate.set()
        await asyncio.wait_for(asyncio.gather(t1, t3), 5)
        with pytest.raises(asyncio.CancelledError):
            await t2
    finally:
        await enc.close()
    assert model.calls == [[3], [4]]
    assert enc.stats.skipped_cancelled == 1


async def test_full_queue_answers_overloaded(model):
    model.gate = threading.Event()
    enc = BatchedEncoder(model, max_batch_size=1, max_wait_ms=0, max_queue=3)
    try:
        busy = asyncio.create_task(enc.embed(["busy"]))
        await until(lambda: len(model.calls) == 1)
        queued = asyncio.create_task(enc.embed(["a", "b", "c"]))
        await until(lambda: enc.queue_size == 3)
        with pytest.raises(Overloaded) as err:
            await enc.embed(["one more"])
        assert err.value.kind == "overloaded"
        with pytest.raises(TooLarge):
            await enc.embed(["x"] * 4)  # could never fit, so not "retry later"
        model.gate.set()
        await asyncio.wait_for(asyncio.gather(busy, queued), 5)
        assert (await enc.embed(["fits again"])).shape == (1, 768)
    finally:
        await enc.close()


async def test_a_failing_batch_fails_its_callers_only(model):
    enc = BatchedEncoder(model, max_wait_ms=0)
    try:
        model.fail_with = RuntimeError("kernel exploded")
        with pytest.raises(BackendUnavailable, match="RuntimeError"):
            await enc.embed(["doomed"])
        assert enc.healthy()
        model.fail_with = None
        assert (await enc.embed(["fine"])).shape == (1, 768)
        assert enc.stats.failed_batches == 1
    finally:
        await enc.close()


async def test_worker_death_marks_unhealthy_and_fails_waiters(model, monkeypatch):
    enc = BatchedEncoder(model, max_wait_ms=0)
    await enc.start()
    assert enc.healthy()

    def boom():
        raise RuntimeError("bug in the batcher")

    monkeypatch.setattr(enc, "_pop_window", boom)
    with pytest.raises(BackendUnavailable, match="worker stopped"):
        await asyncio.wait_for(enc.embed(["a", "b"]), 5)
    assert not enc.healthy()
    with pytest.raises(BackendUnavailable):
        await enc.embed(["after death"])
    await enc.close()


async def test_close_fails_pending_callers(model):
    model.gate = threading.Event()
    enc = BatchedEncoder(model, max_batch_size=1, max_wait_ms=0)
    running = asyncio.create_task(enc.embed(["running"]))
    await until(lambda: len(model.calls) == 1)
    waiting = asyncio.create_task(enc.embed(["waiting"]))
    await until(lambda: enc.queue_size == 1)
    await enc.close()
    for task in (running, waiting):
        with pytest.raises(BackendUnavailable, match="shutting down"):
            await task
    assert not enc.healthy()
    with pytest.raises(BackendUnavailable):
        await enc.embed(["late"])


async def test_large_request_is_tokenised_off_loop_and_split(model):
    enc = BatchedEncoder(model, max_batch_size=8, max_wait_ms=0)
    texts = [words(3 + i % 7) * 50 for i in range(50)]  # > TOKENIZE_INLINE_CHARS in total
    try:
        got = await enc.embed(texts)
    finally:
        await enc.close()
    calls = list(model.calls)
    assert np.array_equal(got, model.embed_tokens(model.tokenize(texts)))
    assert all(len(c) <= 8 for c in calls) and sum(map(len, calls)) == 50
