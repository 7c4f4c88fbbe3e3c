"""The parsed-document data model shared by ingestion, indexing and the agent.

A document becomes ordered *paragraphs* (the unit of citation: an answer cites paragraph ids and
the page they sit on) and *chunks* (what is embedded and searched). A chunk is a run of
consecutive paragraphs, so a hit can always be mapped back to citable paragraphs, and chunk k's
neighbours k-1 and k+1 (same document, same level) can be fetched to widen a context window.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

KINDS = ("pdf", "docx", "pptx", "html", "md", "txt")
PARAGRAPH_KINDS = ("text", "heading", "table", "list", "caption", "title")


@dataclass(frozen=True)
class Paragraph:
    """One citable unit of a document."""

    id: int  # 0-based, ordered within the document; the unit of citation
    text: str
    page: int | None = None  # 1-based page (PDF page, PPTX slide); None where unknown
    headings: tuple[str, ...] = ()  # heading path, outermost first
    kind: str = "text"  # "text" | "heading" | "table" | "list" | "caption" | "title"


@dataclass(frozen=True)
class Chunk:
    """Consecutive paragraphs ``start..end`` (inclusive) of one document at one granularity."""

    doc_id: str
    level: str  # "small" | "large"
    index: int  # k within (doc, level); neighbours are index±1
    start: int  # first paragraph id (inclusive)
    end: int  # last paragraph id (inclusive)
    text: str
    page: int | None  # page of the first paragraph
    n_tokens: int

    @property
    def key(self) -> str:
        return f"{self.doc_id}:{self.level}:{self.index}"


@dataclass
class ParsedDocument:
    """What a converter returns: paragraphs plus a little metadata."""

    kind: str  # pdf|docx|pptx|html|md|txt
    title: str  # from metadata / first heading / filename
    paragraphs: list[Paragraph]
    pages: int | None
    meta: dict = field(default_factory=dict)  # author, converter used, timings, ...

    @property
    def text(self) -> str:
        """The whole document as plain text (paragraphs separated by blank lines)."""
        return "\n\n".join(p.text for p in self.paragraphs)

    def page_of(self, paragraph_id: int) -> int | None:
        return self.paragraphs[paragraph_id].page


def renumber(paragraphs: list[Paragraph]) -> list[Paragraph]:
    """Give paragraphs consecutive ids 0..n-1 in list order (after merging or filtering)."""
    return [p if p.id == i else replace(p, id=i) for i, p in enumerate(paragraphs)]
