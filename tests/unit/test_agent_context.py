"""Search (fusion, score normalisation) and the context builder over real documents."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from engine.agent.config import AgentConfig
from engine.agent.context import ContextBuilder
from engine.agent.search import normalise, search
from engine.agent.types import Operation
from engine.index.hybrid import RRF_K, Hit
from engine.ingest.document import Chunk
from tests.conftest import requires_weights
from tests.unit.agent_fixtures import (
    MemorySession,
    word_processor_and_autogen,
)

QUESTION = "When did Microsoft launch Word for MS-DOS?"  # paragraph 13 of the word processor doc


@pytest.fixture()
def session() -> MemorySession:
    return word_processor_and_autogen()


def _hit(score: float, bm25: int | None, dense: int | None) -> Hit:
    chunk = Chunk("d", "small", 0, 0, 0, "x", None, 1)
    return Hit("d", chunk, score, bm25_rank=bm25, dense_rank=dense)


# --- fusion and normalisation ---------------------------------------------------------------
def test_rrf_scores_normalised_by_the_number_of_lists():
    both = _hit(2 / (RRF_K + 1), 1, 1)
    bm25_only = _hit(1 / (RRF_K + 1), 1, None)
    dense_second = _hit(1 / (RRF_K + 2), None, 2)
    out = normalise([both, bm25_only, dense_second], "rrf")
    assert [h.score for h in out] == pytest.approx([1.0, 0.5, (RRF_K + 1) / (RRF_K + 2) / 2])
    # one list only (no query vector): its first hit is 1.0
    assert normalise([bm25_only], "rrf")[0].score == pytest.approx(1.0)
    assert normalise([], "rrf") == []


def test_convex_scores_clipped():
    out = normalise([_hit(1.0000001, 1, 1), _hit(0.4, 2, None), _hit(-1e-9, None, 3)], "convex")
    assert [h.score for h in out] == pytest.approx([1.0, 0.4, 0.0])


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
async def test_search_normalises_filters_and_restricts(session, fusion):
    cfg = AgentConfig(fusion=fusion, search_k=5)
    hits = await search(session, QUESTION, ["wp"], cfg)
    assert 1 <= len(hits) <= 5 and all(h.doc_id == "wp" for h in hits)
    scores = [h.score for h in hits]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    assert any(h.chunk.start <= 13 <= h.chunk.end for h in hits[:2])
    assert hits[0].dense_rank is not None and hits[0].bm25_rank is not None
    # the threshold drops the weaker hits, never the best one
    strict = await search(session, QUESTION, ["wp"], replace(cfg, score_threshold=scores[0]))
    assert [h.chunk.key for h in strict] == [h.chunk.key for h in hits if h.score >= scores[0]]
    assert await search(session, QUESTION, ["ag"], cfg, k=3) != []
    assert await search(session, "   ", None, cfg) == []
    assert await search(session, QUESTION, None, cfg, k=0) == []


async def test_search_without_vectors_is_bm25_only(session):
    session.embed_queries = False
    hits = await search(session, QUESTION, None, AgentConfig(search_k=3))
    assert hits and all(h.dense_rank is None for h in hits)
    assert hits[0].score == pytest.approx(1.0)


# --- context builder ------------------------------------------------------------------------
async def test_search_context_in_document_order_with_provenance(session):
    ops = [Operation("SEARCH", "wp", QUESTION)]
    (ctx,) = await ContextBuilder(session, AgentConfig()).build(ops)
    assert ctx.operation == ops[0]
    ids = [ev.paragraph.id for ev in ctx.evidence]
    assert 13 in ids and ids == sorted(ids) and len(ids) == len(set(ids))
    assert all(ev.doc_id == "wp" and ev.operation == 0 for ev in ctx.evidence)
    assert {ev.source for ev in ctx.evidence} <= {"search", "window", "semantic"}
    assert "search" in {ev.source for ev in ctx.evidence}
    assert all(0 < ev.score <= 1 for ev in ctx.evidence)
    for entry in ctx.hits:
        assert set(entry) == {"chunk", "score", "bm25_rank", "dense_rank", "source"}
    searched = [e for e in ctx.hits if e["source"] == "search"]
    assert searched and all(e["bm25_rank"] or e["dense_rank"] for e in searched)
    assert any(e["source"] == "window" for e in ctx.hits)


async def test_read_returns_every_paragraph_in_order(session):
    (ctx,) = await ContextBuilder(session, AgentConfig()).build([Operation("READ", "ag")])
    assert [ev.paragraph for ev in ctx.evidence] == list(session.paragraphs("ag"))
    assert {(ev.source, ev.score) for ev in ctx.evidence} == {("read", 1.0)}


async def test_dedup_across_operations_and_ranking(session):
    ops = [
        Operation("SEARCH", "wp", "Google Docs real-time collaboration"),
        Operation("SEARCH", "ag", "multi-agent conversation framework"),
        Operation("READ", "ag"),
        Operation("SEARCH", "wp", "Google Docs cloud-based collaboration"),
        Operation("SEARCH", "nope", "anything"),
    ]
    contexts = await ContextBuilder(session, AgentConfig()).build(ops)
    assert len(contexts) == len(ops)
    # READ first; then SEARCH contexts by best score; empty ones last
    assert contexts[0].operation == ops[2]
    rest = [c for c in contexts[1:] if c.evidence]
    best = [max(ev.score for ev in c.evidence) for c in rest]
    assert all(c.operation.action == "SEARCH" for c in rest) and best == sorted(best, reverse=True)
    assert all(not c.evidence for c in contexts[1 + len(rest) :])
    # every paragraph once
    keys = [(ev.doc_id, ev.paragraph.id) for c in contexts for ev in c.evidence]
    assert len(keys) == len(set(keys))
    # the READ absorbed the SEARCH in the same document, which still shows what it retrieved
    ag_search = next(c for c in contexts if c.operation == ops[1])
    assert ag_search.evidence == [] and ag_search.hits
    assert len(contexts[0].evidence) == len(session.paragraphs("ag"))
    # unknown document: skipped with a note
    unknown = next(c for c in contexts if c.operation == ops[4])
    assert unknown.evidence == [] and "unknown document" in unknown.hits[0]["note"]
    # the two overlapping searches of "wp" split their paragraphs, the better score keeps each
    wp = [c for c in contexts if c.operation in (ops[0], ops[3])]
    assert sum(len(c.evidence) for c in wp) > 0
    for c in wp:
        assert [ev.paragraph.id for ev in c.evidence] == sorted(
            ev.paragraph.id for ev in c.evidence
        )


async def test_operations_run_concurrently(session):
    barrier = asyncio.Barrier(3)
    plain = session.embed_query

    async def embed_query(text: str) -> np.ndarray | None:
        await asyncio.wait_for(barrier.wait(), 10)  # deadlocks unless all three run at once
        return await plain(text)

    session.embed_query = embed_query  # type: ignore[method-assign]
    ops = [Operation("SEARCH", "wp", q) for q in ("typewriter", "WordStar", "LaTeX")]
    contexts = await ContextBuilder(session, AgentConfig()).build(ops)
    assert all(c.evidence for c in contexts)


async def test_search_without_query_and_empty_plan(session):
    contexts = await ContextBuilder(session, AgentConfig()).build([Operation("SEARCH", "wp")])
    assert contexts[0].evidence == [] and "without a query" in contexts[0].hits[0]["note"]
    assert await ContextBuilder(session, AgentConfig()).build([]) == []


@pytest.mark.slow
@requires_weights
async def test_real_encoder_finds_the_paragraph():
    from engine.encoder.onnx import OnnxEmbeddingModel
    from models import paths

    s = word_processor_and_autogen(OnnxEmbeddingModel(paths.encoder_onnx_path(), threads=1))
    ops = [
        Operation("SEARCH", "wp", "Which program introduced a GUI and mouse support in 1983?"),
        Operation("SEARCH", "ag", "What are the two steps of conversation programming?"),
    ]
    contexts = await ContextBuilder(s, AgentConfig()).build(ops)
    by_doc = {c.operation.document: c for c in contexts}
    assert 13 in {ev.paragraph.id for ev in by_doc["wp"].evidence}
    assert {5, 7} & {ev.paragraph.id for ev in by_doc["ag"].evidence}
    top = [e for e in by_doc["wp"].hits if e["source"] == "search"]
    assert top[0]["dense_rank"] is not None
