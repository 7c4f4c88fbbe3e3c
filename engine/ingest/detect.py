"""Tell a document's kind from its bytes, not its name.

A client's filename or Content-Type is only a hint: a ``.pdf`` that is really an HTML error page
must be read as HTML (or refused), and a DOCX renamed to ``.zip`` is still a DOCX. Rules:

- magic bytes first: ``%PDF-``; ZIP containers are opened and told apart by their parts
  (``word/document.xml`` → docx, ``ppt/presentation.xml`` → pptx) and ``[Content_Types].xml``;
  OLE2 files are either legacy Office (refused) or an *encrypted* OOXML package (refused with
  "encrypted"); other known binaries (images, archives, ...) are refused by name;
- otherwise the bytes must decode as text (BOM, UTF-8, or a single-byte code page with no NULs and
  few control characters); then HTML is recognised by its tags, Markdown by its extension or
  Content-Type or, failing both, by its syntax; anything else is plain text.
"""

from __future__ import annotations

import io
import re
import zipfile

from engine.errors import InvalidRequest, UnsupportedMedia

SUPPORTED = ("pdf", "docx", "pptx", "html", "md", "txt")
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
# Binary signatures we refuse with a name, so that the message says what was sent.
_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"II*\x00", "TIFF image"),
    (b"MM\x00*", "TIFF image"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"\x7fELF", "executable"),
    (b"MZ", "Windows executable"),
    (b"{\\rtf", "RTF document"),
    (b"OggS", "Ogg media"),
    (b"ID3", "MP3 audio"),
    (b"fLaC", "FLAC audio"),
)
_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S)
_HTML_ANY = re.compile(rb"<(html|head|body|title|meta|div|p|table|h[1-6])[\s>]", re.I)
_XML_DECL = re.compile(rb"^\s*<\?xml", re.I)
_MD_SYNTAX = re.compile(
    r"^(#{1,6} \S|\s*[-*+] \S|\s*\d+\. \S|```|\|.*\|\s*$|>\s)|\[[^\]]+\]\([^)]+\)", re.M
)
_MD_EXT = (".md", ".markdown", ".mdown", ".mkd")
_HTML_EXT = (".html", ".htm", ".xhtml")


def detect_kind(data: bytes, filename: str | None = None, content_type: str | None = None) -> str:
    """Return one of ``SUPPORTED`` or raise ``UnsupportedMedia`` (or ``InvalidRequest`` for an
    empty file). ``filename`` and ``content_type`` only break ties between text kinds and name
    the kind of a damaged OOXML file (so that the converter reports the parser's reason)."""
    if not data:
        raise InvalidRequest("the file is empty", code="empty_file")
    name = (filename or "").lower()
    mime = (content_type or "").split(";")[0].strip().lower()
    head = data[:2048]
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return _zip_kind(data, name)
    if head.startswith(_OLE2):
        if _ENCRYPTED_PACKAGE in data[: 1 << 20] or _ENCRYPTED_PACKAGE in data[-(1 << 20) :]:
            from engine.ingest.convert import ConversionError

            raise ConversionError("encrypted", code="encrypted")
        raise UnsupportedMedia(
            "legacy binary Office format (.doc/.ppt/.xls) is not supported; "
            "save it as .docx or .pptx",
            code="unsupported_type",
        )
    for magic, label in _BINARY_MAGIC:
        if head.startswith(magic):
            raise UnsupportedMedia(f"unsupported file type: {label}", code="unsupported_type")
    text = decode_text(data)
    if text is None:
        raise UnsupportedMedia(
            f"unsupported file type: {_binary_name(data)}", code="unsupported_type"
        )
    return _text_kind(text, head, name, mime)


def _zip_kind(data: bytes, name: str) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = set(zf.namelist())
            types = ""
            if "[Content_Types].xml" in names:
                types = zf.read("[Content_Types].xml")[:65536].decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, ValueError) as exc:
        # A damaged OOXML file: let the converter report the parser's reason.
        for ext in ("docx", "pptx"):
            if name.endswith("." + ext):
                return ext
        raise UnsupportedMedia(
            f"unsupported file type: damaged ZIP archive ({exc})", code="unsupported_type"
        ) from exc
    if "word/document.xml" in names or "wordprocessingml.document.main" in types:
        return "docx"
    if "ppt/presentation.xml" in names or "presentationml.presentation.main" in types:
        return "pptx"
    if "xl/workbook.xml" in names or "spreadsheetml" in types:
        label = "spreadsheet (XLSX)"
    elif "mimetype" in names and "content.xml" in names:
        label = "OpenDocument file"
    elif "[Content_Types].xml" in names:
        label = "Office Open XML file other than DOCX/PPTX"
    else:
        label = "ZIP archive"
    raise UnsupportedMedia(f"unsupported file type: {label}", code="unsupported_type")


def decode_text(data: bytes) -> str | None:
    """Decode bytes that look like text; None for binary data."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", "replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    sample = data[:65536]
    if b"\x00" in sample:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte sequence cut at the end of the file is still UTF-8.
        if exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
    controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13, 27))
    if controls > len(sample) * 0.01:
        return None
    return data.decode("cp1252", "replace")


def _text_kind(text: str, head: bytes, name: str, mime: str) -> str:
    if _HTML_START.search(head) or mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if _XML_DECL.match(head):
        if b"<html" in head.lower():
            return "html"
        raise UnsupportedMedia("unsupported file type: XML document", code="unsupported_type")
    if name.endswith(_HTML_EXT) and _HTML_ANY.search(head):
        return "html"
    if name.endswith(_MD_EXT) or mime in ("text/markdown", "text/x-markdown"):
        return "md"
    if name.endswith(".txt") or (mime == "text/plain" and not name):
        return "txt"
    return "md" if looks_like_markdown(text) else "txt"


def looks_like_markdown(text: str) -> bool:
    """At least a few Markdown constructs (headings, lists, links, fences, tables) in the start."""
    sample = text[:20000]
    hits = len(_MD_SYNTAX.findall(sample))
    lines = max(1, sample.count("\n"))
    return hits >= 3 and hits >= lines * 0.02 and bool(re.search(r"^#{1,6} \S", sample, re.M))


def _binary_name(data: bytes) -> str:
    """A human name for an unknown binary, via puremagic when installed."""
    try:
        import puremagic
    except ImportError:
        return "binary data"
    try:
        matches = puremagic.magic_string(data[:8192])
    except Exception:  # noqa: BLE001 - puremagic raises its own error types for no match
        return "binary data"
    if matches:
        best = matches[0]
        return best.name or best.mime_type or best.extension or "binary data"
    return "binary data"
