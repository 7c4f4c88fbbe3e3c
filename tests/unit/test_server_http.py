"""HTTP behaviour of the server with fake engines: routing, wire format, errors, auth, metrics.

Fakes only stand in for the models here; the same behaviour is checked against the real models in
tests/integration/test_server_sdk.py.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from server.app import build_app
from server.settings import Settings


def make_client(**overrides) -> TestClient:
    settings = Settings(llm_backend="fake", encoder_backend="fake", **overrides)
    return TestClient(build_app(settings), raise_server_exceptions=False)


@pytest.fixture
def http():
    with make_client() as c:
        yield c


def assert_openai_error(resp, status: int, type_: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and "Traceback" not in err["message"]
    if type_:
        assert err["type"] == type_
    return err


def test_models_lists_chat_and_embedding_model(http):
    data = http.get("/v1/models").json()["data"]
    ids = [m["id"] for m in data]
    assert len(ids) == 2 and "all-mpnet-base-v2" in ids
    assert http.get(f"/v1/models/{ids[0]}").json()["id"] == ids[0]
    assert_openai_error(http.get("/v1/models/nope"), 404, "not_found_error")


def test_chat_non_stream_shape(http):
    r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert body["usage"]["total_tokens"] >= body["usage"]["completion_tokens"]


def test_chat_stream_sse_ends_with_done_and_usage(http):
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with http.stream("POST", "/v1/chat/completions", json=payload) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [ln[len("data: ") :] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] in ("stop", "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1


def test_validation_errors_are_openai_shaped(http):
    err = assert_openai_error(
        http.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}], "temperature": 9},
        ),
        422,
    )
    assert err["param"] == "temperature"
    assert_openai_error(http.post("/v1/chat/completions", json={"messages": []}), 422)
    r = http.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_openai_error(r, 400)
    assert_openai_error(
        http.post(
            "/v1/chat/completions",
            json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
        ),
        404,
    )
    assert_openai_error(
        http.post(
            "/v1/chat/completions", json={"n": 2, "messages": [{"role": "user", "content": "x"}]}
        ),
        400,
    )
    assert_openai_error(http.get("/v1/nothing-here"), 404)
    assert_openai_error(http.get("/v1/chat/completions"), 405)


def test_embeddings_float_and_base64(http):
    r = http.post("/v1/embeddings", json={"input": ["a b c", "d"], "encoding_format": "float"})
    assert r.status_code == 200, r.text
    body = r.json()
    vecs = [d["embedding"] for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert len(vecs[0]) == 768
    assert abs(np.linalg.norm(vecs[0]) - 1) < 1e-3
    r64 = http.post("/v1/embeddings", json={"input": "a b c", "encoding_format": "base64"})
    v64 = np.frombuffer(base64.b64decode(r64.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(v64, vecs[0], atol=1e-6)
    assert body["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize(
    "payload,status",
    [
        ({"input": []}, 400),
        ({"input": ["ok", "  "]}, 400),
        ({"input": [[1, 2, 3]]}, 400),
        ({"input": "x", "dimensions": 64}, 400),
        ({"input": "x", "model": "text-embedding-3-small"}, 404),
        ({}, 422),
    ],
)
def test_embedding_errors(http, payload, status):
    assert_openai_error(http.post("/v1/embeddings", json=payload), status)


def test_auth_when_key_set():
    with make_client(api_key="s3cret") as c:
        assert_openai_error(c.get("/v1/models"), 401, "authentication_error")
        bad = c.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert_openai_error(bad, 401)
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/health").status_code == 200  # probes need no key


def test_public_bind_without_key_is_refused():
    with pytest.raises(ValueError, match="API_KEY"):
        Settings(host="0.0.0.0", llm_backend="fake", encoder_backend="fake")


def test_every_agent_setting_reaches_the_agent_config():
    """BRIEF_AGENT_<NAME> sets AgentConfig.<name>; a setting the agent never sees is a bug."""
    names = [n for n in Settings.model_fields if n.startswith("agent_")]
    changed = {"agent_fusion": "convex", "agent_unsupported_figures": "keep"}
    settings = Settings(llm_backend="fake", encoder_backend="fake", **changed)
    config = settings.agent_config()
    for name in names:
        assert getattr(config, name.removeprefix("agent_")) == getattr(settings, name), name
    assert config.fusion == "convex" and config.unsupported_figures == "keep"


def test_health_and_metrics(http):
    http.post("/v1/embeddings", json={"input": "hello"})
    http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    h = http.get("/health")
    assert h.status_code == 200 and h.json()["components"] == {"llm": True, "encoder": True}
    text = http.get("/metrics").text
    for name in (
        "brief_request_duration_seconds_bucket",
        "brief_generated_tokens_total",
        "brief_encoder_batch_size_bucket",
        "brief_encoder_queue_size",
        'brief_engine_healthy{component="llm"} 1.0',
    ):
        assert name in text, name


def test_health_reports_dead_engine(http):
    ctx = http.app.state.ctx
    ctx.llm.healthy = lambda: False  # simulate a crashed backend worker
    r = http.get("/health")
    assert r.status_code == 503
    assert r.json()["components"]["llm"] is False
