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
_BULLET = re.compile(r"^([\u2022\u00b7\u25cf\u25aa\u25a0\u25e6\u2023\u2043\uf0b7*\-\u2013\u2014]|"
                     r"\(?[0-9a-zA-Z]{1,3}[.)])\s")
_SENT_END = re.compile(r"[.!?:;\"\u201d)\]]$")
_NUMBERED = re.compile(r"^(\d{1,2}(\.\d{1,2})*\.?|[IVX]{1,4}\.|[A-H]\.?)\s+[A-Z][A-Za-z]")
_NUMERIC = re.compile(r"^[$€£(]?[-+]?[\d,.]+%?\)?$|^[$€£%—–-]$")
_DIGITS = re.compile(r"\d+")
_PDF_ERRORS = {1: "unknown error", 2: "file not found or unreadable", 3: "not a PDF or corrupt",
               4: "encrypted", 5: "encrypted", 6: "page not found"}


class _Line:
    __slots__ = ("text", "x0", "x1", "y_first", "y_last", "h", "numeric")

    def __init__(self, text: str, box0: tuple, box1: tuple):
        self.text = text
        self.x0, self.x1 = box0[0], box1[2]
        self.y_first, self.y_last = box0[1], box1[1]  # bottoms of the first and last char
        self.h = max(box0[3] - box0[1], 0.1)
        words = text.split()
        self.numeric = len(words) >= 2 and sum(bool(_NUMERIC.match(w)) for w in words) >= max(
            2, len(words) * 0.3
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
            raise ConversionError(f"cannot read the PDF: {reason} ({exc})", code="corrupt_file")
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
    paragraphs = _paragraphs(pages, body_h)
    title = _title(meta.get("Title", ""), paragraphs, filename)
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
    page = pdf[index]
    tp = page.get_textpage()
    try:
        text = tp.get_text_range()
        n_chars = tp.count_chars()
        remap = None
        if len(text) != n_chars:  # rare: pdfium's text view differs from its char list
            import pypdfium2.raw as raw

            def remap(i: int) -> int:
                return raw.FPDFText_GetCharIndexFromTextIndex(tp.raw, i)

        lines: list[_Line] = []
        pos = 0
        for raw_line in re.split(r"\r\n|\n|\r", text):
            start, length = pos, len(raw_line)
            pos += length + (2 if text[pos + length : pos + length + 2] == "\r\n" else 1)
            stripped = raw_line.strip()
            if not stripped:
                continue
            first = start + len(raw_line) - len(raw_line.lstrip())
            last = start + len(raw_line.rstrip()) - 1
            if remap is not None:
                first, last = remap(first), remap(last)
                if first < 0 or last < 0:
                    continue
            clean = stripped.replace("\ufffe", "").replace("\x02", "")
            clean = re.sub(r"\s+", " ", clean)
            lines.append(_Line(clean, tp.get_charbox(first, loose=True),
                               tp.get_charbox(last, loose=True)))
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
        pages[i] = head + lines[2:-2] + tail if len(lines) > 4 else [
            ln for ln in lines if _DIGITS.sub("#", ln.text) not in running
        ]


def _body_height(pages: list[list[_Line]]) -> float:
    heights = [round(ln.h, 1) for lines in pages for ln in lines if len(ln.text) > 20]
    return statistics.median(heights) if heights else 10.0


def _paragraphs(pages: list[list[_Line]], body_h: float) -> list[Paragraph]:
    out: list[Paragraph] = []
    stack: list[tuple[int, str]] = []
    for page_no, lines in enumerate(pages, start=1):
        for para in _split_page(lines, page_no):
            text = para.text.strip()
            if not text:
                continue
            level = _heading_level(para, body_h)
            if level:
                while stack and stack[-1][0] >= level:
                    stack.pop()
                out.append(Paragraph(len(out), text, page_no, tuple(t for _, t in stack), "heading"))
                stack.append((level, text))
            else:
                out.append(Paragraph(len(out), text, page_no, tuple(t for _, t in stack), "text"))
    return merge_tiny(out)


def _split_page(lines: list[_Line], page_no: int) -> list[_Para]:
    if not lines:
        return []
    pitches = [
        a.y_last - b.y_first
        for a, b in zip(lines, lines[1:], strict=False)
        if 0 < a.y_last - b.y_first < 3 * a.h
    ]
    pitch = statistics.median(pitches) if pitches else lines[0].h * 1.2
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
        window = lines[max(0, i - 4) : i + 3]
        right = max(ln.x1 for ln in window)
        if _breaks(prev, cur, pitch, right) or size > MAX_PARA_CHARS:
            paras.append(_Para([cur], page_no))
            size = len(cur.text)
        else:
            paras[-1].lines.append(cur)
            size += len(cur.text) + 1
    return paras


def _breaks(prev: _Line, cur: _Line, pitch: float, right: float) -> bool:
    ends = bool(_SENT_END.search(prev.text))
    continues = not ends and cur.text[:1].islower()
    gap = prev.y_last - cur.y_first
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


def _title(meta_title: str, paragraphs: list[Paragraph], filename: str) -> str:
    meta_title = re.sub(r"^Microsoft (Word|PowerPoint) - ", "", meta_title or "").strip()
    if meta_title and not re.fullmatch(r"(untitled|document\d*|[\w-]+\.(docx?|pdf|pptx?))",
                                       meta_title, re.I):
        return meta_title
    for p in paragraphs[:15]:
        if p.page == 1 and p.kind == "heading" and len(p.text) > 6:
            return p.text
    stem = filename.rsplit("/", 1)[-1]
    return stem.rsplit(".", 1)[0] if "." in stem else stem or "document"
