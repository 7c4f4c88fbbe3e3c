"""Type detection by content: real corpus files of every kind, renamed files, refusals."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from engine.errors import InvalidRequest, UnsupportedMedia
from engine.ingest.convert import ConversionError
from engine.ingest.detect import decode_text, detect_kind, looks_like_markdown

DOCS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "documents"

REAL = [
    ("unstructured/pdf/multi-column.pdf", "pdf"),
    ("docling/docx/word_sample.docx", "docx"),
    ("unstructured/docx/handbook-872p.docx", "docx"),
    ("docling/pptx/powerpoint_sample.pptx", "pptx"),
    ("markitdown/test.pptx", "pptx"),
    ("docling/html/wiki_duck.html", "html"),
    ("unstructured/html/example-10k-1p.html", "html"),
    ("markitdown/test_blog.html", "html"),
    ("docling/md/wiki.md", "md"),
    ("docling/md/mixed.md", "md"),
]


@pytest.mark.parametrize(("rel", "kind"), REAL)
def test_real_files(rel: str, kind: str):
    path = DOCS / rel
    if not path.exists():
        pytest.skip(f"corpus file missing: {path}")
    data = path.read_bytes()
    assert detect_kind(data, path.name) == kind
    # the name is not what decides: a misleading or missing name gives the same binary kinds
    if kind in ("pdf", "docx", "pptx", "html"):
        assert detect_kind(data, "upload.bin") == kind
        assert detect_kind(data, None) == kind


def test_markdown_without_extension_is_sniffed():
    data = (DOCS / "docling/md/wiki.md").read_bytes()
    assert detect_kind(data, "notes") == "md"
    assert detect_kind(data, "notes", "text/markdown") == "md"
    # an explicit .txt name keeps it plain text
    assert detect_kind(data, "notes.txt") == "txt"


def test_plain_text_and_encodings():
    assert detect_kind(b"Just a line of text.\nAnother one.\n", "a") == "txt"
    assert detect_kind("Grüße aus Köln".encode("cp1252"), "a.txt") == "txt"
    assert detect_kind("\ufeffHello".encode(), "a") == "txt"
    assert detect_kind("Hello world".encode("utf-16"), "a") == "txt"
    assert decode_text("caf\u00e9".encode()[:-1]) == "caf"  # cut multi-byte tail
    assert not looks_like_markdown("A sentence. Another sentence.\n- one item\n")


def test_html_by_content_even_with_pdf_name():
    page = b"<!DOCTYPE html><html><head><title>Err</title></head><body>Not found</body></html>"
    assert detect_kind(page, "report.pdf", "application/pdf") == "html"
    assert detect_kind(b"<!-- c -->\n<html><body><p>x</p></body></html>", None) == "html"


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return buf.getvalue()


def test_zip_containers():
    xlsx = zip_bytes({"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<w/>"})
    with pytest.raises(UnsupportedMedia, match="XLSX"):
        detect_kind(xlsx, "book.docx")
    with pytest.raises(UnsupportedMedia, match="ZIP archive"):
        detect_kind(zip_bytes({"a.txt": b"x"}), "a.zip")
    # a DOCX renamed to .zip is still a DOCX
    docx = (DOCS / "docling/docx/lorem_ipsum.docx").read_bytes()
    assert detect_kind(docx, "archive.zip") == "docx"
    # damaged OOXML with a fitting name goes to the converter (which reports the parser error)
    assert detect_kind(docx[: len(docx) // 2], "lorem.docx") == "docx"
    with pytest.raises(UnsupportedMedia, match="damaged ZIP"):
        detect_kind(docx[: len(docx) // 2], "lorem.bin")


def test_refusals():
    with pytest.raises(InvalidRequest, match="empty"):
        detect_kind(b"", "a.txt")
    with pytest.raises(UnsupportedMedia, match="PNG"):
        detect_kind(b"\x89PNG\r\n\x1a\n" + bytes(100), "scan.pdf")
    with pytest.raises(UnsupportedMedia, match="legacy"):
        detect_kind(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600), "old.doc")
    encrypted = (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600) + "EncryptedPackage".encode("utf-16-le")
    )
    with pytest.raises(ConversionError, match="encrypted"):
        detect_kind(encrypted, "secret.docx")
    with pytest.raises(UnsupportedMedia, match="unsupported file type"):
        detect_kind(bytes(range(256)) * 8, "blob")
    with pytest.raises(UnsupportedMedia, match="XML"):
        detect_kind(b'<?xml version="1.0"?><feed><entry/></feed>', "feed.xml")
