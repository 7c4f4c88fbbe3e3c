"""Hybrid search for the agent: embed the query, search the session index, normalise scores.

Why normalise: the context builder mixes hits of several operations, the window and the semantic
neighbours, and ranks and thresholds them on one scale, while the index's raw fused scores have
no fixed range (RRF tops out at ``lists / (RRF_K + 1)``, e.g. 2/61 ≈ 0.033 for BM25 + dense).

- RRF: ``score / (lists / (RRF_K + 1))``, where ``lists`` is the number of ranked lists that
  contributed to the hits (2 for BM25 + dense, 1 when the query has no vector or no chunk in
  scope is embedded yet). A chunk ranked first by both lists scores 1.0; first by one list only,
  0.5 — so the number keeps an absolute meaning (agreement of both retrievers) and
  ``score_threshold`` means the same thing for every query.
- convex: already ``alpha * dense + (1 - alpha) * bm25`` over min-max normalised lists, in
  [0, 1]; only clipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from engine.agent.config import AgentConfig
from engine.agent.types import SessionView
from engine.index.hybrid import RRF_K, Hit


def normalise(hits: Sequence[Hit], fusion: str) -> list[Hit]:
    """Hits with their fused score mapped to [0, 1] (see the module docstring)."""
    if not hits:
        return []
    if fusion == "rrf":
        lists = any(h.bm25_rank is not None for h in hits) + any(
            h.dense_rank is not None for h in hits
        )
        top = max(lists, 1) / (RRF_K + 1)
        return [replace(h, score=min(1.0, max(0.0, h.score / top))) for h in hits]
    return [replace(h, score=min(1.0, max(0.0, h.score))) for h in hits]


async def search(
    view: SessionView,
    query: str,
    doc_ids: list[str] | None,
    config: AgentConfig,
    k: int | None = None,
) -> list[Hit]:
    """Top ``k`` (default ``config.search_k``) chunks of ``config.search_level`` for ``query``,
    restricted to ``doc_ids`` (None = the whole session), best first, scores in [0, 1] and at
    least ``config.score_threshold``. BM25 only while the session has no query vector."""
    k = config.search_k if k is None else k
    if k <= 0 or not query.strip():
        return []
    vector = await view.embed_query(query)
    # In a thread: the index lock may be held by an ingestion task adding a large document.
    raw = await asyncio.to_thread(
        view.index.search,
        query,
        vector,
        k,
        doc_ids,
        config.search_level,
        fusion=config.fusion,
    )
    hits = normalise(raw, config.fusion)
    return [h for h in hits if h.score >= config.score_threshold]
