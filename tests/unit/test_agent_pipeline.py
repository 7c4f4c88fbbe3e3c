"""The agent end to end with the FakeLLM and a stand-in context builder (no index, no encoder):
stage order, citation-processed deltas, the trace, usage, and cancellation. The real
``CitationStream`` is used: it is pure logic."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from engine.agent.config import AgentConfig
from engine.agent.grounding import ABSTAIN
from engine.agent.mapreduce import NOT_FOUND
from engine.agent.pipeline import NO_DOCUMENTS, BriefingAgent, Done, TextDelta
from engine.agent.types import Context, DocumentInfo, Evidence, Operation, Turn
from engine.ingest.document import Paragraph
from engine.llm.fake import FakeLLM

REPORT = [
    "Norbel's revenue grew 12% to 88 million dollars in 2022, driven by exports to Asia.",
    "The company opened two new factories in Vietnam during 2022.",
    "Headcount rose to 420 employees by the end of the year.",
    "The board approved a dividend of 30 cents per share for 2022.",
    "Energy costs doubled and squeezed the operating margin in the second half.",
    "Management expects revenue growth of about 8% in 2023.",
]
SLIDES = ["Q3 sales in Asia grew 30% compared with the second quarter.", "Europe was flat."]


class View:
    """Just what the agent and the stand-in builder read of a session."""

    def __init__(self, docs: dict[str, tuple[DocumentInfo, list[str]]]):
        self.docs = docs

    def documents(self) -> list[DocumentInfo]:
        return [info for info, _ in self.docs.values()]

    def paragraphs(self, doc_id: str) -> Sequence[Paragraph]:
        return [Paragraph(i, t, page=1) for i, t in enumerate(self.docs[doc_id][1])]


class StandInBuilder:
    """READ → every paragraph; SEARCH → paragraphs sharing a word with the query."""

    def __init__(self, view: View, config: AgentConfig):
        self.view = view

    async def build(self, operations: Sequence[Operation]) -> list[Context]:
        out = []
        for i, op in enumerate(operations):
            paras = self.view.paragraphs(op.document)
            if op.action == "SEARCH":
                terms = {w.lower().strip("?.,") for w in (op.query or "").split() if len(w) > 3}
                paras = [
                    p for p in paras if terms & {w.lower().strip(".,") for w in p.text.split()}
                ]
            source = "read" if op.action == "READ" else "search"
            evidence = [Evidence(op.document, p, 1.0, source, i) for p in paras]
            out.append(Context(op, evidence, [{"chunk": f"{op.document}:{p.id}"} for p in paras]))
        return out


REPORT_DOC = DocumentInfo(
    "file-r", "report.pdf", "Norbel Annual Report", "pdf", "Norbel's 2022 report."
)
SLIDES_DOC = DocumentInfo("file-s", "q3.pptx", "Q3 Sales", "pptx", "Quarterly sales slides.")


def scripted(
    plan: list[dict],
    rewritten: str = "unused",
    text: str | None = None,
    called: asyncio.Event | None = None,
    delay_s: float = 0.0,
) -> FakeLLM:
    """JSON replies by schema (rewriter / planner); text replies by stage."""

    def json_reply(schema):
        if "operations" in schema["properties"]:
            return {"operations": plan}
        return {"relevant_turns": [1], "query": rewritten}

    def reply(messages, params):
        if called is not None:
            called.set()
        system = messages[0].content
        if system.startswith("You read one part"):
            return "- Revenue grew 12% to 88 million dollars [1]"
        if system.startswith("Write the final answer"):
            return "Norbel's revenue grew 12% to 88 million dollars in 2022 [1]. It opened two factories [2]."
        return text or "Revenue grew 12% to 88 million dollars in 2022 [1]."

    return FakeLLM(reply, json_reply=json_reply, delay_s=delay_s)


async def collect(agent, view, query, history=()):
    events = [e async for e in agent.run(view, query, list(history))]
    assert all(isinstance(e, TextDelta) for e in events[:-1]) and isinstance(events[-1], Done)
    return events[:-1], events[-1]


def agent(llm, **cfg) -> BriefingAgent:
    return BriefingAgent(llm, AgentConfig(**cfg), context_builder=StandInBuilder)


async def test_factual_question_searches_one_document_and_cites():
    view = View({"file-r": (REPORT_DOC, REPORT), "file-s": (SLIDES_DOC, SLIDES)})
    llm = scripted([{"action": "SEARCH", "document": "D1", "query": "revenue growth"}])
    deltas, done = await collect(agent(llm), view, "How much did Norbel's revenue grow in 2022?")
    assert done.text == "".join(d.text for d in deltas)
    assert done.operations == [Operation("SEARCH", "file-r", "revenue growth")]
    assert done.rewrite.skipped_llm and done.trace["rewrite"]["skipped"] == "no history"
    assert "[1]" in done.text
    (c,) = done.citations
    assert (c.doc_id, c.start, c.end, c.filename) == ("file-r", 0, 0, "report.pdf")
    trace = done.trace
    assert trace["path"] == "direct" and trace["operations"][0]["document"] == "file-r"
    assert trace["retrieved"][0]["hits"]
    file_id, pid, score, page = trace["retrieved"][0]["paragraphs"][0]
    assert (file_id, pid, page) == ("file-r", 0, 1) and 0 <= score <= 1
    assert set(trace["timings"]) >= {"rewrite_s", "plan_s", "retrieve_s", "generate_s", "total_s"}
    assert trace["llm_calls"] == 2 == len(llm.calls)  # planner + one direct answer
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0


async def test_summary_of_a_document_larger_than_one_split_goes_through_map_reduce():
    view = View({"file-r": (REPORT_DOC, REPORT)})
    llm = scripted([])
    deltas, done = await collect(
        agent(llm, split_tokens=40, max_splits=6), view, "Summarize this document"
    )
    assert done.operations == [Operation("READ", "file-r")]
    assert done.trace["plan"]["shortcut"]
    trace = done.trace
    assert trace["path"] == "map_reduce" and len(trace["splits"]) >= 3
    assert len(trace["mappers"]) == len(trace["splits"])
    assert trace["reducer"]["input"].count("Part ") == len(trace["splits"])
    assert trace["llm_calls"] == len(trace["splits"]) + 1
    assert done.text.startswith("Norbel's revenue grew 12%") and done.citations
    assert len(deltas) >= 2  # streamed sentence by sentence


async def test_pronoun_follow_up_is_rewritten_before_planning():
    view = View({"file-r": (REPORT_DOC, REPORT), "file-s": (SLIDES_DOC, SLIDES)})
    history = [Turn("What did Norbel open in Vietnam?", "Two new factories [1].")]
    llm = scripted(
        [{"action": "SEARCH", "document": "D1", "query": "factories Vietnam employees"}],
        rewritten="How many employees work in Norbel's Vietnam factories?",
    )
    _, done = await collect(agent(llm), view, "How many employees work in them?", history)
    assert done.rewrite.rewritten == "How many employees work in Norbel's Vietnam factories?"
    assert done.rewrite.original == "How many employees work in them?"
    planner_prompt = llm.calls[1][0][-1].content
    assert "Question: How many employees work in Norbel's Vietnam factories?" in planner_prompt
    assert "(The user's words: How many employees work in them?)" in planner_prompt
    assert done.trace["rewrite"]["used_turns"] == (0,)


async def test_no_documents_answers_without_planning():
    llm = scripted([])
    deltas, done = await collect(agent(llm), View({}), "What is in here?")
    assert [d.text for d in deltas] == [NO_DOCUMENTS] and done.operations == []
    assert llm.calls == []


async def test_nothing_found_says_so():
    view = View({"file-r": (REPORT_DOC, REPORT)})
    llm = scripted([{"action": "SEARCH", "document": "D1", "query": "penguins"}])
    _, done = await collect(agent(llm), view, "What about penguins in Antarctica?")
    assert done.text == NOT_FOUND and done.citations == []
    assert len(llm.calls) == 1  # only the planner


async def test_stopping_the_iteration_cancels_the_mappers():
    view = View({"file-r": (REPORT_DOC, REPORT)})
    called = asyncio.Event()
    llm = scripted([], called=called, delay_s=0.2)
    run = agent(llm, split_tokens=40, mapper_concurrency=1).run(view, "Summarize this document", [])

    async def consume():
        async for _ in run:
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(called.wait(), 10)  # the first mapper is talking to the model
    mappers = [t for t in asyncio.all_tasks() if t.get_name().startswith("mapper-")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(mappers) >= 2 and all(t.done() for t in mappers)
    assert sum(t.cancelled() for t in mappers) >= len(mappers) - 1
    assert len(llm.calls) <= 2  # one mapper at a time: the others never reached the model


async def test_closing_after_the_first_delta_stops_generation():
    view = View({"file-r": (REPORT_DOC, REPORT)})
    llm = scripted([], text="Revenue grew 12% [1]. " * 20)
    run = agent(llm, split_tokens=4000).run(view, "Summarize this document", [])
    first = await anext(run)
    assert isinstance(first, TextDelta)
    await run.aclose()
    assert len(llm.calls) == 1


async def test_an_invented_figure_is_left_out_and_the_answer_abstains():
    view = View({"file-r": (REPORT_DOC, REPORT)})
    plan = [{"action": "SEARCH", "document": "D1", "query": "revenue growth"}]
    invented = "Revenue grew 12% to 95 million dollars in 2022 [1]."
    deltas, done = await collect(agent(scripted(plan, text=invented)), view, "Revenue growth?")
    assert done.text == ABSTAIN == "".join(d.text for d in deltas) and done.citations == []
    assert done.trace["figures"] == {"dropped": [invented], "unsupported": ["95 million"]}
    # Kept when the check is off; a true figure next to an invented one gets a note instead.
    _, kept = await collect(
        agent(scripted(plan, text=invented), unsupported_figures="keep"), view, "Revenue growth?"
    )
    assert kept.text.startswith("Revenue grew 12% to 95 million dollars") and kept.citations
    assert kept.trace["figures"] == {"dropped": [], "unsupported": []}
    mixed = "Revenue grew 12% to 88 million dollars in 2022 [1]. Profit was 7.5 million [1]."
    _, done = await collect(agent(scripted(plan, text=mixed)), view, "Revenue growth?")
    assert done.text.startswith("Revenue grew 12% to 88 million dollars in 2022 [1].")
    assert done.text.endswith(
        "(Left out a statement with figures not found in the documents: 7.5 million.)"
    )
