"""Run the planner's operations and turn them into paragraphs with provenance.

SEARCH: hybrid search in one document → window expansion (``k - cb .. k + cf``) → semantic
neighbours → the chunks' paragraphs, in document order. READ: every paragraph of the document
in order. All operations run concurrently (their query embeddings batch together in the
encoder). The chunk is what is searched, the paragraph is what is cited, so every chunk is
mapped back to its paragraphs here: a paragraph scores as the best chunk that covers it.

Dedup: a paragraph appears once across all contexts, kept by the operation that scored it best
(a READ scores 1.0, so a READ of a document absorbs the hits of SEARCHes in it; ties go to READ,
then to the earlier operation). Ranking: READ contexts first in plan order, then SEARCH
contexts by their best hit, then contexts that produced nothing. Every context keeps the list
of chunks it retrieved (``Context.hits``) for the trace, even when dedup emptied it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from engine.agent.config import AgentConfig
from engine.agent.search import search
from engine.agent.types import Context, Evidence, Operation, SessionView
from engine.agent.window import expand, semantic_neighbours
from engine.ingest.document import Chunk, Paragraph

READ_SCORE = 1.0
_SOURCE_RANK = {"read": 0, "search": 1, "window": 2, "semantic": 3}


def _paragraph(paragraphs: Sequence[Paragraph], pid: int) -> Paragraph | None:
    """Paragraph ``pid`` (ids are list positions after ``renumber``; fall back to a scan)."""
    if 0 <= pid < len(paragraphs) and paragraphs[pid].id == pid:
        return paragraphs[pid]
    return next((p for p in paragraphs if p.id == pid), None)


def _note(op: Operation, message: str) -> Context:
    entry = {"chunk": None, "score": 0.0, "bm25_rank": None, "dense_rank": None, "source": None}
    return Context(op, [], [entry | {"note": message}])


class ContextBuilder:
    """Builds the contexts of one chat turn from the session the view exposes."""

    def __init__(self, view: SessionView, config: AgentConfig):
        self.view = view
        self.config = config

    async def build(self, operations: Sequence[Operation]) -> list[Context]:
        """One Context per operation (unknown documents give an empty one with a note),
        deduplicated and ranked as the module docstring says."""
        known = {d.doc_id for d in self.view.documents()}
        contexts = list(
            await asyncio.gather(*(self._run(i, op, known) for i, op in enumerate(operations)))
        )
        return self._rank(self._dedup(contexts))

    async def _run(self, i: int, op: Operation, known: set[str]) -> Context:
        if op.document not in known:
            return _note(op, f"unknown document '{op.document}': skipped")
        if op.action == "READ":
            paragraphs = self.view.paragraphs(op.document)
            return Context(
                op, [Evidence(op.document, p, READ_SCORE, "read", i) for p in paragraphs]
            )
        if op.action != "SEARCH":
            return _note(op, f"unknown action '{op.action}': skipped")
        if not (op.query or "").strip():
            return _note(op, "SEARCH without a query: skipped")
        return await self._search(i, op)

    async def _search(self, i: int, op: Operation) -> Context:
        cfg = self.config
        hits = await search(self.view, op.query or "", [op.document], cfg)
        if not hits:
            return Context(op, [], [])
        window, semantic = await asyncio.gather(
            asyncio.to_thread(
                expand, self.view.index, hits, cfg.window_before, cfg.window_after, cfg.search_level
            ),
            semantic_neighbours(self.view, hits, cfg),
        )
        by_hit = {h.chunk.key: h for h in hits}
        trace: list[dict[str, Any]] = []
        chunks: dict[str, tuple[Chunk, float, str]] = {}
        for chunk, score, source in [*window, *semantic]:
            if chunk.key in chunks:  # the window wins over the semantic window
                continue
            chunks[chunk.key] = (chunk, score, source)
            hit = by_hit.get(chunk.key) if source == "search" else None
            trace.append(
                {
                    "chunk": chunk.key,
                    "score": round(score, 4),
                    "bm25_rank": hit.bm25_rank if hit else None,
                    "dense_rank": hit.dense_rank if hit else None,
                    "source": source,
                }
            )
        best: dict[int, tuple[float, str]] = {}  # paragraph id -> (score, source)
        for chunk, score, source in chunks.values():
            for pid in range(chunk.start, chunk.end + 1):
                old = best.get(pid)
                if old is None or (score, -_SOURCE_RANK[source]) > (
                    old[0],
                    -_SOURCE_RANK[old[1]],
                ):
                    best[pid] = (score, source)
        paragraphs = self.view.paragraphs(op.document)
        evidence = []
        for pid in sorted(best):
            p = _paragraph(paragraphs, pid)
            if p is not None:
                score, source = best[pid]
                evidence.append(Evidence(op.document, p, score, source, i))  # type: ignore[arg-type]
        return Context(op, evidence, trace)

    @staticmethod
    def _dedup(contexts: list[Context]) -> list[Context]:
        """Keep each paragraph in the context that scored it best."""
        owner: dict[tuple[str, int], tuple[float, int, int]] = {}
        for ctx in contexts:
            for ev in ctx.evidence:
                key = (ev.doc_id, ev.paragraph.id)
                rank = (-ev.score, _SOURCE_RANK[ev.source] != 0, ev.operation)
                if key not in owner or rank < owner[key]:
                    owner[key] = rank
        for ctx in contexts:
            ctx.evidence = [
                ev for ev in ctx.evidence if owner[(ev.doc_id, ev.paragraph.id)][2] == ev.operation
            ]
        return contexts

    @staticmethod
    def _rank(contexts: list[Context]) -> list[Context]:
        def key(item: tuple[int, Context]) -> tuple[int, float, int]:
            i, ctx = item
            if not ctx.evidence:
                return (2, 0.0, i)
            if ctx.operation.action == "READ":
                return (0, 0.0, i)
            return (1, -max(ev.score for ev in ctx.evidence), i)

        return [ctx for _, ctx in sorted(enumerate(contexts), key=key)]
