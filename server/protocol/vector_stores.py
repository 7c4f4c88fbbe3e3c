"""OpenAI Vector Stores wire types. A vector store is a briefing session."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from server.protocol.common import OpenAIModel


class ExpiresAfter(BaseModel):
    anchor: Literal["last_active_at"] = "last_active_at"
    days: int = Field(ge=1, le=365)


class FileCounts(BaseModel):
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


class VectorStoreObject(BaseModel):
    id: str
    object: Literal["vector_store"] = "vector_store"
    created_at: int
    name: str | None = None
    usage_bytes: int = 0
    file_counts: FileCounts
    status: Literal["expired", "in_progress", "completed"]
    expires_after: ExpiresAfter | None = None
    expires_at: int | None = None
    last_active_at: int | None = None
    metadata: dict[str, str] | None = None


class CreateVectorStoreRequest(OpenAIModel):
    name: str | None = Field(default=None, max_length=256)
    file_ids: list[str] = Field(default_factory=list)
    expires_after: ExpiresAfter | None = None
    metadata: dict[str, str] | None = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateVectorStoreRequest(OpenAIModel):
    name: str | None = Field(default=None, max_length=256)
    expires_after: ExpiresAfter | None = None
    metadata: dict[str, str] | None = None


class VectorStoreDeleted(BaseModel):
    id: str
    object: Literal["vector_store.deleted"] = "vector_store.deleted"
    deleted: bool = True


class LastError(BaseModel):
    code: Literal["server_error", "unsupported_file", "invalid_file", "rate_limit_exceeded"]
    message: str


class VectorStoreFileObject(BaseModel):
    id: str
    object: Literal["vector_store.file"] = "vector_store.file"
    usage_bytes: int = 0
    created_at: int
    vector_store_id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    last_error: LastError | None = None
    attributes: dict[str, Any] | None = None
    # extensions: ingestion progress and document metadata
    stages: dict[str, Any] | None = None
    document: dict[str, Any] | None = None


class AttachFileRequest(OpenAIModel):
    file_id: str
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class FileBatchRequest(OpenAIModel):
    file_ids: list[str] = Field(min_length=1)
    attributes: dict[str, Any] | None = None


class FileBatchObject(BaseModel):
    id: str
    object: Literal["vector_store.files_batch"] = "vector_store.files_batch"
    created_at: int
    vector_store_id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    file_counts: FileCounts


class RankingOptions(BaseModel):
    ranker: str | None = None
    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class SearchRequest(OpenAIModel):
    query: str | list[str]
    max_num_results: int = Field(default=10, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False
    # extensions
    file_ids: list[str] | None = None
    mode: Literal["hybrid", "bm25"] = "hybrid"


class SearchContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class SearchResult(BaseModel):
    file_id: str
    filename: str
    score: float
    attributes: dict[str, Any] | None = None
    content: list[SearchContent]
    # extensions (the SDK keeps unknown fields)
    page: int | None = None
    paragraphs: list[int] | None = None


class SearchPage(BaseModel):
    object: Literal["vector_store.search_results.page"] = "vector_store.search_results.page"
    search_query: str | list[str]
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None


class ListPage(BaseModel):
    object: Literal["list"] = "list"
    data: list[Any]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False
