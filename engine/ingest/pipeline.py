"""Online ingestion of one source into one session.

parse (thread) → chunks → BM25 at once (the document is queryable and readable now) → embeddings
in batches through the encoder's batcher, each batch added to the session's HNSW as it returns →
completed. The LLM description runs beside it and never blocks search or completion.
Per-stage timings land in ``SessionFile.stages`` (shown by the API and used by the benchmark).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.encoder.base import Encoder
from engine.errors import EngineError, TooLarge, UnsupportedMedia
from engine.ingest.chunking import DEFAULT_LEVELS, build_chunks
from engine.ingest.convert import DocumentParser
from engine.ingest.detect import detect_kind
from engine.ingest.fetch import FetchLimits, fetch_url
from engine.ingest.metadata import describe
from engine.llm.base import LLM
from engine.session.files import FileStore, StoredFile
from engine.session.store import Session, SessionFile

log = logging.getLogger(__name__)

MIME = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "html": "text/html",
    "md": "text/markdown",
    "txt": "text/plain",
}


@dataclass
class IngestOptions:
    pdf_backend: str = "pypdfium2"  # or "docling" where its layout weights are installed
    levels: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LEVELS))
    embed_batch: int = 32  # chunks per embed call; small so the index fills in progressively
    # Only the search level gets vectors: large chunks exceed MPNet's 384-token window and serve
    # as generation context (BM25 still indexes them); this halves time-to-completed.
    embed_levels: tuple[str, ...] = ("small",)
    describe: bool = True
    fetch: FetchLimits = field(default_factory=FetchLimits)


class Ingestor:
    """File intake (bytes or URL → a typed StoredFile) and the per-session pipeline."""

    def __init__(
        self,
        files: FileStore,
        encoder: Encoder,
        llm: LLM | None,
        count_tokens: Callable[[str], int],
        options: IngestOptions | None = None,
    ):
        self.files = files
        self.encoder = encoder
        self.llm = llm
        self.count_tokens = count_tokens
        self.options = options or IngestOptions()
        self.parser = DocumentParser(pdf_backend=self.options.pdf_backend)
        self._background: set[asyncio.Task] = set()

    def warmup(self) -> None:
        """Import docling and prime its converters off the event loop, so the first upload does
        not pay several seconds of imports (time-to-queryable)."""

        async def run() -> None:
            try:
                await asyncio.to_thread(self.parser.converters.warmup)
            except Exception as exc:  # an upload will report the real error
                log.warning("docling warm-up failed: %s", exc)

        self._spawn(run())

    # intake ------------------------------------------------------------------------------
    def add_bytes(
        self, data: bytes, filename: str, purpose: str, content_type: str | None = None
    ) -> StoredFile:
        if len(data) > self.files.max_file_bytes:
            raise TooLarge(
                f"file is over the {self.files.max_file_bytes:,}-byte limit", param="file"
            )
        kind = detect_kind(data, filename, content_type)
        return self.files.add(data, filename, purpose, kind, MIME[kind])

    async def add_url(self, url: str, purpose: str, filename: str | None) -> StoredFile:
        got = await fetch_url(url, self.options.fetch)
        return self.files.add(
            got.data, filename or got.filename, purpose, got.kind, MIME[got.kind], got.final_url
        )

    # pipeline ----------------------------------------------------------------------------
    async def __call__(self, session: Session, sf: SessionFile) -> None:
        t0 = time.perf_counter()
        st = sf.stages

        def mark(name: str) -> None:
            st[name] = round(time.perf_counter() - t0, 4)

        st["stage"] = "parsing"
        try:
            doc = await asyncio.to_thread(
                self.parser.parse, sf.file.data, sf.file.filename, kind=sf.file.kind
            )
        except UnsupportedMedia as exc:
            sf.fail("unsupported_file", exc.message)
            return
        except EngineError as exc:
            sf.fail("invalid_file", exc.message)
            return
        if not doc.paragraphs:
            sf.fail("invalid_file", "no text found in the document")
            return
        sf.doc = doc
        mark("parsed_s")
        st["stage"] = "chunking"
        chunks = await asyncio.to_thread(
            build_chunks, sf.id, doc.paragraphs, self.count_tokens, self.options.levels
        )
        sf.chunks = chunks
        mark("chunked_s")
        session.index.add_document(sf.id, chunks)
        mark("queryable_s")
        if self.options.describe and self.llm is not None:
            sf.describe_task = self._spawn(self._describe(sf, t0))
        else:  # tell clients not to wait for a description that will never come
            st["describe_skipped"] = "descriptions are disabled"
        todo = [c for name in self.options.embed_levels for c in chunks.get(name, [])]
        st.update(stage="embedding", embedded=0, to_embed=len(todo))
        for i in range(0, len(todo), self.options.embed_batch):
            batch = todo[i : i + self.options.embed_batch]
            vectors = await self.encoder.embed([c.text for c in batch])
            session.index.add_vectors(batch, vectors)
            st["embedded"] += len(batch)
        mark("embedded_s")
        st["stage"] = "completed"
        sf.status = "completed"
        mark("completed_s")
        sf.done.set()

    async def _describe(self, sf: SessionFile, t0: float) -> None:
        try:
            sf.description = await describe(self.llm, sf.doc)
            sf.stages["described_s"] = round(time.perf_counter() - t0, 4)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the description is optional; never fail the file for it
            log.warning("description of %s failed: %s", sf.id, exc)
            sf.stages["describe_error"] = str(exc)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def close(self) -> None:
        for t in list(self._background):
            t.cancel()
