"""Planner logic with the FakeLLM: the prompt and schema it sends, how handles map back to
document ids, validation and repairs, the fallback plan and the one deterministic shortcut."""

from __future__ import annotations

import json

import pytest

from engine.agent.config import AgentConfig
from engine.agent.planner import plan, schema, validate, wants_summary
from engine.agent.prompts import load
from engine.agent.types import DocumentInfo, Operation, Rewrite
from engine.errors import InvalidRequest
from engine.llm.fake import FakeLLM

DOCS = [
    DocumentInfo("file-lp", "layout-parser.pdf", "LayoutParser", "pdf", "A toolkit for layout."),
    DocumentInfo("file-dpr", "multi-column.pdf", "Dense Passage Retrieval", "pdf", "DPR paper."),
    DocumentInfo("file-ibm", "wiki.md", "IBM", "md", None),
]
Q = Rewrite("How accurate is DPR?", "How accurate is DPR?")
CFG = AgentConfig(max_operations=4)


def ops_reply(*ops: tuple[str, str, str]) -> FakeLLM:
    items = [{"action": a, "document": d, "query": q} for a, d, q in ops]
    return FakeLLM(json_reply={"operations": items})


async def test_factual_question_maps_handle_to_document_id():
    llm = ops_reply(("SEARCH", "D2", "retrieval accuracy"))
    ops, trace = await plan(llm, Q, DOCS, CFG)
    assert ops == [Operation("SEARCH", "file-dpr", "retrieval accuracy")]
    assert trace["handles"] == {"D1": "file-lp", "D2": "file-dpr", "D3": "file-ibm"}
    assert "fallback" not in trace and json.loads(trace["raw"])["operations"]


async def test_prompt_shows_metadata_examples_and_an_enum_schema():
    llm = ops_reply(("SEARCH", "D1", "x"))
    await plan(llm, Rewrite("How accurate is it?", "How accurate is DPR?"), DOCS, CFG)
    ((messages, params),) = llm.calls
    assert params.temperature == 0.0
    item = params.json_schema["properties"]["operations"]["items"]["properties"]
    assert item["document"]["enum"] == ["D1", "D2", "D3"]
    assert item["action"]["enum"] == ["SEARCH", "READ"]
    assert params.json_schema["properties"]["operations"]["maxItems"] == 4
    examples = load("planner").examples
    assert len(messages) == 1 + 2 * len(examples) + 1
    last = messages[-1].content
    assert "D2: Dense Passage Retrieval (pdf, multi-column.pdf): DPR paper." in last
    assert "D3: IBM (md, wiki.md)\n" in last  # no description: none invented
    assert "Question: How accurate is DPR?\n(The user's words: How accurate is it?)" in last


def test_every_example_is_a_valid_plan():
    for ex in load("planner").examples:
        docs = [
            DocumentInfo(f"ex{i}", d["filename"], d["title"], d["kind"], d["description"])
            for i, d in enumerate(ex["documents"])
        ]
        ops, notes = validate({"operations": ex["operations"]}, docs, Q, AgentConfig())
        assert ops and not notes, ex["question"]


def test_validation_repairs_and_drops():
    data = {
        "operations": [
            {"action": "SEARCH", "document": "D7", "query": "unknown handle"},
            {"action": "DELETE", "document": "D1", "query": "bad action"},
            {"action": "SEARCH", "document": "D2", "query": "  "},  # empty → the question
            {"action": "READ", "document": "D3", "query": "ignored for READ"},
            {"action": "READ", "document": "D3", "query": ""},  # duplicate
            {"action": "SEARCH", "document": "D1", "query": "a"},
            {"action": "SEARCH", "document": "D1", "query": "b"},
            {"action": "SEARCH", "document": "D1", "query": "c"},
            "not an object",
        ]
    }
    ops, notes = validate(data, DOCS, Q, AgentConfig(max_operations=4))
    assert ops == [
        Operation("SEARCH", "file-dpr", "How accurate is DPR?"),
        Operation("READ", "file-ibm", None),
        Operation("SEARCH", "file-lp", "a"),
        Operation("SEARCH", "file-lp", "b"),
    ]
    text = " | ".join(notes)
    for part in ("D7", "DELETE", "empty SEARCH query", "duplicate", "capped 5", "not an object"):
        assert part in text


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("{not json", "unparsable output"),
        ({"operations": []}, "empty plan"),
        ({"operations": [{"action": "SEARCH", "document": "D9", "query": "x"}]}, "empty plan"),
        ({"plan": "search everything"}, "empty plan"),
    ],
)
async def test_invalid_or_empty_plans_fall_back_to_searching_every_document(reply, reason):
    ops, trace = await plan(FakeLLM(json_reply=reply), Q, DOCS, CFG)
    assert ops == [Operation("SEARCH", d.doc_id, Q.rewritten) for d in DOCS]
    assert trace["fallback"] == reason


async def test_a_failed_request_falls_back_too():
    class TooLong(FakeLLM):
        async def stream(self, messages, params):
            raise InvalidRequest("the prompt has too many tokens")
            yield  # pragma: no cover

    ops, trace = await plan(TooLong(), Q, DOCS, CFG)
    assert len(ops) == 3 and "too many tokens" in trace["fallback"]


async def test_single_document_summary_is_read_without_the_llm():
    llm = ops_reply(("SEARCH", "D1", "x"))
    summary = Rewrite("Summarize this document", "Summarize this document")
    ops, trace = await plan(llm, summary, DOCS[1:2], CFG)
    assert ops == [Operation("READ", "file-dpr")] and llm.calls == []
    assert trace["shortcut"]


async def test_single_document_question_still_uses_the_llm():
    llm = ops_reply(("SEARCH", "D1", "top-20 accuracy"), ("SEARCH", "D1", "top-100 accuracy"))
    ops, _ = await plan(llm, Q, DOCS[1:2], CFG)
    assert [o.query for o in ops] == ["top-20 accuracy", "top-100 accuracy"]
    assert len(llm.calls) == 1


async def test_no_documents_no_operations():
    llm = ops_reply(("SEARCH", "D1", "x"))
    ops, trace = await plan(llm, Q, [], CFG)
    assert ops == [] and llm.calls == [] and trace["fallback"] == "no documents"


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("Summarize this document", True),
        ("Give me an overview of the slides", True),
        ("What are the key findings?", True),
        ("What is this paper about?", True),
        ("What accuracy does DPR reach?", False),
    ],
)
def test_wants_summary(text, summary):
    assert wants_summary(text) is summary


def test_schema_never_allows_zero_operations():
    assert schema(2, 0)["properties"]["operations"]["maxItems"] == 1
