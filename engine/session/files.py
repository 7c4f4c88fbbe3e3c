"""Uploaded sources (OpenAI "files"), held in memory.

Bytes stay in memory because a session is ephemeral by design ("locked mode": closing it discards
every source); limits on file size and total bytes keep that bounded.
"""

from __future__ import annotations

import re
import time
import unicodedata
import uuid
from dataclasses import dataclass, field

from engine.errors import NotFound, Overloaded, TooLarge

_UNSAFE = re.compile(r"[^\w.\- ()\[\]]+", re.UNICODE)


def safe_filename(name: str | None, default: str = "upload") -> str:
    """A display-safe file name: no directories, no control characters, at most 200 chars."""
    name = unicodedata.normalize("NFC", name or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).strip(" ._")
    if not name:
        name = default
    if len(name) > 200:
        stem, dot, ext = name.rpartition(".")
        name = (stem[:190] + dot + ext[:9]) if dot and len(ext) <= 9 else name[:200]
    return name


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    kind: str  # pdf | docx | pptx | html | md | txt
    content_type: str
    created_at: int = field(default_factory=lambda: int(time.time()))
    source_url: str | None = None

    @property
    def size(self) -> int:
        return len(self.data)


class FileStore:
    """Files by id, with a per-file size limit and a global byte budget."""

    def __init__(self, max_file_bytes: int, max_total_bytes: int):
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self._files: dict[str, StoredFile] = {}
        self._total = 0

    def add(
        self,
        data: bytes,
        filename: str,
        purpose: str,
        kind: str,
        content_type: str,
        source_url: str | None = None,
    ) -> StoredFile:
        if len(data) > self.max_file_bytes:
            raise TooLarge(
                f"file is {len(data):,} bytes; the limit is {self.max_file_bytes:,} bytes",
                param="file",
            )
        if self._total + len(data) > self.max_total_bytes:
            raise Overloaded(
                "the server's file storage is full; delete files or sessions first",
                code="storage_full",
            )
        f = StoredFile(
            id=f"file-{uuid.uuid4().hex[:24]}",
            filename=safe_filename(filename),
            purpose=purpose,
            data=data,
            kind=kind,
            content_type=content_type,
            source_url=source_url,
        )
        self._files[f.id] = f
        self._total += f.size
        return f

    def get(self, file_id: str) -> StoredFile:
        try:
            return self._files[file_id]
        except KeyError:
            raise NotFound(f"No file found with id '{file_id}'", param="file_id") from None

    def delete(self, file_id: str) -> StoredFile:
        f = self.get(file_id)
        del self._files[file_id]
        self._total -= f.size
        return f

    def list(self, purpose: str | None = None) -> list[StoredFile]:
        return [f for f in self._files.values() if purpose is None or f.purpose == purpose]

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._files)
