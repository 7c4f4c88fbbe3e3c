"""The llama.cpp backend with the real Qwen2.5-Coder-0.5B GGUF.

Usage is checked against llama-cpp-python's own non-stream call on the same input (the raw
library is the reference). Replies are kept to a few tokens: the model makes ~15 tokens/s here.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio

from engine.errors import InvalidRequest, Overloaded
from engine.llm.base import ChatMessage, SamplingParams, complete
from engine.llm.llamacpp import LlamaCppLLM
from models import paths

GGUF = paths.llm_gguf_path()
llama_cpp = pytest.importorskip("llama_cpp", reason="needs the [cpu] extra (llama-cpp-python)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not GGUF.is_file(), reason=f"no GGUF at {GGUF}; run `brief prepare-models`"),
    pytest.mark.asyncio(loop_scope="module"),
]

SYSTEM = ChatMessage("system", "You are a terse assistant.")
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def ask(text: str) -> list[ChatMessage]:
    return [SYSTEM, ChatMessage("user", text)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llm():
    model = LlamaCppLLM(GGUF, n_ctx=2048, n_batch=256, max_queue=2, seed=1)
    await model.start()
    yield model
    await model.close()
    assert not model.healthy()


@pytest.fixture(scope="module")
def raw():
    """llama-cpp-python used directly: the reference for text and usage."""
    model = llama_cpp.Llama(model_path=str(GGUF), n_ctx=2048, n_batch=256, verbose=False)
    yield model
    model.close()


def raw_chat(raw, messages: list[ChatMessage], params: SamplingParams) -> dict:
    kwargs = {
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
        "stop": list(params.stop),
        "seed": params.seed,
    }
    if params.json_schema:
        kwargs["response_format"] = {"type": "json_object", "schema": params.json_schema}
    return raw.create_chat_completion(**kwargs)


async def test_non_stream_chat(llm):
    out = await complete(llm, ask("Name the capital of France in one word."), GREEDY)
    assert "paris" in out.text.lower()
    assert out.finish_reason in ("stop", "length")
    assert 0 < out.usage.completion_tokens <= GREEDY.max_tokens
    assert llm.healthy() and llm.context_length == 2048


async def test_stream_in_pieces_equals_complete(llm):
    messages = ask("Count from one to ten in words.")
    deltas = [d async for d in llm.stream(messages, GREEDY)]
    assert len(deltas) > 3 and all(d.usage is None for d in deltas[:-1])
    assert deltas[-1].finish_reason == "length" and deltas[-1].usage.completion_tokens == 12
    again = await complete(llm, messages, GREEDY)  # same greedy reply from a cached prefix
    assert "".join(d.text for d in deltas) == again.text


CASES = {
    "plain": (ask("Say hello."), SamplingParams(temperature=0.0, max_tokens=40)),
    "length": (
        ask("Write a long poem about the sea."),
        SamplingParams(temperature=0, max_tokens=9),
    ),
    "stop": (
        ask("List three fruits, comma separated."),
        SamplingParams(temperature=0.0, max_tokens=30, stop=[","]),
    ),
    "json": (
        ask("Describe Ada, 36, as JSON."),
        SamplingParams(temperature=0.0, max_tokens=60, json_schema=PERSON),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_text_and_usage_match_the_library(llm, raw, case):
    messages, params = CASES[case]
    ours = await complete(llm, messages, params)
    ref = await asyncio.to_thread(raw_chat, raw, messages, params)
    assert ours.text == ref["choices"][0]["message"]["content"]
    assert ours.finish_reason == ref["choices"][0]["finish_reason"]
    usage = ref["usage"]
    assert (ours.usage.prompt_tokens, ours.usage.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )


async def test_json_schema_output_parses_and_validates(llm):
    params = SamplingParams(temperature=0.7, max_tokens=80, seed=3, json_schema=PERSON)
    out = await complete(llm, ask("Invent a person and describe them as JSON."), params)
    assert out.finish_reason == "stop", out.text
    value = json.loads(out.text)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, PERSON)


async def test_unsupported_schema_is_a_clear_error(llm):
    bad = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(InvalidRequest, match="JSON schema"):
        await complete(llm, ask("hi"), SamplingParams(json_schema=bad))


async def test_stop_strings(llm):
    params = SamplingParams(temperature=0.0, max_tokens=30, stop=[","])
    out = await complete(llm, ask("List five colours, comma separated."), params)
    assert out.finish_reason == "stop" and "," not in out.text and out.text.strip()


async def test_seed_determinism(llm):
    messages = ask("Invent a name for a cat.")
    greedy = [(await complete(llm, messages, GREEDY)).text for _ in range(2)]
    assert greedy[0] == greedy[1]
    seeded = SamplingParams(temperature=1.0, max_tokens=12, seed=42)
    runs = [(await complete(llm, messages, seeded)).text for _ in range(2)]
    assert runs[0] == runs[1]


async def test_concurrent_requests_are_served_in_order(llm):
    order: list[int] = []

    async def one(i: int):
        params = SamplingParams(temperature=0.0, max_tokens=5)
        deltas = []
        async for d in llm.stream(ask(f"Say the number {i}."), params):
            if not deltas:
                order.append(i)
            deltas.append(d)
        return deltas[-1].usage, llm.count_tokens("".join(d.text for d in deltas))

    await _idle(llm)  # the previous test's worker may still be returning
    tasks = [asyncio.create_task(one(0))]
    await until(lambda: len(order) == 1)  # 0 runs
    tasks.append(asyncio.create_task(one(1)))
    await until(lambda: llm._waiting == 1 or len(order) > 1)  # 1 waits (or already runs)
    tasks.append(asyncio.create_task(one(2)))  # one runs, two wait: exactly max_queue
    results = await asyncio.gather(*tasks)
    assert order == [0, 1, 2]  # FIFO
    for usage, retokenized in results:
        assert usage.prompt_tokens > 10
        assert 0 < usage.completion_tokens <= 5 and retokenized <= usage.completion_tokens


async def until(condition) -> None:
    """Poll a condition on the backend's queue state (it has no event to wait on), <= 30 s."""
    async with asyncio.timeout(30):
        for _ in iter(condition, True):
            await asyncio.sleep(0.005)


async def _idle(llm: LlamaCppLLM) -> None:
    """Wait until the model is free again (the worker thread has returned)."""
    async with llm._lock:
        pass


async def test_cancel_mid_stream_frees_the_model(llm):
    messages = ask("Write a long story about a lighthouse keeper.")
    prompt, _ = await asyncio.to_thread(llm._prepare, messages, GREEDY)
    stream = llm.stream(messages, SamplingParams(temperature=0.0, max_tokens=300))
    got = [await anext(stream) for _ in range(3)]
    await stream.aclose()  # the client went away
    await asyncio.wait_for(_idle(llm), timeout=60)
    # The worker stopped within a token or two instead of generating 300.
    assert llm._llama.n_tokens <= len(prompt) + len(got) + 5
    out = await complete(llm, ask("Say OK."), GREEDY)  # the next request runs normally
    assert out.text and llm.healthy()


async def test_cancel_during_a_long_prompt(llm):
    filler = " ".join(f"item{i}" for i in range(350))  # ~1,350 prompt tokens: ~13 s to evaluate
    task = asyncio.create_task(complete(llm, ask(f"Summarise: {filler}"), GREEDY))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(_idle(llm), timeout=60)
    assert llm._llama.n_tokens < 1000  # prompt evaluation stopped part-way
    assert (await complete(llm, ask("Say OK."), GREEDY)).text


async def test_overloaded_when_the_queue_is_full(llm):
    long = SamplingParams(temperature=0.0, max_tokens=200)
    first = llm.stream(ask("Write a long essay about rivers."), long)
    await anext(first)  # running
    waiting = [asyncio.create_task(complete(llm, ask("Say hi."), GREEDY)) for _ in range(2)]
    await until(lambda: llm._waiting == 2)  # both are queued now (max_queue=2)
    with pytest.raises(Overloaded, match="queue is full"):
        await complete(llm, ask("One more?"), GREEDY)
    await first.aclose()
    for done in await asyncio.gather(*waiting):
        assert done.text
    assert llm._waiting == 0 and llm.healthy()


async def test_context_guard_rejects_or_clips():
    small = LlamaCppLLM(GGUF, n_ctx=128, n_batch=128)
    await small.start()
    try:
        with pytest.raises(InvalidRequest, match="context of 128 tokens"):
            await complete(small, ask("word " * 200), GREEDY)
        messages = ask("Describe the ocean. " * 5)
        n_prompt = len((await asyncio.to_thread(small._prepare, messages, GREEDY))[0])
        out = await complete(small, messages, SamplingParams(temperature=0.0, max_tokens=500))
        assert out.finish_reason == "length"
        assert out.usage.prompt_tokens == n_prompt
        assert out.usage.completion_tokens == 128 - n_prompt  # clipped to the room left
    finally:
        await small.close()


async def test_count_tokens_uses_the_model_tokenizer(llm, raw):
    text = "Paragraph 7 of the 10-K: revenue grew 12%."
    assert llm.count_tokens(text) == len(raw.tokenize(text.encode(), add_bos=False, special=True))
    assert llm.count_tokens("") == 0
