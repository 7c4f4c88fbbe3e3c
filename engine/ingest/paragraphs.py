"""From a DoclingDocument to citable paragraphs with heading paths and pages.

Docling gives a tree of items (title, section headers, text, list items, tables, pictures);
citations need a flat, ordered list of paragraphs a reader would recognise:

- section headers keep a heading path (title = level 0) that every paragraph below carries;
- consecutive list items of one list become one "list" paragraph (bounded in length);
- a table becomes compact pipe-separated rows, split into row groups that each repeat the
  header row, so a row is never cited without its column names; its caption comes first;
- page headers/footers are dropped; tiny text fragments are merged into a neighbour;
- the page comes from the item's provenance (PDF page, PPTX slide), None where docling has none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engine.ingest.document import Paragraph

MAX_LIST_CHARS = 1500  # a list paragraph is cut into parts beyond this
MAX_TABLE_CHARS = 1200  # rows per group so that a group (with its header) stays below this
TINY_CHARS = 25  # text shorter than this is merged into a neighbour
_SKIP_LABELS = {"page_header", "page_footer", "empty_value"}
_WS = re.compile(r"[ \t\r\f\v\u00a0]+")


def clean(text: str) -> str:
    """Collapse runs of spaces within lines and blank lines, strip the ends."""
    lines = [_WS.sub(" ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{2,}", "\n", "\n".join(lines)).strip()


@dataclass
class _Builder:
    out: list[Paragraph] = field(default_factory=list)
    stack: list[tuple[int, str]] = field(default_factory=list)  # (level, heading text)
    list_lines: list[str] = field(default_factory=list)
    list_page: int | None = None
    list_parent: str | None = None
    list_level: int = 0

    @property
    def headings(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.stack)

    def add(self, text: str, page: int | None, kind: str, headings=None) -> None:
        text = clean(text)
        if text:
            hs = self.headings if headings is None else headings
            self.out.append(Paragraph(len(self.out), text, page, hs, kind))

    def heading(self, text: str, level: int, page: int | None, kind: str = "heading") -> None:
        self.flush_list()
        text = clean(text).replace("\n", " ")
        if not text:
            return
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.add(text, page, kind, self.headings)  # a heading carries its ancestors' path
        self.stack.append((level, text))

    def list_item(self, text: str, marker: str, level: int, page: int | None, parent: str) -> None:
        """Add an item to the current list paragraph, or start a new one for a new list (a
        different parent at the same or an outer level), another page, or when it is long."""
        size = sum(len(x) + 1 for x in self.list_lines)
        if self.list_lines and (
            (parent != self.list_parent and level <= self.list_level)
            or size > MAX_LIST_CHARS
            or (page is not None and self.list_page is not None and page != self.list_page)
        ):
            self.flush_list()
        if not self.list_lines:
            self.list_page, self.list_parent, self.list_level = page, parent, level
        depth = min(max(0, (level - self.list_level) // 2), 4)
        self.list_lines.append("  " * depth + f"{marker} {clean(text)}".strip())

    def flush_list(self) -> None:
        if self.list_lines:
            self.add("\n".join(self.list_lines), self.list_page, "list")
            self.list_lines = []


def from_docling(doc, *, reset_on_page: bool = False) -> list[Paragraph]:
    """Paragraphs of a ``docling_core`` DoclingDocument, in reading order. ``reset_on_page``
    clears the heading path on a new page (slides: a slide's title does not cover the next)."""
    b = _Builder()
    skip_below: int | None = None  # level of a table whose descendants are already rendered
    counters: dict[str, int] = {}  # numbering of enumerated lists without markers
    last_page: int | None = None
    for item, level in doc.iterate_items():
        if skip_below is not None:
            if level > skip_below:
                continue
            skip_below = None
        label = str(getattr(item.label, "value", item.label))
        if label in _SKIP_LABELS:
            continue
        page = item.prov[0].page_no if getattr(item, "prov", None) else None
        if reset_on_page and page is not None and page != last_page:
            b.flush_list()
            b.stack.clear()
        last_page = page if page is not None else last_page
        if label == "table":
            b.flush_list()
            skip_below = level
            caption = item.caption_text(doc) if hasattr(item, "caption_text") else ""
            if caption:
                b.add(caption, page, "caption")
            for group in table_groups(item):
                b.add(group, page, "table")
            continue
        if label in ("picture", "chart"):
            b.flush_list()
            skip_below = level
            caption = item.caption_text(doc) if hasattr(item, "caption_text") else ""
            if caption:
                b.add(caption, page, "caption")
            continue
        text = getattr(item, "text", None) or ""
        if label == "list_item":
            parent = item.parent.cref if item.parent is not None else ""
            marker = (getattr(item, "marker", "") or "").strip()
            if not marker or marker in ("-", "•") and getattr(item, "enumerated", False):
                counters[parent] = counters.get(parent, 0) + 1
                marker = f"{counters[parent]}." if getattr(item, "enumerated", False) else "-"
            b.list_item(text, marker, level, page, parent)
            continue
        if label == "title":
            b.stack.clear()
            b.heading(text, 0, page, "title")
        elif label == "section_header":
            b.heading(text, max(1, int(getattr(item, "level", 1) or 1)), page)
        elif label == "caption":
            b.flush_list()
            b.add(text, page, "caption")
        elif text:
            b.flush_list()
            b.add(text, page, "text")
    b.flush_list()
    return merge_tiny(b.out)


def table_groups(table) -> list[str]:
    """Render a docling TableItem as pipe-separated rows in groups that repeat the header."""
    grid = table.data.grid if table.data is not None else []
    rows: list[str] = []
    header_rows = 0
    for r, row in enumerate(grid):
        cells: list[str] = []
        last_id = None
        for cell in row:
            ident = (cell.start_row_offset_idx, cell.start_col_offset_idx)
            if ident == last_id:  # a cell spanning columns appears once per column
                continue
            last_id = ident
            cells.append(clean(cell.text).replace("\n", " "))
        if not any(cells):
            continue
        rows.append(" | ".join(cells))
        if r == header_rows and row and all(c.column_header for c in row):
            header_rows += 1
    header = rows[: min(header_rows, 3)]
    body = rows[len(header) :]
    if not body:
        return ["\n".join(header)] if header else []
    head_len = sum(len(h) + 1 for h in header)
    groups: list[list[str]] = [[]]
    size = head_len
    for line in body:
        if groups[-1] and size + len(line) + 1 > MAX_TABLE_CHARS:
            groups.append([])
            size = head_len
        groups[-1].append(line)
        size += len(line) + 1
    return ["\n".join(header + g) for g in groups]


def merge_tiny(paragraphs: list[Paragraph], tiny: int = TINY_CHARS) -> list[Paragraph]:
    """Merge short text fragments into the previous text paragraph of the same page and section
    (or else the next one), so that a stray "Fig. 3" or "a)" is not a citation unit of its own.
    Returns paragraphs numbered 0..n-1."""
    rows: list[list] = []  # [text, page, headings, kind], built without dataclass copies
    pending: list | None = None
    for p in paragraphs:
        row = [p.text, p.page, p.headings, p.kind]
        if pending is not None:
            if p.kind == "text" and p.page == pending[1] and p.headings == pending[2]:
                row[0] = f"{pending[0]}\n{p.text}"
            else:
                rows.append(pending)
            pending = None
        if p.kind == "text" and len(p.text) < tiny:
            prev = rows[-1] if rows else None
            if (
                prev is not None
                and prev[3] == "text"
                and prev[1] == p.page
                and prev[2] == p.headings
            ):
                prev[0] = f"{prev[0]}\n{p.text}"
            else:
                pending = row
            continue
        rows.append(row)
    if pending is not None:
        rows.append(pending)
    return [Paragraph(i, t, pg, hs, k) for i, (t, pg, hs, k) in enumerate(rows)]
