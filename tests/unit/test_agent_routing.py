"""Routing: the planner's SEARCHes checked against the session index (real documents, real
index, fake encoder)."""

from __future__ import annotations

import pytest

from engine.agent.config import AgentConfig
from engine.agent.routing import is_comparison, keep, mass_by_document, route
from engine.agent.types import Operation, Rewrite
from engine.index.hybrid import Hit
from engine.ingest.document import Chunk
from tests.unit.agent_fixtures import (
    MemorySession,
    word_processor_and_autogen,
)

QUESTION = "When did Microsoft launch Word for MS-DOS?"  # only the word processor doc says


@pytest.fixture()
def session() -> MemorySession:
    return word_processor_and_autogen()


def rw(text: str) -> Rewrite:
    return Rewrite(text, text)


def test_mass_and_keep():
    chunk = Chunk("d", "small", 0, 0, 0, "x", None, 1)
    hits = [Hit("a", chunk, 1.0), Hit("a", chunk, 0.5), Hit("b", chunk, 0.4)]
    mass = mass_by_document(hits)
    assert mass == pytest.approx({"a": 1.5, "b": 0.4})
    assert keep(mass, "a", 0.5) and not keep(mass, "b", 0.5) and keep(mass, "b", 0.25)
    assert not keep(mass, "unseen", 0.1)
    assert keep({}, "anything", 0.5)  # no hits: no signal, keep


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Compare the budget and the brief", True),
        ("What is the difference between A and B?", True),
        ("What do both papers say about recall?", True),
        ("When did Microsoft launch Word?", False),
        ("What top-20 retrieval accuracy does DPR reach?", False),
    ],
)
def test_comparison_detection(text, expected):
    assert is_comparison(rw(text)) is expected


async def test_search_of_an_off_topic_document_is_dropped(session):
    ops = [Operation("SEARCH", "wp", QUESTION), Operation("SEARCH", "ag", QUESTION)]
    kept, trace = await route(session, rw(QUESTION), ops, AgentConfig())
    assert kept == [ops[0]]
    assert trace["dropped"] == [{"action": "SEARCH", "document": "ag", "query": QUESTION}]
    mass = trace["mass"][QUESTION]
    assert mass["wp"] > 2 * mass.get("ag", 0.0)


async def test_route_leaves_alone_what_it_should(session):
    cfg = AgentConfig()
    both = [Operation("SEARCH", "wp", QUESTION), Operation("SEARCH", "ag", QUESTION)]
    # a comparison names several documents on purpose
    q = "Compare what the two documents say about Microsoft Word"
    kept, trace = await route(
        session, rw(q), [Operation("SEARCH", d, q) for d in ("wp", "ag")], cfg
    )
    assert len(kept) == 2 and trace == {"skipped": "comparison"}
    # one document searched: nothing to choose between; READs are never touched
    one = [Operation("READ", "ag"), Operation("SEARCH", "wp", QUESTION)]
    assert await route(session, rw(QUESTION), one, cfg) == (one, {})
    # routing switched off
    assert (await route(session, rw(QUESTION), both, AgentConfig(route_keep_ratio=0)))[0] == both


async def test_each_search_is_judged_by_its_own_query(session):
    """A compound question: each sub-query keeps the document that answers it."""
    autogen_query = "AutoGen multi-agent conversation framework"
    ops = [Operation("SEARCH", "wp", QUESTION), Operation("SEARCH", "ag", autogen_query)]
    kept, trace = await route(session, rw(QUESTION + " And what is AutoGen?"), ops, AgentConfig())
    assert kept == ops and "dropped" not in trace


async def test_the_agent_runs_only_the_routed_operations(session):
    """The whole pipeline (real context builder): the plan searches both documents, routing
    drops the off-topic one before retrieval, and the trace shows both the plan and the drop."""
    from engine.agent.pipeline import BriefingAgent
    from tests.unit.test_agent_pipeline import scripted

    plan = [
        {"action": "SEARCH", "document": "D1", "query": QUESTION},
        {"action": "SEARCH", "document": "D2", "query": QUESTION},
    ]
    llm = scripted(plan)
    agent = BriefingAgent(llm, AgentConfig())
    events = [e async for e in agent.run(session, QUESTION, [])]
    done = events[-1]
    assert [op.document for op in done.operations] == ["wp"]
    trace = done.trace
    assert [op["document"] for op in trace["operations"]] == ["wp"]
    assert [r["operation"]["document"] for r in trace["retrieved"]] == ["wp"]
    assert trace["plan"]["routing"]["dropped"][0]["document"] == "ag"
    assert '"D2"' in trace["plan"]["raw"]  # the planner's own output stays visible
