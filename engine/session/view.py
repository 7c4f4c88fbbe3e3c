"""The agent's window onto one session (engine.agent.types.SessionView): its documents, their
paragraphs, its index, and query embedding — nothing of any other session.

One view lives for one chat turn, and that turn asks for the same query vector more than once
(routing searches each SEARCH's query across the plan's documents, then the context builder
searches it within its document; parallel operations often share a query), so query vectors are
memoised per view: each distinct text goes through the encoder once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from engine.agent.types import DocumentInfo
from engine.encoder.base import Encoder
from engine.errors import NotFound
from engine.index.hybrid import SessionIndex
from engine.ingest.document import Paragraph
from engine.session.store import Session


class SessionDocuments:
    def __init__(self, session: Session, encoder: Encoder):
        self.session = session
        self.encoder = encoder
        self._queries: dict[str, asyncio.Future[np.ndarray]] = {}

    @property
    def index(self) -> SessionIndex:
        return self.session.index

    def documents(self) -> list[DocumentInfo]:
        """Every parsed (hence queryable) document, in the order they were attached."""
        out = []
        for sf in sorted(self.session.files.values(), key=lambda f: (f.attached_at, f.id)):
            if sf.doc is None or sf.status == "failed":
                continue
            out.append(
                DocumentInfo(
                    doc_id=sf.id,
                    filename=sf.file.filename,
                    title=sf.doc.title or sf.file.filename,
                    kind="url" if sf.file.source_url and sf.doc.kind == "html" else sf.doc.kind,
                    description=sf.description,
                    pages=sf.doc.pages,
                    paragraphs=len(sf.doc.paragraphs),
                )
            )
        return out

    def paragraphs(self, doc_id: str) -> Sequence[Paragraph]:
        sf = self.session.files.get(doc_id)
        if sf is None or sf.doc is None:
            raise NotFound(f"document '{doc_id}' is not in this session")
        return sf.doc.paragraphs

    async def embed_query(self, text: str) -> np.ndarray | None:
        if not any(level["embedded"] for level in self.index.stats().values()):
            return None
        task = self._queries.get(text)
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._queries[text] = asyncio.ensure_future(self.encoder.embed([text]))
        # Shielded: one caller giving up must not cancel the vector another caller awaits.
        return (await asyncio.shield(task))[0]
