"""Chunking: budgets, paragraph ranges, neighbours, oversize paragraphs, headings."""

from __future__ import annotations

from engine.ingest.chunking import build_chunks, split_text, whitespace_tokens
from engine.ingest.document import Paragraph


def paras(*specs: tuple[int, str]) -> list[Paragraph]:
    """(n_words, kind) -> paragraphs with that many distinct words."""
    out = []
    for i, (n, kind) in enumerate(specs):
        words = " ".join(f"w{i}_{j}" for j in range(n))
        out.append(Paragraph(id=i, text=words, page=1 + i // 3, kind=kind))
    return out


def test_levels_cover_every_paragraph_in_order():
    ps = paras(*[(30, "text")] * 20)
    chunks = build_chunks("d1", ps, whitespace_tokens, {"small": 64, "large": 256})
    assert set(chunks) == {"small", "large"}
    for level, budget in (("small", 64), ("large", 256)):
        cs = chunks[level]
        assert [c.index for c in cs] == list(range(len(cs)))
        assert cs[0].start == 0 and cs[-1].end == 19
        for a, b in zip(cs, cs[1:], strict=False):
            assert b.start == a.end + 1  # consecutive, no gaps, no overlap
        for c in cs:
            assert c.n_tokens <= budget
            assert c.n_tokens == whitespace_tokens(c.text)
            assert c.page == ps[c.start].page
            assert c.key == f"d1:{level}:{c.index}"
    assert len(chunks["small"]) == 10  # two 30-word paragraphs per 64-token chunk
    assert len(chunks["large"]) == 3  # eight per 256-token chunk


def test_oversize_paragraph_is_split_but_keeps_its_id():
    text = " ".join(f"Sentence {i} has five words." for i in range(100))  # 500 words
    ps = [Paragraph(0, "short intro"), Paragraph(1, text, page=4), Paragraph(2, "tail words")]
    cs = build_chunks("d", ps, whitespace_tokens, {"small": 64})["small"]
    middle = [c for c in cs if c.start == 1]
    assert len(middle) >= 8
    assert all(c.end == 1 and c.page == 4 and c.n_tokens <= 64 for c in middle)
    assert cs[0].start == cs[0].end == 0 and cs[-1].start == 2
    # sentence boundaries are kept and nothing is lost
    assert all(c.text.endswith(".") for c in middle)
    assert sum(c.n_tokens for c in middle) == 500


def test_single_huge_sentence_splits_on_words():
    text = " ".join(["word"] * 1000)
    pieces = split_text(text, 1000, 100, lambda ts: [whitespace_tokens(t) for t in ts])
    assert all(n <= 100 for _, n in pieces)
    assert sum(n for _, n in pieces) == 1000


def test_heading_starts_new_chunk_and_is_not_left_dangling():
    ps = paras((40, "text"), (3, "heading"), (40, "text"), (40, "text"))
    cs = build_chunks("d", ps, whitespace_tokens, {"small": 80})["small"]
    # the heading opens the second chunk (first chunk was half full) together with its body
    assert [(c.start, c.end) for c in cs] == [(0, 0), (1, 2), (3, 3)]
    ps = paras((60, "text"), (3, "heading"), (60, "text"))
    cs = build_chunks("d", ps, whitespace_tokens, {"small": 70})["small"]
    assert [(c.start, c.end) for c in cs] == [(0, 0), (1, 2)]


def test_empty_document():
    assert build_chunks("d", [], whitespace_tokens) == {"small": [], "large": []}


def test_heading_that_cannot_join_its_body_stays_behind():
    # the heading does not fit with the next paragraph: it ends the previous chunk rather than
    # forming a chunk of its own
    ps = paras((10, "text"), (3, "heading"), (60, "text"))
    cs = build_chunks("d", ps, whitespace_tokens, {"small": 60})["small"]
    assert [(c.start, c.end) for c in cs] == [(0, 1), (2, 2)]
    ps = paras((10, "text"), (3, "heading"), (40, "text"))
    cs = build_chunks("d", ps, whitespace_tokens, {"small": 50})["small"]
    assert [(c.start, c.end) for c in cs] == [(0, 0), (1, 2)]


def test_batch_counter_gives_the_same_chunks():
    ps = paras(*[(30, "text")] * 9)
    one = build_chunks("d", ps, whitespace_tokens)
    calls = []

    def batch(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return [whitespace_tokens(t) for t in texts]

    assert build_chunks("d", ps, whitespace_tokens, count_batch=batch) == one
    assert calls == [9]
