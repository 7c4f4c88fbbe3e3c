"""Widen search hits into readable context: the chunk window and the semantic window.

A small chunk is a precise hit but often a poor context: the sentence before it names the
subject, the one after it gives the number. ``expand`` adds chunks ``k - before .. k + after``
of the same document around each hit (clipped at the document's first and last chunk);
``semantic_neighbours`` adds chunks elsewhere in the same document whose vectors are very close
to a hit's (the same topic continued two pages later), which a positional window cannot reach.

Scores: a neighbour inherits its hit's score decayed by ``WINDOW_DECAY`` per step, a semantic
neighbour its hit's score times the cosine similarity, so derived chunks never outrank the hit
that brought them. A chunk reached several ways keeps its best score, and the source of the hit
it came through ("search" for hits themselves).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from engine.agent.config import AgentConfig
from engine.agent.types import SessionView
from engine.index.hybrid import Hit, SessionIndex
from engine.ingest.document import Chunk

WINDOW_DECAY = 0.9  # a neighbour at distance d scores hit.score * WINDOW_DECAY ** d
_RANK = {"search": 0, "window": 1, "semantic": 2}  # which source wins a tie

Scored = tuple[Chunk, float, str]


def _keep_best(found: dict[str, Scored], chunk: Chunk, score: float, source: str) -> None:
    old = found.get(chunk.key)
    if old is None or (score, -_RANK[source]) > (old[1], -_RANK[old[2]]):
        found[chunk.key] = (chunk, score, source)


def _ordered(found: dict[str, Scored]) -> list[Scored]:
    """Best score first; ties in document order."""
    return sorted(found.values(), key=lambda t: (-t[1], t[0].doc_id, t[0].index))


def _anchors(index: SessionIndex, hit: Hit, level: str) -> list[Chunk]:
    """The chunks of ``level`` a hit stands for: itself, or those covering its paragraphs
    (when the window is taken at another level than the search, e.g. small hits, large windows).
    """
    if hit.chunk.level == level:
        return [hit.chunk]
    c = hit.chunk
    return [x for x in index.chunks(c.doc_id, level) if x.start <= c.end and x.end >= c.start]


def expand(
    index: SessionIndex, hits: Sequence[Hit], before: int, after: int, level: str
) -> list[Scored]:
    """Hits plus their neighbours ``k - before .. k + after`` (same document and level), without
    duplicates, best first. Neighbours beyond a document's edges simply do not exist."""
    if before < 0 or after < 0:
        raise ValueError("window sizes must be >= 0")
    found: dict[str, Scored] = {}
    for hit in hits:
        for anchor in _anchors(index, hit, level):
            hit_source = "search" if anchor is hit.chunk else "window"
            _keep_best(found, anchor, hit.score, hit_source)
            for offset in [*range(-before, 0), *range(1, after + 1)]:
                if anchor.index + offset < 0:
                    continue
                neighbour = index.chunk(anchor.doc_id, level, anchor.index + offset)
                if neighbour is not None:
                    score = hit.score * WINDOW_DECAY ** abs(offset)
                    _keep_best(found, neighbour, score, "window")
    return _ordered(found)


def _window_keys(hits: Sequence[Hit], before: int, after: int) -> set[tuple[str, int]]:
    return {(h.doc_id, h.chunk.index + d) for h in hits for d in range(-before, after + 1)}


def _semantic(index: SessionIndex, hits: Sequence[Hit], config: AgentConfig) -> list[Scored]:
    level = config.search_level
    hits = [h for h in hits if h.chunk.level == level]
    excluded = _window_keys(hits, config.window_before, config.window_after)
    found: dict[str, Scored] = {}
    for hit in hits:
        vector = index.vector(hit.chunk)
        if vector is None:  # not embedded yet
            continue
        in_doc = sum(1 for d, _ in excluded if d == hit.doc_id)
        # An empty query: BM25 returns nothing, so these are pure dense hits, cosine in
        # ``dense_score``.
        similar = index.search(
            "", vector, config.semantic_window + in_doc, [hit.doc_id], level, fusion="rrf"
        )
        taken = 0
        for s in similar:
            if taken >= config.semantic_window:
                break
            cos = s.dense_score
            if cos is None or cos < config.semantic_min_similarity:
                break  # best first: the rest are less similar
            if (s.doc_id, s.chunk.index) in excluded:
                continue
            _keep_best(found, s.chunk, hit.score * cos, "semantic")
            taken += 1
    return _ordered(found)


async def semantic_neighbours(
    view: SessionView, hits: Sequence[Hit], config: AgentConfig
) -> list[Scored]:
    """Up to ``config.semantic_window`` chunks per hit, from the hit's document and outside its
    positional window, whose cosine similarity to the hit is at least
    ``config.semantic_min_similarity``. Hits without a vector (not embedded yet) bring none."""
    if config.semantic_window <= 0 or not hits:
        return []
    return await asyncio.to_thread(_semantic, view.index, hits, config)
