"""Files API: upload (multipart) or add by URL (JSON), retrieve, content, delete, list."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from engine.errors import InvalidRequest, TooLarge
from server.deps import Ctx
from server.protocol.files import FileDeleted, FileList, FileObject, UrlFileRequest
from server.serving.sessions import file_list, file_object

router = APIRouter()

PURPOSES = {"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}


@router.post("/v1/files", response_model=FileObject, response_model_exclude_none=True)
async def create_file(request: Request, ctx: Ctx) -> FileObject:
    limit = ctx.settings.max_file_mb * 1024 * 1024
    declared = int(request.headers.get("content-length") or 0)
    if declared > limit + 64 * 1024:
        raise TooLarge(f"upload is {declared:,} bytes; the limit is {int(limit):,} bytes")
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        try:
            body = UrlFileRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise InvalidRequest(f"invalid body: {exc.errors()[0]['msg']}") from None
        stored = await ctx.ingest.add_url(body.url, body.purpose, body.filename)
        return file_object(stored)
    if not ctype.startswith("multipart/form-data"):
        raise InvalidRequest(
            "send multipart/form-data with `file` and `purpose`, or JSON with `url`"
        )
    form = await request.form(max_files=1, max_fields=8)
    upload = form.get("file")
    purpose = str(form.get("purpose") or "")
    if purpose not in PURPOSES:
        raise InvalidRequest(f"purpose must be one of {sorted(PURPOSES)}", param="purpose")
    if upload is None or isinstance(upload, str):
        url = form.get("url")
        if isinstance(url, str) and url:
            return file_object(await ctx.ingest.add_url(url, purpose, None))
        raise InvalidRequest("a `file` field is required", param="file")
    data = await upload.read(int(limit) + 1)
    await upload.close()
    stored = ctx.ingest.add_bytes(data, upload.filename or "upload", purpose, upload.content_type)
    return file_object(stored)


@router.get("/v1/files", response_model=FileList, response_model_exclude_none=True)
async def list_files(
    ctx: Ctx,
    purpose: str | None = None,
    limit: int = Query(default=100, ge=1, le=10000),
    order: str = "desc",
    after: str | None = None,
) -> FileList:
    return file_list(ctx.files.list(purpose), min(limit, 100), order, after)


@router.get("/v1/files/{file_id}", response_model=FileObject, response_model_exclude_none=True)
async def retrieve_file(file_id: str, ctx: Ctx) -> FileObject:
    return file_object(ctx.files.get(file_id))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, ctx: Ctx) -> Response:
    f = ctx.files.get(file_id)
    return Response(
        f.data,
        media_type=f.content_type,
        headers={"Content-Disposition": f'attachment; filename="{f.filename}"'},
    )


@router.delete("/v1/files/{file_id}", response_model=FileDeleted)
async def delete_file(file_id: str, ctx: Ctx) -> FileDeleted:
    ctx.sessions.delete_file(file_id)
    return FileDeleted(id=file_id)
