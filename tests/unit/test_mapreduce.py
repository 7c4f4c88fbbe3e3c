"""Splitter and map-reduce logic with a whitespace token counter and the FakeLLM: the budget is
never exceeded, oversized paragraphs are cut (not dropped), both truncation strategies and the
cap, the single-call path, the map + reduce path with split provenance, and cancellation."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from engine.agent.config import AgentConfig
from engine.agent.mapreduce import NOT_FOUND, MapReduce, keep_known_labels, splitter
from engine.agent.types import DocumentInfo, Evidence, Operation, Rewrite
from engine.ingest.document import Paragraph
from engine.llm.fake import FakeLLM


def words(text: str) -> int:
    return len(text.split())


DOCS = [
    DocumentInfo("f-pdf", "report.pdf", "Annual report", "pdf", "Yearly report."),
    DocumentInfo("f-ppt", "deck.pptx", "Sales deck", "pptx", "Quarterly slides."),
]
RW = Rewrite("How did sales grow?", "How did sales grow?")


def labelled(texts: list[str], doc: str = "f-pdf", start: int = 1, per_page: int = 3):
    return [
        (start + i, Evidence(doc, Paragraph(i, t, page=1 + i // per_page), 1.0, "read", 0))
        for i, t in enumerate(texts)
    ]


def distinct(n: int, length: int = 12, tag: str = "w") -> list[str]:
    return [" ".join(f"{tag}{i}x{j}" for j in range(length)) for i in range(n)]


# --- splitter -----------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [20, 33, 57, 200])
def test_budget_is_never_exceeded_and_nothing_is_lost(budget):
    lengths = [3, 17, 8, 25, 1, 12, 9, 30, 4, 6, 14, 2]
    texts = [" ".join(f"t{i}_{j}" for j in range(n)) for i, n in enumerate(lengths)]
    cut = splitter(labelled(texts), budget, words, max_splits=100)
    splits = list(cut)
    for s in splits:
        assert s.tokens <= budget
        assert words(s.text) == s.tokens  # the count is the rendered text's count
    got = [label for s in splits for label, _ in s.items]
    assert got == list(range(1, len(texts) + 1))  # in order, none lost
    assert [s.index for s in splits] == list(range(len(splits)))
    assert not cut.dropped and not cut.skipped


def test_headers_mark_document_and_page_changes():
    items = labelled(distinct(4), per_page=2) + labelled(distinct(2), doc="f-ppt", start=5)
    (split,) = list(splitter(items, 500, words, 3, docs=DOCS))
    headers = [line for line in split.text.splitlines() if line.startswith("## ")]
    assert headers == [
        "## D1: Annual report (pdf, page 1)",
        "## D1: Annual report (pdf, page 2)",
        "## D2: Sales deck (pptx, page 1)",
    ]
    assert "\n[5] w0x0 w0x1" in split.text
    assert split.runs() == [("f-pdf", 1, 4), ("f-ppt", 5, 6)]


def test_an_oversized_paragraph_is_truncated_not_dropped():
    texts = ["short one", " ".join(f"long{j}" for j in range(100)), "after it"]
    cut = splitter(labelled(texts), 30, words, max_splits=10)
    splits = list(cut)
    assert all(s.tokens <= 30 for s in splits)
    big = next(s for s in splits if 2 in s.labels)
    assert big.truncated == [2] and cut.truncated == [2]
    line = next(x for x in big.text.splitlines() if x.startswith("[2]"))
    assert line.endswith("…") and "long0 long1" in line and "long99" not in line
    assert [label for s in splits for label, _ in s.items] == [1, 2, 3]
    assert cut.report()["truncated"] == [2]


def test_splits_are_streamed_lazily():
    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return words(text)

    stream = iter(splitter(labelled(distinct(40)), 30, counting, max_splits=100))
    next(stream)
    assert len(counted) < 10  # the first split came before the rest was even measured
    rest = list(stream)
    assert len(rest) > 5


def test_stop_strategy_stops_at_the_cap():
    cut = splitter(labelled(distinct(20)), 30, words, max_splits=3, strategy="stop")
    splits = list(cut)
    assert len(splits) == 3
    taken = [label for s in splits for label, _ in s.items]
    assert taken == list(range(1, len(taken) + 1))
    assert cut.dropped == list(range(len(taken) + 1, 21))  # listed, not silently lost
    report = cut.report()["dropped_at_cap"]
    assert report == {"count": 20 - len(taken), "labels": [[len(taken) + 1, 20]]}


def test_skip_similar_skips_near_duplicates_and_reaches_further():
    base = distinct(12)
    texts = list(itertools.chain.from_iterable((t, t + " extra", t) for t in base))
    items = labelled(texts)
    stop = splitter(items, 40, words, max_splits=2, strategy="stop")
    skip = splitter(items, 40, words, max_splits=2, strategy="skip_similar", similar_threshold=0.6)
    stop_labels = [lb for s in stop for lb, _ in s.items]
    skip_labels = [lb for s in skip for lb, _ in s.items]
    unique = lambda labels: {texts[lb - 1].removesuffix(" extra") for lb in labels}  # noqa: E731
    assert len(unique(skip_labels)) > len(unique(stop_labels))  # wider reach under one cap
    assert skip.skipped and set(skip.skipped).isdisjoint(skip_labels)
    assert 2 in skip.skipped and 3 in skip.skipped  # "+ extra" and the exact repeat of label 1
    assert max(skip_labels) > max(stop_labels)


def test_skip_similar_keeps_text_below_the_threshold():
    a = "the quick brown fox jumps over the lazy dog near the river bank"
    b = "the quick brown fox sleeps under a tall tree far from any water"
    cut = splitter(labelled([a, b]), 100, words, 5, "skip_similar", similar_threshold=0.6)
    assert [lb for s in cut for lb, _ in s.items] == [1, 2] and cut.skipped == []


def test_invalid_settings_are_rejected():
    with pytest.raises(ValueError, match="budget"):
        splitter(labelled(["x"]), 5, words, 1)
    with pytest.raises(ValueError, match="strategy"):
        splitter(labelled(["x"]), 50, words, 1, strategy="random")  # type: ignore[arg-type]


def test_invented_labels_are_removed():
    text, invented = keep_known_labels(
        "Fact one [2]. Fact two [9]. Range [2-4], list [3, 12].", {2, 3, 4}
    )
    assert text == "Fact one [2]. Fact two. Range [2-4], list [3]."
    assert invented == [9, 12]


# --- generation ---------------------------------------------------------------------------
def role_llm(
    mapper: str = "- Sales grew 12% [{first}]",
    reducer: str = "Sales grew 12% [1].",
    answer: str = "Sales grew 12% [1].",
    delay_s: float = 0.0,
    called: asyncio.Event | None = None,
) -> FakeLLM:
    """Replies by stage (the system prompt says which); a mapper cites its split's first label."""

    def reply(messages, params):
        if called is not None:
            called.set()
        system, user = messages[0].content, messages[-1].content
        if system.startswith("You read one part"):
            first = user.split("Paragraphs:\n", 1)[1].split("[", 1)[1].split("]", 1)[0]
            return mapper.format(first=first)
        return reducer if system.startswith("Write the final answer") else answer

    return FakeLLM(reply, delay_s=delay_s)


async def run(mr: MapReduce, items, ops=(Operation("READ", "f-pdf"),)) -> str:
    return "".join([t async for t in mr.generate(RW, list(ops), DOCS, items)])


async def test_one_split_is_answered_by_one_direct_call():
    llm = role_llm(answer="Sales grew 12% [1].")
    mr = MapReduce(llm, AgentConfig(split_tokens=500))
    out = await run(mr, labelled(["Sales grew 12% in 2022.", "Costs were flat."]))
    assert out == "Sales grew 12% [1]." and len(llm.calls) == 1
    messages, params = llm.calls[0]
    assert messages[0].content.startswith("Answer the question using only the numbered")
    user = messages[-1].content
    assert "[1] Sales grew 12% in 2022.\n[2] Costs were flat." in user
    assert "Plan: READ D1" in user and "D1: Annual report (pdf): Yearly report." in user
    assert user.endswith("Question: How did sales grow?\nCite the labels, like [2].")
    assert params.max_tokens == AgentConfig().answer_tokens
    assert mr.trace["path"] == "direct" and len(mr.trace["splits"]) == 1
    assert mr.trace["reducer"]["completion_tokens"] == 4


async def test_many_splits_run_mappers_then_one_reducer_with_provenance():
    llm = role_llm()
    cfg = AgentConfig(split_tokens=40, max_splits=10, mapper_concurrency=2)
    mr = MapReduce(llm, cfg)
    items = labelled(distinct(6)) + labelled(distinct(3, tag="s"), doc="f-ppt", start=7)
    ops = [Operation("SEARCH", "f-pdf", "sales"), Operation("SEARCH", "f-ppt", "sales")]
    out = await run(mr, items, ops)
    trace = mr.trace
    n = len(trace["splits"])
    assert out == "Sales grew 12% [1]." and trace["path"] == "map_reduce" and n >= 3
    assert len(llm.calls) == n + 1  # N mappers + 1 reducer
    mappers = [c for c in llm.calls if c[0][0].content.startswith("You read one part")]
    assert len(mappers) == n and all(c[1].temperature == 0.0 for c in mappers)
    # each mapper sees the question, the plan and the documents' metadata
    assert all(
        'Plan: SEARCH D1 for "sales"; SEARCH D2 for "sales"' in c[0][-1].content for c in mappers
    )
    assert all("D2: Sales deck (pptx): Quarterly slides." in c[0][-1].content for c in mappers)
    assert [m["split"] for m in trace["mappers"]] == list(range(n))
    assert all(m["max_tokens"] == mappers[0][1].max_tokens for m in trace["mappers"])
    first_labels = [s["labels"][0][0] for s in trace["splits"]]
    assert [m["output"] for m in trace["mappers"]] == [
        f"- Sales grew 12% [{x}]" for x in first_labels
    ]
    reducer_input = trace["reducer"]["input"]
    assert "Part 1, from D1 (pdf) [1]-[" in reducer_input
    assert "D2 (pptx) [" in reducer_input  # kinds stay distinct in the provenance
    assert llm.calls[-1][0][-1].content == reducer_input
    assert set(trace["timings"]) == {"split_s", "map_s", "total_s"}
    ppt = [s["paragraphs"].get("f-ppt", []) for s in trace["splits"]]
    assert sum(ppt, []) == [0, 1, 2]  # which paragraphs each split (and so each note) covers


async def test_mapper_concurrency_is_bounded():
    running = peak = 0

    class Counting(FakeLLM):
        async def stream(self, messages, params):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                async for d in super().stream(messages, params):
                    yield d
            finally:
                running -= 1

    llm = Counting(["- fact [1]"], delay_s=0.01)
    mr = MapReduce(llm, AgentConfig(split_tokens=30, max_splits=8, mapper_concurrency=2))
    await run(mr, labelled(distinct(10)))
    assert len(mr.trace["splits"]) >= 4 and peak == 2


async def test_mappers_start_before_splitting_ends():
    log: list[str] = []

    class Logging(FakeLLM):
        def count_tokens(self, text):
            log.append("count")
            return super().count_tokens(text)

        async def stream(self, messages, params):
            log.append("call")
            async for d in super().stream(messages, params):
                yield d

    mr = MapReduce(Logging(["- fact [1]"]), AgentConfig(split_tokens=30, max_splits=20))
    await run(mr, labelled(distinct(12)))
    last_count = max(i for i, x in enumerate(log) if x == "count")
    assert log.index("call") < last_count


async def test_invented_labels_never_reach_the_reducer():
    llm = role_llm(mapper="- fact [{first}] and a made-up one [999]")
    mr = MapReduce(llm, AgentConfig(split_tokens=40, max_splits=5))
    await run(mr, labelled(distinct(6)))
    assert "[999]" not in mr.trace["reducer"]["input"]
    assert all(m["invented_labels"] == [999] for m in mr.trace["mappers"])


async def test_a_marker_cut_off_by_max_tokens_is_dropped():
    llm = role_llm(mapper="- fact [{first}]\n- another fact [1")
    mr = MapReduce(llm, AgentConfig(split_tokens=40, max_splits=5))
    await run(mr, labelled(distinct(6)))
    assert all(m["output"].endswith("- another fact") for m in mr.trace["mappers"])


async def test_no_relevant_notes_means_no_reducer_call():
    llm = role_llm(mapper="NONE")
    mr = MapReduce(llm, AgentConfig(split_tokens=40, max_splits=5))
    out = await run(mr, labelled(distinct(6)))
    assert out == NOT_FOUND and "skipped" in mr.trace["reducer"]
    assert len(llm.calls) == len(mr.trace["splits"])


async def test_no_evidence_means_no_llm_call():
    llm = role_llm()
    mr = MapReduce(llm, AgentConfig())
    assert await run(mr, []) == NOT_FOUND and llm.calls == []


async def test_cancelling_the_consumer_cancels_the_mappers():
    called = asyncio.Event()
    llm = role_llm(delay_s=0.2, called=called)
    mr = MapReduce(llm, AgentConfig(split_tokens=30, max_splits=6, mapper_concurrency=2))
    task = asyncio.create_task(run(mr, labelled(distinct(12))))
    await asyncio.wait_for(called.wait(), 10)  # a mapper is talking to the model
    mappers = [t for t in asyncio.all_tasks() if t.get_name().startswith("mapper-")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mappers and all(t.done() for t in mappers)
    assert any(t.cancelled() for t in mappers)
    assert len(llm.calls) <= 2  # the queued mappers never called the model


async def test_budget_shrinks_to_fit_a_small_context():
    llm = role_llm()
    llm.context_length = 700
    mr = MapReduce(llm, AgentConfig(split_tokens=5000, answer_tokens=100))
    await run(mr, labelled(distinct(40)))
    assert mr.trace["splitting"]["budget"] < 700 - 100
