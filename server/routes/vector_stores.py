"""Vector Stores API (= briefing sessions): stores, their files, file batches and search."""

from __future__ import annotations

from fastapi import APIRouter, Query

from engine.ingest.document import Paragraph
from server.deps import Ctx
from server.protocol.vector_stores import (
    AttachFileRequest,
    CreateVectorStoreRequest,
    FileBatchObject,
    FileBatchRequest,
    FileCounts,
    ListPage,
    SearchPage,
    SearchRequest,
    UpdateVectorStoreRequest,
    VectorStoreDeleted,
    VectorStoreFileObject,
    VectorStoreObject,
)
from server.serving.sessions import vector_store_file_object, vector_store_object

router = APIRouter(prefix="/v1/vector_stores")
EXCL = {"response_model_exclude_none": True}


@router.post("", response_model=VectorStoreObject, **EXCL)
async def create(req: CreateVectorStoreRequest, ctx: Ctx) -> VectorStoreObject:
    return ctx.session_service.create(req)


@router.get("", response_model=ListPage, **EXCL)
async def list_stores(
    ctx: Ctx,
    limit: int = Query(default=20),
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
) -> ListPage:
    return ctx.session_service.list(limit, order, after, before)


@router.get("/{vs_id}", response_model=VectorStoreObject, **EXCL)
async def retrieve(vs_id: str, ctx: Ctx) -> VectorStoreObject:
    return vector_store_object(ctx.sessions.get(vs_id))


@router.post("/{vs_id}", response_model=VectorStoreObject, **EXCL)
async def update(vs_id: str, req: UpdateVectorStoreRequest, ctx: Ctx) -> VectorStoreObject:
    return ctx.session_service.update(vs_id, req)


@router.delete("/{vs_id}", response_model=VectorStoreDeleted)
async def delete(vs_id: str, ctx: Ctx) -> VectorStoreDeleted:
    ctx.sessions.close(vs_id)
    return VectorStoreDeleted(id=vs_id)


@router.post("/{vs_id}/files", response_model=VectorStoreFileObject, **EXCL)
async def attach(vs_id: str, req: AttachFileRequest, ctx: Ctx) -> VectorStoreFileObject:
    s = ctx.sessions.get(vs_id)
    return vector_store_file_object(ctx.sessions.attach(s, req.file_id, req.attributes))


@router.get("/{vs_id}/files", response_model=ListPage, **EXCL)
async def list_files(
    vs_id: str,
    ctx: Ctx,
    filter: str | None = None,
    limit: int = Query(default=20),
    order: str = "desc",
    after: str | None = None,
) -> ListPage:
    return ctx.session_service.list_files(vs_id, filter, limit, order, after)


@router.get("/{vs_id}/files/{file_id}", response_model=VectorStoreFileObject, **EXCL)
async def retrieve_file(vs_id: str, file_id: str, ctx: Ctx) -> VectorStoreFileObject:
    return vector_store_file_object(ctx.sessions.get(vs_id).file(file_id))


@router.get("/{vs_id}/files/{file_id}/content")
async def file_content(vs_id: str, file_id: str, ctx: Ctx) -> dict:
    """The parsed paragraphs (the units of citation) of a file, in order."""
    sf = ctx.sessions.get(vs_id).file(file_id)
    paragraphs: list[Paragraph] = sf.doc.paragraphs if sf.doc else []
    return {
        "object": "vector_store.file_content.page",
        "file_id": sf.id,
        "filename": sf.file.filename,
        "data": [
            {"type": "text", "text": p.text, "paragraph": p.id, "page": p.page, "kind": p.kind}
            for p in paragraphs
        ],
        "has_more": False,
        "next_page": None,
    }


@router.delete("/{vs_id}/files/{file_id}")
async def detach(vs_id: str, file_id: str, ctx: Ctx) -> dict:
    ctx.sessions.detach(ctx.sessions.get(vs_id), file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


@router.post("/{vs_id}/file_batches", response_model=FileBatchObject)
async def create_batch(vs_id: str, req: FileBatchRequest, ctx: Ctx) -> FileBatchObject:
    s = ctx.sessions.get(vs_id)
    ctx.sessions.check_file_ids(req.file_ids)
    for fid in req.file_ids:
        ctx.sessions.attach(s, fid, req.attributes)
    return ctx.batches.create(s, req.file_ids)


@router.get("/{vs_id}/file_batches/{batch_id}", response_model=FileBatchObject)
async def retrieve_batch(vs_id: str, batch_id: str, ctx: Ctx) -> FileBatchObject:
    return ctx.batches.get(ctx.sessions.get(vs_id), batch_id)


@router.post("/{vs_id}/search", response_model=SearchPage)
async def search(vs_id: str, req: SearchRequest, ctx: Ctx) -> SearchPage:
    return await ctx.session_service.search(vs_id, req)


__all__ = ["router", "FileCounts"]
