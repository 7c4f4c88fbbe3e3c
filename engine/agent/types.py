"""Data passed between the stages of the briefing agent.

rewriter → planner → context (SEARCH | READ) → mapreduce → citations. Every stage takes and
returns these plain dataclasses, so each can be tested alone and traced (``brief_trace``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from engine.index.hybrid import SessionIndex
from engine.ingest.document import Paragraph


@dataclass(frozen=True)
class DocumentInfo:
    """What the planner and the generator know of a document."""

    doc_id: str  # the file id
    filename: str
    title: str
    kind: str  # pdf | docx | pptx | html | md | txt | url
    description: str | None = None
    pages: int | None = None
    paragraphs: int = 0


@dataclass(frozen=True)
class Operation:
    action: Literal["SEARCH", "READ"]
    document: str  # doc_id
    query: str | None = None  # SEARCH only


@dataclass(frozen=True)
class Turn:
    """One earlier exchange of the conversation, with what the agent did for it."""

    user: str
    assistant: str
    operations: tuple[Operation, ...] = ()
    documents: tuple[str, ...] = ()  # doc_ids cited in the answer


@dataclass(frozen=True)
class Rewrite:
    original: str
    rewritten: str  # standalone query (== original when nothing needed resolving)
    used_turns: tuple[int, ...] = ()  # indexes into the history that were relevant
    skipped_llm: bool = False


@dataclass(frozen=True)
class Evidence:
    """A paragraph with its provenance: the unit passed to generation and cited."""

    doc_id: str
    paragraph: Paragraph
    score: float
    source: Literal["search", "window", "semantic", "read"]
    operation: int  # index of the operation that brought it


@dataclass
class Context:
    """The result of one operation: paragraphs in document order, and what search returned."""

    operation: Operation
    evidence: list[Evidence]
    hits: list[dict[str, Any]] = field(default_factory=list)  # chunk key, scores (for the trace)


@dataclass(frozen=True)
class Citation:
    doc_id: str
    filename: str
    start: int  # first paragraph id
    end: int  # last paragraph id (inclusive)
    page: int | None
    quote: str
    index: int  # character offset of the marker in the answer text


class SessionView(Protocol):
    """What the agent may see of one session (and nothing of any other)."""

    index: SessionIndex

    def documents(self) -> list[DocumentInfo]: ...

    def paragraphs(self, doc_id: str) -> Sequence[Paragraph]: ...

    async def embed_query(self, text: str) -> np.ndarray | None:
        """The query vector, or None while nothing of the session is embedded yet."""
        ...
