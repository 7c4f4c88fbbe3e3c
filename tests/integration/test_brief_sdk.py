"""The briefing agent end to end, as a user drives it: a real server with the real llama.cpp
model and ONNX encoder, the official openai SDK, real corpus files (issue "The briefing agent",
Done when)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.live import LiveServer
from tests.conftest import weights_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DPR = "documents/unstructured/pdf/multi-column.pdf"
DISTRACTORS = ["documents/docling/pdf/multi_page.pdf", "documents/unstructured/pdf/reliance.pdf"]
SHORT = "documents/docling/pdf/multi_page.pdf"


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def upload_all(client, vs_id: str, paths: list[Path]) -> dict[str, object]:
    out = {}
    for p in paths:
        with p.open("rb") as fh:
            f = client.vector_stores.files.upload_and_poll(
                vector_store_id=vs_id, file=fh, poll_interval_ms=250
            )
        assert f.status == "completed", f.last_error
        out[p.name] = f
    return out


def chat_model(client) -> str:
    return next(m.id for m in client.models.list().data if "mpnet" not in m.id)


@pytest.fixture(scope="module")
def dpr_session(client, corpus):
    vs = client.vector_stores.create(name="dpr + distractors")
    files = upload_all(client, vs.id, [corpus / DPR, *(corpus / d for d in DISTRACTORS)])
    # The planner chooses documents by title, kind and the LLM-written description, which is
    # generated in the background after ingestion: wait for it like a user reading the status.
    deadline = time.monotonic() + 900
    for f in files.values():
        while True:
            stages = client.vector_stores.files.retrieve(
                vector_store_id=vs.id, file_id=f.id
            ).model_extra["stages"]
            if "described_s" in stages or "describe_error" in stages:
                break
            assert time.monotonic() < deadline, "descriptions not ready"
            time.sleep(1)
    yield vs, files
    client.vector_stores.delete(vs.id)


def page_texts(live_server, vs_id: str, file_id: str) -> dict[int | None, str]:
    r = httpx.get(f"{live_server.base_url}/v1/vector_stores/{vs_id}/files/{file_id}/content")
    pages: dict[int | None, str] = {}
    for p in r.json()["data"]:
        pages[p["page"]] = pages.get(p["page"], "") + " " + p["text"]
    return {k: norm(v) for k, v in pages.items()}


def annotations_of(msg) -> list[dict]:
    """``message.annotations`` as plain dicts (the SDK types only ``url_citation``; our
    ``file_citation`` arrives as an extra field of each annotation)."""
    return [a.model_dump(exclude_none=True) for a in msg.annotations or []]


def test_factual_question_searches_only_dpr_and_cites_real_text(client, live_server, dpr_session):
    vs, files = dpr_session
    dpr = files["multi-column.pdf"]
    r = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": "What top-20 retrieval accuracy does DPR reach?"}],
        extra_body={"session_id": vs.id, "brief_trace": True},
    )
    trace = r.model_extra["brief_trace"]
    ops = trace["operations"]
    assert ops and all(op["action"] == "SEARCH" for op in ops), ops
    # SEARCH on the DPR file only: whatever the planner proposed, routing keeps DPR alone.
    assert {op["document"] for op in ops} == {dpr.id}, trace["plan"]
    assert {r["operation"]["document"] for r in trace["retrieved"]} == {dpr.id}
    msg = r.choices[0].message
    assert msg.content.strip()
    annotations = annotations_of(msg)
    assert annotations, f"no citation survived the check: {msg.content!r}"
    pages = page_texts(live_server, vs.id, dpr.id)
    for ann in annotations:
        assert ann["type"] == "file_citation"
        cit = ann["file_citation"]
        assert cit["file_id"] == dpr.id and cit["filename"] == "multi-column.pdf"
        quote = norm(cit["quote"]).removesuffix("…").strip()
        assert quote[:60] in pages[cit["page"]], (cit, pages.get(cit["page"], "")[:200])
        assert msg.content[ann["index"] :].startswith("[")


def test_follow_up_with_pronoun_is_rewritten(client, dpr_session):
    vs, _ = dpr_session
    first_q = "What is the Dense Passage Retriever?"
    first = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": first_q}],
        extra_body={"session_id": vs.id},
        max_tokens=64,
    )
    r = client.chat.completions.create(
        model=chat_model(client),
        messages=[
            {"role": "user", "content": first_q},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "How is it trained?"},
        ],
        extra_body={"session_id": vs.id, "brief_trace": True},
        max_tokens=64,
    )
    rewrite = r.model_extra["brief_trace"]["rewrite"]
    assert rewrite["original"] == "How is it trained?"
    assert rewrite["skipped_llm"] is False
    assert re.search(r"dense passage|retriever|dpr", rewrite["rewritten"], re.I), rewrite


@pytest.fixture(scope="module")
def small_split_server():
    """A second server whose split budget is small, so a short document needs map-reduce."""
    if not weights_ready():
        pytest.skip("weights not prepared")
    env = {
        "BRIEF_AGENT_SPLIT_TOKENS": "400",
        "BRIEF_AGENT_MAX_SPLITS": "3",
        "BRIEF_AGENT_MAPPER_TOKENS": "64",
        "BRIEF_AGENT_ANSWER_TOKENS": "96",
        "BRIEF_DESCRIBE_DOCUMENTS": "false",
    }
    with LiveServer(env) as srv:
        yield srv


def test_summary_is_read_and_goes_through_map_reduce(small_split_server, corpus):
    import openai

    client = openai.OpenAI(base_url=small_split_server.base_url + "/v1", api_key="x")
    vs = client.vector_stores.create(name="summary")
    (f,) = upload_all(client, vs.id, [corpus / SHORT]).values()
    r = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": "Summarize this document."}],
        extra_body={"session_id": vs.id, "brief_trace": True},
    )
    trace = r.model_extra["brief_trace"]
    assert [op["action"] for op in trace["operations"]] == ["READ"]
    assert trace["operations"][0]["document"] == f.id
    assert trace["path"] == "map_reduce"
    assert len(trace["splits"]) >= 2 and len(trace["mappers"]) == len(trace["splits"])
    assert trace["reducer"]
    assert r.choices[0].message.content.strip()
    client.vector_stores.delete(vs.id)
