"""The briefing agent: rewrite → plan → context → map-reduce → citations, as one event stream.

``BriefingAgent.run`` yields ``TextDelta`` events whose text is already citation-checked (whole
sentences, markers renumbered), then one ``Done`` with the full text, the citations, the plan,
the rewrite, the trace that ``brief_trace`` exposes, and the token usage of every LLM call of the
turn. Stopping the iteration (a client that goes away) closes the generation stream, which
cancels any mapper still running. Each stage is timed with ``time.perf_counter``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from engine.agent.citations import CitationStream, label_evidence
from engine.agent.config import AgentConfig
from engine.agent.context import ContextBuilder
from engine.agent.grounding import FigureCheck
from engine.agent.mapreduce import MapReduce
from engine.agent.planner import plan
from engine.agent.rewriter import rewrite_traced
from engine.agent.routing import route
from engine.agent.types import (
    Citation,
    Context,
    DocumentInfo,
    Evidence,
    Operation,
    Rewrite,
    SessionView,
    Turn,
)
from engine.llm.base import LLM, ChatMessage, Delta, SamplingParams, Usage

NO_DOCUMENTS = "This session has no documents yet. Upload a document and ask again."


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer, ready to show (citation markers already final)."""

    text: str


@dataclass(frozen=True)
class Done:
    """The end of a turn: everything the response, the annotations and the trace need."""

    text: str
    citations: list[Citation]
    operations: list[Operation]
    rewrite: Rewrite
    trace: dict[str, Any]
    usage: Usage = field(default_factory=Usage)


AgentEvent = TextDelta | Done


class Builder(Protocol):
    async def build(self, operations: Sequence[Operation]) -> list[Context]: ...


class MeteredLLM:
    """The turn's LLM: delegates every call and adds up the usage of all of them."""

    def __init__(self, llm: LLM):
        self._llm = llm
        self.usage = Usage()
        self.calls = 0

    @property
    def model_name(self) -> str:
        return self._llm.model_name

    @property
    def context_length(self) -> int:
        return self._llm.context_length

    async def start(self) -> None:  # the app owns the real model's lifecycle
        return None

    async def close(self) -> None:
        return None

    def healthy(self) -> bool:
        return self._llm.healthy()

    def count_tokens(self, text: str) -> int:
        return self._llm.count_tokens(text)

    async def stream(
        self, messages: Sequence[ChatMessage], params: SamplingParams
    ) -> AsyncIterator[Delta]:
        self.calls += 1
        async for delta in self._llm.stream(messages, params):
            if delta.usage is not None:
                self.usage.prompt_tokens += delta.usage.prompt_tokens
                self.usage.completion_tokens += delta.usage.completion_tokens
            yield delta


def _retrieved(contexts: Sequence[Context]) -> list[dict[str, Any]]:
    return [
        {
            "operation": asdict(c.operation),
            "hits": c.hits,
            # [file id, paragraph id, score, page (None where the format has none)]
            "paragraphs": [
                [e.doc_id, e.paragraph.id, round(e.score, 4), e.paragraph.page] for e in c.evidence
            ],
        }
        for c in contexts
    ]


def _shown(
    rw: Rewrite,
    history: Sequence[Turn],
    docs: Sequence[DocumentInfo],
    labelled: Sequence[tuple[int, Evidence]],
) -> list[str]:
    """Every text whose numbers an answer may repeat: what the model was shown or asked."""
    texts = [rw.original, rw.rewritten]
    texts += [f"{t.user}\n{t.assistant}" for t in history]
    texts += [f"{d.filename} {d.title} {d.description or ''} {d.pages or ''}" for d in docs]
    texts += [f"{ev.paragraph.text} (page {ev.paragraph.page})" for _, ev in labelled]
    return texts


class BriefingAgent:
    """Answers one chat turn over one session; holds no per-turn state."""

    def __init__(
        self,
        llm: LLM,
        config: AgentConfig,
        *,
        context_builder: Callable[[SessionView, AgentConfig], Builder] = ContextBuilder,
    ):
        self.llm = llm
        self.config = config
        self.context_builder = context_builder  # injectable for tests without an index

    async def run(
        self, view: SessionView, query: str, history: Sequence[Turn]
    ) -> AsyncIterator[AgentEvent]:
        """``TextDelta`` events as sentences become final, then one ``Done``."""
        cfg, t0 = self.config, time.perf_counter()
        timings: dict[str, float] = {}

        def lap(name: str, since: float) -> float:
            now = time.perf_counter()
            timings[name] = round(now - since, 4)
            return now

        llm = MeteredLLM(self.llm)
        docs = view.documents()
        if not docs:  # nothing to search: no LLM call at all
            rw = Rewrite(query, query, skipped_llm=True)
            trace: dict[str, Any] = {"rewrite": asdict(rw), "operations": [], "timings": timings}
            yield TextDelta(NO_DOCUMENTS)
            timings["total_s"] = round(time.perf_counter() - t0, 4)
            yield Done(NO_DOCUMENTS, [], [], rw, trace, llm.usage)
            return
        rw, rw_trace = await rewrite_traced(llm, query, history, cfg)
        t = lap("rewrite_s", t0)
        trace = {"rewrite": asdict(rw) | rw_trace}
        operations, plan_trace = await plan(llm, rw, docs, cfg)
        operations, routing = await route(view, rw, operations, cfg)
        if routing:
            plan_trace["routing"] = routing
        t = lap("plan_s", t)
        contexts = await self.context_builder(view, cfg).build(operations) if operations else []
        t = lap("retrieve_s", t)
        trace |= {
            "plan": plan_trace,
            "operations": [asdict(op) for op in operations],
            "retrieved": _retrieved(contexts),
        }
        labelled = label_evidence(contexts)
        check = (
            FigureCheck(_shown(rw, history, docs, labelled))
            if cfg.unsupported_figures == "drop"
            else None
        )
        citer = CitationStream(
            labelled,
            {d.doc_id: d for d in docs},
            cfg.citation_min_overlap,
            screen=check.screen if check else None,
        )
        generator = MapReduce(llm, cfg)
        parts: list[str] = []
        async with aclosing(generator.generate(rw, operations, docs, labelled)) as raw:
            async for piece in raw:
                timings.setdefault("first_token_s", round(time.perf_counter() - t0, 4))
                if text := citer.feed(piece):
                    parts.append(text)
                    yield TextDelta(text)
        if tail := citer.finish() + (check.closing() if check else ""):
            parts.append(tail)
            yield TextDelta(tail)
        mr = generator.trace
        trace |= {key: mr.get(key) for key in ("path", "splits", "splitting", "mappers", "reducer")}
        trace["generation_timings"] = mr.get("timings", {})
        trace["figures"] = check.trace() if check else {"dropped": [], "unsupported": []}
        lap("generate_s", t)
        timings["total_s"] = round(time.perf_counter() - t0, 4)
        trace["timings"] = timings
        trace["llm_calls"] = llm.calls
        yield Done("".join(parts), list(citer.citations), operations, rw, trace, llm.usage)
