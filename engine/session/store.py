"""Sessions ("locked mode"): the sources a user brought in, their indexes, and their lifetime.

A session is exposed as an OpenAI vector store. Only its sources are visible to its chat;
closing it (or its expiry) cancels ingestion and drops every file, chunk, vector and index of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InvalidRequest, NotFound, Overloaded, TooLarge
from engine.index.hybrid import SessionIndex
from engine.ingest.document import Chunk, ParsedDocument
from engine.session.files import FileStore, StoredFile

log = logging.getLogger(__name__)


@dataclass
class SessionLimits:
    max_sessions: int = 64
    max_files_per_session: int = 50
    max_bytes_per_session: int = 200 * 1024 * 1024
    default_ttl_s: float = 24 * 3600.0  # idle sessions expire


@dataclass
class SessionFile:
    """One source inside one session, with its ingestion state."""

    file: StoredFile
    session_id: str
    attached_at: int = field(default_factory=lambda: int(time.time()))
    status: str = "in_progress"  # in_progress | completed | failed | cancelled
    error_code: str | None = None
    error: str | None = None
    stages: dict[str, Any] = field(default_factory=dict)
    doc: ParsedDocument | None = None
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    description: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    task: asyncio.Task | None = None
    describe_task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.file.id

    def cancel(self) -> None:
        for task in (self.task, self.describe_task):
            if task and not task.done():
                task.cancel()

    def fail(self, code: str, message: str) -> None:
        self.status, self.error_code, self.error = "failed", code, message
        self.done.set()

    def metadata(self) -> dict[str, Any]:
        d = self.doc
        return {
            "title": d.title if d else None,
            "kind": self.file.kind,
            "filename": self.file.filename,
            "pages": d.pages if d else None,
            "paragraphs": len(d.paragraphs) if d else 0,
            "description": self.description,
            "source_url": self.file.source_url,
        }


@dataclass
class Session:
    id: str
    name: str | None
    ttl_s: float
    expires_after_days: int | None = None
    metadata: dict[str, str] | None = None
    created_at: int = field(default_factory=lambda: int(time.time()))
    last_active_at: float = field(default_factory=time.time)
    files: dict[str, SessionFile] = field(default_factory=dict)
    index: SessionIndex = field(default_factory=SessionIndex)
    batches: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    turns: dict[str, Any] = field(default_factory=dict)  # agent memory of answered turns

    def touch(self) -> None:
        self.last_active_at = time.time()

    @property
    def expires_at(self) -> float:
        return self.last_active_at + self.ttl_s

    def expired(self, now: float | None = None) -> bool:
        return (now or time.time()) >= self.expires_at

    @property
    def usage_bytes(self) -> int:
        return sum(f.file.size for f in self.files.values())

    def file(self, file_id: str) -> SessionFile:
        try:
            return self.files[file_id]
        except KeyError:
            raise NotFound(
                f"No file '{file_id}' in vector store '{self.id}'", param="file_id"
            ) from None

    def counts(self) -> dict[str, int]:
        c = {"in_progress": 0, "completed": 0, "failed": 0, "cancelled": 0}
        for f in self.files.values():
            c[f.status] += 1
        return {**c, "total": len(self.files)}


Ingest = Callable[[Session, SessionFile], Any]  # coroutine function run per attached file


class SessionStore:
    """All live sessions, their limits, and the background reaper of idle ones."""

    def __init__(self, files: FileStore, ingest: Ingest, limits: SessionLimits | None = None):
        self.files = files
        self.limits = limits or SessionLimits()
        self._ingest = ingest
        self._sessions: dict[str, Session] = {}
        self._reaper: asyncio.Task | None = None

    # lifecycle -------------------------------------------------------------------------
    def create(
        self,
        name: str | None = None,
        expires_after_days: int | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Session:
        self._drop_expired()
        if len(self._sessions) >= self.limits.max_sessions:
            raise Overloaded(
                f"the server holds its maximum of {self.limits.max_sessions} sessions; "
                "delete one or try later",
                code="too_many_sessions",
            )
        ttl = expires_after_days * 86400.0 if expires_after_days else self.limits.default_ttl_s
        s = Session(
            id=f"vs_{uuid.uuid4().hex[:24]}",
            name=name,
            ttl_s=ttl,
            expires_after_days=expires_after_days,
            metadata=metadata,
        )
        self._sessions[s.id] = s
        return s

    def get(self, session_id: str, touch: bool = True) -> Session:
        s = self._sessions.get(session_id)
        if s is None or s.expired():
            if s is not None:
                self._discard(s)
            raise NotFound(f"No vector store found with id '{session_id}'", param="vector_store_id")
        if touch:
            s.touch()
        return s

    def list(self) -> list[Session]:
        self._drop_expired()
        return list(self._sessions.values())

    def close(self, session_id: str) -> Session:
        s = self.get(session_id, touch=False)
        self._discard(s)
        return s

    def _discard(self, s: Session) -> None:
        """Cancel ingestion and free everything the session owns (its files too, unless another
        live session also holds them)."""
        self._sessions.pop(s.id, None)
        for sf in s.files.values():
            sf.cancel()
            s.index.remove_document(sf.id)
            if not any(sf.id in o.files for o in self._sessions.values()):
                with contextlib.suppress(NotFound):
                    self.files.delete(sf.id)
        s.files.clear()
        log.info("session %s closed", s.id)

    def _drop_expired(self) -> None:
        now = time.time()
        for s in [s for s in self._sessions.values() if s.expired(now)]:
            self._discard(s)

    # files -----------------------------------------------------------------------------
    def attach(self, session: Session, file_id: str, attributes: dict | None = None) -> SessionFile:
        stored = self.files.get(file_id)
        if file_id in session.files:
            return session.files[file_id]
        if len(session.files) >= self.limits.max_files_per_session:
            raise Overloaded(
                f"a session holds at most {self.limits.max_files_per_session} files",
                code="too_many_files",
            )
        if session.usage_bytes + stored.size > self.limits.max_bytes_per_session:
            raise TooLarge(
                f"the session would exceed its {self.limits.max_bytes_per_session:,}-byte limit",
                param="file_id",
            )
        sf = SessionFile(file=stored, session_id=session.id, attributes=attributes or {})
        session.files[file_id] = sf
        sf.task = asyncio.create_task(self._run(session, sf), name=f"ingest:{file_id}")
        return sf

    async def _run(self, session: Session, sf: SessionFile) -> None:
        try:
            await self._ingest(session, sf)
        except asyncio.CancelledError:
            if sf.status == "in_progress":
                sf.status = "cancelled"
            sf.done.set()
            raise
        except Exception as exc:  # a broken file never spoils the session
            log.exception("ingestion of %s failed", sf.id)
            sf.fail("server_error", f"ingestion failed: {exc}")
        finally:
            sf.done.set()

    def detach(self, session: Session, file_id: str) -> SessionFile:
        sf = session.file(file_id)
        sf.cancel()
        session.index.remove_document(file_id)
        del session.files[file_id]
        return sf

    def delete_file(self, file_id: str) -> StoredFile:
        """Delete a file everywhere: from every session holding it, then from the store."""
        stored = self.files.get(file_id)
        for s in self._sessions.values():
            if file_id in s.files:
                self.detach(s, file_id)
        return self.files.delete(stored.id)

    def check_file_ids(self, file_ids: list[str]) -> None:
        for fid in file_ids:
            try:
                self.files.get(fid)
            except NotFound:
                raise InvalidRequest(f"No file found with id '{fid}'", param="file_ids") from None

    # reaper ----------------------------------------------------------------------------
    def start_reaper(self, every_s: float = 30.0) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(every_s)
                try:
                    self._drop_expired()
                except Exception:  # keep reaping; a failure here must not end the loop
                    log.exception("session reaper failed")

        self._reaper = asyncio.create_task(loop(), name="session-reaper")

    async def close_all(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for s in list(self._sessions.values()):
            self._discard(s)

    def __len__(self) -> int:
        return len(self._sessions)
