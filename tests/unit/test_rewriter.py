"""Query rewriter logic with the FakeLLM: when the LLM is skipped, what it is asked, and how bad
outputs fall back to the original query."""

from __future__ import annotations

import json

import pytest

from engine.agent.config import AgentConfig
from engine.agent.rewriter import (
    needs_rewrite,
    rejection,
    resolve,
    rewrite,
    rewrite_traced,
    substitute,
)
from engine.agent.types import Operation, Rewrite, Turn
from engine.llm.fake import FakeLLM

DPR = Turn(
    "What is dense passage retrieval?",
    "Dense passage retrieval (DPR) encodes questions and passages with two encoders [1].",
    (Operation("SEARCH", "file-dpr", "dense passage retrieval"),),
    ("file-dpr",),
)
OTHER = Turn("Who wrote the handbook?", "The HR team wrote it [2].")
CFG = AgentConfig(history_turns=3)


def reply(query: str, turns: list[int], refers_to: str = "") -> FakeLLM:
    return FakeLLM(json_reply={"relevant_turns": turns, "refers_to": refers_to, "query": query})


async def test_first_turn_skips_the_llm():
    llm = reply("unused", [])
    out = await rewrite(llm, "How accurate is it?", [], CFG)
    assert out == Rewrite("How accurate is it?", "How accurate is it?", (), skipped_llm=True)
    assert llm.calls == []


async def test_self_contained_follow_up_skips_the_llm():
    llm = reply("unused", [])
    out, trace = await rewrite_traced(llm, "Who are the authors of LayoutParser?", [DPR], CFG)
    assert out.skipped_llm and out.rewritten == out.original and llm.calls == []
    assert trace == {"skipped": "nothing to resolve"}


@pytest.mark.parametrize(
    "query",
    [
        "How accurate is it?",
        "What about their training data?",
        "and in 2021?",
        "Same for BM25",
        "Why?",
        "Tell me more about the second one",
        "Is that better than those baselines?",
    ],
)
def test_cues_that_need_resolving(query):
    assert needs_rewrite(query, [DPR])
    assert not needs_rewrite(query, [])  # nothing to resolve against


@pytest.mark.parametrize(
    "query",
    ["What top-20 accuracy does DPR reach on Natural Questions?", "Who founded IBM in 1911?"],
)
def test_standalone_questions(query):
    assert not needs_rewrite(query, [DPR])


async def test_pronoun_follow_up_is_rewritten_at_temperature_zero_with_a_schema():
    llm = reply("How accurate is dense passage retrieval on Natural Questions?", [2])
    out, trace = await rewrite_traced(
        llm, "How accurate is it on Natural Questions?", [OTHER, DPR], CFG
    )
    assert out.original == "How accurate is it on Natural Questions?"
    assert out.rewritten == "How accurate is dense passage retrieval on Natural Questions?"
    assert out.used_turns == (1,) and not out.skipped_llm and "fallback" not in trace
    ((messages, params),) = llm.calls
    assert params.temperature == 0.0 and params.json_schema is not None
    turns = params.json_schema["properties"]["relevant_turns"]["items"]
    assert turns["enum"] == [1, 2]  # only turns that exist can be named
    last = messages[-1].content
    assert "Turn 2\nUser: What is dense passage retrieval?" in last
    assert "Searched: dense passage retrieval" in last
    assert last.endswith('Last question: How accurate is it on Natural Questions?\nResolve: "it"')
    # in-context examples come first, as user/assistant pairs with JSON answers
    assert messages[0].role == "system" and messages[2].role == "assistant"
    assert list(json.loads(messages[2].content)) == ["relevant_turns", "refers_to", "query"]
    assert list(params.json_schema["properties"]) == ["relevant_turns", "refers_to", "query"]


async def test_only_the_last_n_turns_are_shown_and_indexes_map_back():
    history = [Turn(f"Question {i} about topic{i}?", f"Answer {i}.") for i in range(5)] + [DPR]
    llm = reply("How large is dense passage retrieval's index?", [3])
    out = await rewrite(llm, "How large is its index?", history, AgentConfig(history_turns=3))
    shown = llm.calls[0][0][-1].content
    assert "topic2" not in shown and "topic3" in shown and "Turn 4" not in shown
    assert out.used_turns == (5,)  # prompt turn 3 of the last three = history[5]


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ("", "empty"),
        ("What is " + "very " * 60 + "accurate?", "too long"),
        ("DPR reaches 78.4% top-20 accuracy on Natural Questions.", "not a question"),
        ("Dense passage retrieval (DPR) encodes questions and passages", "copied from an answer"),
        ("What is dense passage retrieval?", "lost the question's words"),
    ],
)
async def test_bad_rewrites_fall_back_to_the_original(output, reason):
    query = "How accurate is it on Natural Questions?"
    out, trace = await rewrite_traced(reply(output, [1]), query, [DPR], CFG)
    assert out == Rewrite(query, query)
    assert trace["fallback"].startswith(reason)


async def test_a_named_referent_is_substituted_when_the_model_left_the_pronoun():
    query = "How accurate is it on Natural Questions?"
    llm = reply(query, [1], refers_to="dense passage retrieval")
    out, trace = await rewrite_traced(llm, query, [DPR], CFG)
    assert out.rewritten == "How accurate is dense passage retrieval on Natural Questions?"
    assert trace["substituted"] == "dense passage retrieval"
    llm = reply("What about its training data?", [1], refers_to="DPR")
    out = await rewrite(llm, "What about its training data?", [DPR], CFG)
    assert out.rewritten == "What about DPR's training data?"


@pytest.mark.parametrize(
    ("question", "referent", "expected"),
    [
        ("When did he join Dundee United?", "Maurice Malpas", "When did Maurice Malpas join Dundee United?"),
        ("Were her parents musicians?", "Mary Chapin Carpenter", "Were Mary Chapin Carpenter's parents musicians?"),
        ("What happened to her in 1990?", "Faith Hill", "What happened to Faith Hill in 1990?"),
        ("Did anyone interview her?", "Faith Hill", "Did anyone interview Faith Hill?"),
        ("What was his first album?", "Ludwig van Beethoven", "What was Ludwig van Beethoven's first album?"),
        # a person pronoun takes a name, never a section title or a phrase
        ("When did she marry Churchill?", "Marriage to Randolph Churchill", None),
        ("Were there other ways he liked attacking?", "his preferred method of attack", None),
        ("When did he start performing?", "Jefferson's biography", None),
    ],
)  # fmt: skip
def test_person_pronouns_are_substituted_only_by_names(question, referent, expected):
    assert substitute(question, referent) == expected


def test_resolve_replays_a_stored_output_without_the_llm():
    raw = json.dumps({"relevant_turns": [1], "refers_to": "DPR", "query": "How fast is it?"})
    out, trace = resolve(raw, "How fast is it?", [OTHER, OTHER, DPR], turns=1)
    assert out == Rewrite("How fast is it?", "How fast is DPR?", (2,))
    assert trace == {"substituted": "DPR"}


async def test_a_referent_not_from_the_conversation_is_not_substituted():
    query = "How accurate is it on Natural Questions?"
    llm = reply(query, [1], refers_to="the Eiffel Tower")
    out, trace = await rewrite_traced(llm, query, [DPR], CFG)
    assert out.rewritten == query and "substituted" not in trace


async def test_short_follow_up_asks_to_complete_the_question():
    llm = reply("What was Reliance's revenue in 2021?", [1])
    await rewrite(llm, "and in 2021?", [OTHER], CFG)
    assert llm.calls[0][0][-1].content.endswith("Resolve: complete the short question")


async def test_unparsable_output_falls_back():
    llm = FakeLLM(json_reply="not json at all")
    out, trace = await rewrite_traced(llm, "Why?", [DPR], CFG)
    assert out.rewritten == "Why?" and "unparsable" in trace["fallback"]


def test_rejection_accepts_a_good_rewrite():
    ok = "What was Reliance's revenue in 2021?"
    assert rejection(ok, "and in 2021?", [OTHER]) is None


async def test_history_turns_zero_disables_rewriting():
    llm = reply("unused", [])
    out = await rewrite(llm, "How accurate is it?", [DPR], AgentConfig(history_turns=0))
    assert out.skipped_llm and llm.calls == []
