"""Chunks at several granularities, built from consecutive paragraphs under a token budget.

Why paragraphs first: citations point at paragraphs, so a chunk is always a paragraph range
``start..end`` and a search hit maps straight back to citable text. Small chunks (~128 tokens)
give precise retrieval; large ones (~512) give the generator context. Tokens are counted by a
callable passed in (the MPNet tokenizer in production, a whitespace counter in unit tests); it
must *not* truncate, or oversize paragraphs go unnoticed.

Rules:
- greedy packing of whole paragraphs while the sum of their token counts fits the budget;
- a heading starts a new chunk once the current one is at least half full, and a chunk never
  ends on a heading whose body went to the next chunk (the heading moves along with it);
- a paragraph over the budget is split on lines, then sentences, then words into sub-chunks that
  all keep that paragraph's id (``start == end``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from engine.ingest.document import Chunk, Paragraph

DEFAULT_LEVELS: dict[str, int] = {"small": 128, "large": 512}
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_HEADING_KINDS = ("heading", "title")

CountTokens = Callable[[str], int]
CountMany = Callable[[list[str]], list[int]]


def whitespace_tokens(text: str) -> int:
    """A crude counter for tests and for callers without a tokenizer."""
    return len(text.split())


def build_chunks(
    doc_id: str,
    paragraphs: Sequence[Paragraph],
    count_tokens: CountTokens,
    levels: dict[str, int] | None = None,
    *,
    count_batch: Callable[[list[str]], list[int]] | None = None,
) -> dict[str, list[Chunk]]:
    """Chunks of one document for every level, e.g. ``{"small": [...], "large": [...]}``.

    Each paragraph is counted once and the counts are shared by all levels; ``count_batch``
    (e.g. a fast tokenizer's ``encode_batch``) counts all paragraphs, and the pieces of an
    oversize paragraph, in one call each instead of one call per text.
    """
    levels = dict(DEFAULT_LEVELS if levels is None else levels)
    for name, budget in levels.items():
        if budget < 8:
            raise ValueError(f"token budget of level '{name}' is too small: {budget}")
    memo: dict[str, int] = {}  # pieces of oversize paragraphs are counted once for all levels

    def count_many(texts: list[str]) -> list[int]:
        todo = [t for t in dict.fromkeys(texts) if t not in memo]
        if todo:
            counts = count_batch(todo) if count_batch else [count_tokens(t) for t in todo]
            memo.update(zip(todo, counts, strict=True))
        return [memo[t] for t in texts]

    texts = [p.text for p in paragraphs]
    counts = list(count_batch(texts)) if count_batch else [count_tokens(t) for t in texts]
    return {
        name: _pack(doc_id, name, paragraphs, counts, budget, count_many)
        for name, budget in levels.items()
    }


def _pack(
    doc_id: str,
    level: str,
    paragraphs: Sequence[Paragraph],
    counts: Sequence[int],
    budget: int,
    count_many: CountMany,
) -> list[Chunk]:
    chunks: list[Chunk] = []

    def emit(group: list[tuple[Paragraph, int]]) -> None:
        if not group:
            return
        chunks.append(
            Chunk(
                doc_id=doc_id,
                level=level,
                index=len(chunks),
                start=group[0][0].id,
                end=group[-1][0].id,
                text="\n\n".join(p.text for p, _ in group),
                page=group[0][0].page,
                n_tokens=sum(n for _, n in group),
            )
        )

    current: list[tuple[Paragraph, int]] = []
    used = 0
    for para, n in zip(paragraphs, counts, strict=True):
        if n > budget:
            emit(current)
            current, used = [], 0
            for piece, pn in split_text(para.text, n, budget, count_many):
                chunks.append(
                    Chunk(doc_id, level, len(chunks), para.id, para.id, piece, para.page, pn)
                )
            continue
        is_heading = para.kind in _HEADING_KINDS
        if current and (used + n > budget or (is_heading and used >= budget // 2)):
            # Carry trailing headings over so that they stay with their body (when it fits).
            cut = len(current)
            while cut > 1 and current[cut - 1][0].kind in _HEADING_KINDS:
                cut -= 1
            carry = current[cut:]
            if sum(c for _, c in carry) + n > budget:
                carry, cut = [], len(current)
            emit(current[:cut])
            current = carry
            used = sum(c for _, c in carry)
        current.append((para, n))
        used += n
    emit(current)
    return chunks


def split_text(
    text: str, n_tokens: int, budget: int, count_many: CountMany
) -> list[tuple[str, int]]:
    """Split one oversize text into pieces of at most ``budget`` tokens (approximately, for
    single words longer than the budget), preferring line, then sentence, then word boundaries.
    ``count_many`` counts a list of texts in one call.
    """
    if n_tokens <= budget:
        return [(text, n_tokens)]
    units: list[tuple[str, str, int]] = []  # (text, separator before it, tokens)
    lines = [line for line in text.split("\n") if line.strip()]
    for line, line_n in zip(lines, count_many(lines), strict=True):
        if line_n <= budget:
            units.append((line, "\n", line_n))
            continue
        sentences = _SENTENCE_END.split(line)
        for j, (sentence, s_n) in enumerate(zip(sentences, count_many(sentences), strict=True)):
            sep = "\n" if j == 0 else " "
            if s_n <= budget:
                units.append((sentence, sep, s_n))
            else:
                for i, w in enumerate(_split_words(sentence, s_n, budget, count_many)):
                    units.append((w[0], sep if i == 0 else " ", w[1]))
    return _greedy(units, budget)


def _split_words(
    text: str, n_tokens: int, budget: int, count_many: CountMany
) -> Iterable[tuple[str, int]]:
    """Windows of words sized from the text's tokens-per-word ratio, re-counted to be sure."""
    words = text.split()
    per_window = max(1, int(len(words) * budget / max(n_tokens, 1) * 0.9))
    i = 0
    while i < len(words):
        size = per_window
        while True:
            piece = " ".join(words[i : i + size])
            n = count_many([piece])[0]
            if n <= budget or size == 1:
                break
            size = max(1, int(size * 0.8))
        yield piece, n
        i += size


def _greedy(units: list[tuple[str, str, int]], budget: int) -> list[tuple[str, int]]:
    pieces: list[tuple[str, int]] = []
    buf: list[str] = []
    used = 0
    for text, sep, n in units:
        if buf and used + n > budget:
            pieces.append(("".join(buf).strip(), used))
            buf, used = [], 0
        buf.append(text if not buf else sep + text)
        used += n
    if buf:
        pieces.append(("".join(buf).strip(), used))
    return [(t, n) for t, n in pieces if t]
