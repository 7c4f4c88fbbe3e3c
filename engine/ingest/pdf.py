"""PDF → paragraphs: a fast path on pypdfium2, docling's full pipeline behind a setting.

Fast path (default): pdfium's text per page (``get_text_range``) split into lines, plus the loose
box of each line's first and last char, which costs about as much as the text itself. Paragraphs
are rebuilt from line geometry and text:

- a break before a line on a larger vertical gap than the page's usual line pitch, a font-size
  change, a first-line indent or a bullet, or after a short line ending a sentence; a jump to a
  new column continues the paragraph when the text does (no sentence end, lower-case start);
- fragments on the same baseline (sub/superscripts) are one line; hyphenation marks are dropped;
- rows of numbers stay one per line (tables), prose lines are joined with spaces;
- running headers/footers (the same first/last lines on many pages, digits ignored) are dropped;
- single short lines in a larger font or numbered like "3.2 Title" become headings, and every
  paragraph carries the current heading path.

Each paragraph keeps its 1-based physical page. pdfium is not thread-safe, so all calls go
through ``PDFIUM_LOCK``, a process-wide lock (the one deliberate module global: the library's own
state is process-wide). Failures: password → "encrypted"; no text at all → "no text layer; OCR
not enabled"; unreadable file → pdfium's reason.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass

from engine.ingest.document import Paragraph, ParsedDocument
from engine.ingest.paragraphs import merge_tiny

PDFIUM_LOCK = threading.Lock()
MAX_PARA_CHARS = 2000
_BULLET = re.compile(
    r"^([\u2022\u00b7\u25cf\u25aa\u25a0\u25e6\u2023\u2043\uf0b7*\-\u2013\u2014]|"
    r"\(?[0-9a-zA-Z]{1,3}[.)])\s"
)
_SENT_END = re.compile(r"[.!?:;\"\u201d)\]]$")
_NUMBERED = re.compile(r"^(\d{1,2}(\.\d{1,2})*\.?|[IVX]{1,4}\.|[A-H]\.?)\s+[A-Z][A-Za-z]")
_NUMERIC = re.compile(r"(?<!\S)(?:[$€£(]?[-+]?\d[\d,.]*%?\)?|[$€£%—–-])(?!\S)")
_DIGITS = re.compile(r"\d+")
_ANY_DIGIT = re.compile(r"\d")
_PDF_ERRORS = {
    1: "unknown error",
    2: "file not found or unreadable",
    3: "not a PDF or corrupt",
    4: "encrypted",
    5: "encrypted",
    6: "page not found",
}


class _Line:
    __slots__ = ("text", "x0", "x1", "y_first", "y_last", "h", "size", "numeric")

    def __init__(self, text: str, box0: tuple, box1: tuple):
        self.text = text
        self.x0, self.x1 = box0[0], box1[2]
        self.y_first, self.y_last = box0[1], box1[1]  # bottoms of the first and last char
        self.h = max(box0[3] - box0[1], 0.1)
        self.size = min(self.h, box1[3] - box1[1])  # font size estimate robust to odd glyphs
        n_words = text.count(" ") + 1
        self.numeric = (
            n_words >= 2
            and _ANY_DIGIT.search(text) is not None
            and len(_NUMERIC.findall(text)) >= max(2, n_words * 0.3)
        )


@dataclass
class _Para:
    lines: list[_Line]
    page: int

    @property
    def text(self) -> str:
        out = self.lines[0].text
        for prev, line in zip(self.lines, self.lines[1:], strict=False):
            sep = "\n" if (prev.numeric or line.numeric) else " "
            out += sep + line.text
        return out


def parse_pdf(data: bytes, filename: str) -> ParsedDocument:
    """Parse a PDF with pypdfium2 (blocking). Raises ConversionError on failure."""
    from engine.ingest.convert import ConversionError

    try:
        import pypdfium2 as pdfium
    except ImportError as exc:  # pragma: no cover - a core dependency
        from engine.errors import MissingExtra

        raise MissingExtra("pypdfium2", "pypdfium2", "ingest") from exc
    t0 = time.perf_counter()
    with PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            code = getattr(exc, "err_code", None)
            if code in (4, 5) or "password" in str(exc).lower():
                raise ConversionError("encrypted", code="encrypted") from exc
            reason = _PDF_ERRORS.get(code, str(exc))
            raise ConversionError(
                f"cannot read the PDF: {reason} ({exc})", code="corrupt_file"
            ) from exc
        try:
            n_pages = len(pdf)
            pages = [_page_lines(pdf, i) for i in range(n_pages)]
            meta = {k: v for k, v in pdf.get_metadata_dict().items() if v}
        finally:
            pdf.close()
    t_extract = time.perf_counter() - t0
    if not any(line.text.strip() for lines in pages for line in lines):
        raise ConversionError("no text layer; OCR not enabled", code="no_text_layer")
    _drop_running_lines(pages)
    body_h = _body_height(pages)
    paragraphs, title_at = _paragraphs(pages, body_h)
    title = _title(meta.get("Title", ""), paragraphs, title_at, filename)
    return ParsedDocument(
        kind="pdf",
        title=title,
        paragraphs=paragraphs,
        pages=n_pages,
        meta={
            "converter": "pypdfium2",
            "author": meta.get("Author") or None,
            "pages_without_text": sum(1 for lines in pages if not lines),
            "extract_s": round(t_extract, 4),
            "parse_s": round(time.perf_counter() - t0, 4),
        },
    )


def _page_lines(pdf, index: int) -> list[_Line]:
    import pypdfium2.raw as raw

    page = pdf[index]
    tp = page.get_textpage()
    try:
        text = tp.get_text_range()
        n_chars = tp.count_chars()
        remap = None
        if len(text) != n_chars:  # rare: pdfium's text view differs from its char list

            def remap(i: int) -> int:
                return raw.FPDFText_GetCharIndexFromTextIndex(tp.raw, i)

        lines: list[_Line] = []
        # pdfium's loose char box through the raw API with one reused rect: this is called
        # twice per line, and the wrapper's allocations were a visible share of the time.
        rect = raw.FS_RECTF()
        get_box, handle = raw.FPDFText_GetLooseCharBox, tp.raw

        def charbox(i: int) -> tuple[float, float, float, float]:
            get_box(handle, i, rect)
            return rect.left, rect.bottom, rect.right, rect.top

        pos = 0
        for raw_line in text.split("\r\n"):
            start = pos
            pos += len(raw_line) + 2
            stripped = raw_line.strip()
            if not stripped:
                continue
            first = start + raw_line.index(stripped[0])
            last = first + len(stripped) - 1
            if remap is not None:
                first, last = remap(first), remap(last)
                if first < 0 or last < 0:
                    continue
            if "\ufffe" in stripped or "\x02" in stripped:
                stripped = stripped.replace("\ufffe", "").replace("\x02", "")
            if "  " in stripped or "\n" in stripped or "\t" in stripped:
                stripped = " ".join(stripped.split())
            lines.append(_Line(stripped, charbox(first), charbox(last)))
        return lines
    finally:
        tp.close()
        page.close()


def _drop_running_lines(pages: list[list[_Line]]) -> None:
    """Remove lines that repeat at the top or bottom of many pages (digits ignored)."""
    if len(pages) < 4:
        return
    counts: Counter[str] = Counter()
    for lines in pages:
        edge = {_DIGITS.sub("#", ln.text) for ln in lines[:2] + lines[-2:]}
        counts.update(edge)
    limit = max(3, int(len(pages) * 0.4))
    running = {t for t, c in counts.items() if c >= limit}
    if not running:
        return
    for i, lines in enumerate(pages):
        head = [ln for ln in lines[:2] if _DIGITS.sub("#", ln.text) not in running]
        tail = [ln for ln in lines[-2:] if _DIGITS.sub("#", ln.text) not in running]
        pages[i] = (
            head + lines[2:-2] + tail
            if len(lines) > 4
            else [ln for ln in lines if _DIGITS.sub("#", ln.text) not in running]
        )


def _body_height(pages: list[list[_Line]]) -> float:
    heights = [round(ln.h, 1) for lines in pages for ln in lines if len(ln.text) > 20]
    return statistics.median(heights) if heights else 10.0


def _paragraphs(pages: list[list[_Line]], body_h: float) -> tuple[list[Paragraph], int | None]:
    """Paragraphs with heading paths, and the index of a title candidate (the largest-font
    heading of page 1, when clearly larger than body text)."""
    out: list[Paragraph] = []
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()  # the stack's texts, kept as a tuple
    title_at, title_h = None, 1.3 * body_h
    for page_no, lines in enumerate(pages, start=1):
        for para in _split_page(lines, page_no, body_h):
            text = para.text.strip()
            if not text:
                continue
            level = _heading_level(para, body_h)
            size = para.lines[0].size
            big = size > title_h and len(para.lines) <= 4 and len(text.split()) <= 30
            if page_no == 1 and big and len(re.findall(r"[^\W\d_]{2,}", text)) >= 2:
                title_at, title_h = len(out), size
            if not level:
                out.append(Paragraph(len(out), text, page_no, path, "text"))
                continue
            while stack and stack[-1][0] >= level:
                stack.pop()
            path = tuple(t for _, t in stack)
            out.append(Paragraph(len(out), text, page_no, path, "heading"))
            stack.append((level, text))
            path = (*path, text)
    if title_at is not None:  # the title is not a section: nothing nests under it
        title = out[title_at]
        out[title_at] = Paragraph(title.id, title.text, title.page, (), "title")
        out = [
            Paragraph(p.id, p.text, p.page, p.headings[1:], p.kind)
            if p.headings[:1] == (title.text,)
            else p
            for p in out
        ]
    merged = merge_tiny(out)
    if title_at is not None:
        title_at = next((p.id for p in merged if p.kind == "title"), None)
    return merged, title_at


def _split_page(lines: list[_Line], page_no: int, body_h: float) -> list[_Para]:
    if not lines:
        return []
    pitches = [
        a.y_last - b.y_first
        for a, b in zip(lines, lines[1:], strict=False)
        if 0 < a.y_last - b.y_first < 3 * a.h
    ]
    pitch = statistics.median(pitches) if pitches else lines[0].h * 1.2
    x1s = [ln.x1 for ln in lines]
    paras = [_Para([lines[0]], page_no)]
    size = len(lines[0].text)
    for i in range(1, len(lines)):
        prev, cur = paras[-1].lines[-1], lines[i]
        # Same visual line (sub/superscripts, a second text run): glue to the previous line.
        if abs(cur.y_first - prev.y_last) < 0.5 * prev.h and cur.x0 >= prev.x1 - 2:
            prev.text += ("" if cur.text[:1] in ",.;:)" else " ") + cur.text
            prev.x1, prev.y_last = cur.x1, cur.y_last
            size += len(cur.text)
            continue
        if _breaks(prev, cur, pitch, x1s, i, body_h) or size > MAX_PARA_CHARS:
            paras.append(_Para([cur], page_no))
            size = len(cur.text)
        else:
            paras[-1].lines.append(cur)
            size += len(cur.text) + 1
    return paras


def _breaks(prev: _Line, cur: _Line, pitch: float, x1s: list[float], i: int, body_h: float) -> bool:
    """Whether line ``i`` (``cur``) starts a new paragraph after ``prev``."""
    ends = bool(_SENT_END.search(prev.text))
    continues = not ends and cur.text[:1].islower()
    gap = prev.y_last - cur.y_first
    if (  # lines of one large-font heading or title, at that font's line spacing
        not ends
        and prev.size >= 1.15 * body_h
        and abs(cur.size - prev.size) < 0.2 * prev.size
        and 0 < gap < 1.6 * prev.h
    ):
        return False
    if gap <= 0 or gap > 1.4 * pitch:  # a column/page jump or extra space
        return not continues
    if abs(cur.h - prev.h) > 0.2 * max(cur.h, prev.h):
        return True
    if prev.numeric != cur.numeric:
        return True
    if _BULLET.match(cur.text) and (ends or prev.text.endswith(":") or prev.numeric is False):
        return True
    if ends and cur.x0 > prev.x0 + 0.8 * cur.h:  # first-line indent
        return True
    right = max(x1s[max(0, i - 4) : i + 3])  # the column's right edge around here
    short = prev.x1 < right - max(0.12 * (right - prev.x0), 2 * prev.h)
    return short and (ends or not cur.text[:1].islower()) and not prev.numeric


def _heading_level(para: _Para, body_h: float) -> int:
    if len(para.lines) != 1:
        return 0
    line = para.lines[0]
    text = line.text
    words = text.split()
    if not words or len(words) > 14 or text[-1] in ".,;" or line.numeric:
        return 0
    if not (text[0].isupper() or text[0].isdigit()):
        return 0
    m = _NUMBERED.match(text)
    if m:
        return m.group(1).rstrip(".").count(".") + 1
    if line.h >= 1.15 * body_h:
        return 1
    return 0


def _title(meta_title: str, paragraphs: list[Paragraph], at: int | None, filename: str) -> str:
    """Largest-font heading of page 1, else a sensible metadata title, else the file name."""
    if at is not None:
        return paragraphs[at].text.replace("\n", " ")[:300]
    meta_title = re.sub(r"^Microsoft (Word|PowerPoint) - ", "", meta_title or "").strip()
    if (
        len(meta_title) > 3
        and " " in meta_title
        and not re.search(r"\.(docx?|pdf|pptx?|exe|indd|qxd|tmp)$", meta_title, re.I)
    ):
        return meta_title[:300]
    stem = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return (stem.rsplit(".", 1)[0] if "." in stem else stem) or "document"
