"""The generation side of the agent with the real llama.cpp model (Qwen2.5-Coder-0.5B GGUF) on
small real documents of the corpus: planning, rewriting, and map-reduce over a READ.

Each test makes a few short LLM calls (the model makes ~15 tokens/s here). The document
descriptions are what ``engine.ingest.metadata.describe`` wrote for these files with this model
(recorded once, so a test does not spend three more calls regenerating them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from engine.agent.config import AgentConfig
from engine.agent.mapreduce import NOT_FOUND
from engine.agent.pipeline import BriefingAgent, Done, TextDelta
from engine.agent.planner import plan
from engine.agent.rewriter import rewrite_traced
from engine.agent.types import DocumentInfo, Operation, Rewrite, Turn
from engine.ingest.convert import parse
from engine.ingest.document import ParsedDocument
from engine.llm.llamacpp import LlamaCppLLM
from models import paths

GGUF = paths.llm_gguf_path()
pytest.importorskip("llama_cpp", reason="needs the [cpu] extra (llama-cpp-python)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not GGUF.is_file(), reason=f"no GGUF at {GGUF}; run `brief prepare-models`"),
    pytest.mark.asyncio(loop_scope="module"),
]

FILES = {  # corpus path → description written by engine.ingest.metadata.describe
    "documents/unstructured/pdf/layout-parser-paper-with-table.pdf": (
        "LayoutParser is a unified toolkit for DL-based DIA 5, designed to detect and annotate "
        "layout regions in scientific documents. It uses deep convolutional neural networks to "
        "identify content regions and provides a concise, generalized interface for layout "
        "detection."
    ),
    "documents/unstructured/pdf/multi-column.pdf": (
        "Dense Passage Retrieval for Open-Domain Question Answering is a task that answers "
        "factoid questions using a large collection of documents. While early QA systems are "
        "often complicated and consist of multiple components (Ferrucci (2012); Moldovan et al."
    ),
    "documents/docling/md/wiki.md": (
        "IBM is a multinational technology company headquartered in Armonk, New York and present "
        "in over 175 countries. It is a publicly traded company and one of the 30 companies in "
        "the Dow Jones Industrial Average."
    ),
}
SHORT_DOC = "documents/docling/docx/word_sample.docx"  # 15 paragraphs, ~140 words


def info(doc_id: str, path: Path, doc: ParsedDocument, description: str | None) -> DocumentInfo:
    return DocumentInfo(
        doc_id, path.name, doc.title, doc.kind, description, doc.pages, len(doc.paragraphs)
    )


@pytest.fixture(scope="module")
def three_docs(corpus: Path) -> list[DocumentInfo]:
    """LayoutParser paper (D1), the DPR paper (D2), the IBM wiki page (D3)."""
    out = []
    for i, (rel, description) in enumerate(FILES.items()):
        path = corpus / rel
        out.append(info(f"file-{i}", path, parse(path.read_bytes(), path.name), description))
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llm():
    model = LlamaCppLLM(GGUF, n_ctx=4096, n_batch=256, seed=0)
    await model.start()
    yield model
    await model.close()


async def test_factual_question_is_one_search_on_the_right_document(llm, three_docs):
    question = "What top-20 retrieval accuracy does DPR reach on Natural Questions?"
    ops, trace = await plan(llm, Rewrite(question, question), three_docs, AgentConfig())
    print("plan:", trace.get("raw"))
    assert "fallback" not in trace, trace
    assert ops and all(op.action == "SEARCH" for op in ops)
    assert {op.document for op in ops} == {"file-1"}  # the DPR paper only
    assert all(op.query and "accuracy" in op.query.lower() for op in ops)


async def test_summary_of_a_named_document_is_read(llm, three_docs):
    question = "Summarize the dense passage retrieval paper."
    ops, trace = await plan(llm, Rewrite(question, question), three_docs, AgentConfig())
    print("plan:", trace.get("raw"))
    assert "fallback" not in trace and "shortcut" not in trace, trace  # the LLM planned it
    assert ops == [Operation("READ", "file-1")]


async def test_pronoun_follow_up_is_rewritten_to_a_standalone_query(llm):
    history = [Turn("Where is IBM headquartered?", "IBM is headquartered in Armonk, New York [1].")]
    query = "In how many countries is it present?"
    rw, trace = await rewrite_traced(llm, query, history, AgentConfig())
    print("rewrite:", trace)
    assert not rw.skipped_llm and "fallback" not in trace, trace
    assert rw.original == query
    assert "IBM" in rw.rewritten and "countries" in rw.rewritten.lower()
    assert rw.used_turns == (0,)


class OneDocView:
    """A session of one parsed document (READ needs no index)."""

    index = None

    def __init__(self, doc: DocumentInfo, parsed: ParsedDocument):
        self.doc, self.parsed = doc, parsed

    def documents(self) -> list[DocumentInfo]:
        return [self.doc]

    def paragraphs(self, doc_id: str):
        return self.parsed.paragraphs

    async def embed_query(self, text: str):
        return None


async def test_summarize_this_document_goes_through_map_reduce(llm, corpus):
    path = corpus / SHORT_DOC
    parsed = parse(path.read_bytes(), path.name)
    view = OneDocView(info("file-w", path, parsed, None), parsed)
    cfg = AgentConfig(split_tokens=96, max_splits=4, mapper_tokens=48, answer_tokens=80)
    events = [e async for e in BriefingAgent(llm, cfg).run(view, "Summarize this document", [])]
    done = events[-1]
    assert isinstance(done, Done) and all(isinstance(e, TextDelta) for e in events[:-1])
    trace = done.trace
    print("splits:", trace["splits"])
    print("mappers:", [m["output"] for m in trace["mappers"]])
    print("answer:", done.text, done.citations)
    assert done.operations == [Operation("READ", "file-w")]
    assert trace["path"] == "map_reduce"
    assert 2 <= len(trace["splits"]) <= 4
    assert all(s["tokens"] <= 96 for s in trace["splits"])
    assert len(trace["mappers"]) == len(trace["splits"])
    assert any(not m["empty"] for m in trace["mappers"])
    assert trace["reducer"]["input"].startswith("Documents:\nD1: Swimming in the lake (docx)")
    assert trace["reducer"]["completion_tokens"] > 0
    assert done.text and done.text != NOT_FOUND
    assert any(w in done.text.lower() for w in ("swim", "lake", "duck", "eat"))
    assert done.citations and all(c.doc_id == "file-w" for c in done.citations)
    assert trace["llm_calls"] == len(trace["splits"]) + 1  # READ needed no planner call
    assert done.usage.completion_tokens > 0
