"""An in-memory ``SessionView`` over real corpus documents, for the agent's unit tests.

Documents are parsed by the real converter, chunked by the real chunker and indexed in a real
``SessionIndex``; only the encoder is the deterministic fake (bag of hashed words), unless a test
passes the real ONNX model.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.agent.types import DocumentInfo, Evidence
from engine.encoder.base import EmbeddingModel
from engine.encoder.fake import FakeEmbeddingModel
from engine.index.hybrid import SessionIndex
from engine.ingest.chunking import build_chunks, whitespace_tokens
from engine.ingest.document import Paragraph, ParsedDocument
from tests.conftest import CORPUS

# Small budgets so that even a 5-page document has a dozen chunks to window over.
LEVELS = {"small": 48, "large": 160}
WORD_PROCESSOR = "documents/docling/pdf/multi_page.pdf"  # 55 paragraphs, 5 pages
AUTOGEN = "documents/markitdown/test.pdf"  # 9 paragraphs, 1 page


@functools.cache
def corpus_document(relative: str) -> ParsedDocument:
    """A corpus file parsed once per test process (parsing is pure, the result is reused)."""
    from engine.ingest.convert import parse

    path = CORPUS / relative
    if not path.exists():
        pytest.skip(f"corpus file {path} not found")
    return parse(path.read_bytes(), Path(relative).name)


class MemorySession:
    """Implements ``engine.agent.types.SessionView`` with plain dicts and a real index."""

    def __init__(self, model: EmbeddingModel | None = None, *, dim: int = 128):
        self.model = model or FakeEmbeddingModel(dimension=dim)
        self.index = SessionIndex(dim=self.model.dimension)
        self.infos: dict[str, DocumentInfo] = {}
        self._paragraphs: dict[str, list[Paragraph]] = {}
        self.embed_queries = True  # False: behave like a session with nothing embedded yet
        self.queries: list[str] = []

    def add(
        self, doc_id: str, doc: ParsedDocument, filename: str, *, embed: bool = True
    ) -> DocumentInfo:
        chunks = build_chunks(doc_id, doc.paragraphs, whitespace_tokens, LEVELS)
        self.index.add_document(doc_id, chunks)
        if embed:
            small = chunks["small"]
            self.index.add_vectors(small, self.embed([c.text for c in small]))
        info = DocumentInfo(
            doc_id, filename, doc.title, doc.kind, pages=doc.pages, paragraphs=len(doc.paragraphs)
        )
        self.infos[doc_id] = info
        self._paragraphs[doc_id] = list(doc.paragraphs)
        return info

    def add_corpus(self, doc_id: str, relative: str, *, embed: bool = True) -> DocumentInfo:
        return self.add(doc_id, corpus_document(relative), Path(relative).name, embed=embed)

    def add_texts(self, doc_id: str, texts: Sequence[str], *, embed: bool = True) -> DocumentInfo:
        """A synthetic document, one paragraph per text."""
        paragraphs = [Paragraph(i, t, page=1) for i, t in enumerate(texts)]
        return self.add(
            doc_id, ParsedDocument("txt", doc_id, paragraphs, None), f"{doc_id}.txt", embed=embed
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.embed_tokens(self.model.tokenize(list(texts)))

    # --- SessionView ---
    def documents(self) -> list[DocumentInfo]:
        return list(self.infos.values())

    def paragraphs(self, doc_id: str) -> Sequence[Paragraph]:
        return self._paragraphs.get(doc_id, [])

    async def embed_query(self, text: str) -> np.ndarray | None:
        self.queries.append(text)
        if not self.embed_queries:
            return None
        return (await asyncio.to_thread(self.embed, [text]))[0]


def evidence_of(
    session: MemorySession, doc_id: str, ids: Sequence[int], score: float = 1.0
) -> list[Evidence]:
    """Evidence for chosen paragraphs of a document (as the context builder would give)."""
    paras = session.paragraphs(doc_id)
    return [Evidence(doc_id, paras[i], score, "search", 0) for i in ids]


def word_processor_and_autogen(model: EmbeddingModel | None = None) -> MemorySession:
    """The two-document session most agent tests share: "wp" (the 5-page word-processor essay)
    and "ag" (the 1-page AutoGen abstract)."""
    s = MemorySession(model)
    s.add_corpus("wp", WORD_PROCESSOR)
    s.add_corpus("ag", AUTOGEN)
    return s
