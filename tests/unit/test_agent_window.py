"""Window expansion (positional and semantic) over real documents in a real session index."""

from __future__ import annotations

import pytest

from engine.agent.config import AgentConfig
from engine.agent.window import WINDOW_DECAY, expand, semantic_neighbours
from engine.index.hybrid import Hit
from tests.unit.agent_fixtures import WORD_PROCESSOR, MemorySession


@pytest.fixture()
def session() -> MemorySession:
    s = MemorySession()
    s.add_corpus("wp", WORD_PROCESSOR)
    s.add_texts("tiny", ["A single paragraph about ducks that swim in a pond."])
    return s


def hit(session: MemorySession, doc: str, index: int, score: float = 1.0, level="small") -> Hit:
    chunk = session.index.chunk(doc, level, index)
    assert chunk is not None
    return Hit(doc, chunk, score)


def indexes(found) -> list[int]:
    return sorted(c.index for c, _, _ in found)


def test_window_in_the_middle_scores_decay(session):
    found = expand(session.index, [hit(session, "wp", 10, 0.8)], 2, 1, "small")
    assert indexes(found) == [8, 9, 10, 11]
    by_index = {c.index: (score, source) for c, score, source in found}
    assert by_index[10] == (0.8, "search")
    assert by_index[9] == (pytest.approx(0.8 * WINDOW_DECAY), "window")
    assert by_index[8] == (pytest.approx(0.8 * WINDOW_DECAY**2), "window")
    assert found[0][0].index == 10  # best first


def test_window_clipped_at_first_and_last_chunk(session):
    last = len(session.index.chunks("wp", "small")) - 1
    assert indexes(expand(session.index, [hit(session, "wp", 0)], 3, 1, "small")) == [0, 1]
    found = expand(session.index, [hit(session, "wp", last)], 1, 5, "small")
    assert indexes(found) == [last - 1, last]
    assert all(c.doc_id == "wp" for c, _, _ in found)


def test_tiny_document_and_zero_window(session):
    assert indexes(expand(session.index, [hit(session, "tiny", 0)], 2, 2, "small")) == [0]
    only_hits = expand(session.index, [hit(session, "wp", 4), hit(session, "wp", 7)], 0, 0, "small")
    assert indexes(only_hits) == [4, 7]
    assert {s for _, _, s in only_hits} == {"search"}
    with pytest.raises(ValueError):
        expand(session.index, [hit(session, "wp", 4)], -1, 0, "small")
    assert expand(session.index, [], 1, 1, "small") == []


def test_overlapping_windows_have_no_duplicates_and_keep_the_best(session):
    hits = [hit(session, "wp", 5, 0.9), hit(session, "wp", 6, 0.5), hit(session, "tiny", 0, 0.7)]
    found = expand(session.index, hits, 1, 1, "small")
    keys = [c.key for c, _, _ in found]
    assert len(keys) == len(set(keys))
    by_key = {c.key: (score, source) for c, score, source in found}
    # chunk 6 is a hit itself (0.5) and chunk 5's neighbour (0.9 * decay = 0.81): best score wins
    assert by_key["wp:small:6"] == (pytest.approx(0.9 * WINDOW_DECAY), "window")
    assert by_key["wp:small:5"] == (0.9, "search")
    assert by_key["wp:small:4"][0] == pytest.approx(0.9 * WINDOW_DECAY)
    assert by_key["wp:small:7"][0] == pytest.approx(0.5 * WINDOW_DECAY)
    assert by_key["tiny:small:0"] == (0.7, "search")
    assert [s for _, s, _ in found] == sorted((s for _, s, _ in found), reverse=True)


def test_window_at_another_level_maps_hits_to_covering_chunks(session):
    small = hit(session, "wp", 9)  # paragraph 13
    found = expand(session.index, [small], 1, 1, "large")
    large = [c for c in session.index.chunks("wp", "large") if c.start <= 13 <= c.end]
    assert large and large[0].index in indexes(found)
    assert all(c.level == "large" for c, _, _ in found)
    assert indexes(found) == list(range(large[0].index - 1, large[0].index + 2))


async def test_semantic_neighbours_pull_similar_chunks_outside_the_window():
    s = MemorySession()
    # ~40 words each, so every paragraph is a chunk of its own; fillers share no words
    texts = [" ".join(f"filler{i}word{j}" for j in range(40)) for i in range(12)]
    wang = "The Wang 1200 word processing machine had small screens and floppy disks " * 3
    texts[1] = wang + "in offices."
    texts[9] = wang + "for secretaries."
    s.add_texts("doc", texts)
    s.add_texts("other", [texts[1]])  # identical text in another document: never pulled in
    cfg = AgentConfig(
        semantic_window=2, semantic_min_similarity=0.6, window_before=1, window_after=1
    )
    chunk = next(c for c in s.index.chunks("doc", "small") if c.start <= 1 <= c.end)
    found = await semantic_neighbours(s, [Hit("doc", chunk, 0.9)], cfg)
    assert found, "the near-duplicate paragraph should be found"
    window = {chunk.index - 1, chunk.index, chunk.index + 1}
    for c, score, source in found:
        assert source == "semantic" and c.doc_id == "doc" and c.index not in window
        assert 0 < score <= 0.9
    assert any(c.start <= 9 <= c.end for c, _, _ in found)
    # a higher bar, switched off, or not embedded: nothing
    strict = AgentConfig(semantic_min_similarity=0.999)
    assert await semantic_neighbours(s, [Hit("doc", chunk, 0.9)], strict) == []
    off = AgentConfig(semantic_window=0)
    assert await semantic_neighbours(s, [Hit("doc", chunk, 0.9)], off) == []
    s.add_texts("raw", texts, embed=False)
    raw = s.index.chunk("raw", "small", chunk.index)
    assert await semantic_neighbours(s, [Hit("raw", raw, 0.9)], cfg) == []


def test_index_vector_accessor(session):
    chunk = session.index.chunk("wp", "small", 3)
    vec = session.index.vector(chunk)
    assert vec is not None and vec.shape == (session.model.dimension,)
    assert session.index.vector(chunk.key) is not None
    assert session.index.vector("wp:small:999") is None
    assert session.index.vector("wp:large:0") is None  # large chunks are not embedded here
    vec[:] = 0  # a copy: the index is not changed
    assert float(abs(session.index.vector(chunk)).sum()) > 0
