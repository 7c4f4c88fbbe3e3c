"""Engine-level errors.

The engine knows nothing about HTTP. Each error carries a *kind*; the server maps kinds to a
status code and an OpenAI error type in one table (``server/errors.py``). Raise the most specific
class so that a client gets a fitting status, and write messages for the person reading them.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class; ``kind`` selects the HTTP status in the server's error table."""

    kind = "internal"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(EngineError):
    """The request is malformed or asks for something impossible (400)."""

    kind = "invalid_request"


class NotFound(EngineError):
    """An id (file, session, model) does not exist (404)."""

    kind = "not_found"


class TooLarge(EngineError):
    """An upload or a request body is over a configured limit (413)."""

    kind = "too_large"


class UnsupportedMedia(EngineError):
    """The content type is not one we can read (415)."""

    kind = "unsupported_media"


class Overloaded(EngineError):
    """A queue or a capacity limit is full; the client should retry later (429)."""

    kind = "overloaded"


class BackendUnavailable(EngineError):
    """A model backend is not loaded, died, or is unreachable (503)."""

    kind = "unavailable"


class MissingExtra(BackendUnavailable):
    """A backend's optional dependency is not installed."""

    def __init__(self, backend: str, module: str, extra: str):
        super().__init__(
            f"backend '{backend}' needs the Python package '{module}', which is not installed; "
            f"install the extra: pip install 'brief-server[{extra}]'",
            code="missing_extra",
        )
