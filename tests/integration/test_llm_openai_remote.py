"""The remote backend against a real OpenAI-compatible server: llama-cpp-python's own server
(``python -m llama_cpp.server``) with the real GGUF, started on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from engine.errors import BackendUnavailable
from engine.llm.base import ChatMessage, SamplingParams, complete
from engine.llm.openai_remote import OpenAIRemoteLLM
from models import paths

GGUF = paths.llm_gguf_path()
pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server] packages")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not GGUF.is_file(), reason=f"no GGUF at {GGUF}; run `brief prepare-models`"),
    pytest.mark.asyncio(loop_scope="module"),
]

USER = [ChatMessage("user", "Name the capital of France in one word.")]
GREEDY = SamplingParams(temperature=0.0, max_tokens=10)
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = Path(tmp_path_factory.mktemp("llama_server")) / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(GGUF)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--verbose", "false"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"llama_cpp.server not ready in 120 s:\n{log.read_text()[-3000:]}")
        time.sleep(0.25)
    yield base_url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def remote(server):
    llm = OpenAIRemoteLLM(server, api_key=None, model=None, timeout=60, context_length=2048)
    await llm.start()
    yield llm
    await llm.close()


async def test_start_picks_the_served_model(remote):
    assert remote.model == str(GGUF)  # llama_cpp.server names the model by its path
    assert remote.model_name == remote.model and remote.healthy()


async def test_chat(remote):
    out = await complete(remote, USER, GREEDY)
    assert "paris" in out.text.lower()
    assert out.finish_reason in ("stop", "length") and out.usage.prompt_tokens > 5
    assert 0 < out.usage.completion_tokens <= GREEDY.max_tokens


async def test_stream_with_usage(remote):
    params = SamplingParams(temperature=0.0, max_tokens=8)
    deltas = [d async for d in remote.stream([ChatMessage("user", "Count to twenty.")], params)]
    pieces = [d for d in deltas[:-1] if d.text]
    assert len(pieces) > 2 and deltas[-1].finish_reason == "length"
    usage = deltas[-1].usage
    # This server ignores include_usage, so the backend counted one token per chunk.
    assert usage.completion_tokens == len(pieces) <= 8 and usage.prompt_tokens > 5


async def test_json_schema(remote):
    params = SamplingParams(temperature=0.0, max_tokens=40, json_schema=CITY)
    out = await complete(remote, [ChatMessage("user", "Where is the Eiffel tower? JSON.")], params)
    value = json.loads(out.text)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, CITY)
    assert remote._json_mode == "json_object"  # this server only knows the llama.cpp shape


async def test_cancelled_stream_leaves_the_server_usable(remote):
    stream = remote.stream(
        [ChatMessage("user", "Write a long story.")], SamplingParams(max_tokens=200)
    )
    await anext(stream)
    await stream.aclose()
    out = await asyncio.wait_for(complete(remote, USER, GREEDY), timeout=120)
    assert out.text and remote.healthy()


async def test_a_stream_failing_on_the_server_is_an_error_not_an_empty_reply(remote):
    # llama_cpp.server accepts the stream, then fails inside it (prompt over its 2,048 tokens)
    too_long = [ChatMessage("user", "word " * 3000)]
    with pytest.raises(BackendUnavailable, match="broke off|without finishing"):
        await complete(remote, too_long, GREEDY)
    assert (await complete(remote, USER, GREEDY)).text and remote.healthy()


async def test_dead_server_is_backend_unavailable():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(BackendUnavailable, match="cannot reach"):
        await OpenAIRemoteLLM(url, timeout=5).start()  # no model to fall back on
    llm = OpenAIRemoteLLM(url, model="m", timeout=5)
    await llm.start()  # a named model: start anyway, health tells the story
    assert not llm.healthy()
    with pytest.raises(BackendUnavailable):
        await complete(llm, USER, GREEDY)
    assert not llm.healthy()
    await llm.close()
