"""Adapts Files / Vector Stores wire types to the engine's FileStore, SessionStore and index."""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

from engine.encoder.base import Encoder
from engine.errors import InvalidRequest, NotFound
from engine.index.hybrid import RRF_K
from engine.session.files import StoredFile
from engine.session.store import Session, SessionFile, SessionStore
from engine.session.view import SessionDocuments
from server.protocol.files import FileList, FileObject
from server.protocol.vector_stores import (
    CreateVectorStoreRequest,
    ExpiresAfter,
    FileBatchObject,
    FileCounts,
    LastError,
    ListPage,
    SearchContent,
    SearchPage,
    SearchRequest,
    SearchResult,
    UpdateVectorStoreRequest,
    VectorStoreFileObject,
    VectorStoreObject,
)


def file_object(f: StoredFile) -> FileObject:
    return FileObject(
        id=f.id,
        bytes=f.size,
        created_at=f.created_at,
        filename=f.filename,
        purpose=f.purpose,
        content_type=f.content_type,
        kind=f.kind,
        source_url=f.source_url,
    )


def paginate(items: list[Any], key, limit: int, order: str, after: str | None, before: str | None):
    """OpenAI cursor pagination over objects sorted by creation time."""
    if not 1 <= limit <= 100:
        raise InvalidRequest("limit must be between 1 and 100", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
    items = sorted(items, key=key, reverse=order == "desc")
    ids = [i.id for i in items]
    if after:
        items = items[ids.index(after) + 1 :] if after in ids else []
    if before:
        ids = [i.id for i in items]
        items = items[: ids.index(before)] if before in ids else items
    page = items[:limit]
    return page, len(items) > limit


def file_list(files: list[StoredFile], limit: int, order: str, after: str | None) -> FileList:
    page, more = paginate(files, lambda f: (f.created_at, f.id), limit, order, after, None)
    data = [file_object(f) for f in page]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=more,
    )


def vector_store_object(s: Session) -> VectorStoreObject:
    counts = s.counts()
    return VectorStoreObject(
        id=s.id,
        created_at=s.created_at,
        name=s.name,
        usage_bytes=s.usage_bytes,
        file_counts=FileCounts(**counts),
        status="in_progress" if counts["in_progress"] else "completed",
        expires_after=ExpiresAfter(days=s.expires_after_days) if s.expires_after_days else None,
        expires_at=int(s.expires_at),
        last_active_at=int(s.last_active_at),
        metadata=s.metadata,
    )


def vector_store_file_object(sf: SessionFile) -> VectorStoreFileObject:
    err = None
    if sf.status == "failed":
        err = LastError(code=sf.error_code or "server_error", message=sf.error or "failed")
    return VectorStoreFileObject(
        id=sf.id,
        usage_bytes=sf.file.size,
        created_at=sf.attached_at,
        vector_store_id=sf.session_id,
        status=sf.status,
        last_error=err,
        attributes=sf.attributes or None,
        stages=dict(sf.stages),
        document=sf.metadata(),
    )


def list_page(objs: list[Any]) -> ListPage:
    return ListPage(
        data=objs,
        first_id=objs[0].id if objs else None,
        last_id=objs[-1].id if objs else None,
        has_more=False,
    )


class SessionService:
    def __init__(self, store: SessionStore, encoder: Encoder):
        self.store = store
        self.encoder = encoder

    def create(self, req: CreateVectorStoreRequest) -> VectorStoreObject:
        self.store.check_file_ids(req.file_ids)
        days = req.expires_after.days if req.expires_after else None
        s = self.store.create(name=req.name, expires_after_days=days, metadata=req.metadata)
        for fid in req.file_ids:
            self.store.attach(s, fid)
        return vector_store_object(s)

    def update(self, session_id: str, req: UpdateVectorStoreRequest) -> VectorStoreObject:
        s = self.store.get(session_id)
        if req.name is not None:
            s.name = req.name
        if req.metadata is not None:
            s.metadata = req.metadata
        if req.expires_after is not None:
            s.expires_after_days = req.expires_after.days
            s.ttl_s = req.expires_after.days * 86400.0
        return vector_store_object(s)

    def list(self, limit: int, order: str, after: str | None, before: str | None) -> ListPage:
        page, more = paginate(
            self.store.list(), lambda s: (s.created_at, s.id), limit, order, after, before
        )
        out = list_page([vector_store_object(s) for s in page])
        out.has_more = more
        return out

    def list_files(
        self, session_id: str, status: str | None, limit: int, order: str, after: str | None
    ) -> ListPage:
        s = self.store.get(session_id)
        files = [f for f in s.files.values() if status is None or f.status == status]
        page, more = paginate(files, lambda f: (f.attached_at, f.id), limit, order, after, None)
        out = list_page([vector_store_file_object(f) for f in page])
        out.has_more = more
        return out

    async def search(self, session_id: str, req: SearchRequest) -> SearchPage:
        s = self.store.get(session_id)
        query = req.query if isinstance(req.query, str) else " ".join(req.query)
        if not query.strip():
            raise InvalidRequest("query must not be empty", param="query")
        doc_ids = None
        if req.file_ids is not None:
            for fid in req.file_ids:
                s.file(fid)
            doc_ids = list(req.file_ids)
        vector = None
        if req.mode != "bm25":
            vector = await SessionDocuments(s, self.encoder).embed_query(query)
        hits = s.index.search(query, vector, k=req.max_num_results, doc_ids=doc_ids)
        # RRF scores live in (0, lists/61]; rescale so the best possible hit scores 1.0.
        scale = (RRF_K + 1) / (2 if vector is not None else 1)
        threshold = req.ranking_options.score_threshold if req.ranking_options else None
        results = []
        for hit in hits:
            raw = hit.score * scale
            score = float(min(max(raw, 0.0), 1.0)) if math.isfinite(raw) else 0.0
            if threshold is not None and score < threshold:
                continue
            sf = s.files.get(hit.doc_id)
            if sf is None:
                continue
            c = hit.chunk
            results.append(
                SearchResult(
                    file_id=sf.id,
                    filename=sf.file.filename,
                    score=score,
                    attributes={**sf.attributes, "page": c.page, "paragraphs": [c.start, c.end]},
                    content=[SearchContent(text=c.text)],
                    page=c.page,
                    paragraphs=list(range(c.start, c.end + 1)),
                )
            )
        return SearchPage(search_query=req.query, data=results)


class FileBatches:
    """`vector_stores.file_batches`: a batch is a named group of files attached together."""

    def create(self, s: Session, file_ids: list[str]) -> FileBatchObject:
        batch_id = f"vsfb_{uuid.uuid4().hex[:24]}"
        s.batches[batch_id] = (int(time.time()), list(file_ids))
        return self.get(s, batch_id)

    def get(self, s: Session, batch_id: str) -> FileBatchObject:
        if batch_id not in s.batches:
            raise NotFound(f"No file batch '{batch_id}' in vector store '{s.id}'")
        created, ids = s.batches[batch_id]
        counts = {"in_progress": 0, "completed": 0, "failed": 0, "cancelled": 0}
        for fid in ids:
            sf = s.files.get(fid)
            counts[sf.status if sf else "cancelled"] += 1
        return FileBatchObject(
            id=batch_id,
            created_at=created,
            vector_store_id=s.id,
            status="in_progress" if counts["in_progress"] else "completed",
            file_counts=FileCounts(**counts, total=len(ids)),
        )
