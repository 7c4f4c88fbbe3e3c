"""Unit tests of LLM logic that needs no model: the fake, the registry, and the pure helpers of
the real backends (stop-string scanning, vLLM deltas and structured-output detection, remote
error mapping)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import httpx
import openai
import pytest

from engine.errors import BackendUnavailable, InvalidRequest, MissingExtra, Overloaded
from engine.llm.base import LLM, ChatMessage, SamplingParams, complete
from engine.llm.fake import FakeLLM, example_for_schema
from engine.llm.llamacpp import LlamaCppLLM, StopScanner
from engine.llm.openai_remote import OpenAIRemoteLLM, _map_error
from engine.llm.registry import build_llm
from engine.llm.vllm import VllmLLM, new_text, structured_output_kwargs
from server.settings import Settings

USER = [ChatMessage("user", "say something nice")]


# --- FakeLLM -----------------------------------------------------------------------------
async def test_fake_streams_word_by_word_with_usage():
    llm = FakeLLM(["one two  three"])
    await llm.start()
    deltas = [d async for d in llm.stream(USER, SamplingParams())]
    assert [d.text for d in deltas[:-1]] == ["one", " two", "  three"]
    last = deltas[-1]
    assert last.finish_reason == "stop" and last.text == ""
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (3, 3)
    assert isinstance(llm, LLM) and llm.healthy()


async def test_fake_cycles_replies_and_records_calls():
    llm = FakeLLM(["a", "b"])
    texts = [(await complete(llm, USER, SamplingParams())).text for _ in range(3)]
    assert texts == ["a", "b", "a"]
    assert len(llm.calls) == 3 and llm.calls[0][0] == USER


async def test_fake_reply_function_sees_the_request():
    llm = FakeLLM(lambda msgs, params: f"{msgs[-1].content} / {params.temperature}")
    out = await complete(llm, USER, SamplingParams(temperature=0.0))
    assert out.text == "say something nice / 0.0"


async def test_fake_max_tokens_and_stop():
    llm = FakeLLM(["w1 w2 w3 w4 w5. END rest"])
    out = await complete(llm, USER, SamplingParams(max_tokens=2))
    assert (out.text, out.finish_reason, out.usage.completion_tokens) == ("w1 w2", "length", 2)
    out = await complete(llm, USER, SamplingParams(stop=["END", "w4"]))
    assert (out.text, out.finish_reason) == ("w1 w2 w3 ", "stop")


async def test_fake_json_schema():
    schema = {
        "type": "object",
        "properties": {
            "ops": {"type": "array", "items": {"enum": ["SEARCH", "READ"]}},
            "n": {"type": "integer"},
            "why": {"type": ["string", "null"]},
        },
    }
    out = await complete(FakeLLM(), USER, SamplingParams(json_schema=schema))
    assert json.loads(out.text) == {"ops": ["SEARCH"], "n": 0, "why": "fake"}
    canned = FakeLLM(json_reply={"ops": ["READ"]})
    out = await complete(canned, USER, SamplingParams(json_schema=schema))
    assert json.loads(out.text) == {"ops": ["READ"]}
    assert example_for_schema({"const": 3}) == 3


async def test_fake_failure_and_cancellation():
    llm = FakeLLM(["a b c d"], delay_s=0.01)
    stream = llm.stream(USER, SamplingParams())
    assert (await anext(stream)).text == "a"
    await stream.aclose()  # the consumer leaves early: nothing hangs
    llm.failed = True
    assert not llm.healthy()
    with pytest.raises(BackendUnavailable):
        await complete(llm, USER, SamplingParams())


# --- registry ----------------------------------------------------------------------------
def test_registry_builds_fake_with_settings():
    llm = build_llm(Settings(llm_backend="fake", llm_served_name="brief-test", llm_context=1234))
    assert isinstance(llm, FakeLLM)
    assert (llm.model_name, llm.context_length) == ("brief-test", 1234)


def test_registry_vllm_needs_the_gpu_extra():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(MissingExtra) as err:
        build_llm(Settings(llm_backend="vllm", llm_model="Qwen/Qwen2.5-0.5B-Instruct"))
    assert "pip install 'brief-server[gpu]'" in err.value.message
    assert err.value.code == "missing_extra" and err.value.kind == "unavailable"


async def test_vllm_start_without_vllm_is_a_missing_extra():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(MissingExtra, match=r"brief-server\[gpu\]"):
        await VllmLLM("some/model").start()


def test_registry_llamacpp_and_openai(tmp_path):
    settings = Settings(llm_backend="llamacpp", llm_model=str(tmp_path / "m.gguf"), llm_batch=64)
    if importlib.util.find_spec("llama_cpp") is None:
        with pytest.raises(MissingExtra, match=r"brief-server\[cpu\]"):
            build_llm(settings)
    else:
        llm = build_llm(settings)
        assert isinstance(llm, LlamaCppLLM) and llm.model_name == "m"
        assert llm.context_length == settings.llm_context
    remote = build_llm(
        Settings(llm_backend="openai", llm_base_url="http://127.0.0.1:9/v1", llm_model="x")
    )
    assert isinstance(remote, OpenAIRemoteLLM) and remote.model == "x"


def test_registry_rejects_unknown_backend():
    with pytest.raises(ValueError, match="unknown LLM backend"):
        build_llm(SimpleNamespace(llm_backend="tpu"))  # type: ignore[arg-type]


def test_registry_import_is_lazy():
    code = (
        "import sys, engine.llm.registry as r\n"
        "from server.settings import Settings\n"
        "r.build_llm(Settings(llm_backend='fake'))\n"
        "heavy = [m for m in ('llama_cpp', 'vllm', 'openai', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=".", timeout=60)


# --- helpers of the real backends ----------------------------------------------------------
def test_stop_scanner_holds_back_partial_matches():
    scan = StopScanner(["</a>", "\n\n"])
    assert scan.feed("hello <") == ("hello ", False)
    assert scan.feed("/") == ("", False)
    assert scan.feed("b> more\n") == ("</b> more", False)
    assert scan.feed("\nignored") == ("", True)
    scan = StopScanner([])
    assert scan.feed("abc") == ("abc", False) and scan.flush() == ""
    scan = StopScanner(["STOP"])
    assert scan.feed("x ST") == ("x ", False) and scan.flush() == "ST"
    assert StopScanner(["b", "ab"]).feed("xab") == ("x", True)


async def test_llamacpp_missing_gguf_says_how_to_prepare(tmp_path):
    llm = LlamaCppLLM(tmp_path / "absent.gguf")
    with pytest.raises(BackendUnavailable) as err:
        await llm.start()
    if importlib.util.find_spec("llama_cpp") is None:
        assert isinstance(err.value, MissingExtra)
    else:
        assert "brief prepare-models" in err.value.message
    assert not llm.healthy()
    with pytest.raises(BackendUnavailable):
        llm.count_tokens("hello")


def test_vllm_delta_and_structured_outputs_detection():
    assert new_text("", "Hel") == "Hel"
    assert new_text("Hel", "Hello") == "lo"
    assert new_text("Hello", "Hello") == ""
    new = SimpleNamespace(StructuredOutputsParams=lambda json: ("new", json))
    old = SimpleNamespace(GuidedDecodingParams=lambda json: ("old", json))
    schema = {"type": "object"}
    assert structured_output_kwargs(new, schema) == {"structured_outputs": ("new", schema)}
    assert structured_output_kwargs(old, schema) == {"guided_decoding": ("old", schema)}
    with pytest.raises(InvalidRequest):
        structured_output_kwargs(SimpleNamespace(), schema)


def test_openai_remote_error_mapping_and_request_shape():
    req = httpx.Request("POST", "http://x/v1/chat/completions")

    def status(code: int) -> openai.APIStatusError:
        body = {"error": {"message": f"boom {code}"}}
        resp = httpx.Response(code, request=req, json=body)
        return openai.APIStatusError(f"status {code}", response=resp, body=body)

    assert isinstance(_map_error(openai.APIConnectionError(request=req), "u"), BackendUnavailable)
    assert isinstance(_map_error(openai.APITimeoutError(request=req), "u"), BackendUnavailable)
    assert isinstance(_map_error(status(429), "u"), Overloaded)
    bad = _map_error(status(400), "u")
    assert isinstance(bad, InvalidRequest) and "boom 400" in bad.message
    assert isinstance(_map_error(status(503), "u"), BackendUnavailable)

    llm = OpenAIRemoteLLM("http://x/v1", model="m")
    shaped = llm._request(USER, SamplingParams(json_schema={"type": "object"}, stop=["\n"]))
    assert shaped["response_format"]["type"] == "json_schema"
    assert shaped["response_format"]["json_schema"]["strict"] is True
    assert shaped["stream_options"] == {"include_usage": True} and shaped["stop"] == ["\n"]
    assert llm.count_tokens("x" * 35) == 10 and not llm.healthy()
