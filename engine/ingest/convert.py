"""Bytes → ParsedDocument: detect the kind, run the right converter, build paragraphs.

- PDF: pypdfium2 fast path (``pdf.py``); ``pdf_backend="docling"`` runs docling's full PDF
  pipeline instead, for installations that carry its layout weights (slow, optional);
- DOCX, PPTX, HTML, Markdown: docling's declarative backends (simple pipeline, offline, no
  torch), then ``paragraphs.from_docling``;
- TXT: blank-line separated blocks.

docling's import and converter set-up take seconds, so ``DoclingConverters`` builds converters
lazily and keeps them; hold one per process (the session store does) and pass it in. Every
failure to read a file is a ``ConversionError`` (400, kind "invalid_request") whose message is
the reason, e.g. "encrypted" or "no text layer; OCR not enabled".
"""

from __future__ import annotations

import io
import re
import threading
import time

from engine.errors import InvalidRequest, MissingExtra
from engine.ingest.detect import SUPPORTED, decode_text, detect_kind
from engine.ingest.document import Paragraph, ParsedDocument
from engine.ingest.paragraphs import clean, from_docling, merge_tiny

PDF_BACKENDS = ("pypdfium2", "docling")
_DOCLING_EXT = {"docx": "docx", "pptx": "pptx", "html": "html", "md": "md", "pdf": "pdf"}


class ConversionError(InvalidRequest):
    """A file that cannot be converted; ``reason`` is the short human reason."""

    def __init__(self, reason: str, *, code: str = "conversion_failed", param: str | None = None):
        super().__init__(reason, param=param, code=code)
        self.reason = reason


class DoclingConverters:
    """Lazily built, reused docling DocumentConverters (one for office/web formats, one for the
    full PDF pipeline). Thread-safe; conversions themselves may run concurrently."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._simple = None
        self._pdf = None

    def simple(self):
        with self._lock:
            if self._simple is None:
                try:
                    from docling.datamodel.base_models import InputFormat
                    from docling.document_converter import DocumentConverter
                except ImportError as exc:
                    raise MissingExtra("docling", "docling-slim", "ingest") from exc
                self._simple = DocumentConverter(
                    allowed_formats=[InputFormat.DOCX, InputFormat.PPTX, InputFormat.HTML,
                                     InputFormat.MD]
                )
            return self._simple

    def pdf_full(self):
        """docling's standard PDF pipeline (layout model, tables); needs its model weights."""
        with self._lock:
            if self._pdf is None:
                try:
                    from docling.datamodel.base_models import InputFormat
                    from docling.document_converter import DocumentConverter, PdfFormatOption
                    from docling.pipeline.standard_pdf_pipeline import StandardPdfPipeline
                except ImportError as exc:
                    raise MissingExtra("docling-pdf", "docling", "pdf-layout") from exc
                self._pdf = DocumentConverter(
                    allowed_formats=[InputFormat.PDF],
                    format_options={
                        InputFormat.PDF: PdfFormatOption(pipeline_cls=StandardPdfPipeline)
                    },
                )
            return self._pdf


class DocumentParser:
    """Parses uploads; holds the reusable converters and the PDF backend setting."""

    def __init__(self, *, pdf_backend: str = "pypdfium2", converters: DoclingConverters | None = None):
        if pdf_backend not in PDF_BACKENDS:
            raise ValueError(f"pdf_backend must be one of {PDF_BACKENDS}, not '{pdf_backend}'")
        self.pdf_backend = pdf_backend
        self.converters = converters or DoclingConverters()

    def parse(self, data: bytes, filename: str, *, kind: str | None = None) -> ParsedDocument:
        """Detect (unless ``kind`` is given), convert and return paragraphs. Blocking."""
        t0 = time.perf_counter()
        if kind is None:
            kind = detect_kind(data, filename)
        elif kind not in SUPPORTED:
            raise InvalidRequest(f"unsupported kind '{kind}'", param="kind")
        if kind == "pdf":
            if self.pdf_backend == "docling":
                doc = self._docling(data, filename, kind, self.converters.pdf_full())
            else:
                from engine.ingest.pdf import parse_pdf

                doc = parse_pdf(data, filename)
        elif kind == "txt":
            doc = parse_text(data, filename)
        else:
            doc = self._docling(data, filename, kind, self.converters.simple())
        if not doc.paragraphs:
            raise ConversionError("the document contains no text", code="no_text")
        doc.meta.setdefault("parse_s", round(time.perf_counter() - t0, 4))
        doc.meta["total_s"] = round(time.perf_counter() - t0, 4)
        return doc

    def _docling(self, data: bytes, filename: str, kind: str, converter) -> ParsedDocument:
        from docling.datamodel.base_models import ConversionStatus, DocumentStream

        # docling picks the backend from the name, so give it the extension of the detected kind.
        stem = re.sub(r"[^\w.-]+", "_", filename.rsplit("/", 1)[-1]).rsplit(".", 1)[0] or "doc"
        stream = DocumentStream(name=f"{stem}.{_DOCLING_EXT[kind]}", stream=io.BytesIO(data))
        t0 = time.perf_counter()
        try:
            if kind == "pdf":
                from engine.ingest.pdf import PDFIUM_LOCK

                with PDFIUM_LOCK:  # docling's PDF backend uses pdfium too
                    result = converter.convert(stream, raises_on_error=False)
            else:
                result = converter.convert(stream, raises_on_error=False)
        except Exception as exc:  # noqa: BLE001 - parsers raise anything on bad input
            raise ConversionError(_reason(kind, exc), code="corrupt_file") from exc
        if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
            msgs = "; ".join(e.error_message for e in (result.errors or [])) or str(result.status)
            raise ConversionError(f"cannot read the {kind.upper()} file: {msgs}",
                                  code="corrupt_file")
        ddoc = result.document
        paragraphs = from_docling(ddoc)
        pages = len(ddoc.pages) if ddoc.pages else None
        title = next((p.text for p in paragraphs if p.kind == "title"), None) or next(
            (p.text for p in paragraphs if p.kind == "heading"), None
        ) or stem
        return ParsedDocument(
            kind=kind,
            title=title[:300],
            paragraphs=paragraphs,
            pages=pages if kind in ("pdf", "pptx") else None,
            meta={"converter": f"docling-{kind}", "convert_s": round(time.perf_counter() - t0, 4)},
        )


def parse(
    data: bytes,
    filename: str,
    *,
    kind: str | None = None,
    pdf_backend: str = "pypdfium2",
    converters: DoclingConverters | None = None,
) -> ParsedDocument:
    """One-shot parse; pass ``converters`` (kept by the caller) to reuse docling's set-up."""
    return DocumentParser(pdf_backend=pdf_backend, converters=converters).parse(
        data, filename, kind=kind
    )


def parse_text(data: bytes, filename: str) -> ParsedDocument:
    """Plain text: paragraphs are blank-line separated blocks; a file without blank lines is
    read one line per paragraph (merged when tiny)."""
    text = decode_text(data)
    if text is None:
        raise ConversionError("the file is not text", code="corrupt_file")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = re.split(r"\n\s*\n", text)
    if len(blocks) == 1 and text.count("\n") > 3:
        blocks = text.split("\n")
    paras = []
    for block in blocks:
        block = clean(block)
        if block:
            paras.append(Paragraph(len(paras), block))
    paras = merge_tiny(paras)
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0] or "document"
    first = paras[0].text.split("\n", 1)[0] if paras else ""
    title = first if 0 < len(first) <= 120 else stem
    return ParsedDocument("txt", title, paras, None, {"converter": "text"})


def _reason(kind: str, exc: Exception) -> str:
    name = type(exc).__name__
    msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else name
    if name == "BadZipFile" or "zip" in msg.lower():
        return f"cannot read the {kind.upper()} file: damaged or truncated ZIP container ({msg})"
    return f"cannot read the {kind.upper()} file: {name}: {msg}"
