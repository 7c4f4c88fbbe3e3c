"""URL fetching against a real HTTP server on loopback: redirects, limits, timeouts, types."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.errors import TooLarge, UnsupportedMedia
from engine.ingest.fetch import (
    FetchError,
    FetchLimits,
    fetch_url,
    filename_from,
    sanitize_filename,
    with_extension,
)

DOCS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "documents"
PDF = (DOCS / "markitdown/test.pdf").read_bytes() if DOCS.exists() else b"%PDF-1.4\n"
HTML = b"<!DOCTYPE html><html><head><title>T</title></head><body><p>Hello</p></body></html>"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path
        if path == "/page":
            self.send(200, HTML, {"Content-Type": "text/html; charset=utf-8"})
        elif path == "/paper.pdf":
            self.send(200, PDF, {"Content-Type": "application/pdf"})
        elif path == "/download?id=7":
            self.send(
                200,
                PDF,
                {
                    "Content-Type": "application/octet-stream",
                    "Content-Disposition": 'attachment; filename="../../etc/Q3 report.pdf"',
                },
            )
        elif path == "/lying-type":
            self.send(200, HTML, {"Content-Type": "application/pdf"})
        elif path.startswith("/redirect/"):
            n = int(path.rsplit("/", 1)[1])
            self.send(302, headers={"Location": f"/redirect/{n - 1}" if n > 1 else "/page"})
        elif path == "/to-ftp":
            self.send(301, headers={"Location": "ftp://example.com/file.pdf"})
        elif path == "/big":
            self.send(200, b"x" * 5000, {"Content-Type": "text/plain"})
        elif path == "/big-unannounced":
            # no Content-Length: the body streams until the connection closes
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"y" * 1000)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif path == "/slow":
            time.sleep(2.0)
            self.send(200, HTML, {"Content-Type": "text/html"})
        elif path == "/image":
            self.send(200, b"\x89PNG\r\n\x1a\n" + bytes(64), {"Content-Type": "image/png"})
        elif path == "/missing":
            self.send(404, b"not found", {"Content-Type": "text/plain"})
        else:
            self.send(500)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # clients that abort on purpose (limits, timeouts) break the pipe


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


async def test_html_page(server):
    doc = await fetch_url(server + "/page")
    assert doc.kind == "html" and doc.content_type == "text/html"
    assert doc.filename == "page.html" and doc.data == HTML


async def test_pdf_and_content_disposition(server):
    doc = await fetch_url(server + "/paper.pdf")
    assert (doc.kind, doc.filename) == ("pdf", "paper.pdf")
    doc = await fetch_url(server + "/download?id=7")
    assert doc.kind == "pdf" and doc.filename == "Q3 report.pdf"  # no path components


async def test_content_decides_over_header(server):
    doc = await fetch_url(server + "/lying-type")
    assert doc.kind == "html" and doc.filename == "lying-type.html"
    with pytest.raises(UnsupportedMedia, match="PNG"):
        await fetch_url(server + "/image")


async def test_redirects(server):
    doc = await fetch_url(server + "/redirect/5")
    assert doc.kind == "html" and doc.final_url.endswith("/page")
    with pytest.raises(FetchError, match="too many redirects") as err:
        await fetch_url(server + "/redirect/6")
    assert err.value.code == "too_many_redirects"
    with pytest.raises(FetchError, match="only http and https"):
        await fetch_url(server + "/to-ftp")


async def test_size_limits(server):
    limits = FetchLimits(max_bytes=1000)
    with pytest.raises(TooLarge):
        await fetch_url(server + "/big", limits)  # announced by Content-Length
    started = time.monotonic()
    with pytest.raises(TooLarge):
        await fetch_url(server + "/big-unannounced", limits)  # aborted while streaming
    assert time.monotonic() - started < 5


async def test_timeouts_and_errors(server):
    with pytest.raises(FetchError, match="timed out") as err:
        await fetch_url(server + "/slow", FetchLimits(read_timeout_s=0.3))
    assert err.value.code == "timeout"
    with pytest.raises(FetchError, match="timed out after"):
        await fetch_url(server + "/slow", FetchLimits(total_timeout_s=0.5))
    with pytest.raises(FetchError, match="HTTP 404"):
        await fetch_url(server + "/missing")
    with pytest.raises(FetchError, match="could not fetch"):
        await fetch_url("http://127.0.0.1:9/nothing-listens-here", FetchLimits(connect_timeout_s=1))
    with pytest.raises(FetchError, match="only http and https"):
        await fetch_url("file:///etc/passwd")


async def test_private_addresses_can_be_refused(server):
    with pytest.raises(FetchError, match="non-public address") as err:
        await fetch_url(server + "/page", FetchLimits(block_private=True))
    assert err.value.code == "private_address"


def test_filenames():
    assert sanitize_filename("../../a/b\\c:d?.pdf") == "c_d_.pdf"
    assert sanitize_filename("  ..hidden  ") == "hidden"
    assert sanitize_filename("\x00\x01") == "download"
    assert len(sanitize_filename("x" * 500 + ".pdf")) == 150
    assert sanitize_filename("x" * 500 + ".pdf").endswith(".pdf")
    assert filename_from("https://example.com/", None) == "example.com"
    assert filename_from("https://e.com/a/My%20File.docx?x=1", None) == "My File.docx"
    assert filename_from(
        "https://e.com/x", "attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"
    ) == ("résumé.pdf")
    assert with_extension("example.com", "html") == "example.com.html"
    assert with_extension("index.htm", "html") == "index.htm"
    assert with_extension("report", "pdf") == "report.pdf"
