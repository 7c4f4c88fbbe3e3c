"""Bytes → ParsedDocument: detect the kind, run the right converter, build paragraphs.

- PDF: pypdfium2 fast path (``pdf.py``); ``pdf_backend="docling"`` runs docling's full PDF
  pipeline instead, for installations that carry its layout weights (slow, optional);
- DOCX, PPTX, HTML, Markdown: docling's declarative backends (simple pipeline, offline, no
  torch), then ``paragraphs.from_docling``;
- TXT: blank-line separated blocks.

docling is imported lazily (2-6 s once per process; call ``DoclingConverters.warmup()`` at
start-up to pay it before the first upload). ``DoclingConverters`` holds the loaded backends and
the optional full-PDF converter; passing one to ``parse`` is optional (a new one is cheap once
docling is imported) but keeps the full-PDF pipeline's models loaded. Every failure to read a
file is a ``ConversionError`` (400, kind "invalid_request") whose message is the reason, e.g.
"encrypted" or "no text layer; OCR not enabled".
"""

from __future__ import annotations

import io
import re
import threading
import time

from engine.errors import BackendUnavailable, InvalidRequest, MissingExtra
from engine.ingest.detect import SUPPORTED, decode_text, detect_kind
from engine.ingest.document import Paragraph, ParsedDocument
from engine.ingest.paragraphs import clean, from_docling, merge_tiny

PDF_BACKENDS = ("pypdfium2", "docling")


class ConversionError(InvalidRequest):
    """A file that cannot be converted; ``reason`` is the short human reason."""

    def __init__(self, reason: str, *, code: str = "conversion_failed", param: str | None = None):
        super().__init__(reason, param=param, code=code)
        self.reason = reason


class DoclingConverters:
    """Lazily loaded docling backends, reused across documents.

    For DOCX/PPTX/HTML/MD this drives docling's declarative backends directly, which is all its
    SimplePipeline does: ``docling.document_converter`` imports the ASR pipeline and with it
    torch (seconds, and an ImportError where torch is absent), while the backends alone need
    neither. The full PDF pipeline (``pdf_full``) does go through a DocumentConverter.
    Thread-safe; conversions may run concurrently.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[str, tuple] | None = None
        self._pdf = None
        self._pdf_error: BackendUnavailable | None = None

    def warmup(self) -> None:
        """Import docling now (about 2-6 s here) instead of on the first upload, and convert a
        tiny HTML page: the HTML backend compiles a CSS selector (~1 s) on first use."""
        backends = self.backends()
        fmt, backend_cls, options = backends["html"]
        (input_cls,) = backends["_input"]
        page = b"<html><head><title>w</title></head><body><p>warm up</p></body></html>"
        doc = input_cls(
            path_or_stream=io.BytesIO(page),
            format=fmt,
            backend=backend_cls,
            backend_options=options,
            filename="warmup.html",
        )
        doc._backend.convert()
        doc._backend.unload()

    def backends(self) -> dict[str, tuple]:
        """kind -> (InputFormat, backend class, backend options), plus InputDocument."""
        with self._lock:
            if self._backends is None:
                try:
                    from docling.backend.html_backend import HTMLDocumentBackend
                    from docling.backend.md_backend import MarkdownDocumentBackend
                    from docling.backend.mspowerpoint_backend import MsPowerpointDocumentBackend
                    from docling.backend.msword_backend import MsWordDocumentBackend
                    from docling.datamodel.backend_options import HTMLBackendOptions
                    from docling.datamodel.base_models import InputFormat
                    from docling.datamodel.document import InputDocument
                except ImportError as exc:
                    raise MissingExtra("docling", "docling-slim", "ingest") from exc
                # Never fetch images or other resources referenced by an uploaded page.
                html_options = HTMLBackendOptions(
                    enable_remote_fetch=False, enable_local_fetch=False, fetch_images=False
                )
                self._backends = {
                    "docx": (InputFormat.DOCX, MsWordDocumentBackend, None),
                    "pptx": (InputFormat.PPTX, MsPowerpointDocumentBackend, None),
                    "html": (InputFormat.HTML, HTMLDocumentBackend, html_options),
                    "md": (InputFormat.MD, MarkdownDocumentBackend, None),
                    "_input": (InputDocument,),
                }
            return self._backends

    def pdf_full(self):
        """docling's standard PDF pipeline (layout model, tables); needs its model weights."""
        with self._lock:
            if self._pdf_error is not None:  # do not retry a slow failing start per upload
                raise self._pdf_error
            if self._pdf is None:
                try:
                    from docling.datamodel.base_models import InputFormat
                    from docling.document_converter import DocumentConverter, PdfFormatOption
                    from docling.pipeline.standard_pdf_pipeline import StandardPdfPipeline
                except ImportError as exc:
                    raise MissingExtra("docling-pdf", "docling", "pdf-layout") from exc
                converter = DocumentConverter(
                    allowed_formats=[InputFormat.PDF],
                    format_options={
                        InputFormat.PDF: PdfFormatOption(pipeline_cls=StandardPdfPipeline)
                    },
                )
                try:  # load the layout/table models now: missing weights are a setup error
                    converter.initialize_pipeline(InputFormat.PDF)
                except Exception as exc:  # noqa: BLE001
                    self._pdf_error = BackendUnavailable(
                        f"docling's PDF pipeline cannot start (are its model weights installed?): "
                        f"{type(exc).__name__}: {exc}",
                        code="pdf_pipeline_unavailable",
                    )
                    raise self._pdf_error from exc
                self._pdf = converter
            return self._pdf


class DocumentParser:
    """Parses uploads; holds the reusable converters and the PDF backend setting."""

    def __init__(
        self, *, pdf_backend: str = "pypdfium2", converters: DoclingConverters | None = None
    ):
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
                doc = self._docling_pdf(data, filename)
            else:
                from engine.ingest.pdf import parse_pdf

                doc = parse_pdf(data, filename)
        elif kind == "txt":
            doc = parse_text(data, filename)
        else:
            doc = self._docling(data, filename, kind)
        if not doc.paragraphs:
            raise ConversionError("the document contains no text", code="no_text")
        doc.meta.setdefault("parse_s", round(time.perf_counter() - t0, 4))
        doc.meta["total_s"] = round(time.perf_counter() - t0, 4)
        return doc

    def _docling(self, data: bytes, filename: str, kind: str) -> ParsedDocument:
        backends = self.converters.backends()
        fmt, backend_cls, options = backends[kind]
        (input_cls,) = backends["_input"]
        t0 = time.perf_counter()
        try:
            in_doc = input_cls(
                path_or_stream=io.BytesIO(data),
                format=fmt,
                backend=backend_cls,
                backend_options=options,
                filename=f"{_stem(filename)}.{kind}",
            )
            if not in_doc.valid:
                rejection = getattr(in_doc, "_rejection", None)
                cause = getattr(rejection, "original_error", None)
                if cause is not None:
                    raise cause
                raise ValueError(getattr(rejection, "message", "the parser rejected the file"))
            backend = in_doc._backend
            if kind == "docx":
                _strip_xml_comments(backend)
            try:
                ddoc = backend.convert()
            finally:
                backend.unload()
        except Exception as exc:  # noqa: BLE001 - parsers raise anything on bad input
            raise ConversionError(_reason(kind, exc), code="corrupt_file") from exc
        return self._from_docling(ddoc, kind, filename, time.perf_counter() - t0)

    def _docling_pdf(self, data: bytes, filename: str) -> ParsedDocument:
        from docling.datamodel.base_models import ConversionStatus, DocumentStream

        from engine.ingest.pdf import PDFIUM_LOCK

        converter = self.converters.pdf_full()
        stream = DocumentStream(name=f"{_stem(filename)}.pdf", stream=io.BytesIO(data))
        t0 = time.perf_counter()
        try:
            with PDFIUM_LOCK:  # docling's PDF backend uses pdfium too
                result = converter.convert(stream, raises_on_error=False)
        except Exception as exc:  # noqa: BLE001
            raise ConversionError(_reason("pdf", exc), code="corrupt_file") from exc
        if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
            msgs = "; ".join(e.error_message for e in (result.errors or [])) or str(result.status)
            raise ConversionError(f"cannot read the PDF file: {msgs}", code="corrupt_file")
        return self._from_docling(result.document, "pdf", filename, time.perf_counter() - t0)

    @staticmethod
    def _from_docling(ddoc, kind: str, filename: str, seconds: float) -> ParsedDocument:
        paragraphs = from_docling(ddoc, reset_on_page=kind == "pptx")
        pages = len(ddoc.pages) if ddoc.pages else None
        if kind == "pptx" and not pages:
            pages = max((p.page or 0 for p in paragraphs), default=0) or None
        title = (
            next((p.text for p in paragraphs if p.kind == "title"), None)
            or next((p.text for p in paragraphs if p.kind == "heading"), None)
            or _stem(filename)
        )
        return ParsedDocument(
            kind=kind,
            title=title.replace("\n", " ")[:300],
            paragraphs=paragraphs,
            pages=pages if kind in ("pdf", "pptx") else None,
            meta={"converter": f"docling-{kind}", "convert_s": round(seconds, 4)},
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
    stem = _stem(filename)
    first = paras[0].text.split("\n", 1)[0] if paras else ""
    title = first if 0 < len(first) <= 120 else stem
    return ParsedDocument("txt", title, paras, None, {"converter": "text"})


def _strip_xml_comments(backend) -> None:
    """Drop XML comments/processing instructions from a DOCX body: docling's Word backend
    crashes on them ("Invalid input tag of type cython_function_or_method")."""
    body = backend.docx_obj.element.body
    for el in [e for e in body.iter() if not isinstance(e.tag, str)]:
        parent = el.getparent()
        if parent is not None:
            parent.remove(el)


def _stem(filename: str) -> str:
    stem = filename.replace("\\", "/").rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return re.sub(r"[^\w.-]+", "_", stem).strip("._") or "document"


def _reason(kind: str, exc: BaseException) -> str:
    """The parser's own reason: the innermost cause, not docling's generic wrapper."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    name = type(exc).__name__
    msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else name
    if name == "BadZipFile" or "zip" in msg.lower():
        return f"cannot read the {kind.upper()} file: damaged or truncated ZIP container ({msg})"
    return f"cannot read the {kind.upper()} file: {name}: {msg}"
