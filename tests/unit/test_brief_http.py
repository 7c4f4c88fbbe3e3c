"""Briefing chat over HTTP with a scripted LLM and the fake encoder: the wire contract of
DESIGN.md §2 (annotations, stream order, brief_trace, history, errors). The real model runs the
same path in tests/integration/test_brief_sdk.py."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from fastapi.testclient import TestClient

import engine.llm.registry as registry
from engine.llm.fake import FakeLLM
from server.app import build_app
from server.settings import Settings
from tests.unit.test_server_http import assert_openai_error

MD = (
    b"# Ducks\n\nDucks are waterfowl that paddle on ponds across the world.\n\n"
    b"## Food\n\nDucks eat seeds, grasses and small snails found in shallow water.\n"
)


def answer_from_prompt(messages, params) -> str:
    """Cite the paragraph that mentions snails, by the label the prompt gave it."""
    prompt = "\n".join(m.content for m in messages)
    m = re.search(r"\[(\d+)\][^\n]*snails", prompt)
    label = m.group(1) if m else "99"
    return f"Ducks eat seeds, grasses and small snails found in shallow water [{label}]."


@pytest.fixture
def http(monkeypatch):
    monkeypatch.setattr(registry, "build_llm", lambda s: FakeLLM(answer_from_prompt))
    settings = Settings(llm_backend="fake", encoder_backend="fake", describe_documents=False)
    with TestClient(build_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def session(http):
    fid = http.post(
        "/v1/files", files={"file": ("ducks.md", io.BytesIO(MD))}, data={"purpose": "assistants"}
    ).json()["id"]
    vs = http.post("/v1/vector_stores", json={"file_ids": [fid]}).json()["id"]
    deadline = time.monotonic() + 180
    while http.get(f"/v1/vector_stores/{vs}").json()["file_counts"]["in_progress"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return vs, fid


def ask(http, vs, content="What do ducks eat?", **extra):
    body = {"messages": [{"role": "user", "content": content}], "session_id": vs, **extra}
    return http.post("/v1/chat/completions", json=body)


def test_answer_carries_file_citation_annotations(http, session):
    vs, fid = session
    r = ask(http, vs, brief_trace=True)
    assert r.status_code == 200, r.text
    body = r.json()
    msg = body["choices"][0]["message"]
    assert "snails" in msg["content"] and "[1]" in msg["content"]
    (ann,) = msg["annotations"]
    assert ann["type"] == "file_citation"
    assert msg["content"][ann["index"] : ann["index"] + 3] == "[1]"
    cit = ann["file_citation"]
    assert cit["file_id"] == fid and cit["filename"] == "ducks.md"
    assert "snails" in cit["quote"] and len(cit["paragraphs"]) == 2
    trace = body["brief_trace"]
    assert {"rewrite", "operations", "retrieved", "timings"} <= set(trace)
    assert trace["operations"][0]["document"] == fid


def test_stream_puts_annotations_in_last_content_chunk(http, session):
    vs, _ = session
    body = {
        "messages": [{"role": "user", "content": "What do ducks eat?"}],
        "session_id": vs,
        "stream": True,
        "brief_trace": True,
    }
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert "snails" in text
    with_ann = [i for i, c in enumerate(chunks) if c["choices"][0]["delta"].get("annotations")]
    assert with_ann, "no annotations in the stream"
    last_content = max(i for i, c in enumerate(chunks) if "content" in c["choices"][0]["delta"])
    assert with_ann == [last_content]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "brief_trace" in chunks[-1]


def test_errors(http, session):
    vs, _ = session
    assert_openai_error(ask(http, "vs_unknown"), 404)
    assert_openai_error(ask(http, vs, content="  "), 400)
    r = http.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "session_id": vs,
            "response_format": {"type": "json_object"},
        },
    )
    assert_openai_error(r, 400)


def test_history_is_passed_to_the_rewriter(http, session):
    vs, _ = session
    first = ask(http, vs).json()["choices"][0]["message"]["content"]
    body = {
        "session_id": vs,
        "brief_trace": True,
        "messages": [
            {"role": "user", "content": "What do ducks eat?"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "And where do they find it?"},
        ],
    }
    trace = http.post("/v1/chat/completions", json=body).json()["brief_trace"]
    assert trace["rewrite"]["original"] == "And where do they find it?"
    assert trace["rewrite"]["skipped_llm"] is False
