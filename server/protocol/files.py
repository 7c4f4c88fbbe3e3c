"""OpenAI Files wire types (plus the `url` source extension)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from server.protocol.common import OpenAIModel

FilePurpose = Literal[
    "assistants", "batch", "fine-tune", "vision", "user_data", "evals", "assistants_output"
]


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None
    # extensions
    content_type: str | None = None
    kind: str | None = None
    source_url: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class UrlFileRequest(OpenAIModel):
    """`POST /v1/files` with a JSON body: add a web page or file by URL."""

    url: str = Field(min_length=1, max_length=4096)
    purpose: FilePurpose = "assistants"
    filename: str | None = None
