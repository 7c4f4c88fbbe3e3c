"""Fetch a document from a URL with hard limits.

A URL source is untrusted input that the server fetches on a client's behalf, so every hop is
checked: http/https only, at most ``max_redirects`` redirects (followed by hand so that each
target is checked too), connect/read timeouts plus a total deadline, and the body streamed with
an abort as soon as it passes ``max_bytes`` (a missing or lying Content-Length does not help).
The kind comes from the bytes (``detect.detect_kind``), the header only breaks ties. Optionally
(``block_private``) hosts resolving to loopback/private/link-local addresses are refused, for
deployments where the server can reach internal services that clients must not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import posixpath
import re
import socket
from dataclasses import dataclass
from email.message import Message
from urllib.parse import unquote, urljoin, urlsplit

from engine.errors import InvalidRequest, TooLarge
from engine.ingest.detect import detect_kind

_EXT = {
    "pdf": ".pdf",
    "docx": ".docx",
    "pptx": ".pptx",
    "html": ".html",
    "md": ".md",
    "txt": ".txt",
}
_EXT_OK = {
    "pdf": (".pdf",),
    "docx": (".docx",),
    "pptx": (".pptx",),
    "html": (".html", ".htm", ".xhtml"),
    "md": (".md", ".markdown"),
    "txt": (".txt", ".text", ".csv", ".log"),
}
_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>:\"/\\|?*]+")


class FetchError(InvalidRequest):
    """The URL could not be fetched (bad scheme, network error, HTTP error, timeout)."""

    def __init__(self, message: str, *, code: str = "fetch_failed"):
        super().__init__(message, param="url", code=code)


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = 50 * 1024 * 1024
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 15.0
    total_timeout_s: float = 60.0
    max_redirects: int = 5
    block_private: bool = False
    user_agent: str = "brief-server/0.1 (document fetch)"


@dataclass(frozen=True)
class FetchedDocument:
    url: str  # as requested
    final_url: str  # after redirects
    data: bytes
    filename: str  # sanitised, with an extension that matches ``kind``
    content_type: str | None  # the server's header (mime type only)
    kind: str  # pdf|docx|pptx|html|md|txt, from the bytes


async def fetch_url(url: str, limits: FetchLimits | None = None, *, client=None) -> FetchedDocument:
    """Download ``url`` and detect its kind; raise FetchError, TooLarge or UnsupportedMedia."""
    import httpx

    limits = limits or FetchLimits()
    own = client is None
    if own:
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                limits.read_timeout_s,
                connect=limits.connect_timeout_s,
                pool=limits.connect_timeout_s,
            ),
            follow_redirects=False,
            headers={"User-Agent": limits.user_agent},
        )
    try:
        async with asyncio.timeout(limits.total_timeout_s):
            return await _fetch(client, url, limits)
    except TimeoutError as exc:
        raise FetchError(f"timed out after {limits.total_timeout_s:g} s", code="timeout") from exc
    except httpx.TimeoutException as exc:
        raise FetchError(f"timed out ({type(exc).__name__})", code="timeout") from exc
    except httpx.HTTPError as exc:
        raise FetchError(f"could not fetch the URL: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            await client.aclose()


async def _fetch(client, url: str, limits: FetchLimits) -> FetchedDocument:
    current = url
    for hop in range(limits.max_redirects + 1):
        await _check_url(current, limits)
        async with client.stream("GET", current) as resp:
            if resp.is_redirect and "location" in resp.headers:
                if hop == limits.max_redirects:
                    raise FetchError(
                        f"too many redirects (more than {limits.max_redirects})",
                        code="too_many_redirects",
                    )
                current = urljoin(str(resp.url), resp.headers["location"])
                continue
            if resp.status_code >= 400:
                raise FetchError(f"the server answered HTTP {resp.status_code}", code="http_error")
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limits.max_bytes:
                raise _too_large(limits)
            body = bytearray()
            async for part in resp.aiter_bytes():
                body.extend(part)
                if len(body) > limits.max_bytes:
                    raise _too_large(limits)
            mime = resp.headers.get("content-type", "").split(";")[0].strip().lower() or None
            name = filename_from(str(resp.url), resp.headers.get("content-disposition"))
            data = bytes(body)
            kind = detect_kind(data, name, mime)
            return FetchedDocument(url, str(resp.url), data, with_extension(name, kind), mime, kind)
    raise AssertionError("unreachable")


def _too_large(limits: FetchLimits) -> TooLarge:
    return TooLarge(f"the document at the URL is larger than {limits.max_bytes} bytes", param="url")


async def _check_url(url: str, limits: FetchLimits) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchError(
            f"only http and https URLs can be fetched, not '{parts.scheme}:'", code="bad_scheme"
        )
    if not parts.hostname:
        raise FetchError("the URL has no host", code="bad_url")
    if limits.block_private:
        await _refuse_private(
            parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        )


async def _refuse_private(host: str, port: int) -> None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchError(f"cannot resolve host '{host}'", code="dns_error") from exc
    for info in infos:
        ip = ipaddress.ip_address(info[4][0])
        if not ip.is_global:
            raise FetchError(
                f"refusing to fetch from a non-public address ({ip})", code="private_address"
            )


def filename_from(url: str, content_disposition: str | None) -> str:
    """The server's Content-Disposition filename, else the URL's last path segment or host."""
    name = None
    if content_disposition:
        msg = Message()
        msg["content-disposition"] = content_disposition
        name = msg.get_filename()
    if not name:
        parts = urlsplit(url)
        name = posixpath.basename(unquote(parts.path)) or parts.hostname or ""
    return sanitize_filename(name)


def sanitize_filename(name: str, max_len: int = 150) -> str:
    """A safe single path component: no directories, control or shell-special characters."""
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name)
    name = re.sub(r"\s+", " ", name).strip(" ._")
    if len(name) > max_len:
        stem, dot, ext = name.rpartition(".")
        name = (
            stem[: max_len - len(ext) - 1] + "." + ext if dot and len(ext) <= 10 else name[:max_len]
        )
    return name or "download"


def with_extension(name: str, kind: str) -> str:
    """Append the kind's extension unless the name already carries a fitting one."""
    if name.lower().endswith(_EXT_OK[kind]):
        return name
    return name + _EXT[kind]
